//! Beside the flow, the operator page: the pages.
//!
//! The three pages. Each reads the store with bounded queries, a page of
//! any long list at a time, and hands plain views to its template.

use super::templates::render;
use super::view;
use crate::conversation::{ChainHash, ConversationId, TenantId};
use crate::domain::Compaction;
use crate::format::{human_bytes, utc_time};
use crate::state::AppState;
use crate::store::{
    Branch, ConversationRow, ConversationSummary, ListQuery, Listed, MessageText, RequestPoint,
    SortBy, Store, StoreError, MAX_PAGE,
};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use minijinja::context;
use serde::Deserialize;
use serde_json::json;

/// Rows per page of the list.
const PAGE: i64 = 50;

/// Messages of the live branch loaded for a conversation page (with the
/// start of their bodies), at most: enough to show what the summaries on
/// the page folded in.
const PATH_MESSAGES: i64 = 2_000;
const PREVIEW_CHARS: i64 = 300;
/// The newest messages of the live branch shown.
const RECENT_MESSAGES: usize = 100;
/// Requests per page of the chart.
const REQUESTS_PAGE: i64 = 500;
/// Compactions (with their summaries) per page.
const COMPACTIONS_PAGE: i64 = 20;
/// The newest branches listed.
const BRANCHES_SHOWN: i64 = 20;
/// Compaction marks on one page of the chart, at most.
const MAX_MARKS: i64 = 1_000;

fn no_database() -> Response {
    (StatusCode::SERVICE_UNAVAILABLE, "no database configured\n").into_response()
}

fn unavailable(error: StoreError) -> Response {
    tracing::warn!(error.message = %error, "admin page: database query failed");
    (
        StatusCode::SERVICE_UNAVAILABLE,
        "the database did not answer\n",
    )
        .into_response()
}

#[derive(Deserialize, Default)]
pub struct ListParams {
    sort: Option<String>,
    dir: Option<String>,
    q: Option<String>,
    offset: Option<i64>,
}

fn list_href(sort: SortBy, ascending: bool, filter: &str, offset: i64) -> String {
    let dir = if ascending { "asc" } else { "desc" };
    let query = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs([
            ("sort", sort.name()),
            ("dir", dir),
            ("q", filter),
            ("offset", &offset.to_string()),
        ])
        .finish();
    format!("/admin/?{query}")
}

pub async fn conversations(
    State(state): State<AppState>,
    Query(params): Query<ListParams>,
) -> Response {
    let Some(store) = state.storage.store() else {
        return no_database();
    };
    let sort = SortBy::parse(params.sort.as_deref().unwrap_or(""));
    let ascending = params.dir.as_deref() == Some("asc");
    let filter = params.q.unwrap_or_default();
    let offset = params.offset.unwrap_or(0).clamp(0, 1_000_000);
    let query = ListQuery {
        sort,
        ascending,
        filter: Some(filter.clone()),
        offset,
        // One more than shown, to know whether a next page exists.
        limit: (PAGE + 1).min(MAX_PAGE),
    };
    let mut rows = match store.list_conversation_rows(&query).await {
        Ok(rows) => rows,
        Err(error) => return unavailable(error),
    };
    let more = rows.len() as i64 > PAGE;
    rows.truncate(PAGE as usize);
    let sortable: Vec<_> = [
        (SortBy::LastActivity, "Last activity"),
        (SortBy::Messages, "Messages"),
        (SortBy::Compactions, "Compactions"),
        (SortBy::Tokens, "Context"),
    ]
    .into_iter()
    .map(|(column, title)| {
        let active = column == sort;
        // A second click on the active column flips the order.
        let asc = active && !ascending;
        json!({"title": title, "active": active, "href": list_href(column, asc, &filter, 0)})
    })
    .collect();
    let rows: Vec<_> = rows.iter().map(view::row).collect();
    render(
        "list.html",
        context! {
            rows,
            sortable,
            filter,
            sort => sort.name(),
            dir => if ascending { "asc" } else { "desc" },
            previous => (offset > 0).then(|| list_href(sort, ascending, &filter, (offset - PAGE).max(0))),
            next => more.then(|| list_href(sort, ascending, &filter, offset + PAGE)),
        },
    )
}

/// Which page of a conversation's requests and compactions: how many of
/// the newest to skip.
#[derive(Deserialize, Default)]
pub struct ConversationParams {
    requests: Option<i64>,
    compactions: Option<i64>,
}

pub async fn conversation(
    State(state): State<AppState>,
    Path((tenant, conversation)): Path<(String, String)>,
    Query(params): Query<ConversationParams>,
) -> Response {
    let Some(store) = state.storage.store() else {
        return no_database();
    };
    let tenant_valid = tenant.len() == 64 && tenant.bytes().all(|b| b.is_ascii_hexdigit());
    let id = ConversationId::from_hex(&conversation.to_ascii_lowercase());
    let (Some(conversation), true) = (id, tenant_valid) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let tenant = TenantId::from_stored(tenant.to_ascii_lowercase());
    match conversation_page(store, tenant, conversation, &params).await {
        Ok(Some(page)) => page,
        Ok(None) => StatusCode::NOT_FOUND.into_response(),
        Err(error) => unavailable(error),
    }
}

