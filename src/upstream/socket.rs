//! Step 5, forward: the Responses API's WebSocket mode toward the upstream.
//!
//! A client on a socket (`http/websocket`) sends only the items that are
//! new since its last response; Condenser rebuilds the whole history so it
//! can store and compact it. Toward an upstream that serves the mode too,
//! each client socket has a socket of its own there, and a request whose
//! history extends the last response answered on that upstream socket is
//! sent as the client sent it: `previous_response_id` and the new items
//! alone. Anything else goes whole on the same socket: a compacted history,
//! a first request, one after the upstream lost its response. Condenser
//! relies on the upstream's connection state only where that upstream
//! answered on that very socket, as the mode requires.
//!
//! The answer is handed to the pipeline as the HTTP answer to the same
//! request would be: an error frame as its status and `{"error": …}` body,
//! the events as an SSE stream. So overflow detection, compaction and the
//! relay to the client do not know which way it came. An upstream that
//! answers the handshake as a server without the mode does (404, 405,
//! 426) is remembered, and HTTP is used from then on; HTTP is also used
//! whenever the socket cannot be opened, or fails before the request was
//! answered, and always when an HTTP proxy is configured (which reqwest
//! honours and a socket would pass by).
//!
//! A socket idle longer than the HTTP pool keeps its connections is
//! pinged before reuse: a connection a middlebox dropped in silence would
//! otherwise swallow the request until the first-byte timeout. Once a
//! request is sent, it is never sent again another way: a timeout is the
//! 504 HTTP would give, not a second generation.

use super::routes::Upstream;
use crate::error::ProxyError;
use bytes::Bytes;
use futures_util::{SinkExt, Stream, StreamExt};
use http::{HeaderMap, HeaderValue, StatusCode};
use serde_json::{Map, Value};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio::sync::{Mutex, OwnedMutexGuard};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// The beta that asks for the mode (`codex-rs/codex-api/src/endpoint/
/// responses_websocket.rs`).
const MODE_BETA: &str = "responses_websockets=2026-02-06";

/// Headers of an HTTP request that describe its body, not the socket.
const BODY_ONLY: &[http::HeaderName] = &[
    http::header::CONTENT_TYPE,
    http::header::CONTENT_LENGTH,
    http::header::ACCEPT,
    http::header::ACCEPT_ENCODING,
    http::header::HOST,
];

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// One client socket's way to the upstream: its own upstream socket, once
/// opened, and the last response answered there. Requests on a client
/// socket come one at a time; the lock is held for a whole answer.
#[derive(Clone, Default)]
pub struct UpstreamSocket {
    session: Arc<Mutex<Session>>,
}

#[derive(Default)]
struct Session {
    socket: Option<Socket>,
    last: Option<Last>,
    /// When the socket last finished an answer.
    idle_since: Option<Instant>,
}

/// The last response answered on the upstream socket: what the upstream
/// holds for it, its whole input and then its output.
struct Last {
    id: String,
    items: Vec<Value>,
}

/// How long a request may wait for its socket and its first frame, and
/// how long a socket may sit idle before it is pinged.
#[derive(Clone, Copy)]
pub struct Waits {
    pub connect: Duration,
    pub first_frame: Duration,
    pub idle: Duration,
}

/// Handshake statuses of a server that does not serve the mode: a GET on
/// a POST-only route (404, 405, 501), a refused upgrade (426), a request
/// it cannot read (400). Any other (401, 429, 5xx) says nothing of the
/// mode and is not remembered.
const WITHOUT_THE_MODE: &[u16] = &[400, 404, 405, 426, 501];

/// What went wrong before an answer's first frame.
enum Failed {
    /// The request never left, or the socket closed before answering:
    /// nothing was generated, HTTP may try.
    Unanswered,
    /// Sent, and no frame within the first-byte timeout.
    TimedOut,
}

