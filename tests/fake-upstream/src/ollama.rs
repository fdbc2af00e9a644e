//! Ollama's native API as Ollama serves it (ollama/ollama `docs/api.md`,
//! `api/types.go`, `server/routes.go`), and its silent truncation:
//!
//! - `POST /api/chat` streams by default, one JSON object per line
//!   (`application/x-ndjson`); the last line has `done: true`,
//!   `done_reason` and the counts (`prompt_eval_count`, `eval_count`).
//!   `"stream": false` gives one object.
//! - A prompt larger than the request's `options.num_ctx` (else the
//!   server's default) is cut, not refused: whole messages are dropped from
//!   the front (system messages kept, the last message always kept), then
//!   the last message itself is cut; the answer is 200 and
//!   `prompt_eval_count` is what was kept (server/prompt.go `chatPrompt`;
//!   issues ollama/ollama#4967, #3839, #8099). With `"truncate": false`
//!   (v0.12.6+) it is a 400 carrying llama-server's body as a string
//!   (#16800).
//! - Errors are `{"error": "<string>"}`; an unknown model is a 404.
//! - `POST /api/show` gives `model_info` with `<arch>.context_length`.
//!
//! The fake records each truncation (`RecordedRequest::truncated`), and
//! the size the client sent (`input_tokens`), so a test can show that
//! nothing above the window was sent and nothing was cut.

use crate::state::{Protocol, RecordedRequest, RequestKind, State};
use axum::body::Body;
use axum::extract::{Request, State as AxumState};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::StatusCode;
use serde_json::{json, Value};
use std::sync::Arc;

const CREATED: &str = "2026-11-26T00:00:00Z";

pub async fn chat(AxumState(state): AxumState<Arc<State>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 512 * 1024 * 1024)
        .await
        .unwrap_or_default();
    let mut record = crate::extras::record_of(&parts, body);
    let response = respond(&state, &mut record).await;
    record.status = response.status().as_u16();
    state.record(record);
    response
}

async fn respond(state: &State, record: &mut RecordedRequest) -> Response {
    let config = state.config();
    let Ok(mut request) = serde_json::from_slice::<Value>(&record.body) else {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid character looking for beginning of value",
        );
    };
    record.json = Some(request.clone());
    let Some(model) = request["model"].as_str().map(str::to_string) else {
        return error(StatusCode::BAD_REQUEST, "model is required");
    };
    if model == "missing" {
        return error(StatusCode::NOT_FOUND, &format!("model '{model}' not found"));
    }
    record.kind = kind(config.summary_marker.as_deref(), &request);
    // Ollama caps num_ctx at the model's trained length (`effectiveContext`).
    let requested = request["options"]["num_ctx"]
        .as_u64()
        .unwrap_or(config.ollama_context_window);
    let window = requested.min(trained_length(&config, &model));
    let sent = count(&request["messages"]);
    record.input_tokens = Some(sent);
    if sent > window {
        if request["truncate"] == false {
            return refused(sent, window);
        }
        record.truncated = true;
        cut(&mut request, window);
    }
    if record.kind == RequestKind::Summary {
        state.summary_delay(config.summary_delay).await;
    }
    let kept = count(&request["messages"]);
    let reply = Answer::new(&request, record, &model, kept, &config);
    if record.kind == RequestKind::Summary {
        record.written = Some(reply.text.clone());
    }
    if request["stream"] == false {
        return axum::Json(reply.last_line(true)).into_response();
    }
    stream(reply, config.stream_chunks)
}

fn kind(marker: Option<&str>, request: &Value) -> RequestKind {
    let first = request["messages"]
        .get(0)
        .map(Value::to_string)
        .unwrap_or_default();
    match marker {
        Some(marker) if first.contains(&format!("{marker} REQUEST")) => RequestKind::Summary,
        _ => RequestKind::Chat,
    }
}

/// The prompt's size as the fake counts every API: a quarter of its JSON
/// bytes, plus a little per message.
pub fn count(messages: &Value) -> u64 {
    let n = messages.as_array().map_or(0, Vec::len) as u64;
    (messages.to_string().len() as u64).div_ceil(4) + 3 * n
}

/// Cuts `request`'s messages to `window` as Ollama does: whole messages
/// from the front first (system messages and the last message kept), then
/// the last message's text.
pub fn cut(request: &mut Value, window: u64) {
    let Some(messages) = request["messages"].as_array_mut() else {
        return;
    };
    while count(&Value::Array(messages.clone())) > window {
        let Some(index) = messages
            .iter()
            .take(messages.len().saturating_sub(1))
            .position(|m| m["role"] != "system")
        else {
            break;
        };
        messages.remove(index);
    }
    let over = count(&Value::Array(messages.clone())).saturating_sub(window);
    if let Some(text) = messages
        .last_mut()
        .and_then(|m| m["content"].as_str().map(str::to_string))
    {
        let keep = text.len().saturating_sub(over as usize * 4 + 8);
        let mut end = keep;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        if let Some(last) = messages.last_mut() {
            last["content"] = Value::String(text[..end].to_string());
        }
    }
}

fn refused(sent: u64, window: u64) -> Response {
    let inner = json!({"error": {"code": 400, "message": format!("request ({sent} tokens) exceeds the available context size ({window} tokens), try increasing it"), "type": "exceed_context_size_error", "n_prompt_tokens": sent, "n_ctx": window}});
    (
        StatusCode::BAD_REQUEST,
        axum::Json(json!({"error": inner.to_string()})),
    )
        .into_response()
}

