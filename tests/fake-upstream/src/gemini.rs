//! Google's Gemini API (`POST /{v1,v1beta}/models/{model}:{method}`) as
//! the Developer API serves it. Sources: ai.google.dev API reference and
//! the shipped clients read for Condenser (google-genai 3.6.1,
//! @google/genai 1.30.0 inside Gemini CLI 0.61.0):
//!
//! - The model and the method are in the path; there is no `model` or
//!   `stream` in the body. `:streamGenerateContent?alt=sse` streams one
//!   whole `GenerateContentResponse` per event, framed `data: …\r\n\r\n`
//!   (Routstr/routstr-core#543), `usageMetadata` in every chunk with the
//!   output counted so far, `finishReason` on the last; there is no
//!   `[DONE]`. Without `alt=sse` the chunks come as one JSON array.
//! - The key is `x-goog-api-key` or `?key=`. None: 403
//!   `PERMISSION_DENIED` (gunpal5/Google_GenerativeAI#15); a bad one: 400
//!   `API_KEY_INVALID` (continuedev/continue#8516).
//! - Overflow is a 400 `INVALID_ARGUMENT`, pretty-printed: `The input
//!   token count (N) exceeds the maximum number of tokens allowed (M).`
//!   (google-gemini/gemini-cli#4118). Output does not count toward it.
//! - Thinking spends `maxOutputTokens` before the text: a budget that
//!   thinking exhausts answers `MAX_TOKENS` with no parts. Gemini 2.5 Pro
//!   refuses a budget of 0 (ai.google.dev "Gemini thinking").
//! - The request rules Condenser must keep are in `gemini_rules.rs`.

use crate::gemini_rules as rules;
use crate::replies::Reply;
use crate::state::{Protocol, RecordedRequest, RequestKind, Scripted, State};
use axum::extract::{Path, Request, State as AxumState};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use bytes::Bytes;
use http::StatusCode;
use serde_json::{json, Value};
use std::sync::Arc;

/// What an image costs: 258 tokens when both sides are at most 384
/// pixels (ai.google.dev "Understand and count tokens").
const IMAGE_TOKENS: u64 = 258;

pub async fn call(
    AxumState(state): AxumState<Arc<State>>,
    Path(call): Path<String>,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 512 * 1024 * 1024)
        .await
        .unwrap_or_default();
    let mut record = crate::extras::record_of(&parts, body);
    let response = respond(&state, &call, &parts, &mut record).await;
    record.status = response.status().as_u16();
    state.record(record);
    response
}

async fn respond(
    state: &State,
    call: &str,
    parts: &http::request::Parts,
    record: &mut RecordedRequest,
) -> Response {
    let config = state.config();
    let key = match rules::credential(parts) {
        Ok(key) => key,
        Err(response) => return response,
    };
    let version = parts.uri.path().split('/').nth(1).unwrap_or_default();
    let Some((model, method)) = call.split_once(':') else {
        return not_found(call, version, "generateContent");
    };
    if model == "missing"
        || !matches!(
            method,
            "generateContent" | "streamGenerateContent" | "countTokens"
        )
    {
        return not_found(model, version, method);
    }
    let Ok(request) = serde_json::from_slice::<Value>(&record.body) else {
        return error(
            StatusCode::BAD_REQUEST,
            "INVALID_ARGUMENT",
            "Invalid JSON payload received. Unexpected token.",
        );
    };
    if method == "countTokens" {
        return count_tokens(&request);
    }
    record.kind = classify(config.summary_marker.as_deref(), &request);
    match state.take_script(record.kind) {
        Some(Scripted::Respond { status, body, .. }) => return raw(status, body),
        Some(Scripted::Delay { delay, .. }) => tokio::time::sleep(delay).await,
        Some(Scripted::StreamError { data, .. }) if method == "streamGenerateContent" => {
            return crate::sse::single_event(&data)
        }
        _ => {}
    }
    let summary_marker = config
        .summary_marker
        .as_deref()
        .filter(|_| record.kind == RequestKind::Chat);
    if let Err(message) = rules::check(&request, model, &key, &record.body, summary_marker) {
        return error(StatusCode::BAD_REQUEST, "INVALID_ARGUMENT", &message);
    }
    let tokens = count(&request);
    record.input_tokens = Some(tokens);
    let window = config
        .context_windows
        .get(model)
        .copied()
        .unwrap_or(config.default_context_window);
    if tokens > window {
        return overflow(tokens, window);
    }
    let thoughts = match thoughts(model, &request, &config) {
        Ok(thoughts) => thoughts,
        Err(message) => return error(StatusCode::BAD_REQUEST, "INVALID_ARGUMENT", &message),
    };
    if record.kind == RequestKind::Summary {
        state.summary_delay(config.summary_delay).await;
    }
    tokio::time::sleep(config.first_byte_delay).await;
    let answer = Answer::new(model, &request, record, tokens, thoughts, &config);
    if record.kind == RequestKind::Summary {
        record.written = Some(answer.reply.text.clone());
    }
    let sse = parts
        .uri
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "alt=sse"));
    match (method, sse) {
        ("generateContent", _) => axum::Json(answer.whole()).into_response(),
        (_, true) => crate::sse::respond(answer.events(config.stream_chunks), config.chunk_delay),
        (_, false) => axum::Json(Value::Array(answer.chunks(config.stream_chunks))).into_response(),
    }
}

