//! Steps 2 to 7, the protocol seam: Anthropic Messages.
//!
//! Anthropic Messages.

use super::request::serialize_replacing;
use super::summary_text;
use super::{
    elide_middle, with_text_content, Adapter, AnswerFacts, AnswerMessage, ChatRequest, Endpoint,
    ErrorClass, ErrorInfo, Outline, Protocol, Provider, Root, ServedForms, SummaryCall, SystemPart,
    TelemetryNames, ToolLinks, Trimmed, Usage, WindowProbe,
};
use crate::protocol::canonical::canonical_json;
use bytes::Bytes;
use http::{HeaderMap, Method};
use serde_json::{json, Value};

pub struct Anthropic;

/// Anthropic's API family: Messages and its siblings under `/v1`.
pub const PROTOCOL: Protocol = Protocol::of(&Anthropic);

impl Adapter for Anthropic {
    fn outline(&self, body: Bytes) -> Option<Outline> {
        Outline::read(body, "messages", |body, _, _| {
            SystemPart::Value(body.get("system").cloned().unwrap_or(Value::Null))
        })
    }

    fn build(&self, request: &ChatRequest, messages: &[&Value]) -> Vec<u8> {
        serialize_replacing(&request.body, "messages", messages)
    }

    /// Claude Code sends the newest user message as one text block with
    /// `cache_control`, and the same message as a plain string a request
    /// later: both must hash alike. Thinking signatures stay in identity.
    fn canonical(&self, message: &Value) -> Vec<u8> {
        // A system prompt given as one text block hashes like the string.
        if let Some(system) = single_text_block(message) {
            return canonical_json(&Value::String(system), &["cache_control"]);
        }
        canonical_json(
            &with_text_content(message, single_text_block),
            &["cache_control"],
        )
    }

    fn canonical_scheme(&self) -> &'static str {
        "anthropic-messages"
    }

    fn tool_links(&self, message: &Value) -> ToolLinks {
        let ids = |kind: &str, field: &str| -> Vec<String> {
            blocks(message)
                .filter(|block| block_type(block) == kind)
                .filter_map(|block| block.get(field)?.as_str().map(String::from))
                .collect()
        };
        ToolLinks {
            calls: ids("tool_use", "id"),
            results: ids("tool_result", "tool_use_id"),
        }
    }

    fn summary_message(&self, role: &str, summary: &str) -> Value {
        json!({"role": role, "content": [{"type": "text", "text": summary_text(summary)}]})
    }

    /// Thinking stays off: a summary needs none, and a thinking budget
    /// would have to fit below `max_tokens` (Anthropic's extended-thinking
    /// rules). The client's `anthropic-version` and `anthropic-beta` travel
    /// as headers.
    fn summary_request(&self, _client: &ChatRequest, call: &SummaryCall<'_>) -> Value {
        json!({
            "model": call.model,
            "max_tokens": call.output_limit(),
            "system": call.instructions,
            "messages": [{"role": "user", "content": call.transcript}],
        })
    }

    /// Image and document blocks, and Anthropic's server tools (their
    /// type names end in a date, `web_search_20250305`).
    fn non_text_markers(&self) -> &'static [&'static str] {
        &[
            "\"image\"",
            "\"document\"",
            "\"web_search_20",
            "\"web_fetch_20",
            "\"code_execution_20",
            "\"computer_20",
            "\"mcp_servers\"",
        ]
    }

    fn ran_out(&self, response: &Value) -> bool {
        response.get("stop_reason") == Some(&json!("max_tokens"))
    }

    fn response_text(&self, response: &Value) -> Option<String> {
        let text: Vec<&str> = response
            .get("content")?
            .as_array()?
            .iter()
            .filter(|block| block_type(block) == "text")
            .filter_map(|block| block.get("text")?.as_str())
            .collect();
        Some(text.join("")).filter(|text| !text.trim().is_empty())
    }

    /// Thinking blocks are left out: they are the model's private reasoning,
    /// and their content is not meant to be read back.
    fn transcript_entry(&self, message: &Value) -> String {
        let role = self.role(message);
        let parts: Vec<String> = match message.get("content") {
            Some(Value::String(text)) => vec![text.clone()],
            _ => blocks(message).filter_map(block_transcript).collect(),
        };
        format!("[{role}] {}", parts.join("\n"))
    }

    fn trim_tool_result(&self, message: &Value, keep_bytes: usize) -> Option<Trimmed> {
        let content = message.get("content")?.as_array()?;
        let (index, text) = content
            .iter()
            .enumerate()
            .filter(|(_, block)| block_type(block) == "tool_result")
            .map(|(index, block)| (index, result_text(block)))
            .max_by_key(|(_, text)| text.len())?;
        let cut = elide_middle(&text, keep_bytes)?;
        let mut trimmed = message.clone();
        trimmed["content"][index]["content"] = Value::String(cut.clone());
        Some(Trimmed {
            message: trimmed,
            original_bytes: text.len(),
            kept_bytes: cut.len(),
        })
    }

    fn max_output_tokens(&self, request: &ChatRequest) -> Option<u64> {
        request.body.get("max_tokens")?.as_u64()
    }

    fn stream_error_event(&self, _status: u16, error_body: &Value) -> Vec<u8> {
        format!("event: error\ndata: {error_body}\n\n").into_bytes()
    }

    fn usage(&self, usage: &Value) -> Option<Usage> {
        usage_of(usage)
    }

    /// `message_start` carries the input counts, `message_delta` the output.
    fn stream_usage(&self, event: &Value) -> Option<Usage> {
        let usage = event
            .pointer("/message/usage")
            .or_else(|| event.get("usage"))?;
        usage_of(usage)
    }

    /// A message, or the `message_start` holding one; `message_delta`
    /// says why it stopped.
    fn answer_facts(&self, answer: &Value, facts: &mut AnswerFacts) {
        for message in [Some(answer), answer.get("message")].into_iter().flatten() {
            facts.named(message.get("model"), message.get("id"));
            facts.finished(message.get("stop_reason"));
            let usage = message.get("usage");
            let count = |key: &str| usage.and_then(|usage| usage.get(key));
            facts.cached(
                count("cache_read_input_tokens"),
                count("cache_creation_input_tokens"),
            );
        }
        facts.finished(answer.pointer("/delta/stop_reason"));
    }

    fn fact_markers(&self) -> &'static [&'static str] {
        &["stop_reason", "\"model\"", "cache_read_input_tokens"]
    }

    /// The answer is the message.
    fn answer_messages<'v>(&self, answer: &'v Value) -> Vec<AnswerMessage<'v>> {
        vec![AnswerMessage::new(answer, answer.get("stop_reason"))]
    }

    /// Context editing and compaction (`anthropic_native.rs`).
    fn served_forms(&self) -> Option<&'static dyn ServedForms> {
        Some(&super::anthropic_native::AnthropicForms)
    }
}

