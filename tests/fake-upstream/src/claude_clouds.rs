//! Claude as Amazon Bedrock and Google Vertex AI serve it: Messages
//! underneath (the same replies, windows and rules as `/v1/messages`),
//! with each cloud's own door.
//!
//! Bedrock InvokeModel (`POST /model/{modelId}/invoke` and
//! `/invoke-with-response-stream`; docs.aws.amazon.com/bedrock, "Anthropic
//! Claude Messages API"; the Anthropic SDK's `lib/bedrock/_client.py`):
//!
//! - the model is in the path; the body must carry `anthropic_version:
//!   "bedrock-2023-05-31"` and must not carry `model` or `stream`
//!   (`Malformed input request: #: extraneous key [model] is not
//!   permitted, please reformat your input and try again.`, as Bedrock
//!   answers keys it does not know; BerriAI/litellm#6124);
//! - a credential is required: a Bedrock API key as `Authorization:
//!   Bearer` or a SigV4 signature, verified here with `aws-sigv4` for the
//!   access key [`GATEWAY_ACCESS_KEY`] (any other key is unknown to AWS:
//!   403 `UnrecognizedClientException`);
//! - streams are `application/vnd.amazon.eventstream`, each Messages event
//!   a `chunk` frame of `{"bytes": base64(event)}`;
//! - an overflow is `400` `ValidationException`, `{"message":"Input is too
//!   long for requested model."}` (anthropics/claude-code#760, #8637).
//!
//! Vertex AI rawPredict (`…/projects/{p}/locations/{r}/publishers/
//! anthropic/models/{model}:rawPredict` and `:streamRawPredict`; the SDK's
//! `lib/vertex/_client.py`): `anthropic_version: "vertex-2023-10-16"` in the
//! body, the model in the path, an OAuth bearer token; `context_management`
//! refused (`context_management: Extra inputs are not permitted`,
//! anthropics/claude-code#21612); an overflow is `413` with Anthropic's
//! error shape and `"Prompt is too long"` (anthropics/claude-code#2569).

use crate::chat::{answer, Flavor};
use crate::state::{Protocol, State};
use aws_smithy_eventstream::frame::write_message_to;
use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
use axum::body::Body;
use axum::extract::{Path, Request, State as AxumState};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use bytes::Bytes;
use futures_util::StreamExt;
use http::StatusCode;
use serde_json::{json, Value};
use std::sync::Arc;

/// The access key a gateway signs with in tests, and its secret.
pub const GATEWAY_ACCESS_KEY: &str = "AKIDCONDENSERGATEWAY";
pub const GATEWAY_SECRET_KEY: &str = "condenser-gateway-test-secret";

const BEDROCK_VERSION: &str = "bedrock-2023-05-31";
const VERTEX_VERSION: &str = "vertex-2023-10-16";

pub async fn bedrock(
    AxumState(state): AxumState<Arc<State>>,
    Path((model, action)): Path<(String, String)>,
    request: Request,
) -> Response {
    let stream = match action.as_str() {
        "invoke" => false,
        "invoke-with-response-stream" => true,
        _ => return bedrock_error(StatusCode::NOT_FOUND, "UnknownOperationException", ""),
    };
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 512 * 1024 * 1024)
        .await
        .unwrap_or_default();
    if let Err(refused) = bedrock_caller(&parts, &body) {
        return refused;
    }
    let translated = match bedrock_body(&body, &model, stream) {
        Ok(translated) => translated,
        Err(message) => {
            return bedrock_error(StatusCode::BAD_REQUEST, "ValidationException", &message)
        }
    };
    let messages = messages_parts(&parts, "bedrock");
    let (response, mut record) = answer(
        &state,
        Protocol::Anthropic,
        &Flavor::Native,
        &messages,
        translated,
    )
    .await;
    record.path = parts.uri.path().to_string();
    record.headers = crate::extras::record_of(&parts, Bytes::new()).headers;
    record.body = body;
    state.record(record);
    bedrock_answer(response).await
}

/// The caller's credential: a Bedrock API key, or a SigV4 signature that
/// verifies.
#[allow(clippy::result_large_err)]
fn bedrock_caller(parts: &http::request::Parts, body: &[u8]) -> Result<(), Response> {
    let authorization = parts
        .headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if authorization.starts_with("Bearer ") {
        return Ok(());
    }
    if !authorization.starts_with("AWS4-HMAC-SHA256 ") {
        let message = "Authorization header requires 'Credential' parameter. Authorization header requires 'Signature' parameter. Authorization header requires 'SignedHeaders' parameter. Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header.";
        return Err(bedrock_error(
            StatusCode::FORBIDDEN,
            "IncompleteSignatureException",
            message,
        ));
    }
    crate::sigv4::verify(parts, body, GATEWAY_ACCESS_KEY, GATEWAY_SECRET_KEY).map_err(|message| {
        bedrock_error(
            StatusCode::FORBIDDEN,
            "UnrecognizedClientException",
            &message,
        )
    })
}

