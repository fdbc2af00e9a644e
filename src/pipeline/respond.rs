//! Responses as the client sees them: relayed bodies, unchanged upstream
//! errors, and the `x-condenser-*` headers that say what was done.

use super::inspect::Inspected;
use crate::upstream::{headers, relay};
use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use futures_util::StreamExt;
use http::{HeaderMap, HeaderValue, StatusCode};
use std::time::Duration;

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

pub fn relayed(inspected: Inspected, idle: Duration) -> Response {
    match inspected {
        Inspected::Relay {
            response,
            first_chunk,
        } => {
            let status = response.status();
            let headers = headers::response_headers(response.headers());
            let rest = relay::body_stream(response, idle);
            let first = futures_util::stream::iter(first_chunk.map(Ok));
            with_parts(status, headers, Body::from_stream(first.chain(rest)))
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
