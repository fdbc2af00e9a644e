//! Step 5, forward: what the client gets back.
//!
//! Responses as the client sees them: relayed bodies, unchanged upstream
//! errors, and the `x-condenser-*` headers that say what was done.

use crate::overflow::inspect::{is_event_stream, Inspected};
use crate::store::CompactionFailure;
use crate::tokens::usage::{UsageRead, UsageTap};
use crate::upstream::{headers, relay};
use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use futures_util::StreamExt;
use http::{HeaderMap, HeaderValue, StatusCode};
use std::time::Duration;

/// What Condenser did for one request, reported in response headers and
/// recorded for the operator page.
#[derive(Debug, Default)]
pub struct Report {
    pub compactions: u32,
    pub compacted_messages: Option<i64>,
    /// Why storing was skipped, as the `x-condenser-degraded` header says.
    pub degraded: Option<Degraded>,
    pub compaction_error: Option<CompactionFailure>,
    pub overflows: u32,
    /// Size of the body last sent upstream.
    pub sent_bytes: usize,
    /// The usage read off a relayed response, once it has been read.
    pub usage: Option<UsageRead>,
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
        if let Some(reason) = self.degraded {
            let reason = HeaderValue::from_static(reason.as_str());
            headers.insert("x-condenser-degraded", reason);
        }
        if let Some(kind) = self.compaction_error {
            let kind = HeaderValue::from_static(kind.as_str());
            headers.insert("x-condenser-compaction-error", kind);
        }
    }
}

/// Why a request was forwarded without storing its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Degraded {
    /// The database could not be reached.
    StorageUnavailable,
    /// The write queue was full; the conversation's next request stores them.
    WriteQueueFull,
}

impl Degraded {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::StorageUnavailable => "storage-unavailable",
            Self::WriteQueueFull => "write-queue-full",
        }
    }
}

/// The response for the client; a successful one's usage is read as it
/// passes when `usage` says for which request.
pub fn relayed(
    inspected: Inspected,
    idle: Duration,
    usage: Option<UsageTap>,
) -> (Response, Option<UsageRead>) {
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
            let (body, read) = match usage.filter(|_| status.is_success()) {
                Some(tap) => {
                    let (body, read) = crate::tokens::usage::tap(body, event_stream, tap);
                    (Body::from_stream(body), Some(read))
                }
                None => (Body::from_stream(body), None),
            };
            (with_parts(status, headers, body), read)
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
        } => (buffered(status, &headers, body), None),
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
