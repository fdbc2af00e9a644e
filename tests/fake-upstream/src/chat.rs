//! The chat endpoints: what the real APIs check, in the order they check it.

use crate::replies::Reply;
use crate::state::{Protocol, RecordedRequest, RequestKind, Scripted, State};
use crate::{sse, validate};
use axum::body::Body;
use axum::extract::{Request, State as AxumState};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, StatusCode};
use serde_json::{json, Value};
use std::sync::Arc;

/// Who serves a protocol's endpoint: the provider itself, or a cloud that
/// serves it with its own credentials and error bodies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Flavor {
    Native,
    /// Azure OpenAI's deployment path: the deployment names the model.
    Azure {
        deployment: String,
    },
    /// Gemini's OpenAI-compatible endpoint, whose errors are Gemini's.
    GeminiCompat,
    /// OpenAI's compaction endpoint, `/v1/responses/compact`.
    Compact,
}

pub async fn openai(AxumState(state): AxumState<Arc<State>>, request: Request) -> Response {
    handle(state, Protocol::OpenAi, Flavor::Native, request).await
}

pub async fn anthropic(AxumState(state): AxumState<Arc<State>>, request: Request) -> Response {
    handle(state, Protocol::Anthropic, Flavor::Native, request).await
}

pub async fn responses(AxumState(state): AxumState<Arc<State>>, request: Request) -> Response {
    handle(state, Protocol::Responses, Flavor::Native, request).await
}

/// `POST /v1/responses/compact`, which only OpenAI serves: elsewhere no
/// such route (a 404, nothing recorded).
pub async fn compact(AxumState(state): AxumState<Arc<State>>, request: Request) -> Response {
    if state.config().responses_mode != crate::config::ResponsesMode::OpenAi {
        return StatusCode::NOT_FOUND.into_response();
    }
    handle(state, Protocol::Responses, Flavor::Compact, request).await
}

pub async fn handle(
    state: Arc<State>,
    protocol: Protocol,
    flavor: Flavor,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 512 * 1024 * 1024)
        .await
        .unwrap_or_default();
    let (response, record) = answer(&state, protocol, &flavor, &parts, body).await;
    state.record(record);
    response
}

/// The answer to one request and its record, not yet logged: the
/// WebSocket transport (`responses_socket.rs`) answers each frame here,
/// with the handshake's headers, and logs the record itself.
pub async fn answer(
    state: &State,
    protocol: Protocol,
    flavor: &Flavor,
    parts: &http::request::Parts,
    body: bytes::Bytes,
) -> (Response, RecordedRequest) {
    let mut record = crate::extras::record_of(parts, body);
    record.protocol = Some(protocol);
    let response = respond(state, protocol, flavor, &parts.headers, &mut record).await;
    record.status = response.status().as_u16();
    (response, record)
}