/// The Messages body a Bedrock body stands for, or Bedrock's refusal.
fn bedrock_body(body: &[u8], model: &str, stream: bool) -> Result<Bytes, String> {
    let Ok(Value::Object(mut fields)) = serde_json::from_slice::<Value>(body) else {
        return Err("Malformed input request, please reformat your input and try again.".into());
    };
    for key in ["model", "stream"] {
        if fields.contains_key(key) {
            return Err(format!("Malformed input request: #: extraneous key [{key}] is not permitted, please reformat your input and try again."));
        }
    }
    if fields.get("anthropic_version") != Some(&json!(BEDROCK_VERSION)) {
        return Err("Malformed input request: #: required key [anthropic_version] not found, please reformat your input and try again.".into());
    }
    fields.remove("anthropic_version");
    fields.remove("anthropic_beta");
    fields.insert("model".into(), json!(model));
    fields.insert("stream".into(), json!(stream));
    Ok(serde_json::to_vec(&fields)
        .expect("a map serializes")
        .into())
}

/// The request as Messages takes it: its key and version in headers.
fn messages_parts(parts: &http::request::Parts, key: &str) -> http::request::Parts {
    let mut messages = http::Request::new(());
    *messages.method_mut() = parts.method.clone();
    *messages.uri_mut() = "/v1/messages".parse().expect("a path");
    let headers = messages.headers_mut();
    headers.insert("x-api-key", key.parse().expect("a key"));
    headers.insert(
        "anthropic-version",
        "2023-06-01".parse().expect("a version"),
    );
    let (messages, ()) = messages.into_parts();
    messages
}

/// Messages' answer as Bedrock gives it.
async fn bedrock_answer(response: Response) -> Response {
    let status = response.status();
    let is_stream = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if status.is_success() && is_stream {
        let frames = response
            .into_body()
            .into_data_stream()
            .map(|event| event.map(|event| Bytes::from(frame_of_event(&event))));
        return Response::builder()
            .header("content-type", "application/vnd.amazon.eventstream")
            .body(Body::from_stream(frames))
            .expect("static response parts");
    }
    if status.is_success() {
        return response;
    }
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap_or_default();
    let error: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let message = error["error"]["message"].as_str().unwrap_or_default();
    if message.starts_with("prompt is too long") || message.starts_with("input length and") {
        let message = "Input is too long for requested model.";
        return bedrock_error(StatusCode::BAD_REQUEST, "ValidationException", message);
    }
    bedrock_error(status, "ValidationException", message)
}

/// The `chunk` frame of one of the fake's own SSE events (each body chunk
/// of its streams is one whole event); an error event becomes Bedrock's
/// exception frame.
fn frame_of_event(event: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(event);
    let data = text
        .lines()
        .find_map(|line| line.strip_prefix("data: "))
        .unwrap_or_default();
    let value: Value = serde_json::from_str(data).unwrap_or(Value::Null);
    if value["type"] == "error" {
        let message = value["error"]["message"].as_str().unwrap_or_default();
        let payload = json!({"message": message}).to_string();
        return frame(
            &[
                (":exception-type", "validationException"),
                (":content-type", "application/json"),
                (":message-type", "exception"),
            ],
            payload,
        );
    }
    let bytes = base64::engine::general_purpose::STANDARD.encode(data);
    let payload = json!({"bytes": bytes}).to_string();
    frame(
        &[
            (":event-type", "chunk"),
            (":content-type", "application/json"),
            (":message-type", "event"),
        ],
        payload,
    )
}

