//! Step 7, compact: keep-alives while a summary is written.
//!
//! Invariant 6, "progress is visible": a streaming client waiting on a
//! summary gets `200` and SSE comments every few seconds, so neither it nor a
//! load balancer gives up, then the retried response's events. Condenser
//! commits early only once a compaction has run for one interval: fast
//! compactions keep the upstream's real status and headers.

use super::work::{Finished, Work};
use crate::protocol::{Adapter, Protocol};
use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::StreamExt;
use http::{HeaderValue, StatusCode};
use http_body_util::BodyExt;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tracing::Instrument;

pub const KEEPALIVE_COMMENT: &[u8] = crate::protocol::SSE_KEEPALIVE;

/// What a committed stream is written in: the endpoint's framing, and the
/// provider whose error shape an in-band error takes.
#[derive(Clone, Copy)]
pub struct Speaks {
    pub adapter: &'static dyn Adapter,
    pub protocol: Protocol,
}

/// Waits for `work`; if it starts compacting and runs one `interval` past
/// that, answers with an event stream fed by keep-alives and then by it.
pub async fn respond(
    mut work: Work,
    mut compacting: watch::Receiver<bool>,
    interval: Duration,
    speaks: Speaks,
) -> Response {
    let mut watching = !interval.is_zero();
    loop {
        tokio::select! {
            finished = &mut work => return finished_response(finished),
            changed = compacting.changed(), if watching => {
                if changed.is_err() {
                    watching = false;
                    continue;
                }
                if !*compacting.borrow() {
                    continue;
                }
                tokio::select! {
                    finished = &mut work => return finished_response(finished),
                    () = tokio::time::sleep(interval) => return commit_early(work, interval, speaks),
                }
            }
        }
    }
}

fn finished_response(finished: Finished) -> Response {
    match finished {
        Ok((mut response, report)) => {
            report.apply(response.headers_mut());
            response
        }
        Err(panic) => {
            let message = panic_message(&*panic);
            tracing::error!(error.message = message, "request failed");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("panicked")
}

fn commit_early(work: Work, interval: Duration, speaks: Speaks) -> Response {
    let adapter = speaks.adapter;
    let (sender, receiver) = mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    // Tracked: after a client hangs up, this task alone finishes the
    // compaction, and shutdown must wait for it as for any other.
    let background = work.background().clone();
    background.spawn(feed(work, sender, interval, speaks).in_current_span());
    let body = Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(receiver));
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(adapter.stream_content_type()),
    );
    headers.insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache"),
    );
    headers.insert(
        "x-condenser-compacting",
        HeaderValue::from_static("streamed"),
    );
    response
}

async fn feed(
    mut work: Work,
    sender: mpsc::Sender<Result<Bytes, std::io::Error>>,
    interval: Duration,
    speaks: Speaks,
) {
    let adapter = speaks.adapter;
    let keepalive = || Ok(Bytes::from_static(adapter.keepalive()));
    let _ = sender.send(keepalive()).await;
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    let finished = loop {
        tokio::select! {
            finished = &mut work => break finished,
            _ = ticks.tick() => {
                // A closed channel means the client left; the work goes on
                // so what it compacted is stored for the next request.
                let _ = sender.send(keepalive()).await;
            }
        }
    };
    let Ok((response, report)) = finished else {
        tracing::error!("request failed after keep-alives were sent");
        let error = crate::error::ProxyError::Internal.body(speaks.protocol);
        let _ = sender
            .send(Ok(adapter.stream_error_event(500, &error).into()))
            .await;
        return;
    };
    let trailer = adapter.stream_trailer(report.compactions);
    if response.status().is_success() {
        let mut body = response.into_body().into_data_stream();
        while let Some(chunk) = body.next().await {
            let failed = chunk.is_err();
            if sender
                .send(chunk.map_err(std::io::Error::other))
                .await
                .is_err()
                || failed
            {
                return;
            }
        }
        if let Some(trailer) = trailer {
            let _ = sender.send(Ok(trailer.into())).await;
        }
        return;
    }
    let _ = sender.send(Ok(error_event(adapter, response).await)).await;
}

/// An error answer as the stream's error event.
async fn error_event(adapter: &dyn crate::protocol::Adapter, response: Response) -> Bytes {
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let error: serde_json::Value = serde_json::from_slice(&body).unwrap_or_else(
        |_| serde_json::json!({"error": {"message": String::from_utf8_lossy(&body)}}),
    );
    adapter.stream_error_event(status, &error).into()
}
