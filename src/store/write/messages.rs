//! Step 3, persist: messages.
//!
//! Messages: finding how much of a chain is already stored, and writing only
//! the rest (ARCHITECTURE.md "Persist": cost grows with what is new), with
//! the head of each request's conversation (`store::heads`) in the same
//! transaction.

use super::heads::record_heads_on;
use super::json_rows::{
    hash_rows, hex, json_rows, optional_hex, rows_source, source_columns, BatchStatement, Column,
    HASH_COLUMN,
};
use super::requests::{record_requests_on, RequestRecord};
use crate::conversation::{ChainHash, ConversationId, TenantId};
use crate::store::coordination::locks::{lock_tenant, TenantLock};
use crate::store::rows::{hash_column, now_ms, HASH_CHUNK};
use crate::store::{Backend, Result, Store, StoreError};
use serde::Serialize;
use sqlx::AnyConnection;
use std::collections::HashSet;

/// Messages per insert statement: a long history's first write is a few
/// statements of bounded size rather than one of many megabytes.
const INSERT_CHUNK: usize = 500;

/// One link of a chain to store. Position 0 is the root (the system prompt,
/// role "system", no parent); `body` is the message JSON as the client sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewMessage {
    pub hash: ChainHash,
    pub parent: Option<ChainHash>,
    pub position: i64,
    pub role: String,
    pub body: String,
    pub token_estimate: i64,
}

impl Store {
    /// Length of the leading run of `chain` (h_0, h_1, …) already stored for
    /// this tenant. One query per chunk of up to 500 hashes, never one per
    /// message, and it stops at the first chunk with a gap.
    #[tracing::instrument(
        name = "store.stored_prefix_len",
        level = "debug",
        skip_all,
        fields(chain = chain.len()),
    )]
    pub async fn stored_prefix_len(&self, tenant: &TenantId, chain: &[ChainHash]) -> Result<usize> {
        let mut stored_len = 0;
        for chunk in chain.chunks(HASH_CHUNK) {
            let found = self.stored_hashes(tenant, chunk).await?;
            let run = chunk
                .iter()
                .take_while(|hash| found.contains(*hash))
                .count();
            stored_len += run;
            if run < chunk.len() {
                break;
            }
        }
        Ok(stored_len)
    }

    async fn stored_hashes(
        &self,
        tenant: &TenantId,
        hashes: &[ChainHash],
    ) -> Result<HashSet<ChainHash>> {
        let rows = sqlx::query(STORED_HASHES.text(self.backend))
            .bind(tenant.as_str())
            .bind(hash_rows(hashes)?)
            .fetch_all(&self.pool)
            .await?;
        let found = rows
            .iter()
            .map(|row| hash_column(row, "hash"))
            .collect::<Result<_, _>>()?;
        Ok(found)
    }

    /// Writes the rows of `batch` in one transaction, idempotently: rows
    /// that already exist (a replay, another instance, a shared branch)
    /// are left as they are, `label` included; its chain's head is
    /// recorded for its conversation. Returns how many rows were new.
    pub async fn insert_messages(&self, batch: MessageBatch<'_>) -> Result<u64> {
        self.write_batch(&[batch], &[]).await
    }

    /// One group commit: the messages of several requests (any tenants),
    /// the heads of their conversations, and their request records, in one
    /// transaction. Returns how many message rows were new.
    ///
    /// Fails with [`StoreError::ParentMissing`], writing nothing, when a
    /// batch's first message extends one the store does not have: the
    /// writer found it stored before the transaction, and a deletion of
    /// another conversation that reached it may have taken it since.
    #[tracing::instrument(
        name = "store.write_batch",
        level = "debug",
        skip_all,
        fields(batches = messages.len(), records = records.len()),
    )]
    pub async fn write_batch(
        &self,
        messages: &[MessageBatch<'_>],
        records: &[RequestRecord],
    ) -> Result<u64> {
        if messages.is_empty() && records.is_empty() {
            return Ok(0);
        }
        let rows = rows_in_lock_order(messages);
        let created_at = now_ms();
        let mut tx = self.begin_write().await?;
        let mut tenants: Vec<&str> = messages.iter().map(|b| b.tenant.as_str()).collect();
        tenants.sort_unstable();
        tenants.dedup();
        for tenant in tenants {
            lock_tenant(&mut tx, self.backend, tenant, TenantLock::Shared).await?;
        }
        let mut inserted = 0;
        for chunk in rows.chunks(INSERT_CHUNK) {
            inserted += insert_rows(&mut tx, self.backend, chunk, created_at).await?;
        }
        if !parents_stored(&mut tx, self.backend, messages).await? {
            return Err(StoreError::ParentMissing);
        }
        record_heads_on(&mut tx, self.backend, messages, created_at).await?;
        record_requests_on(&mut tx, self.backend, records).await?;
        tx.commit().await?;
        Ok(inserted)
    }
}

/// The messages of one request, for [`Store::write_batch`].
#[derive(Debug, Clone, Copy)]
pub struct MessageBatch<'a> {
    pub tenant: &'a TenantId,
    pub conversation: &'a ConversationId,
    pub label: Option<&'a str>,
    /// The request's whole chain: its root first, its head last.
    pub chain: &'a [ChainHash],
    /// The links of `chain` to insert: those not stored yet.
    pub messages: &'a [NewMessage],
    /// When the request arrived: its conversation's last activity.
    pub at_ms: i64,
}