/// A summary call holds `"{marker} REQUEST"` in its instruction or its
/// first content.
fn classify(marker: Option<&str>, request: &Value) -> RequestKind {
    let Some(marker) = marker else {
        return RequestKind::Chat;
    };
    let system = rules::field(request, "systemInstruction", "system_instruction");
    let first = request["contents"].get(0);
    let prompt = format!(
        "{}{}",
        system.unwrap_or(&Value::Null),
        first.unwrap_or(&Value::Null)
    );
    if prompt.contains(&format!("{marker} REQUEST")) {
        RequestKind::Summary
    } else {
        RequestKind::Chat
    }
}

/// The prompt's size as the fake counts every API: a quarter of its JSON
/// bytes and a little per content, plus the fixed price of each image or
/// file.
pub fn count(request: &Value) -> u64 {
    let system = rules::field(request, "systemInstruction", "system_instruction");
    let bytes = request["contents"].to_string().len()
        + system.map_or(0, |s| s.to_string().len())
        + request.get("tools").map_or(0, |t| t.to_string().len());
    let contents = request["contents"].as_array().map_or(0, Vec::len) as u64;
    (bytes as u64).div_ceil(4) + 3 * contents + IMAGE_TOKENS * rules::media_parts(request)
}

fn count_tokens(request: &Value) -> Response {
    let inner = request.get("generateContentRequest").unwrap_or(request);
    let total = count(inner);
    axum::Json(json!({"totalTokens": total, "promptTokensDetails": [{"modality": "TEXT", "tokenCount": total}]}))
        .into_response()
}

/// What thinking spends of the output budget, or the refusal of a budget
/// the model does not take.
fn thoughts(model: &str, request: &Value, config: &crate::FakeConfig) -> Result<u64, String> {
    let thinks = model.starts_with("gemini-2.5") || model.starts_with("gemini-3");
    if !thinks {
        return Ok(0);
    }
    let generation = rules::field(request, "generationConfig", "generation_config");
    let thinking = generation.and_then(|g| rules::field(g, "thinkingConfig", "thinking_config"));
    let budget =
        thinking.and_then(|t| rules::field(t, "thinkingBudget", "thinking_budget")?.as_i64());
    let level = thinking.and_then(|t| rules::field(t, "thinkingLevel", "thinking_level")?.as_str());
    let dynamic = config.reasoning_tokens.unwrap_or(600);
    match (budget, level) {
        (Some(0), _) if model.starts_with("gemini-2.5-pro") || model.starts_with("gemini-3") => {
            Err("Budget 0 is invalid. This model only works in thinking mode.".into())
        }
        (Some(0), _) => Ok(0),
        (Some(budget), _) if budget > 0 => Ok(dynamic.min(budget as u64)),
        (_, Some("MINIMAL" | "LOW" | "minimal" | "low")) => Ok(dynamic / 4),
        _ => Ok(dynamic),
    }
}

/// The answer in Gemini's shapes.
struct Answer {
    reply: Reply,
    thoughts: u64,
    model: String,
    /// The thinking that precedes a call, signed so it must come back.
    signature: Option<String>,
}

impl Answer {
    fn new(
        model: &str,
        request: &Value,
        record: &RecordedRequest,
        tokens: u64,
        thoughts: u64,
        config: &crate::FakeConfig,
    ) -> Self {
        let generation = rules::field(request, "generationConfig", "generation_config");
        let limit = generation
            .and_then(|g| rules::field(g, "maxOutputTokens", "max_output_tokens")?.as_u64());
        // The reply's own text gets what thinking leaves of the budget.
        let mut shim = json!({"model": model, "messages": request["contents"], "tools": request.get("tools").cloned().unwrap_or(Value::Null)});
        if let Some(limit) = limit {
            shim["max_tokens"] = json!(limit.saturating_sub(thoughts));
        }
        let mut reply = Reply::new(
            Protocol::OpenAi,
            &shim,
            &record.body,
            config,
            record.kind,
            tokens,
        );
        reply.truncated |= limit.is_some_and(|l| l <= thoughts);
        let thoughts = limit.map_or(thoughts, |l| thoughts.min(l));
        reply.output_tokens += thoughts;
        reply.id = reply.id.replace("chatcmpl-", "").chars().take(22).collect();
        let signature = (thoughts > 0).then(|| rules::signature_for(&reply.id));
        Self {
            reply,
            thoughts,
            model: model.to_string(),
            signature,
        }
    }

