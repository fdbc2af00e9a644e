//! Beside the flow, the operator's views: per-request figures, written.
//!
//! Per-request figures for the operator page: one row per chat request,
//! rolled into its conversation's row (`conversations`), both written in
//! the background after the response. The chart reads them back
//! (`store::read::requests`).

use super::batch_rows::{hex, source_columns, BatchStatement, Column};
use super::conversations::{roll_up_on, stored_heads_on, ConversationKey, ConversationRow};
use crate::conversation::{ChainHash, ConversationId, TenantId};
use crate::domain::CompactionFailure;
use crate::store::{Backend, Result, Store};
use serde::Serialize;
use sqlx::any::AnyArguments;
use sqlx::AnyConnection;
use std::collections::HashMap;

/// Request rows kept per conversation: enough for a day-long agent session's
/// chart; older ones are dropped as new ones come.
pub const REQUESTS_KEPT: i64 = 2_000;

/// Pruning past [`REQUESTS_KEPT`] runs on every this-many-th request only:
/// each prune walks the kept rows' index to find the cut, so a busy
/// conversation pays for that walk once per this many requests. On
/// Postgres the walk took 1.2 ms, a fifth of the database's time for a
/// busy conversation's requests at 256; at 1,024 a twentieth, for at most
/// 1,024 rows (about 200 KB) more kept.
pub const PRUNE_EVERY: i64 = 1_024;

/// What one chat request did, as the chart and the overview need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    /// Time-ordered (v7), taken when the request arrived, so rows sort in
    /// arrival order however late each is written.
    pub id: uuid::Uuid,
    pub arrived_at_ms: i64,
    pub tenant: TenantId,
    pub conversation: ConversationId,
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
    pub compaction_error: Option<CompactionFailure>,
    pub degraded: bool,
}

/// Inserts the request rows bound.
static INSERT_REQUESTS: BatchStatement = BatchStatement::new(0, &REQUEST_COLUMNS, |source| {
    format!(
        "insert into requests (tenant, conversation, root, id, head, messages, model, upstream, status, \
         sent_bytes, estimated_tokens, upstream_input_tokens, window_tokens, \
         compacted_messages, compactions, overflows, compaction_error, degraded, created_at) \
         select {} from {source}",
        source_columns(&REQUEST_COLUMNS),
    )
});

/// The columns of [`RequestRow`], in the table's order.
const REQUEST_COLUMNS: [Column; 19] = [
    ("tenant", "text"),
    ("conversation", "text"),
    ("root", "text"),
    ("id", "text"),
    ("head", "text"),
    ("messages", "bigint"),
    ("model", "text"),
    ("upstream", "text"),
    ("status", "bigint"),
    ("sent_bytes", "bigint"),
    ("estimated_tokens", "bigint"),
    ("upstream_input_tokens", "bigint"),
    ("window_tokens", "bigint"),
    ("compacted_messages", "bigint"),
    ("compactions", "bigint"),
    ("overflows", "bigint"),
    ("compaction_error", "text"),
    ("degraded", "bigint"),
    ("created_at", "bigint"),
];

/// Rows per batch statement, inserted or rolled up: what bounds
/// how long one statement holds a core of the database. A busy instance's
/// group commit carries a few hundred records (200 at 1,000 req/s and the
/// writer's 200 ms linger); as one statement their insert ran 2.7 ms on a
/// Postgres backend and their prune 1.3 ms, and the requests sharing that
/// core waited behind them. The small body's added p99 on Postgres, against
/// d8c7237's in the same run: +538 against +378 µs at 500 rows, +466
/// against +351 at 64, +298 against +435 at 32 (bench/HISTORY.md, "Issue
/// 54: a group commit in short statements"). A statement more costs a round
/// trip: about 0.03 context switches a request at 1,000 req/s.
const ROWS_PER_STATEMENT: usize = 32;

/// Rows a prune deletes per statement. A prune comes once per
/// [`PRUNE_EVERY`] requests of a conversation, so however its rows are cut
/// it delays a request of so many at most once: ranges of 256 hold the
/// database about a millisecond each (a range of 32 took 0.05–0.37 ms),
/// and a prune is 4 round trips instead of 32, each a wait of the writer's
/// (bench/HISTORY.md, "Issue 54: a prune in four statements").
const PRUNE_ROWS_PER_STATEMENT: usize = 256;

