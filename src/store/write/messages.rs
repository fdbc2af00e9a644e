//! Step 3, persist: messages.
//!
//! Messages: finding how much of a chain is already stored, and writing only
//! the rest (ARCHITECTURE.md "Persist": cost grows with what is new). The
//! transaction that writes them, with each request's head and figures, is
//! `commit`'s.

use super::batch_rows::{
    add, hash_rows, hex, optional_hex, source_columns, BatchStatement, Column, HASH_COLUMN,
};
use crate::conversation::{ChainHash, ConversationId, TenantId};
use crate::store::rows::{hash_column, HASH_CHUNK};
use crate::store::{Backend, Result, Store};
use serde::Serialize;
use sqlx::any::AnyArguments;
use sqlx::{AnyConnection, Row as _};
use std::collections::HashSet;

/// Messages per insert statement: a long history's first write is a few
/// statements of bounded size rather than one of many megabytes.
pub(super) const INSERT_CHUNK: usize = 500;

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
        let mut fixed = AnyArguments::default();
        add(&mut fixed, tenant.as_str())?;
        let (text, arguments) = STORED_HASHES.bound(self.backend, fixed, &hash_rows(hashes))?;
        let rows = sqlx::query_with(text, arguments)
            .fetch_all(&self.pool)
            .await?;
        let found = rows
            .iter()
            .map(|row| hash_column(row, "hash"))
            .collect::<Result<_, _>>()?;
        Ok(found)
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
pub(super) type Row<'a> = (&'a TenantId, Option<&'a str>, &'a NewMessage);

/// Every row once, ordered by key. Every writer locks the rows it inserts
/// in this one order, so two batches that share rows (two instances, one
/// conversation) never wait on each other in a cycle.
pub(super) fn rows_in_lock_order<'a>(batches: &[MessageBatch<'a>]) -> Vec<Row<'a>> {
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

/// The links a transaction inserted, by tenant: those no request had
/// stored before it.
pub(super) type Inserted = HashSet<(String, ChainHash)>;

/// Inserts `rows`, leaving those already stored as they are; adds the
/// links it inserted to `inserted`.
pub(super) async fn insert_rows(
    connection: &mut AnyConnection,
    backend: Backend,
    rows: &[Row<'_>],
    created_at: i64,
    inserted: &mut Inserted,
) -> Result<()> {
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
    let mut fixed = AnyArguments::default();
    add(&mut fixed, created_at)?;
    let (text, arguments) = INSERT_MESSAGES.bound(backend, fixed, &rows)?;
    let new = sqlx::query_with(text, arguments)
        .fetch_all(&mut *connection)
        .await?;
    for row in new {
        inserted.insert((row.try_get("tenant")?, hash_column(&row, "hash")?));
    }
    Ok(())
}

/// A message the first message of a batch extends.
#[derive(Serialize)]
struct ParentRow<'a> {
    tenant: &'a str,
    #[serde(serialize_with = "hex")]
    hash: &'a ChainHash,
}

const PARENT_COLUMNS: [Column; 2] = [("tenant", "text"), ("hash", "text")];

/// How many of the messages bound as rows are not stored.
static MISSING_PARENTS: BatchStatement = BatchStatement::new(0, &PARENT_COLUMNS, |source| {
    format!(
        "select count(*) from {source} where not exists \
         (select 1 from messages m where m.tenant = r.tenant and m.hash = r.hash)"
    )
});

/// Whether every batch's first message extends a stored one, once the
/// batches' own rows are in (a batch may extend another's).
pub(super) async fn parents_stored(
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
    let (text, arguments) = MISSING_PARENTS.bound(backend, AnyArguments::default(), &parents)?;
    let missing: i64 = sqlx::query_scalar_with(text, arguments)
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

/// Inserts the rows bound after `$1`, all created at `$1`; returns the
/// links it inserted.
static INSERT_MESSAGES: BatchStatement = BatchStatement::new(1, &MESSAGE_COLUMNS, |source| {
    format!(
        "insert into messages (tenant, hash, parent, position, role, body, bytes, \
         token_estimate, label, created_at) select {}, $1 from {source} where true \
         on conflict (tenant, hash) do nothing returning tenant, hash",
        source_columns(&MESSAGE_COLUMNS),
    )
});

/// Which of the hashes bound after `$1` tenant `$1` has stored.
static STORED_HASHES: BatchStatement = BatchStatement::new(1, &HASH_COLUMN, |source| {
    format!("select hash from messages where tenant = $1 and hash in (select r.hash from {source})")
});