fn blocks(message: &Value) -> impl Iterator<Item = &Value> {
    message
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

fn block_type(block: &Value) -> &str {
    block.get("type").and_then(Value::as_str).unwrap_or("")
}

fn single_text_block(content: &Value) -> Option<String> {
    let [block] = content.as_array()?.as_slice() else {
        return None;
    };
    (block_type(block) == "text").then(|| block.get("text")?.as_str().map(str::to_string))?
}

/// A tool result's text: a string, or its text blocks joined.
fn result_text(block: &Value) -> String {
    match block.get("content") {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text")?.as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn block_transcript(block: &Value) -> Option<String> {
    match block_type(block) {
        "text" => block.get("text")?.as_str().map(str::to_string),
        "tool_use" => {
            let name = block.get("name").and_then(Value::as_str).unwrap_or("?");
            Some(format!(
                "→ tool call {name}({})",
                block.get("input").unwrap_or(&Value::Null)
            ))
        }
        "tool_result" => {
            let id = block
                .get("tool_use_id")
                .and_then(Value::as_str)
                .unwrap_or("?");
            let error = if block.get("is_error") == Some(&Value::Bool(true)) {
                " (error)"
            } else {
                ""
            };
            Some(format!(
                "← tool result ({id}){error}: {}",
                result_text(block)
            ))
        }
        "thinking" | "redacted_thinking" => None,
        other => {
            let size = block
                .get("source")
                .map_or(0, |source| source.to_string().len());
            Some(format!("[{other}, {size} bytes]"))
        }
    }
}

/// Anthropic reports cached prompt tokens apart from `input_tokens`; the
/// window holds all of them. Thinking is billed within `output_tokens` and
/// not reported apart (summary calls ask for none).
fn usage_of(usage: &Value) -> Option<Usage> {
    let count = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
    let input = count("input_tokens")
        + count("cache_creation_input_tokens")
        + count("cache_read_input_tokens");
    let output = count("output_tokens");
    // Cache reads and writes are counted into the input already.
    (input > 0 || output > 0).then_some(Usage {
        input_tokens: input,
        output_tokens: output,
        ..Usage::default()
    })
}

impl Provider for Anthropic {
    fn name(&self) -> &'static str {
        "anthropic"
    }

    fn chat(&self) -> &'static dyn Adapter {
        &Anthropic
    }

    fn endpoint(&self, method: &Method, path: &str) -> Endpoint {
        if method == Method::POST && path == "/v1/messages" {
            Endpoint::Chat
        } else {
            Endpoint::Passthrough
        }
    }

    fn adapter(&self, _endpoint: Endpoint) -> &'static dyn Adapter {
        &Anthropic
    }

    /// Anthropic base URLs carry no version: the path is kept.
    fn upstream_path<'p>(&self, path: &'p str) -> &'p str {
        path
    }

    fn root(&self) -> Option<Root> {
        Some(Root {
            base_url: "https://api.anthropic.com",
            default_window: None,
            legacy_key: Some("anthropic_base_url"),
        })
    }

    /// Its own paths, and the paths both APIs serve (`/v1/models`) when
    /// the client is Anthropic's: its SDKs always send `anthropic-version`,
    /// OpenAI's never do.
    fn claims(&self, path: &str, headers: &HeaderMap) -> bool {
        path.starts_with("/v1/messages") || headers.contains_key("anthropic-version")
    }

    fn error_body(&self, error: &ErrorInfo<'_>) -> Value {
        let kind = match error.class {
            ErrorClass::TooLarge => "request_too_large",
            ErrorClass::InvalidRequest => "invalid_request_error",
            ErrorClass::ClientTimeout | ErrorClass::UpstreamTimeout => "timeout_error",
            ErrorClass::Server => "api_error",
            // What Anthropic answers when it is overloaded; its SDK retries it.
            ErrorClass::Overloaded => "overloaded_error",
        };
        json!({"type": "error", "error": {"type": kind, "message": error.message}})
    }

    fn telemetry(&self) -> TelemetryNames {
        TelemetryNames {
            operation: "chat",
            provider: "anthropic",
        }
    }

    fn window_probe(&self) -> Option<WindowProbe> {
        None
    }

    fn credential(&self, headers: &HeaderMap, _query: Option<&str>) -> Option<Vec<u8>> {
        super::bearer_or_key(headers).map(<[u8]>::to_vec)
    }

    fn signer(&self) -> Option<&'static dyn super::Signer> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: Value) -> ChatRequest {
        Anthropic
            .parse(body.to_string().as_bytes())
            .expect("parses")
    }

    #[test]
    fn system_is_the_root_and_unknown_fields_survive_a_rebuild() {
        let body = json!({"model": "m", "max_tokens": 10, "system": [{"type": "text", "text": "s"}], "messages": [{"role": "user", "content": "u"}], "thinking": {"type": "adaptive"}});
        let request = parse(body.clone());
        assert_eq!(request.system(), &body["system"]);
        assert_eq!(
            Anthropic.build(&request, &request.messages().iter().collect::<Vec<_>>()),
            serde_json::to_vec(&body).expect("json")
        );
        assert_eq!(
            parse(json!({"model": "m", "messages": []})).system(),
            &Value::Null
        );
    }

    #[test]
    fn a_string_equals_one_text_block_with_cache_control() {
        let string = json!({"role": "user", "content": "hi"});
        let block = json!({"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]});
        assert_eq!(Anthropic.canonical(&string), Anthropic.canonical(&block));
        let system_blocks =
            json!([{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}]);
        assert_eq!(
            Anthropic.canonical(&system_blocks),
            Anthropic.canonical(&json!("sys"))
        );
    }

    #[test]
    fn a_thinking_signature_is_part_of_identity() {
        let a = json!({"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "s1"}]});
        let b = json!({"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "s2"}]});
        assert_ne!(Anthropic.canonical(&a), Anthropic.canonical(&b));
    }

    #[test]
    fn tool_links_and_trims_keep_the_pairing() {
        let call = json!({"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}]});
        let result = json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "x".repeat(5000)}]});
        assert_eq!(Anthropic.tool_links(&call).calls, ["toolu_1"]);
        assert_eq!(Anthropic.tool_links(&result).results, ["toolu_1"]);
        let trimmed = Anthropic.trim_tool_result(&result, 1000).expect("trimmed");
        assert_eq!(trimmed.message["content"][0]["tool_use_id"], "toolu_1");
        assert!(trimmed.message["content"][0]["content"]
            .as_str()
            .expect("text")
            .contains("condenser trimmed"));
        assert_eq!(trimmed.original_bytes, 5000);
        assert!(Anthropic.trim_tool_result(&call, 10).is_none());
    }

    #[test]
    fn the_summary_is_one_text_block_and_replies_skip_thinking() {
        let summary = Anthropic.summary_message("user", "facts");
        assert_eq!(summary["content"].as_array().map(Vec::len), Some(1));
        assert!(summary["content"][0]["text"]
            .as_str()
            .expect("text")
            .starts_with(super::super::SUMMARY_MARKER));
        let reply = json!({"content": [{"type": "thinking", "thinking": "hmm", "signature": "s"}, {"type": "text", "text": "done"}]});
        assert_eq!(Anthropic.response_text(&reply).as_deref(), Some("done"));
    }
}
