//! Per-request figures for the operator page: one row per chat request, and
//! the per-conversation row the list reads, both written in the background
//! after the response.

use super::rows::hash_column;
use super::{Result, Store};
use crate::conversation::{ChainHash, TenantId};
use sqlx::any::AnyRow;
use sqlx::{AnyConnection, FromRow, Row};

/// Request rows kept per conversation: enough for a day-long agent session's
/// chart; older ones are dropped as new ones come.
pub const REQUESTS_KEPT: i64 = 2_000;

/// Pruning past [`REQUESTS_KEPT`] runs on every this-many-th request only.
const PRUNE_EVERY: i64 = 64;

/// What one chat request did, as the chart and the overview need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    /// Time-ordered (v7), taken when the request arrived, so rows sort in
    /// arrival order however late each is written.
    pub id: uuid::Uuid,
    pub arrived_at_ms: i64,
    pub tenant: TenantId,
    /// `chain[0]` is the conversation's root; the last is the request's head.
    pub chain: Vec<ChainHash>,
    pub label: Option<String>,
    pub model: String,
    pub upstream: String,
    pub status: i64,
    pub sent_bytes: i64,
    pub estimated_tokens: i64,
    pub upstream_input_tokens: Option<i64>,
    pub window_tokens: Option<i64>,
    pub compacted_messages: Option<i64>,
    pub compactions: i64,
    pub overflows: i64,
    pub compaction_error: Option<String>,
    pub degraded: bool,
}

/// A stored request row, as the chart reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestPoint {
    pub at_ms: i64,
    pub messages: i64,
    pub estimated_tokens: i64,
    pub upstream_input_tokens: Option<i64>,
    pub window_tokens: Option<i64>,
    pub compacted_messages: Option<i64>,
    pub compactions: i64,
    pub overflows: i64,
    pub status: i64,
}

const UPSERT_CONVERSATION: &str = "\
insert into conversations (tenant, root, label, head, messages, branches, requests, compactions,
    tokens, window_tokens, model, pruned_at, last_activity, created_at)
values ($1, $2, $3, $4, $5, 1, 1, $6, $7, $8, $9, null, $10, $10)
on conflict (tenant, root) do update set
    label = coalesce(excluded.label, conversations.label),
    branches = conversations.branches + $11,
    requests = conversations.requests + 1,
    compactions = conversations.compactions + excluded.compactions,
    window_tokens = coalesce(excluded.window_tokens, conversations.window_tokens),
    -- Records land out of order (each waits for its response's usage):
    -- the newest request, by arrival, sets the current state.
    head = case when excluded.last_activity >= conversations.last_activity
        then excluded.head else conversations.head end,
    messages = case when excluded.last_activity >= conversations.last_activity
        then excluded.messages else conversations.messages end,
    tokens = case when excluded.last_activity >= conversations.last_activity
        then excluded.tokens else conversations.tokens end,
    model = case when excluded.last_activity >= conversations.last_activity
        then excluded.model else conversations.model end,
    last_activity = case when excluded.last_activity >= conversations.last_activity
        then excluded.last_activity else conversations.last_activity end
returning requests";

const INSERT_REQUEST: &str = "\
insert into requests (tenant, root, id, head, messages, model, upstream, status, sent_bytes,
    estimated_tokens, upstream_input_tokens, window_tokens, compacted_messages, compactions,
    overflows, compaction_error, degraded, created_at)
values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)";

/// Keeps the newest [`REQUESTS_KEPT`] rows of one conversation.
const PRUNE_REQUESTS: &str = "\
delete from requests where tenant = $1 and root = $2 and id < (
    select id from requests where tenant = $1 and root = $2
    order by id desc limit 1 offset $3)";