    fn function_calls(&self) -> Vec<Value> {
        self.reply
            .tool_calls
            .iter()
            .enumerate()
            .map(|(index, call)| {
                let args: Value = serde_json::from_str(&call.arguments).unwrap_or_default();
                let mut part = json!({"functionCall": {"name": call.name, "args": args}});
                // Only the first call of a step carries the signature.
                if let (0, Some(signature)) = (index, &self.signature) {
                    part["thoughtSignature"] = json!(signature);
                }
                part
            })
            .collect()
    }

    fn finish_reason(&self) -> &'static str {
        if self.reply.truncated {
            "MAX_TOKENS"
        } else {
            "STOP"
        }
    }

    /// Usage after `text_tokens` of the text.
    fn usage(&self, text_tokens: u64) -> Value {
        let prompt = self.reply.input_tokens;
        let mut usage = json!({"promptTokenCount": prompt, "candidatesTokenCount": text_tokens,
            "totalTokenCount": prompt + text_tokens + self.thoughts,
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}]});
        if self.thoughts > 0 {
            usage["thoughtsTokenCount"] = json!(self.thoughts);
        }
        usage
    }

    fn response(&self, parts: Vec<Value>, finish: Option<&str>, text_tokens: u64) -> Value {
        let mut candidate = json!({"content": {"role": "model"}, "index": 0});
        if !parts.is_empty() {
            candidate["content"]["parts"] = Value::Array(parts);
        }
        if let Some(finish) = finish {
            candidate["finishReason"] = json!(finish);
        }
        json!({"candidates": [candidate], "usageMetadata": self.usage(text_tokens),
            "modelVersion": self.model, "responseId": self.reply.id})
    }

    fn text_tokens(&self) -> u64 {
        self.reply.output_tokens - self.thoughts
    }

    fn whole(&self) -> Value {
        let mut parts = Vec::new();
        if !self.reply.text.is_empty() {
            parts.push(json!({"text": self.reply.text}));
        }
        parts.extend(self.function_calls());
        if self.reply.tool_calls.is_empty() {
            if let (Some(last), Some(signature)) = (parts.last_mut(), &self.signature) {
                last["thoughtSignature"] = json!(signature);
            }
        }
        self.response(parts, Some(self.finish_reason()), self.text_tokens())
    }

    /// The stream's chunks: text pieces, then the calls, then the finish
    /// (with the signature on an empty text part when there is no call).
    fn chunks(&self, pieces: usize) -> Vec<Value> {
        let mut chunks = Vec::new();
        let mut sent = 0;
        for piece in crate::sse::split(&self.reply.text, pieces) {
            sent += (piece.len() as u64).div_ceil(4);
            chunks.push(self.response(
                vec![json!({"text": piece})],
                None,
                sent.min(self.text_tokens()),
            ));
        }
        let mut last = self.function_calls();
        if last.is_empty() {
            if let Some(signature) = &self.signature {
                last.push(json!({"text": "", "thoughtSignature": signature}));
            }
        }
        chunks.push(self.response(last, Some(self.finish_reason()), self.text_tokens()));
        chunks
    }

    fn events(&self, pieces: usize) -> Vec<Bytes> {
        self.chunks(pieces)
            .iter()
            .map(|chunk| Bytes::from(format!("data: {chunk}\r\n\r\n")))
            .collect()
    }
}

/// An error as Google sends it: pretty-printed JSON.
pub fn error(status: StatusCode, kind: &str, message: &str) -> Response {
    let body = json!({"error": {"code": status.as_u16(), "message": message, "status": kind}});
    pretty(status, &body)
}

fn pretty(status: StatusCode, body: &Value) -> Response {
    let text = serde_json::to_string_pretty(body).unwrap_or_default();
    let mut response = (status, text).into_response();
    let json = http::HeaderValue::from_static("application/json; charset=UTF-8");
    response
        .headers_mut()
        .insert(http::header::CONTENT_TYPE, json);
    response
}

fn overflow(tokens: u64, window: u64) -> Response {
    let message = format!(
        "The input token count ({tokens}) exceeds the maximum number of tokens allowed ({window})."
    );
    error(StatusCode::BAD_REQUEST, "INVALID_ARGUMENT", &message)
}

fn not_found(model: &str, version: &str, method: &str) -> Response {
    let message = format!("models/{model} is not found for API version {version}, or is not supported for {method}. Call ListModels to see the list of available models and their supported methods.");
    error(StatusCode::NOT_FOUND, "NOT_FOUND", &message)
}

fn raw(status: u16, body: String) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, body).into_response();
    let json = http::HeaderValue::from_static("application/json; charset=UTF-8");
    response
        .headers_mut()
        .insert(http::header::CONTENT_TYPE, json);
    response
}

/// A signature is base64 of bytes only the fake can make.
pub fn encode(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
