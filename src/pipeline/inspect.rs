//! Step 6, "detect overflow", before anything reaches the client: an error
//! status is read whole (error bodies are small), and a 200 event stream is
//! read up to its first chunk, because some servers put the overflow there.
//! A healthy stream loses no time: its first chunk is what the client waits
//! for anyway, and it is relayed as soon as it is read.

use crate::overflow::{OverflowSignal, SignatureTable};
use bytes::Bytes;
use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use http::{HeaderMap, StatusCode};

/// Error bodies larger than this are relayed without being inspected.
const MAX_ERROR_BODY: usize = 1024 * 1024;

pub enum Inspected {
    /// Relay as it is; `first_chunk` was already read off the body.
    Relay {
        response: reqwest::Response,
        first_chunk: Option<Bytes>,
    },
    /// An error response read whole that is not an overflow.
    Error {
        status: StatusCode,
        headers: HeaderMap,
        body: Bytes,
    },
    Overflow {
        status: StatusCode,
        headers: HeaderMap,
        body: Bytes,
        signal: OverflowSignal,
    },
}

pub async fn inspect(mut response: reqwest::Response, table: &SignatureTable) -> Inspected {
    let status = response.status();
    if status.is_client_error() {
        let headers = response.headers().clone();
        let Some(body) = read_capped(&mut response).await else {
            return Inspected::Relay {
                response,
                first_chunk: None,
            };
        };
        return match table.detect(status.as_u16(), &body) {
            Some(signal) => Inspected::Overflow {
                status,
                headers,
                body,
                signal,
            },
            None => Inspected::Error {
                status,
                headers,
                body,
            },
        };
    }
    if status == StatusCode::OK && is_event_stream(response.headers()) {
        let first_chunk = response.chunk().await.ok().flatten();
        if let Some(signal) = first_event_overflow(first_chunk.as_ref(), table).await {
            let headers = response.headers().clone();
            let body = first_chunk.unwrap_or_default();
            return Inspected::Overflow {
                status,
                headers,
                body,
                signal,
            };
        }
        return Inspected::Relay {
            response,
            first_chunk,
        };
    }
    Inspected::Relay {
        response,
        first_chunk: None,
    }
}

async fn read_capped(response: &mut reqwest::Response) -> Option<Bytes> {
    let mut body = Vec::new();
    while let Ok(Some(chunk)) = response.chunk().await {
        body.extend_from_slice(&chunk);
        if body.len() > MAX_ERROR_BODY {
            return None;
        }
    }
    Some(body.into())
}

pub(super) fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("text/event-stream"))
}

async fn first_event_overflow(
    chunk: Option<&Bytes>,
    table: &SignatureTable,
) -> Option<OverflowSignal> {
    let chunk = chunk?;
    // Cheap pre-check: healthy first events never mention an error.
    if !chunk.windows(5).any(|window| window == b"error") {
        return None;
    }
    let mut events =
        futures_util::stream::iter([Ok::<_, std::io::Error>(chunk.clone())]).eventsource();
    let event = events.next().await?.ok()?;
    table.detect_stream_event(&event.data)
}
