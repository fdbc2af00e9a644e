//! Per-request figures for the operator page: one row per chat request, and
//! the per-conversation row the list reads, both written in the background
//! after the response.

use super::rows::{hash_column, push_placeholders, push_row_placeholders};
use super::{Result, Store};
use crate::conversation::{ChainHash, TenantId};
use sqlx::any::AnyRow;
use sqlx::{Any, AnyConnection, FromRow, QueryBuilder, Row};
use std::collections::HashMap;

/// Request rows kept per conversation: enough for a day-long agent session's
/// chart; older ones are dropped as new ones come.
pub const REQUESTS_KEPT: i64 = 2_000;

/// Pruning past [`REQUESTS_KEPT`] runs on every this-many-th request only:
/// each prune walks the kept rows' index to find the cut, so a busy
/// conversation pays for that walk once per this many requests.
pub const PRUNE_EVERY: i64 = 256;

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

/// Rolls a batch's requests of one conversation into its row: counts are
/// added, `branches` arrives as one plus the new branches seen.
const UPSERT_CONVERSATIONS: &str = "\
insert into conversations (tenant, root, label, head, messages, branches, requests, compactions,
    tokens, window_tokens, model, pruned_at, last_activity, created_at) values ";

const UPSERT_CONVERSATIONS_CONFLICT: &str = " \
on conflict (tenant, root) do update set
    label = coalesce(excluded.label, conversations.label),
    branches = conversations.branches + excluded.branches - 1,
    requests = conversations.requests + excluded.requests,
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
returning tenant, root, requests";

/// Columns bound per conversation row, in placeholder order.
const CONVERSATION_COLUMNS: usize = 14;

const INSERT_REQUESTS: &str = "\
insert into requests (tenant, root, id, head, messages, model, upstream, status, sent_bytes,
    estimated_tokens, upstream_input_tokens, window_tokens, compacted_messages, compactions,
    overflows, compaction_error, degraded, created_at) values ";

/// Columns bound per request row, in placeholder order.
const REQUEST_COLUMNS: usize = 18;

/// Rows per multi-row statement: under every backend's parameter limit.
const ROWS_PER_STATEMENT: usize = 100;

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
        record_requests_on(&mut connection, std::slice::from_ref(record)).await
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

/// One conversation's requests in a batch, oldest first.
struct Rollup<'a> {
    tenant: &'a TenantId,
    root: ChainHash,
    records: Vec<&'a RequestRecord>,
    branched: i64,
}

impl Rollup<'_> {
    fn newest(&self) -> &RequestRecord {
        self.records[self.records.len() - 1]
    }
}

/// Stores a batch of requests' figures and rolls them into their
/// conversations' rows: a few statements per batch, not per request. The
/// figures are for people; a lost update costs one point of a chart.
pub(super) async fn record_requests_on(
    connection: &mut AnyConnection,
    records: &[RequestRecord],
) -> Result<()> {
    let mut rollups = rollups(records);
    if rollups.is_empty() {
        return Ok(());
    }
    for chunk in rollups.chunks_mut(ROWS_PER_STATEMENT) {
        count_branches(connection, chunk).await?;
        let totals = upsert_conversations(connection, chunk).await?;
        prune_requests(connection, chunk, &totals).await?;
    }
    let recorded: Vec<&RequestRecord> = rollups.iter().flat_map(|r| r.records.clone()).collect();
    for chunk in recorded.chunks(ROWS_PER_STATEMENT) {
        insert_requests(connection, chunk).await?;
    }
    Ok(())
}

fn rollups(records: &[RequestRecord]) -> Vec<Rollup<'_>> {
    let mut by_conversation: HashMap<(&str, ChainHash), Rollup<'_>> = HashMap::new();
    for record in records {
        let (Some(root), Some(_)) = (record.chain.first(), record.chain.last()) else {
            continue;
        };
        by_conversation
            .entry((record.tenant.as_str(), *root))
            .or_insert_with(|| Rollup {
                tenant: &record.tenant,
                root: *root,
                records: Vec::new(),
                branched: 0,
            })
            .records
            .push(record);
    }
    let mut rollups: Vec<Rollup<'_>> = by_conversation.into_values().collect();
    for rollup in &mut rollups {
        rollup.records.sort_by_key(|r| (r.arrived_at_ms, r.id));
    }
    // Key order: two instances' batches lock conversation rows alike.
    rollups.sort_by(|a, b| (a.tenant.as_str(), a.root).cmp(&(b.tenant.as_str(), b.root)));
    rollups
}

