//! Step 5, forward: what the client gets back.
//!
//! Responses as the client sees them: relayed bodies, unchanged upstream
//! errors, and the `x-condenser-*` headers that say what was done.

use crate::domain::CompactionFailure;
use crate::overflow::inspect::Inspected;
use crate::tokens::usage::{Framing, UsageRead, UsageTap};
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
    /// The upstream accepted the request (or a summary of it): its
    /// messages and figures are kept.
    pub accepted: bool,
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
/// passes when `usage` says for which request. A successful JSON answer
/// is read whole first (answers are small, and the client gets it at once
/// anyway), so that a prompt the upstream cut without saying so is marked
/// `x-condenser-truncated-upstream: 1`; a stream's headers are gone by the
/// time its counts arrive.
pub async fn relayed(
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
            let headers = headers::response_headers(response.headers());
            let rest = relay::body_stream(response, idle);
            let first = futures_util::stream::iter(first_chunk.map(Ok));
            let body = first.chain(rest);
            let Some(tap) = usage.filter(|_| status.is_success()) else {
                return (with_parts(status, headers, Body::from_stream(body)), None);
            };
            let framing = Framing::of(&headers, tap.adapter);
            if framing == Framing::Json {
                return read_whole(status, headers, Box::pin(body), tap).await;
            }
            let (body, read) = crate::tokens::usage::tap(body, framing, tap);
            (
                with_parts(status, headers, Body::from_stream(body)),
                Some(read),
            )
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

/// Reads a JSON answer whole (up to the usage reader's cap, else streams
/// the rest through it), learns its usage, marks a silent cut.
async fn read_whole(
    status: StatusCode,
    mut headers: HeaderMap,
    mut body: std::pin::Pin<
        Box<dyn futures_util::Stream<Item = Result<Bytes, std::io::Error>> + Send>,
    >,
    mut tap: UsageTap,
) -> (Response, Option<UsageRead>) {
    let mut read = bytes::BytesMut::new();
    while let Some(chunk) = body.next().await {
        match chunk {
            Ok(chunk) => read.extend_from_slice(&chunk),
            Err(error) => {
                let head = futures_util::stream::iter([Ok(read.freeze()), Err(error)]);
                return (with_parts(status, headers, Body::from_stream(head)), None);
            }
        }
        if read.len() > MAX_READ_WHOLE {
            let head = futures_util::stream::iter([Ok(read.freeze())]).chain(body);
            let (body, usage) = crate::tokens::usage::tap(head, Framing::Json, tap);
            return (
                with_parts(status, headers, Body::from_stream(body)),
                Some(usage),
            );
        }
    }
    let read = read.freeze();
    let usage = crate::tokens::usage::json_usage_observed(&mut tap, &read);
    if let Some(usage) = &usage {
        if tap.learn(usage) {
            headers.insert(
                "x-condenser-truncated-upstream",
                HeaderValue::from_static("1"),
            );
        }
    }
    let known = UsageRead::known(usage);
    (with_parts(status, headers, Body::from(read)), Some(known))
}

/// A JSON answer larger than this is streamed on unread.
const MAX_READ_WHOLE: usize = 8 * 1024 * 1024;

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
