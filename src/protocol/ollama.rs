//! Steps 2 to 7, the protocol seam: Ollama's native `POST /api/chat`.
//!
//! Ollama's own API (ollama/ollama `docs/api.md`, `api/types.go`): leading
//! `system` messages are the system part; `tool_calls` carry arguments as a
//! JSON object and, from v0.12.10, an `id`; a `tool` message names its call
//! by `tool_call_id` when it has one, else by `tool_name` (the official
//! Python client drops ids, so names are the links it keeps); `images` are
//! base64 strings kept byte for byte. Streaming is the default, one JSON
//! object per line (`application/x-ndjson`), the last with `done: true` and
//! the counts (`prompt_eval_count`, `eval_count`).
//!
//! Ollama does not refuse a prompt larger than its window: it cuts it and
//! answers 200. The window of a request is its `options.num_ctx`, else the
//! upstream's configured default, and a request past it is compacted
//! before it is sent (ARCHITECTURE.md "Local servers").

use super::head::role_of;
use super::request::serialize_replacing;
use super::{summary_text, text_of};
use super::{
    Adapter, AnswerFacts, AnswerMessage, ChatRequest, Endpoint, ErrorInfo, Outline, Protocol,
    Provider, Root, SummaryCall, SystemPart, TelemetryNames, ToolLinks, Trimmed, Usage,
    WindowProbe,
};
use crate::protocol::canonical::canonical_json;
use bytes::Bytes;
use http::{HeaderMap, Method};
use serde_json::{json, Value};

pub struct Ollama;

/// Ollama's native API, served at Condenser's root (`/api/…`).
pub const PROTOCOL: Protocol = Protocol::of(&Ollama);

/// A line a newline-delimited stream tolerates while a summary is written:
/// an empty assistant chunk, which every client appends as nothing.
pub const KEEPALIVE_LINE: &[u8] = b"{\"model\":\"\",\"created_at\":\"1970-01-01T00:00:00Z\",\"message\":{\"role\":\"assistant\",\"content\":\"\"},\"done\":false}\n";

impl Adapter for Ollama {
    fn outline(&self, body: Bytes) -> Option<Outline> {
        let outline = Outline::read(body, "messages", |_, items, text| {
            let system = |span: &std::ops::Range<usize>| role_of(&text[span.clone()]) == "system";
            SystemPart::Leading(items.iter().take_while(|span| system(span)).count())
        })?;
        // Ollama streams unless told not to.
        Some(outline.with_stream_default(true))
    }

    fn build(&self, request: &ChatRequest, messages: &[&Value]) -> Vec<u8> {
        let system = request.system().as_array().map_or(&[][..], Vec::as_slice);
        let all: Vec<&Value> = system.iter().chain(messages.iter().copied()).collect();
        serialize_replacing(&request.body, "messages", &all)
    }

    /// Clients re-send tool calls without the `index` and `id` Ollama
    /// added: neither is part of what a message says.
    fn canonical(&self, message: &Value) -> Vec<u8> {
        canonical_json(message, &["index", "id", "tool_call_id"])
    }

