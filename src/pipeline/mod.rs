//! Steps 1 to 8, orchestrated: one chat request, top to bottom.
//!
//! The orchestration of a chat request, read top to bottom:
//! identify → persist (beside the upstream call) → rewrite → forward →
//! on overflow: compact → retry, bounded by [`budget::CompactionBudget`].

pub mod budget;
mod exchange;
mod keepalive;
mod native;
mod observe;
pub mod persist;
mod respond;
pub mod rewrite;
mod work;

use crate::protocol::{Arrived, Arriving};
use crate::state::AppState;
use crate::upstream::routes::Route;
use axum::response::Response;
use bytes::Bytes;
use exchange::{Exchange, Incoming};
use http::request::Parts;

use tracing::Instrument;

pub use keepalive::KEEPALIVE_COMMENT;

/// Serves a chat request whose body is read: `arrived`, the pass over its
/// bytes done as they arrived ([`arriving`]), when one was.
pub async fn handle(
    state: &AppState,
    route: Route,
    parts: Parts,
    body: Bytes,
    arrived: Option<Arrived>,
) -> Response {
    let adapter = route.adapter();
    let credential = caller_credential(&route, &parts);
    let native::Prepared {
        body,
        forwarded,
        ask,
        fallback,
    } = match native::prepared(state, &route, &parts, credential.as_deref(), body).await {
        Ok(prepared) => prepared,
        Err(response) => return response,
    };
    let (credential, body_read) = (credential.as_deref(), (&body, arrived));
    let identified = identify_off_workers(state, adapter, credential, body_read, &parts).await;
    // Invariant 9: what Condenser cannot parse goes upstream unchanged.
    let Some((chat, conversation)) = identified else {
        let (method, headers) = (parts.method, &parts.headers);
        return state
            .upstream
            .forward(&route, method, headers, forwarded.into())
            .await;
    };
    let chat = std::sync::Arc::new(chat);
    let arrived_at_ms = crate::store::now_ms();
    let (writer, storage) = (&state.writer, &state.storage);
    let persist = persist::Persist::new(writer, storage, adapter, body.len(), arrived_at_ms);
    let (upstream, protocol) = (&route.upstream.name, route.upstream.protocol);
    let speaks = keepalive::Speaks { adapter, protocol };
    let observed =
        observe::Observed::new(state, upstream, &chat.model, &conversation, arrived_at_ms);
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
    let exchange = Exchange::new(state.clone(), incoming, persist)
        .signalling(compacting_tx)
        .serving_native(ask)
        .falling_back(fallback);
    // Boxed: the exchange's future is kilobytes, its wrappers move a pointer.
    let work = work::Work::new(
        observed.after(Box::pin(exchange.run())).in_current_span(),
        compacting_rx.clone(),
        state.background.clone(),
    );
    let interval = keepalive_interval(state, stream);
    keepalive::respond(work, compacting_rx, interval, speaks).await
}

/// Keep-alives are for event streams; a plain client just waits.
fn keepalive_interval(state: &AppState, stream: bool) -> std::time::Duration {
    match stream {
        true => state.settings.compaction.keepalive_interval,
        false => std::time::Duration::ZERO,
    }
}

/// What step 2 made of a request: the request read and the conversation
/// it continues, or nothing when Condenser cannot parse it.
pub type Identified = Option<(
    crate::protocol::ChatRequest,
    crate::conversation::Conversation,
)>;

/// Bodies from this size on are identified beside the runtime's worker
/// threads: hashing a 30 MiB history is seconds of CPU without a pause,
/// which would stall every other request on that worker meanwhile. Only
/// that step leaves: the upstream and summary calls, which may take
/// minutes, wait on the async workers and hold no thread of the finite
/// blocking pool. The body budget bounds how many such bodies there are
/// at once.
const LARGE_BODY: usize = 1 << 20;

/// [`identify`], on the blocking pool for a large body, with the
/// request's span so what it logs keeps the request's id.
async fn identify_off_workers(
    state: &AppState,
    adapter: &'static dyn crate::protocol::Adapter,
    credential: Option<&[u8]>,
    (body, arrived): (&Bytes, Option<Arrived>),
    parts: &Parts,
) -> Identified {
    let caller = Caller {
        headers: &parts.headers,
        credential,
    };
    let path = parts.uri.path();
    if body.len() < LARGE_BODY {
        return identify(state, adapter, caller, (body, arrived), path);
    }
    let state = state.clone();
    let headers = parts.headers.clone();
    let credential = credential.map(<[u8]>::to_vec);
    let (body, path) = (body.clone(), path.to_string());
    let span = tracing::Span::current();
    let identifying = tokio::task::spawn_blocking(move || {
        let caller = Caller {
            headers: &headers,
            credential: credential.as_deref(),
        };
        span.in_scope(|| identify(&state, adapter, caller, (&body, arrived), &path))
    });
    match identifying.await {
        Ok(identified) => identified,
        Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
        // Only when the runtime shuts down: the body goes as it came.
        Err(_) => None,
    }
}

/// Step 2: the request's tenant, chain and conversation; `None` for a body
/// this adapter cannot parse. CPU only: no I/O and no await.
fn identify(
    state: &AppState,
    adapter: &'static dyn crate::protocol::Adapter,
    caller: Caller<'_>,
    (body, arrived): (&Bytes, Option<Arrived>),
    path: &str,
) -> Identified {
    let salt = state.settings.storage.tenant_salt.as_bytes();
    let Caller {
        headers,
        credential,
    } = caller;
    let outline = crate::protocol::as_caller(credential, arrived, || {
        adapter.outline_at(body.clone(), path)
    })?;
    let memo = Some(&*state.chain_memo);
    crate::conversation::identify::conversation(adapter, salt, headers, credential, outline, memo)
}

/// The pass over a chat body's bytes to take as they arrive (step 2's,
/// done during step 1): for a body that may be large enough for the
/// re-sent memo (`protocol/resent.rs`), not for one declared smaller.
pub fn arriving(route: &Route, parts: &Parts, declared: Option<usize>) -> Option<Arriving> {
    if !Arriving::may_be_kept(declared) {
        return None;
    }
    let credential = caller_credential(route, parts);
    let list = route.adapter().history_list();
    Some(Arriving::new(credential.as_deref(), list))
}

/// The credential naming the caller, as the route's provider reads it.
fn caller_credential(route: &Route, parts: &Parts) -> Option<Vec<u8>> {
    let provider = route.upstream.protocol.provider();
    provider.credential(&parts.headers, parts.uri.query())
}

/// Who sent a request: its headers (a session it names) and the
/// credential its provider reads.
#[derive(Clone, Copy)]
struct Caller<'a> {
    headers: &'a http::HeaderMap,
    credential: Option<&'a [u8]>,
}
