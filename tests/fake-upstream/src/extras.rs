//! The endpoints a proxy must pass through untouched, plus two test aids:
//! `/v1/echo` returns its body, `/v1/slow-stream` trickles SSE events, and
//! `/_fake/stats` counts the request log and lists the facts summaries
//! lost on the way.

use crate::state::{Protocol, RecordedRequest, RequestKind, State, Transport};
use axum::body::Body;
use axum::extract::{Request, State as AxumState};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::StreamExt;
use http::request::Parts;
use http::StatusCode;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

const BODY_LIMIT: usize = 512 * 1024 * 1024;

pub fn record_of(parts: &Parts, body: Bytes) -> RecordedRequest {
    let headers = parts
        .headers
        .iter()
        .map(|(name, value)| {
            (
                name.as_str().to_string(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect();
    RecordedRequest {
        method: parts.method.to_string(),
        path: parts.uri.path().to_string(),
        query: parts.uri.query().map(str::to_string),
        headers,
        json: serde_json::from_slice(&body).ok(),
        body,
        kind: RequestKind::Other,
        protocol: None,
        status: 0,
        input_tokens: None,
        truncated: false,
        transport: Transport::Http,
        continued: false,
        written: None,
    }
}

async fn take(request: Request) -> (Parts, Bytes) {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, BODY_LIMIT)
        .await
        .unwrap_or_default();
    (parts, body)
}

fn finish(state: &State, mut record: RecordedRequest, response: Response) -> Response {
    record.status = response.status().as_u16();
    state.record(record);
    response
}

pub async fn count_tokens(AxumState(state): AxumState<Arc<State>>, request: Request) -> Response {
    let (parts, body) = take(request).await;
    let mut record = record_of(&parts, body);
    record.protocol = Some(Protocol::Anthropic);
    let response = match (
        crate::validate::credential(Protocol::Anthropic, &parts.headers),
        &record.json,
    ) {
        (Err(response), _) => response,
        (Ok(_), None) => crate::chat::error(
            Protocol::Anthropic,
            StatusCode::BAD_REQUEST,
            "There was an issue with your request body: invalid JSON",
        ),
        (Ok(_), Some(request)) => axum::Json(
            json!({"input_tokens": crate::replies::count_tokens(Protocol::Anthropic, request)}),
        )
        .into_response(),
    };
    finish(&state, record, response)
}

pub async fn models(AxumState(state): AxumState<Arc<State>>, request: Request) -> Response {
    let (parts, body) = take(request).await;
    let record = record_of(&parts, body);
    let models: Vec<Value> = ["gpt-4o", "gpt-4o-mini", "claude-sonnet-4-5"]
        .iter()
        .map(|id| json!({"id": id, "object": "model", "created": 1_715_367_049u64, "owned_by": "system"}))
        .collect();
    finish(
        &state,
        record,
        axum::Json(json!({"object": "list", "data": models})).into_response(),
    )
}

pub async fn embeddings(AxumState(state): AxumState<Arc<State>>, request: Request) -> Response {
    let (parts, body) = take(request).await;
    let record = record_of(&parts, body);
    let input = record
        .json
        .as_ref()
        .map(|j| j["input"].to_string())
        .unwrap_or_default();
    let tokens = (input.len() as u64).div_ceil(4);
    let vector: Vec<f64> = input
        .bytes()
        .take(8)
        .map(|b| f64::from(b) / 255.0)
        .collect();
    let response = json!({
        "object": "list",
        "data": [{"object": "embedding", "index": 0, "embedding": vector}],
        "model": record.json.as_ref().map(|j| j["model"].clone()).unwrap_or_default(),
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens}
    });
    finish(&state, record, axum::Json(response).into_response())
}

pub async fn echo(AxumState(state): AxumState<Arc<State>>, request: Request) -> Response {
    let (parts, body) = take(request).await;
    let record = record_of(&parts, body.clone());
    let mut response = Response::new(Body::from(body));
    if let Some(content_type) = parts.headers.get(http::header::CONTENT_TYPE) {
        response
            .headers_mut()
            .insert(http::header::CONTENT_TYPE, content_type.clone());
    }
    finish(&state, record, response)
}

/// `?chunks=N&delay_ms=D`: `data: chunk i` events, `D` ms apart.
pub async fn slow_stream(AxumState(state): AxumState<Arc<State>>, request: Request) -> Response {
    let (parts, body) = take(request).await;
    let query = parts.uri.query().unwrap_or_default();
    let param = |name: &str, default: u64| {
        query
            .split('&')
            .filter_map(|pair| pair.split_once('='))
            .find(|(k, _)| *k == name)
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(default)
    };
    let (chunks, delay) = (
        param("chunks", 3),
        Duration::from_millis(param("delay_ms", 500)),
    );
    let events = futures_util::stream::iter(0..chunks).then(move |index| async move {
        if index > 0 {
            tokio::time::sleep(delay).await;
        }
        Ok::<_, Infallible>(Bytes::from(format!("data: chunk {index}\n\n")))
    });
    let response = Response::builder()
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(Body::from_stream(events))
        .expect("static response parts");
    finish(&state, record_of(&parts, body), response)
}

/// Counts over the request log, for benchmarks that drive the fake as a
/// process: chat and summary calls, and how many of each it refused.
pub async fn stats(AxumState(state): AxumState<Arc<State>>) -> Response {
    let log = state.log();
    let count = |kind: RequestKind, refused: bool| {
        log.iter()
            .filter(|r| r.kind == kind && (r.status >= 400) == refused)
            .count()
    };
    axum::Json(json!({
        "chat_answered": count(RequestKind::Chat, false),
        "chat_refused": count(RequestKind::Chat, true),
        "summary_answered": count(RequestKind::Summary, false),
        "summary_refused": count(RequestKind::Summary, true),
        // For client tests that drive the fake from outside: every fact a
        // summary carried that did not reach the request it stands for.
        "facts_lost": crate::facts::lost(&log),
    }))
    .into_response()
}
