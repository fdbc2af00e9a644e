//! Step 1, accept and route: the Responses API's WebSocket mode.
//!
//! Codex CLI's built-in OpenAI provider talks to `/v1/responses` over a
//! WebSocket first (`OpenAI-Beta: responses_websockets=…`), sending each
//! request as a `{"type":"response.create", …}` frame and reading the
//! answer's events as text frames. Condenser serves the mode itself: each
//! request is one exchange through the pipeline, as over HTTP
//! (`exchange`), with its whole history rebuilt from the socket's last
//! response where the client names it (`history`), and the answer relayed
//! as frames (`relay`). Upstream, Condenser speaks HTTP. Off
//! (`server.responses_websocket = false`), or past a tenant's sockets, an
//! upgrade is answered 426 and clients fall back to HTTPS at once.
//!
//! permessage-deflate is not offered: axum's WebSocket (tungstenite) does
//! not implement it, and a client that asks for it (Codex does) goes on
//! uncompressed, as RFC 7692 lets it.

mod connection;
mod exchange;
mod frames;
mod history;
mod relay;
mod tenants;

pub use tenants::Sockets;

use super::budget::BodyBudget;
use crate::error::ProxyError;
use crate::state::AppState;
use crate::upstream::routes::{Endpoint, Route};
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{FromRequestParts, Request};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// A WebSocket handshake (RFC 6455 4.1).
pub fn wanted(headers: &http::HeaderMap) -> bool {
    headers
        .get(http::header::UPGRADE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.eq_ignore_ascii_case("websocket"))
}

/// Answers a handshake: accepted on the Responses endpoint when the mode
/// is served and the tenant has room, else 426. Relayed as plain HTTP, a
/// handshake would lose its hop-by-hop `Upgrade` and fail upstream after
/// the client's retries.
pub async fn upgrade(
    state: &AppState,
    sockets: &Arc<Sockets>,
    budget: &Arc<BodyBudget>,
    request: Request,
) -> Response {
    let Some(route) = responses_route(state, &request) else {
        return refused(state, &request, ProxyError::UpgradeRequired);
    };
    let protocol = route.upstream.protocol;
    let (mut parts, _) = request.into_parts();
    let salt = state.settings.storage.tenant_salt.as_bytes();
    let credential = protocol
        .provider()
        .credential(&parts.headers, parts.uri.query());
    let tenant =
        crate::conversation::tenant::TenantId::from_credential(salt, credential.as_deref());
    let Some(slot) = sockets.open(&tenant) else {
        return ProxyError::WebsocketLimit.into_response_for(protocol);
    };
    let upgrade = match WebSocketUpgrade::from_request_parts(&mut parts, &()).await {
        Ok(upgrade) => upgrade,
        Err(rejection) => return rejection.into_response(),
    };
    let head = exchange::Head::of_handshake(parts.uri.clone(), &parts.headers);
    let max_frame = state
        .settings
        .server
        .websocket_max_frame(state.settings.max_body_bytes);
    let connection = connection::Connection::new(state.clone(), route, head, budget.clone(), slot);
    upgrade
        .max_message_size(max_frame)
        .max_frame_size(max_frame)
        .on_upgrade(move |socket| connection.run(socket))
}

/// The route a socket's requests take: the Responses endpoint itself
/// (not `/responses/compact` or another path under it), when served.
fn responses_route(state: &AppState, request: &Request) -> Option<Route> {
    if !state.settings.server.responses_websocket {
        return None;
    }
    let uri = request.uri();
    let route = state.routes.resolve(
        &http::Method::POST,
        uri.path(),
        uri.query(),
        request.headers(),
    );
    let is_responses = route.endpoint == Endpoint::Responses && uri.path().ends_with("/responses");
    is_responses.then_some(route)
}

fn refused(state: &AppState, request: &Request, error: ProxyError) -> Response {
    let uri = request.uri();
    let route = state
        .routes
        .resolve(request.method(), uri.path(), uri.query(), request.headers());
    error.into_response_for(route.upstream.protocol)
}
