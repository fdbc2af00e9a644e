//! Step 1, route: what Condenser does not handle.
//!
//! Everything that is not a chat endpoint: forwarded byte for byte,
//! streaming in both directions. Its body is not read into memory, so it
//! takes nothing of the chat body budget; it is bounded in size and in
//! time all the same.

use super::body::{refused_unread, Bounds, WithDeadline};
use crate::error::ProxyError;
use crate::state::AppState;
use crate::upstream::routes::Route;
use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use http_body_util::Limited;

pub async fn forward(state: &AppState, route: Route, request: Request, bounds: Bounds) -> Response {
    let protocol = route.upstream.protocol;
    let limit = bounds.max_bytes;
    let (parts, body) = request.into_parts();
    if declared(&parts.headers).is_some_and(|length| length > limit) {
        let refusal = ProxyError::BodyTooLarge { limit }.into_response_for(protocol);
        return refused_unread(parts.version, body, bounds, refusal);
    }
    let limited = Body::new(Limited::new(body, limit)).into_data_stream();
    let (timed, expired) = WithDeadline::new(limited, bounds.deadline);
    let body = reqwest::Body::wrap_stream(timed);
    let response = state
        .upstream
        .forward(&route, parts.method, &parts.headers, body)
        .await;
    // The upstream request failed because the body was cut off: the
    // client's fault, in the client's terms.
    if expired.is_set() && !response.status().is_success() {
        let limit = bounds.total;
        return ProxyError::BodyDeadline { limit }.into_response_for(protocol);
    }
    response
}

pub fn declared_length(request: &Request) -> Option<usize> {
    declared(request.headers())
}

fn declared(headers: &http::HeaderMap) -> Option<usize> {
    headers
        .get(http::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}
