//! Step 5, forward: the answer streamed back.
//!
//! Streams an upstream response back to the client chunk by chunk, never
//! buffered whole, with an idle timeout on every read.

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use std::io;
use std::time::Duration;

/// The upstream's body as a stream that fails after `idle` without data.
pub fn body_stream(
    response: reqwest::Response,
    idle: Duration,
) -> impl Stream<Item = Result<Bytes, io::Error>> + Send + Unpin + 'static {
    let chunks = Box::pin(response.bytes_stream());
    Box::pin(futures_util::stream::unfold(
        Some(chunks),
        move |state| async move {
            let mut chunks = state?;
            match tokio::time::timeout(idle, chunks.next()).await {
                Ok(Some(Ok(chunk))) => Some((Ok(chunk), Some(chunks))),
                Ok(Some(Err(error))) => Some((Err(io::Error::other(error.without_url())), None)),
                Ok(None) => None,
                Err(_) => {
                    let message = format!("upstream sent nothing for {}s", idle.as_secs_f64());
                    Some((Err(io::Error::new(io::ErrorKind::TimedOut, message)), None))
                }
            }
        },
    ))
}

/// Status and headers as the upstream sent them (minus hop-by-hop), body streamed.
pub fn relay(response: reqwest::Response, idle: Duration) -> Response {
    let status = response.status();
    let headers = super::headers::response_headers(response.headers());
    let mut relayed = Response::new(Body::from_stream(body_stream(response, idle)));
    *relayed.status_mut() = status;
    *relayed.headers_mut() = headers;
    relayed
}