fn frame(headers: &[(&'static str, &str)], payload: String) -> Vec<u8> {
    let headers = headers
        .iter()
        .map(|(name, value)| Header::new(*name, HeaderValue::String(value.to_string().into())))
        .collect();
    let mut framed = Vec::new();
    write_message_to(&Message::new_from_parts(headers, payload), &mut framed)
        .expect("small frames encode");
    framed
}

/// An error as Bedrock answers it: the message in the body, the type in
/// `x-amzn-ErrorType`.
fn bedrock_error(status: StatusCode, kind: &str, message: &str) -> Response {
    let mut response = (status, axum::Json(json!({"message": message}))).into_response();
    if let Ok(kind) = kind.parse() {
        response.headers_mut().insert("x-amzn-errortype", kind);
    }
    response
}

pub async fn vertex(
    AxumState(state): AxumState<Arc<State>>,
    Path(rest): Path<String>,
    request: Request,
) -> Response {
    let Some((model, stream)) = vertex_model(&rest) else {
        return vertex_error(StatusCode::NOT_FOUND, "NOT_FOUND");
    };
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 512 * 1024 * 1024)
        .await
        .unwrap_or_default();
    let token = parts
        .headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let Some(token) = token.map(str::to_string) else {
        return vertex_error(StatusCode::UNAUTHORIZED, "UNAUTHENTICATED");
    };
    let translated = match vertex_body(&body, &model, stream) {
        Ok(translated) => translated,
        Err(message) => return anthropic_error(StatusCode::BAD_REQUEST, &message),
    };
    let mut messages = messages_parts(&parts, &token);
    for name in ["anthropic-beta"] {
        if let Some(value) = parts.headers.get(name) {
            messages.headers.insert(name, value.clone());
        }
    }
    let (response, mut record) = answer(
        &state,
        Protocol::Anthropic,
        &Flavor::Native,
        &messages,
        translated,
    )
    .await;
    record.path = parts.uri.path().to_string();
    record.headers = crate::extras::record_of(&parts, Bytes::new()).headers;
    record.body = body;
    state.record(record);
    vertex_answer(response).await
}

/// The model and whether it streams, from `…/publishers/anthropic/models/{model}:{method}`.
fn vertex_model(rest: &str) -> Option<(String, bool)> {
    let (_, tail) = rest.split_once("/publishers/anthropic/models/")?;
    let (model, method) = tail.split_once(':')?;
    match method {
        "rawPredict" => Some((model.to_string(), false)),
        "streamRawPredict" => Some((model.to_string(), true)),
        _ => None,
    }
}

fn vertex_body(body: &[u8], model: &str, stream: bool) -> Result<Bytes, String> {
    let Ok(Value::Object(mut fields)) = serde_json::from_slice::<Value>(body) else {
        return Err("There was an issue with your request body: invalid JSON".into());
    };
    if fields.contains_key("context_management") {
        return Err("context_management: Extra inputs are not permitted".into());
    }
    if fields.get("anthropic_version") != Some(&json!(VERTEX_VERSION)) {
        return Err("anthropic_version: Input should be 'vertex-2023-10-16'".into());
    }
    fields.remove("anthropic_version");
    fields.insert("model".into(), json!(model));
    fields.insert("stream".into(), json!(stream));
    Ok(serde_json::to_vec(&fields)
        .expect("a map serializes")
        .into())
}

/// Messages' answer as Vertex gives it: the overflow a 413, a stream with
/// Vertex's own `vertex_event` (usage by pricing tier) before its
/// `message_stop` (vercel/ai#11309 shows one as Vertex sends it).
async fn vertex_answer(response: Response) -> Response {
    let streamed = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if response.status().is_success() && streamed {
        let (parts, body) = response.into_parts();
        let events = body.into_data_stream().flat_map(|event| {
            let stop = event.as_ref().is_ok_and(|e| e.windows(14).any(|w| w == b"\"message_stop\""));
            let vertex = r#"{"type":"vertex_event","usage":{"input_tokens":9,"output_tokens":1,"cache_creation_input_tokens":null,"cache_read_input_tokens":null}}"#;
            let before = stop.then(|| Ok(Bytes::from(format!("event: vertex_event\ndata: {vertex}\n\n"))));
            futures_util::stream::iter(before.into_iter().chain([event]))
        });
        return Response::from_parts(parts, Body::from_stream(events));
    }
    if response.status() != StatusCode::BAD_REQUEST {
        return response;
    }
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap_or_default();
    let error: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let message = error["error"]["message"].as_str().unwrap_or_default();
    if message.starts_with("prompt is too long") || message.starts_with("input length and") {
        let body = json!({"type": "error", "error": {"type": "invalid_request_error", "message": "Prompt is too long"}, "request_id": "req_vrtx_011CFakeUpstream00000"});
        return (StatusCode::PAYLOAD_TOO_LARGE, axum::Json(body)).into_response();
    }
    (StatusCode::BAD_REQUEST, axum::Json(error)).into_response()
}

fn anthropic_error(status: StatusCode, message: &str) -> Response {
    let body = json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}, "request_id": "req_vrtx_011CFakeUpstream00000"});
    (status, axum::Json(body)).into_response()
}

/// Google's own error shape, for what Vertex refuses before the model.
fn vertex_error(status: StatusCode, kind: &str) -> Response {
    let body = json!({"error": {"code": status.as_u16(), "message": format!("Request had invalid authentication credentials or no such model ({kind})."), "status": kind}});
    (status, axum::Json(body)).into_response()
}