/// One conversation's request rows older than its [`REQUESTS_KEPT`]
/// newest (offset `$3`), oldest first.
const PRUNED_IDS: &str = "\
select id from requests where tenant = $1 and conversation = $2 and id < (
    select id from requests where tenant = $1 and conversation = $2
    order by id desc limit 1 offset $3)
order by id";

/// Drops one conversation's request rows from `$3` to `$4`: a range of
/// [`PRUNED_IDS`], walked on the conversation's index. (A `limit` in the
/// statement would have to skip the rows deleted before it, and Postgres's
/// generic plan for it scanned the table: 100 ms a statement.)
const PRUNE_REQUESTS: &str = "\
delete from requests where tenant = $1 and conversation = $2 and id >= $3 and id <= $4";

impl Store {
    /// Stores one request's figures and rolls them into its conversation's
    /// row. Three short statements, no transaction: the figures are for
    /// people, and a lost update costs one point of a chart.
    #[tracing::instrument(name = "store.record_request", level = "debug", skip_all)]
    pub async fn record_request(&self, record: &RequestRecord) -> Result<()> {
        let mut connection = self.pool.acquire().await?;
        record_requests_on(&mut connection, self.backend, std::slice::from_ref(record)).await
    }
}

/// One conversation's requests in a batch, oldest first.
struct Rollup<'a> {
    tenant: &'a TenantId,
    conversation: ConversationId,
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
    backend: Backend,
    records: &[RequestRecord],
) -> Result<()> {
    let mut rollups = rollups(records);
    if rollups.is_empty() {
        return Ok(());
    }
    for chunk in rollups.chunks_mut(ROWS_PER_STATEMENT) {
        count_branches(connection, backend, chunk).await?;
        let totals = upsert_conversations(connection, backend, chunk).await?;
        prune_requests(connection, chunk, &totals).await?;
    }
    let recorded: Vec<&RequestRecord> = rollups.iter().flat_map(|r| r.records.clone()).collect();
    for chunk in recorded.chunks(ROWS_PER_STATEMENT) {
        insert_requests(connection, backend, chunk).await?;
    }
    Ok(())
}

