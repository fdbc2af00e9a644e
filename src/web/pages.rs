//! Beside the flow, the operator page: the pages.
//!
//! The three pages. Each reads the store with a bounded query and hands
//! plain views to its template.

use super::templates::render;
use super::view;
use crate::conversation::{ChainHash, ConversationId, TenantId};
use crate::format::utc_time;
use crate::state::AppState;
use crate::store::{ListQuery, SortBy, Store, StoreError, MAX_PAGE};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use minijinja::context;
use serde::Deserialize;
use serde_json::json;

/// Rows per page of the list.
const PAGE: i64 = 50;

/// Messages of the live branch loaded for a conversation page (with the
/// start of their bodies): enough to show what the summaries folded in.
const PATH_MESSAGES: i64 = 2_000;
const PREVIEW_CHARS: i64 = 300;

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

pub async fn conversation(
    State(state): State<AppState>,
    Path((tenant, conversation)): Path<(String, String)>,
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
    match conversation_page(store, tenant, conversation).await {
        Ok(Some(page)) => page,
        Ok(None) => StatusCode::NOT_FOUND.into_response(),
        Err(error) => unavailable(error),
    }
}

async fn conversation_page(
    store: &Store,
    tenant: TenantId,
    conversation: ConversationId,
) -> Result<Option<Response>, StoreError> {
    let Some(row) = store.conversation_row(&tenant, &conversation).await? else {
        return Ok(None);
    };
    let points = store.conversation_requests(&tenant, &conversation).await?;
    let detail = store
        .conversation_tree(tenant.clone(), conversation)
        .await?;
    let head = live_head(&detail, &row.head);
    let from = (row.messages - PATH_MESSAGES).max(0);
    let path = store
        .path_texts(&tenant, &head, from, PREVIEW_CHARS)
        .await?;
    let title = row
        .label
        .clone()
        .unwrap_or_else(|| format!("Conversation {}", conversation.short()));
    Ok(Some(render(
        "conversation.html",
        context! {
            title,
            tenant_short => tenant.short(),
            id_short => conversation.short(),
            root_short => row.root.short(),
            messages => row.messages,
            requests => row.requests,
            context => view::context(row.tokens, row.window_tokens),
            last_activity => utc_time(row.last_activity_ms),
            chart => view::chart(&points, &detail.compactions),
            compactions => view::compactions(&detail, &path),
            branches => view::branches(&detail, &path),
            recent => view::texts(&path, 100),
        },
    )))
}

/// The tip of the live branch: the newest request's head when it is
/// stored, else the newest message the conversation reaches.
fn live_head(detail: &crate::store::ConversationDetail, newest: &ChainHash) -> ChainHash {
    if detail.messages.iter().any(|m| m.hash == *newest) {
        return *newest;
    }
    detail
        .messages
        .iter()
        .max_by_key(|m| (m.created_at_ms, m.position))
        .map_or(detail.root, |m| m.hash)
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