pub fn error(status: StatusCode, message: &str) -> Response {
    (status, axum::Json(json!({"error": message}))).into_response()
}

/// What the fake answers, in Ollama's shapes.
struct Answer {
    model: String,
    text: String,
    tool_calls: Vec<Value>,
    prompt_eval_count: u64,
    eval_count: u64,
    done_reason: &'static str,
}

impl Answer {
    fn new(
        request: &Value,
        record: &RecordedRequest,
        model: &str,
        kept: u64,
        config: &crate::FakeConfig,
    ) -> Self {
        let reply = crate::replies::Reply::new(
            Protocol::OpenAi,
            request,
            &record.body,
            config,
            record.kind,
            kept,
        );
        let limit = request["options"]["num_predict"]
            .as_u64()
            .unwrap_or(u64::MAX);
        let mut text = reply.text.clone();
        let over = (text.len() as u64).div_ceil(4) > limit;
        text.truncate(
            usize::try_from(limit.saturating_mul(4))
                .unwrap_or(usize::MAX)
                .min(text.len()),
        );
        let tool_calls = reply
            .tool_calls
            .iter()
            .enumerate()
            .map(|(index, call)| {
                let arguments: Value = serde_json::from_str(&call.arguments).unwrap_or_default();
                let id = format!("call_{}", &call.id[5..13].to_ascii_lowercase());
                json!({"id": id, "function": {"index": index, "name": call.name, "arguments": arguments}})
            })
            .collect();
        Self {
            model: model.to_string(),
            eval_count: (text.len() as u64).div_ceil(4),
            text,
            tool_calls,
            prompt_eval_count: kept,
            done_reason: if over { "length" } else { "stop" },
        }
    }

    fn line(&self, message: Value, done: bool) -> Value {
        json!({"model": self.model, "created_at": CREATED, "message": message, "done": done})
    }

    /// The final line, or the whole answer (`whole`).
    fn last_line(&self, whole: bool) -> Value {
        let mut message =
            json!({"role": "assistant", "content": if whole { self.text.as_str() } else { "" }});
        if whole && !self.tool_calls.is_empty() {
            message["tool_calls"] = Value::Array(self.tool_calls.clone());
        }
        let mut line = self.line(message, true);
        for (key, value) in [
            ("done_reason", json!(self.done_reason)),
            ("total_duration", json!(182_242_375)),
            ("load_duration", json!(41_295_167)),
            ("prompt_eval_count", json!(self.prompt_eval_count)),
            ("prompt_eval_duration", json!(24_573_166)),
            ("eval_count", json!(self.eval_count)),
            ("eval_duration", json!(115_959_084)),
        ] {
            line[key] = value;
        }
        line
    }
}

fn stream(reply: Answer, pieces: usize) -> Response {
    let mut lines: Vec<Value> = Vec::new();
    let size = reply.text.len().div_ceil(pieces.max(1)).max(1);
    let chars: Vec<char> = reply.text.chars().collect();
    for piece in chars.chunks(size) {
        let text: String = piece.iter().collect();
        lines.push(reply.line(json!({"role": "assistant", "content": text}), false));
    }
    if !reply.tool_calls.is_empty() {
        let message = json!({"role": "assistant", "content": "", "tool_calls": reply.tool_calls});
        lines.push(reply.line(message, false));
    }
    lines.push(reply.last_line(false));
    let body: String = lines.iter().map(|line| format!("{line}\n")).collect();
    let mut response = Response::new(Body::from(Bytes::from(body)));
    let ndjson = http::HeaderValue::from_static("application/x-ndjson");
    response
        .headers_mut()
        .insert(http::header::CONTENT_TYPE, ndjson);
    response
}

/// `/api/show`: the model's trained context length.
pub async fn show(AxumState(state): AxumState<Arc<State>>, body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or_default();
    let model = request["model"].as_str().unwrap_or_default();
    let length = trained_length(&state.config(), model);
    axum::Json(json!({
        "modelfile": "", "parameters": "num_keep                       24", "template": "",
        "details": {"family": "llama", "parameter_size": "135M", "quantization_level": "Q4_1"},
        "model_info": {"general.architecture": "llama", "llama.context_length": length},
        "capabilities": ["completion", "tools"]
    }))
    .into_response()
}

/// The model's trained context length: its configured window, else one
/// larger than any test asks for.
fn trained_length(config: &crate::FakeConfig, model: &str) -> u64 {
    config
        .context_windows
        .get(model)
        .copied()
        .unwrap_or(131_072)
}

/// `/api/tags`: the models the server has.
pub async fn tags() -> Response {
    axum::Json(
        json!({"models": [{"name": "smollm2:135m", "model": "smollm2:135m", "size": 91_000_000}]}),
    )
    .into_response()
}

/// Chat Completions as Ollama's `/v1` serves it: the same cut, a 200, and
/// `prompt_tokens` is what was kept. For `chat.rs` when the fake plays
/// a silently truncating server.
pub fn cut_openai(request: &mut Value, window: u64) -> u64 {
    cut(request, window);
    crate::replies::count_tokens(Protocol::OpenAi, request)
}