/// A request branched when its chain does not pass through the head the
/// conversation had before it: the stored head for the first request of
/// the batch, the previous request's for the others.
async fn count_branches(connection: &mut AnyConnection, rollups: &mut [Rollup<'_>]) -> Result<()> {
    let mut builder = QueryBuilder::<Any>::new(
        "select tenant, root, head, messages from conversations where (tenant, root) in (",
    );
    for index in 0..rollups.len() {
        builder.push(if index > 0 { ", (" } else { "(" });
        push_placeholders(&mut builder, 1 + index * 2, 2);
        builder.push(")");
    }
    builder.push(")");
    let mut query = builder.build().persistent(false);
    for rollup in rollups.iter() {
        query = query
            .bind(rollup.tenant.as_str())
            .bind(rollup.root.to_hex());
    }
    let mut stored = HashMap::new();
    for row in query.fetch_all(&mut *connection).await? {
        let tenant: String = row.try_get("tenant")?;
        let root = hash_column(&row, "root")?;
        let head = hash_column(&row, "head")?;
        let messages: i64 = row.try_get("messages")?;
        stored.insert((tenant, root), (head, messages));
    }
    for rollup in rollups.iter_mut() {
        let mut previous = stored.remove(&(rollup.tenant.as_str().to_owned(), rollup.root));
        for record in &rollup.records {
            if let Some((head, at)) = previous {
                let passes = usize::try_from(at).ok().and_then(|at| record.chain.get(at));
                rollup.branched += i64::from(passes != Some(&head));
            }
            let head = *record.chain.last().unwrap_or(&rollup.root);
            previous = Some((head, record.chain.len() as i64 - 1));
        }
    }
    Ok(())
}

/// Returns each conversation's request count after the update.
async fn upsert_conversations(
    connection: &mut AnyConnection,
    rollups: &[Rollup<'_>],
) -> Result<HashMap<(String, ChainHash), i64>> {
    let mut builder = QueryBuilder::<Any>::new(UPSERT_CONVERSATIONS);
    push_row_placeholders(&mut builder, 1, rollups.len(), CONVERSATION_COLUMNS);
    builder.push(UPSERT_CONVERSATIONS_CONFLICT);
    let mut query = builder.build().persistent(false);
    for rollup in rollups {
        let newest = rollup.newest();
        let label = rollup.records.iter().rev().find_map(|r| r.label.as_deref());
        let window = rollup.records.iter().rev().find_map(|r| r.window_tokens);
        let compactions: i64 = rollup.records.iter().map(|r| r.compactions).sum();
        let tokens = newest
            .upstream_input_tokens
            .unwrap_or(newest.estimated_tokens);
        let head = newest.chain.last().unwrap_or(&rollup.root);
        query = query
            .bind(rollup.tenant.as_str())
            .bind(rollup.root.to_hex())
            .bind(label)
            .bind(head.to_hex())
            .bind(newest.chain.len() as i64 - 1)
            .bind(1 + rollup.branched)
            .bind(rollup.records.len() as i64)
            .bind(compactions)
            .bind(tokens)
            .bind(window)
            .bind(newest.model.as_str())
            .bind(None::<i64>)
            .bind(newest.arrived_at_ms)
            .bind(rollup.records[0].arrived_at_ms);
    }
    let mut totals = HashMap::new();
    for row in query.fetch_all(&mut *connection).await? {
        let tenant: String = row.try_get("tenant")?;
        let root = hash_column(&row, "root")?;
        totals.insert((tenant, root), row.try_get::<i64, _>("requests")?);
    }
    Ok(totals)
}

/// Drops a conversation's oldest request rows once it passes
/// [`REQUESTS_KEPT`], on every [`PRUNE_EVERY`]-th request only.
async fn prune_requests(
    connection: &mut AnyConnection,
    rollups: &[Rollup<'_>],
    totals: &HashMap<(String, ChainHash), i64>,
) -> Result<()> {
    for rollup in rollups {
        let key = (rollup.tenant.as_str().to_owned(), rollup.root);
        let Some(&requests) = totals.get(&key) else {
            continue;
        };
        let added = rollup.records.len() as i64;
        let crossed = requests / PRUNE_EVERY > (requests - added) / PRUNE_EVERY;
        if requests > REQUESTS_KEPT && crossed {
            sqlx::query(PRUNE_REQUESTS)
                .bind(rollup.tenant.as_str())
                .bind(rollup.root.to_hex())
                .bind(REQUESTS_KEPT - 1)
                .execute(&mut *connection)
                .await?;
        }
    }
    Ok(())
}

async fn insert_requests(connection: &mut AnyConnection, records: &[&RequestRecord]) -> Result<()> {
    let mut builder = QueryBuilder::<Any>::new(INSERT_REQUESTS);
    push_row_placeholders(&mut builder, 1, records.len(), REQUEST_COLUMNS);
    let mut query = builder.build().persistent(false);
    for record in records {
        let root = record.chain[0];
        let head = record.chain.last().unwrap_or(&root);
        query = query
            .bind(record.tenant.as_str())
            .bind(root.to_hex())
            .bind(record.id.to_string())
            .bind(head.to_hex())
            .bind(record.chain.len() as i64 - 1)
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
            .bind(record.arrived_at_ms);
    }
    query.execute(&mut *connection).await?;
    Ok(())
}
