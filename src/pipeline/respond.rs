//! Responses as the client sees them: relayed bodies, unchanged upstream
//! errors, and the `x-condenser-*` headers that say what was done.

use super::inspect::{is_event_stream, Inspected};
use super::usage::UsageTap;
use crate::upstream::{headers, relay};
use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use futures_util::StreamExt;
use http::{HeaderMap, HeaderValue, StatusCode};
use std::time::Duration;
use tokio_util::task::TaskTracker;

/// What Condenser did for one request, reported in response headers.
#[derive(Debug, Default, Clone)]
pub struct Report {
    pub compactions: u32,
    pub compacted_messages: Option<i64>,
    pub degraded: bool,
    pub compaction_error: Option<&'static str>,
}

impl Report {
    pub fn apply(&self, headers: &mut HeaderMap) {
        headers.insert(
            "x-condenser-compactions",
            HeaderValue::from(self.compactions),
        );
        if let Some(count) = self.compacted_messages {
            headers.insert("x-condenser-compacted-messages", HeaderValue::from(count));
        }
        if self.degraded {
            headers.insert(
                "x-condenser-degraded",
                HeaderValue::from_static("storage-unavailable"),
            );
        }
        if let Some(kind) = self.compaction_error {
            headers.insert(
                "x-condenser-compaction-error",
                HeaderValue::from_static(kind),
            );
        }
    }
}

/// The response for the client; a successful one's usage is read on the
/// side when `usage` says for which request.
pub fn relayed(
    inspected: Inspected,
    idle: Duration,
    usage: Option<(UsageTap, &TaskTracker)>,
) -> Response {
    match inspected {
        Inspected::Relay {
            response,
            first_chunk,
        } => {
            let status = response.status();
            let event_stream = is_event_stream(response.headers());
            let headers = headers::response_headers(response.headers());
            let rest = relay::body_stream(response, idle);
            let first = futures_util::stream::iter(first_chunk.map(Ok));
            let body = first.chain(rest);
            let body = match usage.filter(|_| status.is_success()) {
                Some((tap, background)) => {
                    Body::from_stream(super::usage::tap(body, event_stream, tap, background).0)
                }
                None => Body::from_stream(body),
            };
            with_parts(status, headers, body)
        }
        Inspected::Error {
            status,
            headers,
            body,
        }
        | Inspected::Overflow {
            status,
            headers,
            body,
            ..
        } => buffered(status, &headers, body),
    }
}

/// An upstream response that was read whole, passed on unchanged.
pub fn buffered(status: StatusCode, upstream_headers: &HeaderMap, body: Bytes) -> Response {
    with_parts(
        status,
        headers::response_headers(upstream_headers),
        Body::from(body),
    )
}

fn with_parts(status: StatusCode, headers: HeaderMap, body: Body) -> Response {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}
