//! Messages: finding how much of a chain is already stored, and writing only
//! the rest (DESIGN.md "Persist": cost grows with what is new).

use super::rows::{hash_column, now_ms, push_placeholders, push_row_placeholders, HASH_CHUNK};
use super::{Result, Store};
use crate::conversation::{ChainHash, TenantId};
use sqlx::{Any, QueryBuilder};
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
    #[tracing::instrument(
        name = "store.insert_messages",
        level = "debug",
        skip_all,
        fields(count = messages.len()),
    )]
    pub async fn insert_messages(
        &self,
        tenant: &TenantId,
        label: Option<&str>,
        messages: &[NewMessage],
    ) -> Result<u64> {
        if messages.is_empty() {
            return Ok(0);
        }
        let created_at = now_ms();
        let mut tx = self.pool.begin().await?;
        let mut inserted = 0;
        // Rows go in chain order, the same order any concurrent writer of
        // this chain uses, so two transactions never wait on each other in a
        // cycle.
        for chunk in messages.chunks(INSERT_CHUNK) {
            let mut builder = QueryBuilder::<Any>::new(
                "insert into messages (tenant, hash, parent, position, role, body, bytes, \
                 token_estimate, label, created_at) values ",
            );
            push_row_placeholders(&mut builder, 1, chunk.len(), MESSAGE_COLUMNS);
            builder.push(" on conflict (tenant, hash) do nothing");
            let mut query = builder.build().persistent(false);
            for message in chunk {
                query = query
                    .bind(tenant.as_str())
                    .bind(message.hash.to_hex())
                    .bind(message.parent.as_ref().map(ChainHash::to_hex))
                    .bind(message.position)
                    .bind(message.role.as_str())
                    .bind(message.body.as_str())
                    .bind(i64::try_from(message.body.len()).unwrap_or(i64::MAX))
                    .bind(message.token_estimate)
                    .bind(label)
                    .bind(created_at);
            }
            inserted += query.execute(&mut *tx).await?.rows_affected();
        }
        tx.commit().await?;
        Ok(inserted)
    }
}
