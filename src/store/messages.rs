//! Messages: finding how much of a chain is already stored, and writing only
//! the rest (DESIGN.md "Persist": cost grows with what is new).

use super::requests::{record_requests_on, RequestRecord};
use super::rows::{hash_column, now_ms, push_placeholders, push_row_placeholders, HASH_CHUNK};
use super::{Result, Store};
use crate::conversation::{ChainHash, TenantId};
use sqlx::{Any, AnyConnection, QueryBuilder};
use std::collections::HashSet;

/// Messages per insert statement: 10 parameters each, well under SQLite's
/// and Postgres's parameter limits.
const INSERT_CHUNK: usize = 100;

/// Columns bound for each inserted message, in placeholder order.
const MESSAGE_COLUMNS: usize = 10;

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
        let mut builder =
            QueryBuilder::<Any>::new("select hash from messages where tenant = $1 and hash in (");
        push_placeholders(&mut builder, 2, hashes.len());
        builder.push(")");
        let mut query = builder.build().persistent(false).bind(tenant.as_str());
        for hash in hashes {
            query = query.bind(hash.to_hex());
        }
        let rows = query.fetch_all(&self.pool).await?;
        let found = rows
            .iter()
            .map(|row| hash_column(row, "hash"))
            .collect::<Result<_, _>>()?;
        Ok(found)
    }

    /// Writes `messages` in one transaction, idempotently: rows that already
    /// exist (a replay, another instance, a shared branch) are left as they
    /// are, `label` included. Returns how many rows were new.
    pub async fn insert_messages(
        &self,
        tenant: &TenantId,
        label: Option<&str>,
        messages: &[NewMessage],
    ) -> Result<u64> {
        let batch = [MessageBatch {
            tenant,
            label,
            messages,
        }];
        self.write_batch(&batch, &[]).await
    }

    /// One group commit: the messages of several requests (any tenants) and
    /// their request records, in one transaction. Returns how many message
    /// rows were new.
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
        let rows = rows_in_lock_order(messages);
        if rows.is_empty() && records.is_empty() {
            return Ok(0);
        }
        let created_at = now_ms();
        let mut tx = self.begin_write().await?;
        let mut inserted = 0;
        for chunk in rows.chunks(INSERT_CHUNK) {
            inserted += insert_rows(&mut tx, chunk, created_at).await?;
        }
        record_requests_on(&mut tx, records).await?;
        tx.commit().await?;
        Ok(inserted)
    }
}

/// The messages of one request, for [`Store::write_batch`].
#[derive(Debug, Clone, Copy)]
pub struct MessageBatch<'a> {
    pub tenant: &'a TenantId,
    pub label: Option<&'a str>,
    pub messages: &'a [NewMessage],
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
    rows: &[Row<'_>],
    created_at: i64,
) -> Result<u64> {
    let mut builder = QueryBuilder::<Any>::new(
        "insert into messages (tenant, hash, parent, position, role, body, bytes, \
         token_estimate, label, created_at) values ",
    );
    push_row_placeholders(&mut builder, 1, rows.len(), MESSAGE_COLUMNS);
    builder.push(" on conflict (tenant, hash) do nothing");
    let mut query = builder.build().persistent(false);
    for (tenant, label, message) in rows {
        query = query
            .bind(tenant.as_str())
            .bind(message.hash.to_hex())
            .bind(message.parent.as_ref().map(ChainHash::to_hex))
            .bind(message.position)
            .bind(message.role.as_str())
            .bind(message.body.as_str())
            .bind(i64::try_from(message.body.len()).unwrap_or(i64::MAX))
            .bind(message.token_estimate)
            .bind(*label)
            .bind(created_at);
    }
    Ok(query.execute(&mut *connection).await?.rows_affected())
}