impl<'a> MessageBatch<'a> {
    /// The newest link of the request: the head its conversation reaches.
    /// Only called on a batch with a chain.
    pub(super) fn head(&self) -> &'a ChainHash {
        &self.chain[self.chain.len() - 1]
    }
}

/// A row to insert, with whose it is.
type Row<'a> = (&'a TenantId, Option<&'a str>, &'a NewMessage);

/// Every row once, ordered by key. Every writer locks the rows it inserts
/// in this one order, so two batches that share rows (two instances, one
/// conversation) never wait on each other in a cycle.
fn rows_in_lock_order<'a>(batches: &[MessageBatch<'a>]) -> Vec<Row<'a>> {
    let mut rows: Vec<Row<'a>> = batches
        .iter()
        .flat_map(|batch| {
            batch
                .messages
                .iter()
                .map(move |message| (batch.tenant, batch.label, message))
        })
        .collect();
    rows.sort_unstable_by(|a, b| (a.0.as_str(), a.2.hash).cmp(&(b.0.as_str(), b.2.hash)));
    rows.dedup_by(|a, b| a.0 == b.0 && a.2.hash == b.2.hash);
    rows
}

async fn insert_rows(
    connection: &mut AnyConnection,
    backend: Backend,
    rows: &[Row<'_>],
    created_at: i64,
) -> Result<u64> {
    let rows: Vec<MessageRow<'_>> = rows
        .iter()
        .map(|(tenant, label, message)| MessageRow {
            tenant: tenant.as_str(),
            hash: &message.hash,
            parent: &message.parent,
            position: message.position,
            role: &message.role,
            body: &message.body,
            bytes: i64::try_from(message.body.len()).unwrap_or(i64::MAX),
            token_estimate: message.token_estimate,
            label: *label,
        })
        .collect();
    let inserted = sqlx::query(INSERT_MESSAGES.text(backend))
        .bind(json_rows(&rows)?)
        .bind(created_at)
        .execute(&mut *connection)
        .await?;
    Ok(inserted.rows_affected())
}

/// A message the first message of a batch extends.
#[derive(Serialize)]
struct ParentRow<'a> {
    tenant: &'a str,
    #[serde(serialize_with = "hex")]
    hash: &'a ChainHash,
}

const PARENT_COLUMNS: [Column; 2] = [("tenant", "text"), ("hash", "text")];

/// How many of the messages bound as `$1` are not stored.
static MISSING_PARENTS: BatchStatement = BatchStatement::new(|backend| {
    format!(
        "select count(*) from {} where not exists \
         (select 1 from messages m where m.tenant = r.tenant and m.hash = r.hash)",
        rows_source(backend, 1, &PARENT_COLUMNS),
    )
});

/// Whether every batch's first message extends a stored one, once the
/// batches' own rows are in (a batch may extend another's).
async fn parents_stored(
    connection: &mut AnyConnection,
    backend: Backend,
    batches: &[MessageBatch<'_>],
) -> Result<bool> {
    let parents: Vec<ParentRow<'_>> = batches
        .iter()
        .filter_map(|batch| {
            let parent = batch.messages.first()?.parent.as_ref()?;
            Some(ParentRow {
                tenant: batch.tenant.as_str(),
                hash: parent,
            })
        })
        .collect();
    if parents.is_empty() {
        return Ok(true);
    }
    let missing: i64 = sqlx::query_scalar(MISSING_PARENTS.text(backend))
        .bind(json_rows(&parents)?)
        .fetch_one(&mut *connection)
        .await?;
    Ok(missing == 0)
}

/// A message row as [`INSERT_MESSAGES`] reads it.
#[derive(Serialize)]
struct MessageRow<'a> {
    tenant: &'a str,
    #[serde(serialize_with = "hex")]
    hash: &'a ChainHash,
    #[serde(serialize_with = "optional_hex")]
    parent: &'a Option<ChainHash>,
    position: i64,
    role: &'a str,
    body: &'a str,
    bytes: i64,
    token_estimate: i64,
    label: Option<&'a str>,
}

/// The columns of [`MessageRow`], in the table's order.
const MESSAGE_COLUMNS: [Column; 9] = [
    ("tenant", "text"),
    ("hash", "text"),
    ("parent", "text"),
    ("position", "bigint"),
    ("role", "text"),
    ("body", "text"),
    ("bytes", "bigint"),
    ("token_estimate", "bigint"),
    ("label", "text"),
];

/// Inserts the rows bound as `$1`, all created at `$2`.
static INSERT_MESSAGES: BatchStatement = BatchStatement::new(|backend| {
    format!(
        "insert into messages (tenant, hash, parent, position, role, body, bytes, \
         token_estimate, label, created_at) select {}, $2 from {} where true \
         on conflict (tenant, hash) do nothing",
        source_columns(&MESSAGE_COLUMNS),
        rows_source(backend, 1, &MESSAGE_COLUMNS),
    )
});

/// Which of the hashes bound as `$2` tenant `$1` has stored.
static STORED_HASHES: BatchStatement = BatchStatement::new(|backend| {
    format!(
        "select hash from messages where tenant = $1 and hash in (select r.hash from {})",
        rows_source(backend, 2, &HASH_COLUMN),
    )
});
