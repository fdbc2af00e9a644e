//! Steps 1 to 8, orchestrated: one chat request, top to bottom.
//!
//! The orchestration of a chat request, read top to bottom:
//! identify → persist (beside the upstream call) → rewrite → forward →
//! on overflow: compact → retry, bounded by [`budget::CompactionBudget`].

pub mod budget;
mod exchange;
mod keepalive;
mod observe;
pub mod persist;
mod respond;
pub mod rewrite;
mod work;

use crate::state::AppState;
use crate::upstream::routes::Route;
use axum::response::Response;
use bytes::Bytes;
use exchange::{Exchange, Incoming};
use http::request::Parts;

use tracing::Instrument;

pub use keepalive::KEEPALIVE_COMMENT;

pub async fn handle(state: &AppState, route: Route, parts: Parts, body: Bytes) -> Response {
    let adapter = route.adapter();
    let salt = state.settings.storage.tenant_salt.as_bytes();
    let identified = adapter.outline(body.clone()).and_then(|outline| {
        crate::conversation::identify::conversation(
            adapter,
            salt,
            &parts.headers,
            outline,
            Some(&state.chain_memo),
        )
    });
    // Invariant 9: what Condenser cannot parse goes upstream unchanged.
    let Some((chat, conversation)) = identified else {
        let upstream = &state.upstream;
        return upstream
            .forward(&route, parts.method, &parts.headers, body.into())
            .await;
    };
    let chat = std::sync::Arc::new(chat);
    let persisted = persist::queue(
        &state.writer,
        &state.storage,
        adapter,
        &conversation,
        &chat,
        body.len(),
    );
    let observed = observe::Observed::new(state, &route.upstream.name, &chat.model, &conversation);
    let stream = chat.stream;
    let incoming = Incoming {
        route,
        parts,
        original: body,
        adapter,
        request: chat,
        conversation,
    };
    let (compacting_tx, compacting_rx) = tokio::sync::watch::channel(false);
    let exchange = Exchange::new(state.clone(), incoming, persisted).signalling(compacting_tx);
    let work = work::Work::new(
        observed.after(exchange.run()).in_current_span(),
        compacting_rx.clone(),
        state.background.clone(),
    );
    // Keep-alives are for event streams; a plain client just waits.
    let keepalive_interval = if stream {
        state.settings.compaction.keepalive_interval
    } else {
        std::time::Duration::ZERO
    };
    keepalive::respond(work, compacting_rx, keepalive_interval, adapter).await
}
