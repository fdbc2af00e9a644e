//! Steps 1 to 8 for one frame: a `response.create` through the pipeline.
//!
//! Each request on a socket is one exchange through the same pipeline as
//! an HTTP request (`pipeline::handle`): a POST to the socket's path with
//! the handshake's headers and the frame as its body. So it is identified,
//! stored, compacted and retried exactly as over HTTP, and counted and
//! traced as one request, labelled `transport = "websocket"`.

use super::history::Answered;
use super::relay;
use crate::http::budget::Lease;
use crate::state::AppState;
use crate::upstream::routes::Route;
use crate::upstream::socket::{input_items, UpstreamSocket};
use axum::extract::ws::Message;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Uri};
use serde_json::{Map, Value};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc;
use tracing::Instrument;

/// Headers of the handshake that describe the socket, not a request.
const HANDSHAKE_ONLY: &[&str] = &[
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-extensions",
    "sec-websocket-protocol",
    "content-length",
];

/// The beta token that asks for this mode: an upstream reached over HTTP
/// is not asked for it.
const MODE_BETA: &str = "responses_websockets=";

/// What every request on one socket is sent as: a POST to the handshake's
/// path (query included) with its headers.
pub struct Head {
    uri: Uri,
    headers: HeaderMap,
    /// The socket's own way to the upstream, shared by its requests.
    upstream: UpstreamSocket,
}

impl Head {
    pub fn of_handshake(uri: Uri, handshake: &HeaderMap) -> Self {
        let mut headers = handshake.clone();
        for name in HANDSHAKE_ONLY {
            headers.remove(*name);
        }
        without_mode_beta(&mut headers);
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        headers.insert(
            http::header::ACCEPT,
            HeaderValue::from_static("text/event-stream"),
        );
        Self {
            uri,
            headers,
            upstream: UpstreamSocket::default(),
        }
    }

    fn parts(&self) -> http::request::Parts {
        let mut request = http::Request::new(());
        *request.method_mut() = Method::POST;
        *request.uri_mut() = self.uri.clone();
        *request.headers_mut() = self.headers.clone();
        request.extensions_mut().insert(self.upstream.clone());
        request.into_parts().0
    }
}

/// `OpenAI-Beta` without this mode's token (the header dropped when that
/// was all it held).
fn without_mode_beta(headers: &mut HeaderMap) {
    let kept: Vec<String> = headers
        .get_all("openai-beta")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(str::trim)
        .filter(|token| !token.is_empty() && !token.starts_with(MODE_BETA))
        .map(String::from)
        .collect();
    headers.remove("openai-beta");
    if let Ok(value) = HeaderValue::from_str(&kept.join(", ")) {
        if !kept.is_empty() {
            headers.insert("openai-beta", value);
        }
    }
}

/// One request, ready to go: its body and whether its history is known.
pub struct Request {
    pub body: Bytes,
    /// The whole input, kept when the socket knows the whole history.
    pub input: Option<Vec<Value>>,
    pub lease: Lease,
}

/// The request body of a frame: its fields, streamed, without what only
/// the socket reads (`generate`).
pub fn body(mut fields: Map<String, Value>) -> Bytes {
    fields.shift_remove("generate");
    fields.entry("stream").or_insert(Value::Bool(true));
    Bytes::from(Value::Object(fields).to_string())
}

/// The input a body carries, for the socket's history.
pub fn input_of(fields: &Map<String, Value>) -> Vec<Value> {
    fields.get("input").map(input_items).unwrap_or_default()
}

/// Runs one request through the pipeline and relays its answer; the
/// response it answered, when the socket knows its whole history.
pub async fn run(
    state: AppState,
    route: Route,
    head: &Head,
    request: Request,
    out: mpsc::Sender<Message>,
    ended: Arc<AtomicBool>,
) -> Option<Answered> {
    let parts = head.parts();
    let span = span(&parts);
    let started = Instant::now();
    async move {
        let Request { body, input, lease } = request;
        let response = crate::pipeline::handle(&state, route, parts, body, None).await;
        drop(lease);
        crate::telemetry::server::answered(&tracing::Span::current(), response.status());
        let relayed = relay::relay(response, &out, &ended).await;
        count(relayed.as_ref().map(|r| r.status), started);
        let (id, output) = relayed?.completed?;
        let mut items = input?;
        items.extend(output);
        Some(Answered { id, items })
    }
    .instrument(span)
    .await
}

/// The request's span, as the HTTP server's (`app::request_span`), with
/// its own request id and its transport.
fn span(parts: &http::request::Parts) -> tracing::Span {
    let request_id = uuid::Uuid::new_v4().to_string();
    let span = tracing::info_span!(
        "request",
        method = "POST",
        path = %parts.uri.path(),
        request_id = %request_id,
        transport = "websocket",
        otel.name = tracing::field::Empty,
        otel.kind = tracing::field::Empty,
    );
    let request = http::Request::from_parts(parts.clone(), ());
    crate::telemetry::server::started(&span, &request, Some(parts.uri.path()));
    span
}

/// Counted as `condenser_http_requests_total` counts HTTP requests; a
/// client gone before its answer is `status = "closed"`.
fn count(status: Option<u16>, started: Instant) {
    let status = status.map_or_else(|| "closed".to_string(), |s| s.to_string());
    metrics::counter!("condenser_websocket_requests_total", "status" => status).increment(1);
    metrics::histogram!("condenser_websocket_request_duration_seconds")
        .record(started.elapsed().as_secs_f64());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_carry_the_handshakes_headers_but_not_its_socket_ones() {
        let mut handshake = HeaderMap::new();
        for (name, value) in [
            ("authorization", "Bearer k"),
            ("sec-websocket-key", "x"),
            ("openai-beta", "responses_websockets=2026-02-06, other=1"),
            ("session_id", "s"),
        ] {
            handshake.insert(name, value.parse().expect("value"));
        }
        let parts = Head::of_handshake(Uri::from_static("/v1/responses"), &handshake).parts();
        assert_eq!(parts.method, Method::POST);
        assert_eq!(parts.headers["authorization"], "Bearer k");
        assert_eq!(parts.headers["session_id"], "s");
        assert_eq!(parts.headers["openai-beta"], "other=1");
        assert!(!parts.headers.contains_key("sec-websocket-key"));
    }

    #[test]
    fn a_body_streams_and_leaves_generate_behind() {
        let Value::Object(fields) =
            serde_json::json!({"model": "m", "generate": true, "input": []})
        else {
            panic!("an object")
        };
        let body: Value = serde_json::from_slice(&body(fields)).expect("json");
        assert_eq!(
            body,
            serde_json::json!({"model": "m", "input": [], "stream": true})
        );
    }
}