    fn canonical_scheme(&self) -> &'static str {
        "ollama-chat"
    }

    fn tool_links(&self, message: &Value) -> ToolLinks {
        let calls = message
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|call| call.pointer("/function/name")?.as_str().map(String::from))
            .collect();
        let results = match (self.role(message), message.get("tool_name")) {
            ("tool", Some(Value::String(name))) => vec![name.clone()],
            _ => Vec::new(),
        };
        ToolLinks { calls, results }
    }

    fn summary_message(&self, role: &str, summary: &str) -> Value {
        json!({"role": role, "content": summary_text(summary)})
    }

    /// The client's window goes with it (`options.num_ctx`), or Ollama
    /// would cut the transcript to its default; `num_predict` caps the
    /// summary.
    fn summary_request(&self, client: &ChatRequest, call: &SummaryCall<'_>) -> Value {
        let mut options = json!({"num_predict": call.output_limit()});
        if let Some(num_ctx) = client.body.get("options").and_then(|o| o.get("num_ctx")) {
            options["num_ctx"] = num_ctx.clone();
        }
        json!({
            "model": call.model,
            "messages": [
                {"role": "system", "content": call.instructions},
                {"role": "user", "content": call.transcript},
            ],
            "stream": false,
            "options": options,
        })
    }

    fn response_text(&self, response: &Value) -> Option<String> {
        let text = response.pointer("/message/content")?.as_str()?;
        (!text.trim().is_empty()).then(|| text.to_string())
    }

    fn ran_out(&self, response: &Value) -> bool {
        response.get("done_reason") == Some(&json!("length"))
    }

    fn transcript_entry(&self, message: &Value) -> String {
        let role = self.role(message);
        let mut entry = format!("[{role}] {}", text_of(message.get("content")));
        for call in message
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = call.pointer("/function/name").and_then(Value::as_str);
            let args = call.pointer("/function/arguments").map(Value::to_string);
            let (name, args) = (name.unwrap_or("?"), args.unwrap_or_default());
            entry.push_str(&format!("\n  → tool call {name}({args})"));
        }
        if let Some(images) = message.get("images").and_then(Value::as_array) {
            entry.push_str(&format!("\n  [{} image(s)]", images.len()));
        }
        entry
    }

    /// A tool message is Chat Completions' own.
    fn trim_tool_result(&self, message: &Value, keep_bytes: usize) -> Option<Trimmed> {
        super::openai::OpenAi.trim_tool_result(message, keep_bytes)
    }

    /// `options.num_predict`; -1 (Ollama's "until done") is no limit.
    fn max_output_tokens(&self, request: &ChatRequest) -> Option<u64> {
        request.body.get("options")?.get("num_predict")?.as_u64()
    }

    /// `options.num_ctx`: the client sets the window of its own request.
    fn request_window(&self, request: &ChatRequest) -> Option<u64> {
        request.body.get("options")?.get("num_ctx")?.as_u64()
    }

    fn non_text_markers(&self) -> &'static [&'static str] {
        &["\"images\""]
    }

    fn stream_error_event(&self, _status: u16, error_body: &Value) -> Vec<u8> {
        let message = error_body
            .pointer("/error/message")
            .or_else(|| error_body.get("error"))
            .and_then(Value::as_str)
            .unwrap_or("condenser: request failed");
        format!("{}\n", json!({"error": message})).into_bytes()
    }

    fn keepalive(&self) -> &'static [u8] {
        KEEPALIVE_LINE
    }

    fn stream_content_type(&self) -> &'static str {
        "application/x-ndjson"
    }

    /// Every NDJSON line is a message the client reads.
    fn stream_trailer(&self, _compactions: u32) -> Option<String> {
        None
    }

    /// A whole response's counts are top-level, not in a `usage` object.
    fn usage(&self, response: &Value) -> Option<Usage> {
        let input = response.get("prompt_eval_count")?.as_u64()?;
        let output = response.get("eval_count").and_then(Value::as_u64);
        Some(Usage {
            input_tokens: input,
            output_tokens: output.unwrap_or(0),
            ..Usage::default()
        })
    }

    fn stream_usage(&self, line: &Value) -> Option<Usage> {
        self.usage(line)
    }

    fn answer_facts(&self, answer: &Value, facts: &mut AnswerFacts) {
        facts.named(answer.get("model"), None);
        facts.finished(answer.get("done_reason"));
    }

    fn fact_markers(&self) -> &'static [&'static str] {
        &["done_reason", "\"model\""]
    }

    fn answer_messages<'v>(&self, answer: &'v Value) -> Vec<AnswerMessage<'v>> {
        let message = answer
            .get("message")
            .map(|m| AnswerMessage::new(m, answer.get("done_reason")));
        message.into_iter().collect()
    }

    /// The last line of a stream counts at the top level.
    fn usage_markers(&self) -> &'static [&'static str] {
        &["eval_count"]
    }
}