fn rollups(records: &[RequestRecord]) -> Vec<Rollup<'_>> {
    let mut by_conversation: HashMap<(&str, ConversationId), Rollup<'_>> = HashMap::new();
    for record in records {
        let (Some(root), Some(_)) = (record.chain.first(), record.chain.last()) else {
            continue;
        };
        by_conversation
            .entry((record.tenant.as_str(), record.conversation))
            .or_insert_with(|| Rollup {
                tenant: &record.tenant,
                conversation: record.conversation,
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
    rollups.sort_by(|a, b| {
        (a.tenant.as_str(), a.conversation).cmp(&(b.tenant.as_str(), b.conversation))
    });
    rollups
}

/// A request branched when its chain does not pass through the head the
/// conversation had before it: the stored head for the first request of
/// the batch, the previous request's for the others.
async fn count_branches(
    connection: &mut AnyConnection,
    backend: Backend,
    rollups: &mut [Rollup<'_>],
) -> Result<()> {
    let keys: Vec<ConversationKey<'_>> = rollups
        .iter()
        .map(|rollup| ConversationKey {
            tenant: rollup.tenant.as_str(),
            conversation: &rollup.conversation,
        })
        .collect();
    let mut stored = stored_heads_on(connection, backend, &keys).await?;
    for rollup in rollups.iter_mut() {
        let key = (rollup.tenant.as_str().to_owned(), rollup.conversation);
        let mut previous = stored.remove(&key);
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
    backend: Backend,
    rollups: &[Rollup<'_>],
) -> Result<HashMap<(String, ConversationId), i64>> {
    let rows: Vec<ConversationRow> = rollups.iter().map(rolled_up).collect();
    roll_up_on(connection, backend, &rows).await
}

/// A conversation's row as its requests in a batch roll into it.
fn rolled_up(rollup: &Rollup<'_>) -> ConversationRow {
    let newest = rollup.newest();
    ConversationRow {
        tenant: rollup.tenant.clone(),
        conversation: rollup.conversation,
        root: rollup.root,
        label: rollup
            .records
            .iter()
            .rev()
            .find_map(|r| r.label.as_deref())
            .map(str::to_owned),
        head: *newest.chain.last().unwrap_or(&rollup.root),
        messages: newest.chain.len() as i64 - 1,
        branches: 1 + rollup.branched,
        requests: rollup.records.len() as i64,
        compactions: rollup.records.iter().map(|r| r.compactions).sum(),
        tokens: newest
            .upstream_input_tokens
            .unwrap_or(newest.estimated_tokens),
        window_tokens: rollup.records.iter().rev().find_map(|r| r.window_tokens),
        model: newest.model.clone(),
        last_activity_ms: newest.arrived_at_ms,
        created_at_ms: rollup.records[0].arrived_at_ms,
        // What it reaches is the message write's to count.
        reached_messages: 0,
        reached_bytes: 0,
    }
}

/// Drops a conversation's oldest request rows once it passes
/// [`REQUESTS_KEPT`], on every [`PRUNE_EVERY`]-th request only.
async fn prune_requests(
    connection: &mut AnyConnection,
    rollups: &[Rollup<'_>],
    totals: &HashMap<(String, ConversationId), i64>,
) -> Result<()> {
    for rollup in rollups {
        let key = (rollup.tenant.as_str().to_owned(), rollup.conversation);
        let Some(&requests) = totals.get(&key) else {
            continue;
        };
        let added = rollup.records.len() as i64;
        let crossed = requests / PRUNE_EVERY > (requests - added) / PRUNE_EVERY;
        if requests > REQUESTS_KEPT && crossed {
            prune_conversation(connection, rollup.tenant, &rollup.conversation).await?;
        }
    }
    Ok(())
}

/// Drops the rows older than the conversation's [`REQUESTS_KEPT`] newest,
/// [`PRUNE_ROWS_PER_STATEMENT`] at a time.
async fn prune_conversation(
    connection: &mut AnyConnection,
    tenant: &TenantId,
    conversation: &ConversationId,
) -> Result<()> {
    let conversation = conversation.to_hex();
    let pruned: Vec<String> = sqlx::query_scalar(PRUNED_IDS)
        .bind(tenant.as_str())
        .bind(&conversation)
        .bind(REQUESTS_KEPT - 1)
        .fetch_all(&mut *connection)
        .await?;
    for range in pruned.chunks(PRUNE_ROWS_PER_STATEMENT) {
        let (Some(first), Some(last)) = (range.first(), range.last()) else {
            continue;
        };
        sqlx::query(PRUNE_REQUESTS)
            .bind(tenant.as_str())
            .bind(&conversation)
            .bind(first)
            .bind(last)
            .execute(&mut *connection)
            .await?;
    }
    Ok(())
}

async fn insert_requests(
    connection: &mut AnyConnection,
    backend: Backend,
    records: &[&RequestRecord],
) -> Result<()> {
    let rows: Vec<RequestRow<'_>> = records
        .iter()
        .map(|record| RequestRow::of(record))
        .collect();
    let (text, arguments) = INSERT_REQUESTS.bound(backend, AnyArguments::default(), &rows)?;
    sqlx::query_with(text, arguments)
        .execute(&mut *connection)
        .await?;
    Ok(())
}

/// A request's row, as [`INSERT_REQUESTS`] reads it.
#[derive(Serialize)]
struct RequestRow<'a> {
    tenant: &'a str,
    conversation: &'a ConversationId,
    #[serde(serialize_with = "hex")]
    root: &'a ChainHash,
    id: String,
    #[serde(serialize_with = "hex")]
    head: &'a ChainHash,
    messages: i64,
    model: &'a str,
    upstream: &'a str,
    status: i64,
    sent_bytes: i64,
    estimated_tokens: i64,
    upstream_input_tokens: Option<i64>,
    window_tokens: Option<i64>,
    compacted_messages: Option<i64>,
    compactions: i64,
    overflows: i64,
    compaction_error: Option<&'a str>,
    degraded: i64,
    created_at: i64,
}

impl<'a> RequestRow<'a> {
    fn of(record: &'a RequestRecord) -> Self {
        let root = &record.chain[0];
        Self {
            tenant: record.tenant.as_str(),
            conversation: &record.conversation,
            root,
            id: record.id.to_string(),
            head: record.chain.last().unwrap_or(root),
            messages: record.chain.len() as i64 - 1,
            model: &record.model,
            upstream: &record.upstream,
            status: record.status,
            sent_bytes: record.sent_bytes,
            estimated_tokens: record.estimated_tokens,
            upstream_input_tokens: record.upstream_input_tokens,
            window_tokens: record.window_tokens,
            compacted_messages: record.compacted_messages,
            compactions: record.compactions,
            overflows: record.overflows,
            compaction_error: record.compaction_error.map(CompactionFailure::as_str),
            degraded: i64::from(record.degraded),
            created_at: record.arrived_at_ms,
        }
    }
}