async fn respond(
    state: &State,
    protocol: Protocol,
    flavor: &Flavor,
    headers: &HeaderMap,
    record: &mut RecordedRequest,
) -> Response {
    let config = state.config();
    let credential = match flavor {
        Flavor::Azure { .. } => crate::clouds::azure_credential(headers),
        _ => validate::credential(protocol, headers),
    };
    let key = match credential {
        Ok(key) => key,
        Err(response) => return response,
    };
    if protocol == Protocol::Anthropic && !headers.contains_key("anthropic-version") {
        return error(
            protocol,
            StatusCode::BAD_REQUEST,
            "anthropic-version: header is required",
        );
    }
    let Ok(mut request) = serde_json::from_slice::<Value>(&record.body) else {
        return malformed(protocol);
    };
    if protocol == Protocol::Anthropic {
        let mode = config.messages_mode;
        if let Some(refused) = crate::messages_modes::refusal(mode, headers, &request) {
            return error(protocol, StatusCode::BAD_REQUEST, &refused);
        }
    }
    if let Flavor::Azure { deployment } = flavor {
        request["model"] = deployment.as_str().into();
    }
    record.json = Some(request.clone());
    record.kind = classify(config.summary_marker.as_deref(), protocol, &request);
    match state.take_script(record.kind) {
        Some(Scripted::Respond {
            status,
            headers,
            body,
            ..
        }) => return raw(status, &headers, body),
        Some(Scripted::Delay { delay, .. }) => tokio::time::sleep(delay).await,
        Some(Scripted::StreamError { data, .. }) if request["stream"] == true => {
            return sse::single_event(&data)
        }
        _ => {}
    }
    if let Some(refused) = refused_parameters(protocol, &request) {
        return refused;
    }
    if let Err(message) =
        validate::request(protocol, &request, &key, &record.body, &config, record.kind)
    {
        return error(protocol, StatusCode::BAD_REQUEST, &message);
    }
    let mut tokens = crate::replies::count_tokens(protocol, &request);
    record.input_tokens = Some(tokens);
    let model = request["model"].as_str().unwrap_or_default();
    let window = config
        .context_windows
        .get(model)
        .copied()
        .unwrap_or(config.default_context_window);
    // A silently truncating server (Ollama's /v1) cuts what does not fit
    // and answers; it refuses nothing for its size.
    let silent = config.silent_truncation && protocol == Protocol::OpenAi;
    if silent && tokens > window {
        tokens = crate::ollama::cut_openai(&mut request, window);
        record.truncated = true;
    }
    let reply = Reply::new(
        protocol,
        &request,
        &record.body,
        &config,
        record.kind,
        tokens,
    );
    if let Some(message) = overflow(protocol, &request, tokens, window).filter(|_| !silent) {
        if protocol == Protocol::Responses && request["stream"] == true {
            let events = crate::responses_sse::overflow(&request, &reply);
            let mut response = sse::respond(events, config.chunk_delay);
            response.extensions_mut().insert(StreamedOverflow);
            return response;
        }
        if *flavor == Flavor::GeminiCompat {
            return crate::clouds::gemini_overflow(tokens, window);
        }
        return overflow_error(protocol, &message);
    }
    if record.kind == RequestKind::Summary {
        state.summary_delay(config.summary_delay).await;
        record.written = Some(reply.text.clone());
    }
    tokio::time::sleep(config.first_byte_delay).await;
    if *flavor == Flavor::Compact {
        return axum::Json(crate::responses_modes::compacted(&request, &reply)).into_response();
    }
    if protocol == Protocol::Responses {
        let mode = config.responses_mode;
        if let Some(answer) = crate::responses_modes::answer(mode, &request, &reply, tokens) {
            return match request["stream"] == true {
                true => sse::respond(crate::responses_modes::events(&answer), config.chunk_delay),
                false => axum::Json(answer).into_response(),
            };
        }
    }
    if request["stream"] == true {
        sse::stream(protocol, &request, reply, &config)
    } else {
        let mut body = match protocol {
            Protocol::Responses => crate::responses::to_json(&request, &reply),
            _ => reply.to_json(protocol),
        };
        if protocol == Protocol::Anthropic {
            crate::messages_modes::decorate(config.messages_mode, &request, &mut body);
        }
        axum::Json(body).into_response()
    }
}

/// The refusal of what the model does not accept in the request's
/// parameters (`models.rs`), if any.
fn refused_parameters(protocol: Protocol, request: &Value) -> Option<Response> {
    let refused = |body: Value| (StatusCode::BAD_REQUEST, axum::Json(body)).into_response();
    match protocol {
        Protocol::OpenAi => crate::models::check_chat(request).err().map(refused),
        Protocol::Responses => crate::models::check_responses(request).err().map(refused),
        Protocol::Anthropic => crate::models::check_messages(request)
            .err()
            .map(|message| error(protocol, StatusCode::BAD_REQUEST, &message)),
    }
}

/// Marks a Responses stream that reports an overflow in-band, so the
/// WebSocket transport can report it as its error frame instead.
#[derive(Debug, Clone, Copy)]
pub struct StreamedOverflow;