impl UpstreamSocket {
    /// Sends `body` over the upstream socket and answers as HTTP would;
    /// `None` when it must go over HTTP: the upstream does not serve the
    /// mode, the socket could not be opened, or the body is not a streamed
    /// Responses request.
    pub async fn send(
        &self,
        upstream: &Upstream,
        url: &url::Url,
        headers: &HeaderMap,
        body: &Bytes,
        waits: Waits,
    ) -> Option<Result<reqwest::Response, ProxyError>> {
        if !upstream.websocket || upstream.websocket_refused.load(Ordering::Relaxed) || proxied() {
            return None;
        }
        let fields = streamed_request(body)?;
        let mut session = self.session.clone().lock_owned().await;
        session.check(waits).await;
        if session.socket.is_none() {
            session.socket = Some(open(upstream, url, headers, waits.connect).await?);
            session.last = None;
        }
        let mut continued = session.last.is_some();
        loop {
            let frame = create_frame(&fields, session.last.as_ref().filter(|_| continued));
            let first = match exchange_first(&mut session, frame, waits).await {
                Ok(first) => first,
                Err(failed) => {
                    session.socket = None;
                    session.last = None;
                    return match failed {
                        Failed::Unanswered => None,
                        Failed::TimedOut => Some(Err(ProxyError::UpstreamTimeout {
                            upstream: upstream.name.clone(),
                            timeout: waits.first_frame,
                        })),
                    };
                }
            };
            session.idle_since = Some(Instant::now());
            match first {
                First::Error(status, error) if continued && lost_previous(&error) => {
                    tracing::debug!(status, "upstream socket lost its last response");
                    session.last = None;
                    continued = false;
                }
                First::Error(status, error) => return Some(Ok(error_response(status, &error))),
                First::Event(text) => {
                    let input = whole_input(&fields);
                    return Some(Ok(event_stream(session, text, input)));
                }
            }
        }
    }
}

impl Session {
    /// Readies a kept socket for the next request: frames left over since
    /// the last answer are dropped, and a socket idle past `waits.idle`
    /// must answer a ping first. A socket that fails either is closed.
    async fn check(&mut self, waits: Waits) {
        let Some(socket) = self.socket.as_mut() else {
            return;
        };
        let idle = self
            .idle_since
            .is_some_and(|since| since.elapsed() > waits.idle);
        let ready = drop_leftovers(socket) && (!idle || answers_ping(socket, waits.connect).await);
        if !ready {
            tracing::debug!("upstream socket gone while idle; opening another");
            self.socket = None;
            self.last = None;
        }
    }
}

/// Drops frames already received between answers (none are expected);
/// false when the socket has ended.
fn drop_leftovers(socket: &mut Socket) -> bool {
    use futures_util::FutureExt;
    loop {
        match socket.next().now_or_never() {
            None => return true,
            Some(Some(Ok(Message::Close(_)) | Err(_)) | None) => return false,
            Some(Some(Ok(_))) => continue,
        }
    }
}

/// Whether the socket answers a ping within `wait`.
async fn answers_ping(socket: &mut Socket, wait: Duration) -> bool {
    let pinged = async {
        socket.send(Message::Ping(Bytes::new())).await.ok()?;
        loop {
            match socket.next().await? {
                Ok(Message::Pong(_)) => return Some(()),
                Ok(Message::Close(_)) | Err(_) => return None,
                Ok(_) => continue,
            }
        }
    };
    matches!(tokio::time::timeout(wait, pinged).await, Ok(Some(())))
}

/// Whether reqwest would go through an HTTP proxy (it reads these): a
/// socket of Condenser's own would pass it by.
fn proxied() -> bool {
    static PROXIED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PROXIED.get_or_init(|| {
        [
            "HTTPS_PROXY",
            "https_proxy",
            "HTTP_PROXY",
            "http_proxy",
            "ALL_PROXY",
            "all_proxy",
        ]
        .iter()
        .any(|name| std::env::var_os(name).is_some_and(|value| !value.is_empty()))
    })
}

/// The request's fields, when it is one the mode carries: a streamed
/// Responses request (the socket answers only with events).
fn streamed_request(body: &Bytes) -> Option<Map<String, Value>> {
    let Ok(Value::Object(fields)) = serde_json::from_slice::<Value>(body) else {
        return None;
    };
    let streamed = fields.get("stream").and_then(Value::as_bool) != Some(false);
    let already_continued = fields.contains_key("previous_response_id");
    (streamed && !already_continued).then_some(fields)
}