impl<'r> FromRow<'r, AnyRow> for RequestPoint {
    fn from_row(row: &'r AnyRow) -> Result<Self, sqlx::Error> {
        Ok(Self {
            at_ms: row.try_get("created_at")?,
            messages: row.try_get("messages")?,
            estimated_tokens: row.try_get("estimated_tokens")?,
            upstream_input_tokens: row.try_get("upstream_input_tokens")?,
            window_tokens: row.try_get("window_tokens")?,
            compacted_messages: row.try_get("compacted_messages")?,
            compactions: row.try_get("compactions")?,
            overflows: row.try_get("overflows")?,
            status: row.try_get("status")?,
        })
    }
}

impl Store {
    /// Stores one request's figures and rolls them into its conversation's
    /// row. Three short statements, no transaction: the figures are for
    /// people, and a lost update costs one point of a chart.
    #[tracing::instrument(name = "store.record_request", level = "debug", skip_all)]
    pub async fn record_request(&self, record: &RequestRecord) -> Result<()> {
        let mut connection = self.pool.acquire().await?;
        record_request_on(&mut connection, record).await
    }

    /// The stored requests of one conversation, oldest first.
    pub async fn conversation_requests(
        &self,
        tenant: &TenantId,
        root: &ChainHash,
    ) -> Result<Vec<RequestPoint>> {
        let rows = sqlx::query_as(
            "select created_at, messages, estimated_tokens, upstream_input_tokens, window_tokens, \
             compacted_messages, compactions, overflows, status \
             from requests where tenant = $1 and root = $2 order by id limit $3",
        )
        .bind(tenant.as_str())
        .bind(root.to_hex())
        .bind(REQUESTS_KEPT)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows)
    }
}

/// [`Store::record_request`] on one connection, so that a batch of writes
/// can share a transaction.
pub(super) async fn record_request_on(
    connection: &mut AnyConnection,
    record: &RequestRecord,
) -> Result<()> {
    let (Some(root), Some(head)) = (record.chain.first(), record.chain.last()) else {
        return Ok(());
    };
    let tenant = record.tenant.as_str();
    let previous =
        sqlx::query("select head, messages from conversations where tenant = $1 and root = $2")
            .bind(tenant)
            .bind(root.to_hex())
            .fetch_optional(&mut *connection)
            .await?;
    let branched = match previous {
        Some(row) => {
            let at: i64 = row.try_get("messages")?;
            let previous_head = hash_column(&row, "head")?;
            usize::try_from(at).ok().and_then(|at| record.chain.get(at)) != Some(&previous_head)
        }
        None => false,
    };
    let at = record.arrived_at_ms;
    let messages = record.chain.len() as i64 - 1;
    let tokens = record
        .upstream_input_tokens
        .unwrap_or(record.estimated_tokens);
    let requests: i64 = sqlx::query_scalar(UPSERT_CONVERSATION)
        .bind(tenant)
        .bind(root.to_hex())
        .bind(record.label.as_deref())
        .bind(head.to_hex())
        .bind(messages)
        .bind(record.compactions)
        .bind(tokens)
        .bind(record.window_tokens)
        .bind(record.model.as_str())
        .bind(at)
        .bind(i64::from(branched))
        .fetch_one(&mut *connection)
        .await?;
    sqlx::query(INSERT_REQUEST)
        .bind(tenant)
        .bind(root.to_hex())
        .bind(record.id.to_string())
        .bind(head.to_hex())
        .bind(messages)
        .bind(record.model.as_str())
        .bind(record.upstream.as_str())
        .bind(record.status)
        .bind(record.sent_bytes)
        .bind(record.estimated_tokens)
        .bind(record.upstream_input_tokens)
        .bind(record.window_tokens)
        .bind(record.compacted_messages)
        .bind(record.compactions)
        .bind(record.overflows)
        .bind(record.compaction_error.as_deref())
        .bind(i64::from(record.degraded))
        .bind(at)
        .execute(&mut *connection)
        .await?;
    if requests > REQUESTS_KEPT && requests % PRUNE_EVERY == 0 {
        sqlx::query(PRUNE_REQUESTS)
            .bind(tenant)
            .bind(root.to_hex())
            .bind(REQUESTS_KEPT - 1)
            .execute(&mut *connection)
            .await?;
    }
    Ok(())
}
