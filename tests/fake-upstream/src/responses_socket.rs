//! The Responses API's WebSocket mode, as OpenAI serves it, so tests can
//! check that Condenser speaks it upstream correctly.
//!
//! The wire, as Codex speaks it (openai/codex
//! `codex-rs/codex-api/src/endpoint/responses_websocket.rs`;
//! OpenAI's "WebSocket mode" guide for the Responses API): the client
//! upgrades `GET /v1/responses` with the HTTP request's auth header, then
//! sends text frames `{"type":"response.create", …}` holding an HTTP
//! request body's fields; the server answers each with text frames, each
//! the JSON payload of one SSE event of the same request over HTTP, or
//! with an error frame `{"type":"error","status":N,"error":{…}}` that
//! leaves the connection open.
//!
//! Every frame is answered by the very code that answers
//! `POST /v1/responses` (`chat::answer`), with a rebuilt full-history
//! body, so validation, windows, scripts and the request log behave as
//! over HTTP.

use crate::chat::{self, Flavor, StreamedOverflow};
use crate::replies::Reply;
use crate::state::{Protocol, RecordedRequest, RequestKind, State, Transport};
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{FromRequestParts, Request, State as AxumState};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::StreamExt;
use http::request::Parts;
use http::StatusCode;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

/// As large as the HTTP handlers accept (`chat::handle`).
const MAX_MESSAGE: usize = 512 * 1024 * 1024;

/// What a connection remembers: the last response it answered, with its
/// full input followed by its output.
struct LastResponse {
    id: String,
    items: Vec<Value>,
}

/// A frame's request as a full-history HTTP request would carry it.
struct Rebuilt {
    body: Value,
    /// `previous_response_id` named the connection's last response.
    continued: bool,
    /// `generate: false`, Codex's prewarm.
    prewarm: bool,
}

/// `GET /v1/responses`: the handshake. Without an upgrade the GET is
/// refused as the route refuses it without the mode (405); without a key,
/// with the HTTP handlers' 401 (`validate::credential`).
pub async fn upgrade(AxumState(state): AxumState<Arc<State>>, request: Request) -> Response {
    let (mut parts, _) = request.into_parts();
    let Ok(upgrade) = WebSocketUpgrade::from_request_parts(&mut parts, &state).await else {
        return (
            StatusCode::METHOD_NOT_ALLOWED,
            [(http::header::ALLOW, "POST")],
        )
            .into_response();
    };
    if let Err(refused) = crate::validate::credential(Protocol::Responses, &parts.headers) {
        let status = refused.status().as_u16();
        state.record(socket_record(&parts, Bytes::new(), status));
        return refused;
    }
    state.websocket_accepted();
    upgrade
        .max_message_size(MAX_MESSAGE)
        .max_frame_size(MAX_MESSAGE)
        .on_upgrade(move |socket| serve(socket, state, parts))
}

/// Frames are answered one at a time, in order: a frame that arrives
/// while another is answered waits, as a real server effectively does for
/// Codex, which holds the connection until `response.completed`
/// (`responses_websocket.rs`, `stream_request`).
async fn serve(mut socket: WebSocket, state: Arc<State>, handshake: Parts) {
    let mut last = None;
    while let Some(Ok(message)) = socket.recv().await {
        let Message::Text(text) = message else {
            continue;
        };
        let answered = answer_frame(&mut socket, &state, &handshake, &mut last, &text).await;
        if answered.is_err() {
            break;
        }
    }
}

async fn answer_frame(
    socket: &mut WebSocket,
    state: &State,
    handshake: &Parts,
    last: &mut Option<LastResponse>,
    text: &str,
) -> Result<(), axum::Error> {
    let Ok(frame) = serde_json::from_str::<Value>(text) else {
        // Unparsable: the HTTP path refuses it with its own message.
        let body = Bytes::copy_from_slice(text.as_bytes());
        return answer_request(socket, state, handshake, body, false)
            .await
            .map(drop);
    };
    match frame["type"].as_str() {
        // Codex acknowledges a response it has handled
        // (`send_response_processed`); nothing answers it.
        Some("response.processed") => return Ok(()),
        Some("response.create") => {}
        other => {
            let refusal = unsupported_type(other.unwrap_or_default());
            state.record(socket_record(handshake, body_of(&frame), 400));
            return send(socket, &refusal).await;
        }
    }
    let rebuilt = match rebuild(&frame, last.as_ref()) {
        Ok(rebuilt) => rebuilt,
        Err(id) => {
            let mut record = socket_record(handshake, body_of(&frame), 400);
            record.kind = classify(state, &frame);
            state.record(record);
            return send(socket, &previous_response_not_found(&id)).await;
        }
    };
    let items = crate::responses::items(&rebuilt.body);
    let body = Bytes::from(rebuilt.body.to_string());
    let completed = match rebuilt.prewarm {
        true => prewarm(socket, state, handshake, body).await?,
        false => answer_request(socket, state, handshake, body, rebuilt.continued).await?,
    };
    if let Some(response) = completed {
        *last = Some(remembered(items, &response));
    }
    Ok(())
}