/// Opens the upstream socket with the request's headers; `None` (HTTP
/// instead) when it cannot be. A handshake answered with an HTTP status
/// means the upstream does not serve the mode: remembered.
async fn open(
    upstream: &Upstream,
    url: &url::Url,
    headers: &HeaderMap,
    wait: Duration,
) -> Option<Socket> {
    let request = handshake(url, headers)?;
    // No Nagle: an answer's events are many small frames each way, and a
    // pong or a frame held for an ACK costs a delayed ACK's 40 ms.
    let connecting = tokio_tungstenite::connect_async_with_config(request, None, true);
    let opened = tokio::time::timeout(wait, connecting).await;
    match opened {
        Ok(Ok((socket, _))) => {
            metrics::counter!("condenser_upstream_websocket_opened_total").increment(1);
            Some(socket)
        }
        Ok(Err(tungstenite::Error::Http(response))) => {
            let status = response.status().as_u16();
            if WITHOUT_THE_MODE.contains(&status) {
                tracing::info!(
                    upstream = %upstream.name,
                    status,
                    "upstream does not serve the Responses WebSocket mode; using HTTP"
                );
                upstream.websocket_refused.store(true, Ordering::Relaxed);
            }
            None
        }
        Ok(Err(error)) => {
            tracing::debug!(upstream = %upstream.name, error = %error, "upstream socket not opened; using HTTP");
            None
        }
        Err(_) => None,
    }
}

/// The handshake: the request's URL as `ws`/`wss`, its headers but those
/// of its body, and the mode's beta beside the client's own.
fn handshake(
    url: &url::Url,
    headers: &HeaderMap,
) -> Option<tungstenite::handshake::client::Request> {
    let mut url = url.clone();
    let scheme = if url.scheme() == "https" { "wss" } else { "ws" };
    url.set_scheme(scheme).ok()?;
    let mut request = url.as_str().into_client_request().ok()?;
    let sent = request.headers_mut();
    let own: Vec<http::HeaderName> = sent.keys().cloned().collect();
    for (name, value) in headers {
        if !BODY_ONLY.contains(name) && !own.contains(name) {
            sent.append(name, value.clone());
        }
    }
    let beta = match sent.get("openai-beta").and_then(|v| v.to_str().ok()) {
        Some(others) if !others.is_empty() => format!("{others}, {MODE_BETA}"),
        _ => MODE_BETA.to_string(),
    };
    sent.insert("openai-beta", HeaderValue::from_str(&beta).ok()?);
    Some(request)
}

/// A `response.create` frame for the request: its new items after the
/// last response when its history extends that one, else whole.
fn create_frame(fields: &Map<String, Value>, last: Option<&Last>) -> String {
    let mut frame = Map::with_capacity(fields.len() + 2);
    frame.insert("type".into(), Value::from("response.create"));
    let items = fields.get("input").map(input_items);
    let new_items = last.zip(items.as_ref()).and_then(|(last, items)| {
        let extends = items.len() > last.items.len() && items.starts_with(&last.items);
        extends.then(|| (last.id.clone(), items[last.items.len()..].to_vec()))
    });
    for (name, value) in fields {
        match (&new_items, name.as_str()) {
            (Some((id, new)), "input") => {
                frame.insert("previous_response_id".into(), Value::from(id.clone()));
                frame.insert("input".into(), Value::Array(new.clone()));
            }
            _ => {
                frame.insert(name.clone(), value.clone());
            }
        }
    }
    Value::Object(frame).to_string()
}

fn whole_input(fields: &Map<String, Value>) -> Vec<Value> {
    fields.get("input").map(input_items).unwrap_or_default()
}

/// A request's `input` as items: a string is one user message, as the
/// API reads it.
pub fn input_items(input: &Value) -> Vec<Value> {
    match input {
        Value::Array(items) => items.clone(),
        Value::String(text) => vec![serde_json::json!({"role": "user", "content": text})],
        _ => Vec::new(),
    }
}

/// The first frame of an answer.
enum First {
    Error(u16, Value),
    Event(String),
}

/// Sends the frame and reads the answer's first one.
async fn exchange_first(
    session: &mut Session,
    frame: String,
    waits: Waits,
) -> Result<First, Failed> {
    let socket = session.socket.as_mut().ok_or(Failed::Unanswered)?;
    let sent = tokio::time::timeout(waits.connect, socket.send(Message::text(frame))).await;
    if !matches!(sent, Ok(Ok(()))) {
        return Err(Failed::Unanswered);
    }
    let text = tokio::time::timeout(waits.first_frame, next_text(socket))
        .await
        .map_err(|_| Failed::TimedOut)?
        .ok_or(Failed::Unanswered)?;
    Ok(match error_frame(&text) {
        Some((status, error)) => First::Error(status, error),
        None => First::Event(text),
    })
}