/// `?requests=…&compactions=…` of a conversation's page.
fn page_href(base: &str, requests: i64, compactions: i64) -> String {
    format!("{base}?requests={requests}&compactions={compactions}")
}

/// Links to the older and the newer page of a list of `total`, `offset`
/// skipped, `page` a page: (older, newer) offsets.
fn neighbours(offset: i64, page: i64, total: i64) -> (Option<i64>, Option<i64>) {
    let older = (offset + page < total).then_some(offset + page);
    let newer = (offset > 0).then(|| (offset - page).max(0));
    (older, newer)
}

/// What a conversation's page shows, read.
struct ConversationRead {
    row: ConversationRow,
    summary: ConversationSummary,
    requests: Listed<RequestPoint>,
    /// The page's requests, oldest first.
    points: Vec<RequestPoint>,
    marks: Vec<Compaction>,
    /// The page's compactions, oldest first, and the prefix of the one
    /// before them.
    compactions: Listed<Compaction>,
    before: i64,
    branches: Vec<Branch>,
    head: ChainHash,
    path: Vec<MessageText>,
}

/// A conversation's page: its list row, a page of its requests (the chart)
/// with the compactions made meanwhile, a page of its compactions, its
/// newest branches and the newest messages of its live branch. Each is a
/// bounded read, whatever the conversation's size.
async fn conversation_page(
    store: &Store,
    tenant: TenantId,
    conversation: ConversationId,
    params: &ConversationParams,
) -> Result<Option<Response>, StoreError> {
    let Some(row) = store.conversation_row(&tenant, &conversation).await? else {
        return Ok(None);
    };
    let Some(summary) = store.conversation_summary(&tenant, &conversation).await? else {
        return Ok(None);
    };
    let requests_offset = params.requests.unwrap_or(0).clamp(0, 1_000_000);
    let requests = store
        .conversation_requests_page(&tenant, &conversation, requests_offset, REQUESTS_PAGE)
        .await?;
    let points: Vec<RequestPoint> = requests.items.iter().rev().cloned().collect();
    let marks = chart_marks(store, &tenant, &conversation, &points, requests_offset).await?;
    let offset = params.compactions.unwrap_or(0);
    let (compactions, before) =
        compaction_page(store, &tenant, &conversation, offset, summary.compactions).await?;
    let branches = store
        .conversation_branches(&tenant, &conversation, BRANCHES_SHOWN)
        .await?;
    let head = match store.stored_prefix_len(&tenant, &[row.head]).await? {
        1 => row.head,
        _ => branches.first().map_or(row.root, |b| b.head),
    };
    let from = (row.messages - RECENT_MESSAGES as i64)
        .min(before + 1)
        .max(row.messages - PATH_MESSAGES)
        .max(0);
    let path = store
        .path_texts(&tenant, &head, from, PREVIEW_CHARS)
        .await?;
    let read = ConversationRead {
        row,
        summary,
        requests,
        points,
        marks,
        compactions,
        before,
        branches,
        head,
        path,
    };
    Ok(Some(render_conversation(&tenant, &conversation, read)))
}

/// Which requests (the first's number, how many) and which compactions
/// (the first's number) the page shows, of how many, with the links to
/// the older and the newer page of each.
fn paging(
    base: &str,
    (requests, first_point, points): (&Listed<RequestPoint>, i64, usize),
    (compactions, first_compaction): (&Listed<Compaction>, i64),
) -> (serde_json::Value, serde_json::Value) {
    let href = |requests: i64, compactions: i64| page_href(base, requests, compactions);
    let (older, newer) = neighbours(requests.offset, REQUESTS_PAGE, requests.total);
    let requests_shown = json!({
        "first": first_point, "last": first_point + points as i64 - 1, "total": requests.total,
        "older": older.map(|o| href(o, compactions.offset)),
        "newer": newer.map(|o| href(o, compactions.offset)),
    });
    let (older, newer) = neighbours(compactions.offset, COMPACTIONS_PAGE, compactions.total);
    let shown = compactions.items.len() as i64;
    let compactions_shown = json!({
        "first": first_compaction, "last": first_compaction + shown - 1,
        "total": compactions.total,
        "older": older.map(|o| href(requests.offset, o)),
        "newer": newer.map(|o| href(requests.offset, o)),
    });
    (requests_shown, compactions_shown)
}