/// A previous response continued: its items, then the frame's.
fn remembered(mut items: Vec<Value>, response: &Value) -> LastResponse {
    let output = response["output"].as_array().into_iter().flatten();
    items.extend(output.cloned());
    LastResponse {
        id: response["id"].as_str().unwrap_or_default().to_string(),
        items,
    }
}

/// The frame without `type` and `generate`, `stream: true`, and a
/// `previous_response_id` resolved into the full input. The connection
/// holds only its last response (OpenAI's connection-local cache; the
/// fake keeps no store across connections), so any other id is refused:
/// `Err(id)`.
fn rebuild(frame: &Value, last: Option<&LastResponse>) -> Result<Rebuilt, String> {
    let mut body = frame.clone();
    let fields = body
        .as_object_mut()
        .expect("a frame with a type is an object");
    fields.shift_remove("type");
    let prewarm = fields.shift_remove("generate") == Some(Value::Bool(false));
    let previous = fields
        .shift_remove("previous_response_id")
        .filter(|id| !id.is_null());
    let continued = previous.is_some();
    if let Some(previous) = previous {
        let id = previous
            .as_str()
            .map_or(previous.to_string(), str::to_string);
        let Some(last) = last.filter(|last| last.id == id) else {
            return Err(id);
        };
        let mut items = last.items.clone();
        items.extend(crate::responses::items(&body));
        body["input"] = Value::Array(items);
    }
    body["stream"] = Value::Bool(true);
    Ok(Rebuilt {
        body,
        continued,
        prewarm,
    })
}

/// One frame through `POST /v1/responses`'s own path, its answer relayed
/// as frames. The completed response, if any.
async fn answer_request(
    socket: &mut WebSocket,
    state: &State,
    handshake: &Parts,
    body: Bytes,
    continued: bool,
) -> Result<Option<Value>, axum::Error> {
    let native = Flavor::Native;
    let (response, mut record) =
        chat::answer(state, Protocol::Responses, &native, handshake, body).await;
    record.transport = Transport::Websocket;
    record.continued = continued;
    if response.extensions().get::<StreamedOverflow>().is_some() {
        record.status = 400;
        state.record(record);
        send(socket, &overflow_frame()).await?;
        return Ok(None);
    }
    state.record(record);
    relay(socket, response).await
}

/// `generate: false` (Codex's prewarm, providers.md "WebSocket
/// transport"): no reply is generated; the fake answers with the events
/// of an empty response and remembers it, so the next frame can continue
/// it. Neither validated nor scripted: it takes no script meant for a
/// real request, and is recorded as `RequestKind::Other`.
async fn prewarm(
    socket: &mut WebSocket,
    state: &State,
    handshake: &Parts,
    body: Bytes,
) -> Result<Option<Value>, axum::Error> {
    let request: Value = serde_json::from_slice(&body).unwrap_or_default();
    let config = state.config();
    let tokens = crate::replies::count_tokens(Protocol::Responses, &request);
    let mut reply = Reply::new(
        Protocol::Responses,
        &request,
        &body,
        &config,
        RequestKind::Other,
        tokens,
    );
    (reply.output_tokens, reply.reasoning_tokens) = (0, 0);
    let usage = crate::responses::usage(&reply);
    let empty = crate::responses::response(&request, &reply, "completed", json!([]), usage);
    let mut record = socket_record(handshake, body, 200);
    record.json = Some(request);
    record.input_tokens = Some(tokens);
    state.record(record);
    let events = crate::responses_modes::events(&empty);
    relay(socket, crate::sse::respond(events, Duration::ZERO)).await
}