/// The next text frame; `None` once the socket ended or failed.
async fn next_text(socket: &mut Socket) -> Option<String> {
    while let Some(message) = socket.next().await {
        match message.ok()? {
            Message::Text(text) => return Some(text.to_string()),
            Message::Close(_) => return None,
            _ => continue,
        }
    }
    None
}

/// `{"type":"error","status":N,"error":{…}}`: the mode's error frame.
fn error_frame(text: &str) -> Option<(u16, Value)> {
    if !text.contains("\"error\"") {
        return None;
    }
    let Ok(Value::Object(mut frame)) = serde_json::from_str::<Value>(text) else {
        return None;
    };
    if frame.get("type").and_then(Value::as_str) != Some("error") {
        return None;
    }
    let status = frame.get("status").and_then(Value::as_u64).unwrap_or(400);
    let error = frame.remove("error").unwrap_or(Value::Null);
    Some((u16::try_from(status).unwrap_or(400), error))
}

/// The upstream no longer holds the response named: it restarted or
/// forgot it, so the request goes whole.
fn lost_previous(error: &Value) -> bool {
    error.get("code").and_then(Value::as_str) == Some("previous_response_not_found")
}

/// An error frame as the HTTP answer with the same error.
fn error_response(status: u16, error: &Value) -> reqwest::Response {
    let body = serde_json::json!({ "error": error }).to_string();
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    let response = http::Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(reqwest::Body::from(body))
        .unwrap_or_default();
    reqwest::Response::from(response)
}

/// The answer's events as an SSE stream, the first already read.
fn event_stream(
    session: OwnedMutexGuard<Session>,
    first: String,
    input: Vec<Value>,
) -> reqwest::Response {
    let events = Events {
        session: Some(session),
        first: Some(first),
        input: Some(input),
        output: Vec::new(),
    };
    let response = http::Response::builder()
        .status(StatusCode::OK)
        .header(http::header::CONTENT_TYPE, "text/event-stream")
        .body(reqwest::Body::wrap_stream(events))
        .unwrap_or_default();
    reqwest::Response::from(response)
}

/// Frames to SSE events until the one that ends the response. Holds the
/// session until then: the next request waits for this answer's end, and
/// only for that (a retry may come while this answer is still held).
struct Events {
    session: Option<OwnedMutexGuard<Session>>,
    first: Option<String>,
    /// The request's whole input, remembered with the answer's output.
    input: Option<Vec<Value>>,
    /// The output items as their `response.output_item.done` events gave
    /// them: a `response.completed` may list none (the ChatGPT backend's
    /// does), and they are the response all the same.
    output: Vec<Value>,
}

/// The events that end a response (`response.completed` remembered).
const ENDING: &[&str] = &[
    "response.completed",
    "response.failed",
    "response.incomplete",
    "error",
];

#[derive(Debug, thiserror::Error)]
#[error("the upstream socket closed mid-answer")]
struct ClosedMidAnswer;

impl Events {
    fn event(&mut self, text: String) -> Bytes {
        let kind = event_type(&text);
        if kind == "response.output_item.done" {
            if let Ok(mut event) = serde_json::from_str::<Value>(&text) {
                self.output.push(event["item"].take());
            }
        }
        if ENDING.contains(&kind.as_str()) {
            if let Some(mut session) = self.session.take() {
                session.idle_since = Some(Instant::now());
                session.last = (kind == "response.completed")
                    .then(|| self.answered(&text))
                    .flatten();
            }
        }
        Bytes::from(format!("event: {kind}\ndata: {text}\n\n"))
    }

    /// The response a `response.completed` event ends, as the upstream
    /// now holds it.
    fn answered(&mut self, text: &str) -> Option<Last> {
        let event = serde_json::from_str::<Value>(text).ok()?;
        let response = &event["response"];
        let id = response["id"].as_str()?;
        let output = match response["output"].as_array() {
            Some(listed) if !listed.is_empty() => listed.clone(),
            _ => std::mem::take(&mut self.output),
        };
        let mut items = self.input.take().unwrap_or_default();
        items.extend(output);
        Some(Last {
            id: id.to_string(),
            items,
        })
    }
}