/// A page of a conversation's compactions, oldest first, and the prefix
/// length of the compaction before it (0 for none).
async fn compaction_page(
    store: &Store,
    tenant: &TenantId,
    conversation: &ConversationId,
    offset: i64,
    total: i64,
) -> Result<(Listed<Compaction>, i64), StoreError> {
    let offset = offset.clamp(0, total.max(0));
    let mut items = store
        .conversation_compactions(tenant, conversation, offset, COMPACTIONS_PAGE)
        .await?;
    items.reverse();
    let before = store
        .conversation_compactions(tenant, conversation, offset + COMPACTIONS_PAGE, 1)
        .await?
        .first()
        .map_or(0, |c| c.prefix_len);
    let page = Listed {
        items,
        offset,
        total,
    };
    Ok((page, before))
}

fn render_conversation(
    tenant: &TenantId,
    conversation: &ConversationId,
    read: ConversationRead,
) -> Response {
    let ConversationRead {
        row,
        summary,
        requests,
        points,
        marks,
        compactions,
        before,
        branches,
        head,
        path,
    } = read;
    let title = row
        .label
        .clone()
        .unwrap_or_else(|| format!("Conversation {}", conversation.short()));
    let base = view::href(tenant.as_str(), conversation);
    let first_point = (requests.total - requests.offset - points.len() as i64).max(0) + 1;
    let shown = &compactions.items;
    let first_compaction = compactions.total - compactions.offset - shown.len() as i64 + 1;
    let chart = view::chart(&points, first_point as usize, &marks);
    let (requests_shown, compactions_shown) = paging(
        &base,
        (&requests, first_point, points.len()),
        (&compactions, first_compaction),
    );
    render(
        "conversation.html",
        context! {
            title,
            tenant_short => tenant.short(),
            id_short => conversation.short(),
            root_short => row.root.short(),
            messages => row.messages,
            reached => summary.messages,
            size => human_bytes(summary.bytes),
            requests => row.requests,
            requests_kept => requests.total,
            requests_shown,
            context => view::context(row.tokens, row.window_tokens),
            last_activity => utc_time(row.last_activity_ms),
            window_note => chart["window_note"].clone(),
            chart,
            marks => marks.iter().map(view::mark).collect::<Vec<_>>(),
            compaction_count => compactions.total,
            compactions => view::compactions(shown, first_compaction, before, &path),
            compactions_shown,
            branch_count => summary.branches,
            branches => view::branches(&branches, &head),
            recent => view::texts(&path, RECENT_MESSAGES),
        },
    )
}

/// The compactions made while the requests of `points` (a page, oldest
/// first, `offset` newer ones after it) were served: from the page's
/// first request to the request after it.
async fn chart_marks(
    store: &Store,
    tenant: &TenantId,
    conversation: &ConversationId,
    points: &[RequestPoint],
    offset: i64,
) -> Result<Vec<Compaction>, StoreError> {
    let Some(first) = points.first() else {
        return Ok(Vec::new());
    };
    let until = match offset {
        0 => None,
        _ => store
            .conversation_requests_page(tenant, conversation, offset - 1, 1)
            .await?
            .items
            .first()
            .map(|next| next.at_ms),
    };
    store
        .compactions_between(tenant, conversation, first.at_ms, until, MAX_MARKS)
        .await
}

#[derive(Deserialize)]
pub struct OverviewParams {
    hours: Option<i64>,
}

fn percentile(sorted: &[i64], share: f64) -> String {
    if sorted.is_empty() {
        return "–".into();
    }
    let index = ((sorted.len() - 1) as f64 * share).round() as usize;
    format!("{:.1} s", sorted[index] as f64 / 1000.0)
}

pub async fn overview(
    State(state): State<AppState>,
    Query(params): Query<OverviewParams>,
) -> Response {
    let Some(store) = state.storage.store() else {
        return no_database();
    };
    let hours = params.hours.unwrap_or(24).clamp(1, 24 * 90);
    let since = crate::store::now_ms() - hours * 3_600_000;
    let overview = match store.overview(since).await {
        Ok(overview) => overview,
        Err(error) => return unavailable(error),
    };
    let windows: Vec<_> = overview
        .windows
        .iter()
        .map(|w| {
            json!({
                "upstream": w.upstream, "model": w.model, "window": w.window, "source": w.source,
                "per_kb": w.tokens_per_mbyte.map(|r| format!("{:.0}", r as f64 / 1000.0)),
                "updated": utc_time(w.updated_at_ms),
            })
        })
        .collect();
    let o = json!({
        "requests": overview.requests, "overflows": overview.overflows,
        "compactions": overview.compactions, "degraded_requests": overview.degraded_requests,
        "degraded_minutes": overview.degraded_minutes, "by_trigger": overview.by_trigger,
        "failures": overview.failures,
    });
    render(
        "overview.html",
        context! {
            o,
            hours,
            windows,
            periods => [1, 24, 168, 720],
            p50 => percentile(&overview.durations_ms, 0.5),
            p95 => percentile(&overview.durations_ms, 0.95),
        },
    )
}
