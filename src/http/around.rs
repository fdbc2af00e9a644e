//! Step 1, accept: what every request passes through on its way in and out.
//!
//! One middleware, in this order from the outside in:
//!
//! 1. the request's `x-request-id` echoed on its response, whatever the
//!    upstream answered: an upstream that sets its own (OpenAI does) would
//!    otherwise replace it, and the client could no longer find its
//!    request in Condenser's logs; the upstream's moves to
//!    `x-upstream-request-id`;
//! 2. a [`ProxyErrorLog`] a handler attached to its response logged
//!    (handlers render, this logs);
//! 3. the request counted and timed (`metrics::Tracked`);
//! 4. a request that must never reach an upstream refused (`guard.rs`).
//!
//! One layer rather than four: axum's `from_fn` clones every service
//! beneath it and boxes its future on every request. The layers between
//! hyper and the handler were a sixth of a small request's instructions,
//! and the four of them 7 K of its 195 K (bench/README.md, "Instructions
//! per request").

use super::guard;
use crate::error::ProxyErrorLog;
use crate::metrics::Tracked;
use crate::state::AppState;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use http::HeaderValue;
use tower_http::request_id::RequestId;

pub async fn every_request(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let id = request
        .extensions()
        .get::<RequestId>()
        .map(|id| id.header_value().clone());
    let tracked = Tracked::start(&request);
    let response = match guard::refused(&state, &request) {
        Some(refusal) => refusal,
        None => next.run(request).await,
    };
    tracked.finish(&response);
    log_proxy_error(&response);
    echo_request_id(response, id)
}

fn log_proxy_error(response: &Response) {
    if let Some(error) = response.extensions().get::<ProxyErrorLog>() {
        tracing::warn!(error.kind = error.kind, error.message = %error.message, status = response.status().as_u16(), "request failed in the proxy");
    }
}

const X_REQUEST_ID: &str = "x-request-id";
const X_UPSTREAM_REQUEST_ID: &str = "x-upstream-request-id";

fn echo_request_id(mut response: Response, id: Option<HeaderValue>) -> Response {
    let headers = response.headers_mut();
    if let Some(upstream_id) = headers.remove(X_REQUEST_ID) {
        if Some(&upstream_id) != id.as_ref() {
            headers.insert(X_UPSTREAM_REQUEST_ID, upstream_id);
        }
    }
    if let Some(id) = id {
        headers.insert(X_REQUEST_ID, id);
    }
    response
}