fn event_type(text: &str) -> String {
    #[derive(serde::Deserialize)]
    struct Typed {
        #[serde(rename = "type")]
        kind: String,
    }
    serde_json::from_str::<Typed>(text)
        .map(|typed| typed.kind)
        .unwrap_or_default()
}

impl Stream for Events {
    type Item = Result<Bytes, ClosedMidAnswer>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(first) = self.first.take() {
            return Poll::Ready(Some(Ok(self.event(first))));
        }
        loop {
            let Some(session) = self.session.as_mut() else {
                return Poll::Ready(None);
            };
            let Some(socket) = session.socket.as_mut() else {
                return Poll::Ready(Some(Err(ClosedMidAnswer)));
            };
            match std::task::ready!(socket.poll_next_unpin(cx)) {
                Some(Ok(Message::Text(text))) => {
                    return Poll::Ready(Some(Ok(self.event(text.to_string()))))
                }
                Some(Ok(Message::Close(_)) | Err(_)) | None => {
                    session.socket = None;
                    session.last = None;
                    self.session = None;
                    return Poll::Ready(Some(Err(ClosedMidAnswer)));
                }
                Some(Ok(_)) => continue,
            }
        }
    }
}

impl Drop for Events {
    /// An answer not read to its end leaves the socket mid-response: it
    /// is closed, and the next request opens another.
    fn drop(&mut self) {
        if let Some(session) = self.session.as_mut() {
            session.socket = None;
            session.last = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(value: Value) -> Map<String, Value> {
        let Value::Object(fields) = value else {
            panic!("an object")
        };
        fields
    }

    fn last() -> Last {
        Last {
            id: "resp_1".into(),
            items: vec![
                json!({"role": "user", "content": "hi"}),
                json!({"type": "function_call", "call_id": "c"}),
            ],
        }
    }

    #[test]
    fn a_history_that_extends_the_last_response_sends_its_new_items_alone() {
        let request = fields(json!({"model": "m", "input": [
            {"role": "user", "content": "hi"},
            {"type": "function_call", "call_id": "c"},
            {"type": "function_call_output", "call_id": "c", "output": "ok"}], "stream": true}));
        let frame: Value =
            serde_json::from_str(&create_frame(&request, Some(&last()))).expect("json");
        assert_eq!(
            frame,
            json!({"type": "response.create", "model": "m", "previous_response_id": "resp_1",
                "input": [{"type": "function_call_output", "call_id": "c", "output": "ok"}], "stream": true})
        );
    }

    #[test]
    fn a_history_that_does_not_extend_it_goes_whole() {
        let compacted = json!({"model": "m", "input": [
            {"role": "user", "content": "summary"},
            {"type": "function_call_output", "call_id": "c", "output": "ok"}]});
        let frame: Value =
            serde_json::from_str(&create_frame(&fields(compacted.clone()), Some(&last())))
                .expect("json");
        let mut expected = compacted;
        expected["type"] = json!("response.create");
        assert_eq!(frame, expected);
        assert!(frame.get("previous_response_id").is_none());
    }

    #[test]
    fn an_error_frame_reads_as_its_status_and_error() {
        let frame = r#"{"type":"error","status":400,"error":{"code":"previous_response_not_found","message":"m"}}"#;
        let (status, error) = error_frame(frame).expect("an error frame");
        assert_eq!(status, 400);
        assert!(lost_previous(&error));
        assert!(error_frame(r#"{"type":"response.created","response":{"error":null}}"#).is_none());
    }

    #[test]
    fn the_handshake_asks_for_the_mode_beside_the_clients_betas() {
        let mut headers = HeaderMap::new();
        headers.insert("authorization", HeaderValue::from_static("Bearer k"));
        headers.insert("openai-beta", HeaderValue::from_static("other=1"));
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        let url = url::Url::parse("https://api.example.com/v1/responses").expect("url");
        let request = handshake(&url, &headers).expect("a request");
        assert_eq!(request.uri(), "wss://api.example.com/v1/responses");
        assert_eq!(request.headers()["authorization"], "Bearer k");
        assert_eq!(
            request.headers()["openai-beta"],
            format!("other=1, {MODE_BETA}")
        );
        assert!(!request.headers().contains_key("content-type"));
        assert!(request.headers().contains_key("sec-websocket-key"));
    }
}
