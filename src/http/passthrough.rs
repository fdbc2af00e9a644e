//! Step 1, route: what Condenser does not handle.
//!
//! Everything that is not a chat endpoint: forwarded byte for byte,
//! streaming in both directions.

use crate::error::{caused_by, ProxyError};
use crate::state::AppState;
use crate::upstream::routes::Route;
use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use http_body_util::{BodyExt, Limited};

pub async fn forward(state: &AppState, route: Route, request: Request) -> Response {
    let protocol = route.upstream.protocol;
    let limit = state.settings.max_body_bytes;
    if declared_length(&request).is_some_and(|length| length > limit) {
        return ProxyError::BodyTooLarge { limit }.into_response_for(protocol);
    }
    let (parts, body) = request.into_parts();
    let limited = Body::new(Limited::new(body, limit)).into_data_stream();
    let body = reqwest::Body::wrap_stream(limited);
    state
        .upstream
        .forward(&route, parts.method, &parts.headers, body)
        .await
}

pub fn declared_length(request: &Request) -> Option<usize> {
    request
        .headers()
        .get(http::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// Reads a whole body, at most `limit` bytes.
pub async fn read_body(body: Body, limit: usize) -> Result<bytes::Bytes, ProxyError> {
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => {
            Err(ProxyError::BodyTooLarge { limit })
        }
        Err(error) if caused_by::<tower_http::timeout::TimeoutError>(error.as_ref()) => {
            Err(ProxyError::BodyTimeout)
        }
        Err(error) => Err(ProxyError::BodyRead(error.to_string())),
    }
}