pub fn classify(marker: Option<&str>, protocol: Protocol, request: &Value) -> RequestKind {
    let Some(marker) = marker else {
        return RequestKind::Chat;
    };
    let token = format!("{marker} REQUEST");
    let prompt = match protocol {
        Protocol::OpenAi => request["messages"]
            .get(0)
            .map(Value::to_string)
            .unwrap_or_default(),
        Protocol::Anthropic => format!(
            "{}{}",
            request["system"],
            request["messages"].get(0).unwrap_or(&Value::Null)
        ),
        Protocol::Responses => format!(
            "{}{}",
            request["instructions"],
            crate::responses::items(request)
                .first()
                .unwrap_or(&Value::Null)
        ),
    };
    if prompt.contains(&token) {
        RequestKind::Summary
    } else {
        RequestKind::Chat
    }
}

/// The real APIs' overflow messages, input first, then input + output.
fn overflow(protocol: Protocol, request: &Value, tokens: u64, window: u64) -> Option<String> {
    let output = ["max_completion_tokens", "max_tokens", "max_output_tokens"]
        .iter()
        .find_map(|k| request[*k].as_u64())
        .unwrap_or(0);
    match protocol {
        Protocol::OpenAi if tokens > window => Some(format!(
            "This model's maximum context length is {window} tokens. However, your messages resulted in {tokens} tokens. Please reduce the length of the messages."
        )),
        Protocol::OpenAi if tokens.saturating_add(output) > window => Some(format!(
            "This model's maximum context length is {window} tokens. However, you requested {} tokens ({tokens} in the messages, {output} in the completion). Please reduce the length of the messages or completion.",
            tokens.saturating_add(output)
        )),
        Protocol::Responses if tokens.saturating_add(output) > window => {
            Some(crate::responses::OVERFLOW.to_string())
        }
        Protocol::Anthropic if tokens > window => Some(format!("prompt is too long: {tokens} tokens > {window} maximum")),
        Protocol::Anthropic if tokens.saturating_add(output) > window => Some(format!(
            "input length and `max_tokens` exceed context limit: {tokens} + {output} > {window}, decrease input length or `max_tokens` and try again"
        )),
        _ => None,
    }
}

fn overflow_error(protocol: Protocol, message: &str) -> Response {
    match protocol {
        Protocol::OpenAi => {
            let body = json!({"error": {"message": message, "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}});
            (StatusCode::BAD_REQUEST, axum::Json(body)).into_response()
        }
        Protocol::Anthropic => error(protocol, StatusCode::BAD_REQUEST, message),
        Protocol::Responses => {
            let body = crate::responses::overflow_body();
            (StatusCode::BAD_REQUEST, axum::Json(body)).into_response()
        }
    }
}

/// An error in the protocol's own shape.
pub fn error(protocol: Protocol, status: StatusCode, message: &str) -> Response {
    let body = match protocol {
        Protocol::OpenAi => {
            json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": null}})
        }
        Protocol::Responses => {
            json!({"error": {"message": message, "type": "invalid_request_error", "param": "input", "code": null}})
        }
        Protocol::Anthropic => {
            let kind = if status == StatusCode::UNAUTHORIZED {
                "authentication_error"
            } else {
                "invalid_request_error"
            };
            json!({"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_011CFakeUpstream0000000"})
        }
    };
    (status, axum::Json(body)).into_response()
}

fn malformed(protocol: Protocol) -> Response {
    let message = match protocol.errors() {
        Protocol::OpenAi | Protocol::Responses => "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON. If you have trouble figuring out how to fix this, please contact us through our help center at help.openai.com.)",
        Protocol::Anthropic => "There was an issue with your request body: invalid JSON",
    };
    error(protocol, StatusCode::BAD_REQUEST, message)
}

fn raw(status: u16, headers: &[(String, String)], body: String) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() =
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::try_from(name.as_str()),
            http::HeaderValue::try_from(value.as_str()),
        ) {
            response.headers_mut().insert(name, value);
        }
    }
    response
}