impl Provider for Ollama {
    fn name(&self) -> &'static str {
        "ollama"
    }

    fn chat(&self) -> &'static dyn Adapter {
        &Ollama
    }

    fn endpoint(&self, method: &Method, path: &str) -> Endpoint {
        if method == Method::POST && path == "/api/chat" {
            Endpoint::Chat
        } else {
            Endpoint::Passthrough
        }
    }

    fn adapter(&self, _endpoint: Endpoint) -> &'static dyn Adapter {
        &Ollama
    }

    fn upstream_path<'p>(&self, path: &'p str) -> &'p str {
        path
    }

    /// Ollama's `num_ctx` when a request sets none: 4,096 on a machine
    /// without a large GPU since Ollama 0.6.7 (2,048 before; 32,768 or
    /// more with 24 GiB of VRAM from 0.15.5). Operators set what the
    /// server runs with (`OLLAMA_CONTEXT_LENGTH`).
    fn root(&self) -> Option<Root> {
        Some(Root {
            base_url: "http://127.0.0.1:11434",
            default_window: Some(4096),
            legacy_key: Some("ollama.base_url"),
        })
    }

    fn claims(&self, path: &str, _headers: &HeaderMap) -> bool {
        path.starts_with("/api/")
    }

    /// Ollama's errors are one string (docs/api/errors.mdx).
    fn error_body(&self, error: &ErrorInfo<'_>) -> Value {
        json!({"error": error.message})
    }

    fn telemetry(&self) -> TelemetryNames {
        TelemetryNames {
            operation: "chat",
            provider: "ollama",
        }
    }

    fn window_probe(&self) -> Option<WindowProbe> {
        Some(WindowProbe {
            path: "/api/show",
            body: |model| json!({"model": model}),
            read: trained_length,
        })
    }

    fn credential(&self, headers: &HeaderMap, _query: Option<&str>) -> Option<Vec<u8>> {
        super::bearer_or_key(headers).map(<[u8]>::to_vec)
    }

    fn signer(&self) -> Option<&'static dyn super::Signer> {
        None
    }
}

/// `model_info["<general.architecture>.context_length"]` of Ollama's
/// `/api/show` (docs/api.md).
fn trained_length(show: &Value) -> Option<u64> {
    let info = show.get("model_info")?;
    let architecture = info.get("general.architecture")?.as_str()?;
    info.get(format!("{architecture}.context_length"))?.as_u64()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: Value) -> ChatRequest {
        Ollama.parse(body.to_string().as_bytes()).expect("parses")
    }

    #[test]
    fn leading_system_messages_are_the_system_part_and_streaming_is_the_default() {
        let request = parse(json!({"model": "llama3.2", "messages": [
            {"role": "system", "content": "be terse"},
            {"role": "user", "content": "hi", "images": ["iVBORw0KGgo="]},
        ]}));
        assert_eq!(request.system().as_array().map(Vec::len), Some(1));
        assert_eq!(request.messages().len(), 1);
        assert!(request.stream, "Ollama streams unless told not to");
        let quiet = parse(json!({"model": "m", "stream": false, "messages": []}));
        assert!(!quiet.stream);
    }

    #[test]
    fn a_call_and_its_result_are_linked_by_name_as_clients_resend_them() {
        let call = json!({"role": "assistant", "tool_calls": [
            {"id": "call_ab12cd34", "function": {"index": 0, "name": "get_weather", "arguments": {"city": "Paris"}}}]});
        let resent = json!({"role": "assistant", "tool_calls": [
            {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]});
        let result = json!({"role": "tool", "content": "Sunny", "tool_name": "get_weather"});
        assert_eq!(Ollama.tool_links(&call).calls, ["get_weather"]);
        assert_eq!(Ollama.tool_links(&result).results, ["get_weather"]);
        assert_eq!(Ollama.canonical(&call), Ollama.canonical(&resent));
    }

    #[test]
    fn the_summary_call_keeps_the_clients_window() {
        let client = parse(json!({"model": "m", "options": {"num_ctx": 2048}, "messages": []}));
        let call = SummaryCall {
            model: "m",
            instructions: "summarize",
            transcript: "t",
            max_tokens: 200,
            reasoning_tokens: 0,
            output_field: None,
        };
        let request = Ollama.summary_request(&client, &call);
        assert_eq!(
            request["options"],
            json!({"num_predict": 200, "num_ctx": 2048})
        );
        assert_eq!(request["stream"], false);
        assert_eq!(Ollama.request_window(&client), Some(2048));
    }

    #[test]
    fn counts_come_from_the_final_line() {
        let last = json!({"model": "m", "done": true, "prompt_eval_count": 169, "eval_count": 15});
        let usage = Ollama.stream_usage(&last).expect("counted");
        assert_eq!((usage.input_tokens, usage.output_tokens), (169, 15));
        assert_eq!(Ollama.stream_usage(&json!({"done": false})), None);
    }
}