/// An SSE answer becomes one text frame per event's `data`, as they
/// come; any other answer becomes one frame: an error frame when it is
/// not a 200. The completed response, if one was relayed.
async fn relay(socket: &mut WebSocket, response: Response) -> Result<Option<Value>, axum::Error> {
    let streamed = response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("text/event-stream"));
    if !streamed {
        send(socket, &whole_answer(response).await).await?;
        return Ok(None);
    }
    let mut body = response.into_body().into_data_stream();
    let mut pending = Vec::new();
    let (mut completed, mut items) = (None, Vec::new());
    while let Some(Ok(chunk)) = body.next().await {
        pending.extend_from_slice(&chunk);
        while let Some(end) = pending.windows(2).position(|pair| pair == b"\n\n") {
            let event: Vec<u8> = pending.drain(..end + 2).collect();
            let Some(data) = event_data(&String::from_utf8_lossy(&event)) else {
                continue;
            };
            let payload = serde_json::from_str::<Value>(&data).unwrap_or_default();
            if payload["type"] == "response.output_item.done" {
                items.push(payload["item"].clone());
            }
            if payload["type"] == "response.completed" {
                // The response as the server holds it: its items, even
                // when the event lists none.
                let mut response = payload["response"].clone();
                response["output"] = Value::Array(std::mem::take(&mut items));
                completed = Some(response);
            }
            socket.send(Message::Text(data.into())).await?;
        }
    }
    Ok(completed)
}

/// The `data:` lines of one SSE event, joined.
fn event_data(event: &str) -> Option<String> {
    let lines: Vec<&str> = event
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(|data| data.strip_prefix(' ').unwrap_or(data))
        .collect();
    (!lines.is_empty()).then(|| lines.join("\n"))
}

/// A non-streamed answer: an HTTP error `{"error":{…}}` becomes the error
/// frame with its status, and its headers (a script's `retry-after`…) in
/// `headers`, which Codex reads (`map_wrapped_websocket_error_event`).
async fn whole_answer(response: Response) -> Value {
    let (parts, body) = response.into_parts();
    let body = axum::body::to_bytes(body, MAX_MESSAGE)
        .await
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&body).into_owned();
    let json = serde_json::from_str::<Value>(&text).ok();
    if parts.status == StatusCode::OK {
        return json.unwrap_or(Value::String(text));
    }
    let error = match json {
        Some(body) if body.get("error").is_some() => body["error"].clone(),
        Some(body) => body,
        None => json!({"message": text}),
    };
    let mut frame = error_frame(parts.status.as_u16(), error);
    let headers = answer_headers(&parts.headers);
    if !headers.is_empty() {
        frame["headers"] = Value::Object(headers);
    }
    frame
}

fn answer_headers(headers: &http::HeaderMap) -> serde_json::Map<String, Value> {
    let ordinary = [http::header::CONTENT_TYPE, http::header::CONTENT_LENGTH];
    headers
        .iter()
        .filter(|(name, _)| !ordinary.contains(name))
        .map(|(name, value)| {
            let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
            (name.as_str().to_string(), Value::String(value))
        })
        .collect()
}

/// An error in a WebSocket: `{"type":"error","status":N,"error":{…}}`,
/// the error object the HTTP answer carries (`responses_websocket.rs`,
/// `parse_wrapped_websocket_error_event`).
fn error_frame(status: u16, error: Value) -> Value {
    json!({"type": "error", "status": status, "error": error})
}

/// Over HTTP a streamed overflow is an in-band `response.failed`; over
/// the socket the fake sends the HTTP 400's error object as an error
/// frame, which Codex maps to the very error an HTTP 400 gives it
/// (`map_wrapped_websocket_error_event` → `TransportError::Http`).
fn overflow_frame() -> Value {
    error_frame(400, crate::responses::overflow_body()["error"].clone())
}

/// A `previous_response_id` the connection does not hold.
fn previous_response_not_found(id: &str) -> Value {
    error_frame(
        400,
        json!({"type": "invalid_request_error", "code": "previous_response_not_found",
            "message": format!("Previous response with id '{id}' not found."),
            "param": "previous_response_id"}),
    )
}

/// A frame of another type. The fake's own wording: no capture of the
/// real message is at hand.
fn unsupported_type(kind: &str) -> Value {
    error_frame(
        400,
        json!({"type": "invalid_request_error", "code": "invalid_value",
            "message": format!("Invalid value: '{kind}'. Supported values are: 'response.create' and 'response.processed'."),
            "param": "type"}),
    )
}

async fn send(socket: &mut WebSocket, frame: &Value) -> Result<(), axum::Error> {
    socket.send(Message::Text(frame.to_string().into())).await
}

/// The frame as recorded when it is refused before the HTTP path.
fn body_of(frame: &Value) -> Bytes {
    let mut body = frame.clone();
    if let Some(fields) = body.as_object_mut() {
        fields.shift_remove("type");
    }
    Bytes::from(body.to_string())
}

fn classify(state: &State, frame: &Value) -> RequestKind {
    let marker = state.config().summary_marker;
    chat::classify(marker.as_deref(), Protocol::Responses, frame)
}

fn socket_record(handshake: &Parts, body: Bytes, status: u16) -> RecordedRequest {
    let mut record = crate::extras::record_of(handshake, body);
    record.protocol = Some(Protocol::Responses);
    record.transport = Transport::Websocket;
    record.status = status;
    record
}
