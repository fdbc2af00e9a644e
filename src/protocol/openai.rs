//! Steps 2 to 7, the protocol seam: OpenAI Chat Completions.
//!
//! OpenAI Chat Completions.

use super::head::role_of;
use super::request::serialize_replacing;
use super::{
    copy_routing, elide_middle, models, summary_text, text_of, with_text_content, Adapter,
    AnswerFacts, AnswerMessage, ChatRequest, Endpoint, ErrorClass, ErrorInfo, Outline, OutputField,
    Protocol, Provider, Root, SummaryCall, SystemPart, TelemetryNames, ToolLinks, Trimmed, Usage,
    WindowProbe,
};
use crate::protocol::canonical::canonical_json;
use bytes::Bytes;
use http::{HeaderMap, Method};
use serde_json::{json, Value};
use std::ops::Range;

pub struct OpenAi;

/// OpenAI's API family: Chat Completions, Responses, and everything else
/// under an OpenAI-style `/v1`, which most compatible servers copy.
pub const PROTOCOL: Protocol = Protocol::of(&OpenAi);

/// The output-limit field the client used for this model, else the one its
/// family requires.
fn output_field(client: &ChatRequest, call: &SummaryCall<'_>) -> OutputField {
    let sent = [OutputField::MaxCompletionTokens, OutputField::MaxTokens]
        .into_iter()
        .find(|field| client.body.contains_key(field.as_str()));
    match sent {
        Some(field) if call.same_model(client) => field,
        _ if models::is_reasoning_model(call.model) => OutputField::MaxCompletionTokens,
        _ => OutputField::MaxTokens,
    }
}

/// `developer` when the client's own instructions came in that role (newer
/// OpenAI models), else `system`, which every compatible server takes.
fn system_role(client: &ChatRequest) -> &'static str {
    let roles = client.system().as_array().into_iter().flatten();
    let developer = roles
        .filter_map(|m| m.get("role")?.as_str())
        .any(|r| r == "developer");
    if developer {
        "developer"
    } else {
        "system"
    }
}

/// Roles that make up the system part when they lead the conversation.
const SYSTEM_ROLES: &[&str] = &["system", "developer"];

impl Adapter for OpenAi {
    fn outline(&self, body: Bytes) -> Option<Outline> {
        Outline::read(body, "messages", |_, items, text| {
            let is_system =
                |span: &Range<usize>| SYSTEM_ROLES.contains(&role_of(&text[span.clone()]).as_str());
            SystemPart::Leading(items.iter().take_while(|span| is_system(span)).count())
        })
    }

    fn build(&self, request: &ChatRequest, messages: &[&Value]) -> Vec<u8> {
        let system = request.system().as_array().map_or(&[][..], Vec::as_slice);
        let all: Vec<&Value> = system.iter().chain(messages.iter().copied()).collect();
        serialize_replacing(&request.body, "messages", &all)
    }

    fn canonical(&self, message: &Value) -> Vec<u8> {
        canonical_json(
            &with_text_content(message, single_text_part),
            &["cache_control"],
        )
    }

    fn canonical_scheme(&self) -> &'static str {
        "openai-chat"
    }

    fn tool_links(&self, message: &Value) -> ToolLinks {
        let calls = message
            .get("tool_calls")
            .and_then(Value::as_array)
            .map(|calls| {
                calls
                    .iter()
                    .filter_map(|c| c.get("id")?.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        let results = match (
            self.role(message),
            message.get("tool_call_id").and_then(Value::as_str),
        ) {
            ("tool", Some(id)) => vec![id.to_string()],
            _ => Vec::new(),
        };
        ToolLinks { calls, results }
    }

    fn summary_message(&self, role: &str, summary: &str) -> Value {
        json!({"role": role, "content": summary_text(summary)})
    }

    fn summary_request(&self, client: &ChatRequest, call: &SummaryCall<'_>) -> Value {
        let field = call
            .output_field
            .unwrap_or_else(|| output_field(client, call));
        let messages = if models::refuses_system_messages(call.model) {
            let both = format!("{}\n\n{}", call.instructions, call.transcript);
            json!([{"role": "user", "content": both}])
        } else {
            json!([
                {"role": system_role(client), "content": call.instructions},
                {"role": "user", "content": call.transcript},
            ])
        };
        let mut request = json!({"model": call.model, "messages": messages, "stream": false});
        request[field.as_str()] = call.output_limit().into();
        if self.reasons(client, call.model) {
            request["reasoning_effort"] = models::lowest_effort(call.model).into();
        }
        copy_routing(client, &mut request);
        request
    }

    /// A reasoning model by name, or the client's own model when its
    /// request set `reasoning_effort` (only reasoning models accept it).
    fn reasons(&self, client: &ChatRequest, model: &str) -> bool {
        let client_reasons = client.model == model && client.body.contains_key("reasoning_effort");
        client_reasons || models::is_reasoning_model(model)
    }

    fn response_text(&self, response: &Value) -> Option<String> {
        let content = response.pointer("/choices/0/message/content")?;
        content
            .as_str()
            .map(str::to_string)
            .filter(|text| !text.trim().is_empty())
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
            let name = call
                .pointer("/function/name")
                .and_then(Value::as_str)
                .unwrap_or("?");
            let args = call
                .pointer("/function/arguments")
                .and_then(Value::as_str)
                .unwrap_or("");
            entry.push_str(&format!("\n  → tool call {name}({args})"));
        }
        entry
    }

    fn trim_tool_result(&self, message: &Value, keep_bytes: usize) -> Option<Trimmed> {
        if self.role(message) != "tool" {
            return None;
        }
        let text = text_of(message.get("content"));
        let cut = elide_middle(&text, keep_bytes)?;
        let mut trimmed = message.clone();
        trimmed["content"] = Value::String(cut.clone());
        Some(Trimmed {
            message: trimmed,
            original_bytes: text.len(),
            kept_bytes: cut.len(),
        })
    }

    /// Image, audio and file content parts (OpenAI's chat content types).
    fn non_text_markers(&self) -> &'static [&'static str] {
        &[
            "\"image_url\"",
            "\"input_audio\"",
            "\"file_data\"",
            "\"file_id\"",
        ]
    }

    fn ran_out(&self, response: &Value) -> bool {
        response.pointer("/choices/0/finish_reason") == Some(&json!("length"))
    }

    /// `{"error": {"code": "unsupported_parameter", "param": "max_tokens"}}`
    /// (griptape-ai/ComfyUI-Griptape#312).
    fn refused_field(&self, error: &Value) -> Option<OutputField> {
        let error = error.get("error")?;
        if error.get("code")?.as_str()? != "unsupported_parameter" {
            return None;
        }
        OutputField::parse(error.get("param")?.as_str()?)
    }

    fn max_output_tokens(&self, request: &ChatRequest) -> Option<u64> {
        ["max_completion_tokens", "max_tokens"]
            .iter()
            .find_map(|key| request.body.get(*key)?.as_u64())
    }

    fn stream_error_event(&self, _status: u16, error_body: &Value) -> Vec<u8> {
        format!("data: {error_body}\n\n").into_bytes()
    }

    fn usage(&self, usage: &Value) -> Option<Usage> {
        Usage::read(usage, "prompt_tokens", "completion_tokens")
    }

    /// The final chunk of a stream asked for with `include_usage` has the
    /// same `usage` object as a whole response.
    fn stream_usage(&self, event: &Value) -> Option<Usage> {
        self.usage(event.get("usage")?)
    }

    fn answer_facts(&self, answer: &Value, facts: &mut AnswerFacts) {
        facts.named(answer.get("model"), answer.get("id"));
        let choices = answer.get("choices").and_then(Value::as_array);
        for choice in choices.into_iter().flatten() {
            facts.finished(choice.get("finish_reason"));
        }
        let cached = answer.pointer("/usage/prompt_tokens_details/cached_tokens");
        facts.cached(cached, None);
    }

    fn fact_markers(&self) -> &'static [&'static str] {
        &["finish_reason", "\"model\""]
    }

    fn answer_messages<'v>(&self, answer: &'v Value) -> Vec<AnswerMessage<'v>> {
        let choices = answer.get("choices").and_then(Value::as_array);
        let message = |choice: &'v Value| {
            let message = choice.get("message").unwrap_or(&Value::Null);
            AnswerMessage::new(message, choice.get("finish_reason"))
        };
        choices.into_iter().flatten().map(message).collect()
    }
}

/// A content of one text part equals the same text as a plain string.
fn single_text_part(content: &Value) -> Option<String> {
    let [part] = content.as_array()?.as_slice() else {
        return None;
    };
    (part.get("type")?.as_str()? == "text")
        .then(|| part.get("text")?.as_str().map(str::to_string))?
}

impl Provider for OpenAi {
    fn name(&self) -> &'static str {
        "openai"
    }

    fn chat(&self) -> &'static dyn Adapter {
        &OpenAi
    }

    fn endpoint(&self, method: &Method, path: &str) -> Endpoint {
        // `…/responses/{id}` and friends pass through; `…/responses/compact`
        // is Responses' own compaction (`responses/native.rs`), forwarded
        // untouched unless Condenser serves it.
        match (method == Method::POST, path) {
            (true, p) if p.ends_with("/responses") => Endpoint::Responses,
            (true, p) if p.ends_with(super::responses::COMPACT_PATH) => Endpoint::Responses,
            (true, p) if p.ends_with("/chat/completions") => Endpoint::Chat,
            _ => Endpoint::Passthrough,
        }
    }

    fn adapter(&self, endpoint: Endpoint) -> &'static dyn Adapter {
        match endpoint {
            Endpoint::Responses => &super::responses::Responses,
            Endpoint::Chat | Endpoint::Passthrough => &OpenAi,
        }
    }

    /// OpenAI-style base URLs already end in their version (`…/v1`,
    /// `…/openai/v1`) and SDKs append `/chat/completions`; clients reach
    /// Condenser at `/v1/…`, so that `/v1` is dropped.
    fn upstream_path<'p>(&self, path: &'p str) -> &'p str {
        match path.strip_prefix("/v1") {
            Some(rest) if rest.is_empty() || rest.starts_with('/') => rest,
            _ => path,
        }
    }

    fn root(&self) -> Option<Root> {
        Some(Root {
            base_url: "https://api.openai.com/v1",
            default_window: None,
            legacy_key: Some("openai_base_url"),
        })
    }

    /// The catch-all: whatever no other provider claims.
    fn claims(&self, _path: &str, _headers: &HeaderMap) -> bool {
        true
    }

    fn error_body(&self, error: &ErrorInfo<'_>) -> Value {
        let kind = match error.class {
            ErrorClass::InvalidRequest | ErrorClass::TooLarge | ErrorClass::ClientTimeout => {
                "invalid_request_error"
            }
            ErrorClass::UpstreamTimeout | ErrorClass::Overloaded | ErrorClass::Server => {
                "api_error"
            }
        };
        json!({"error": {
            "message": error.message,
            "type": kind,
            "param": null,
            "code": error.kind,
        }})
    }

    fn telemetry(&self) -> TelemetryNames {
        TelemetryNames {
            operation: "chat",
            provider: "openai",
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

    #[test]
    fn leading_system_and_developer_messages_are_the_system_part() {
        let body = br#"{"model":"m","messages":[{"role":"system","content":"s"},{"role":"developer","content":"d"},{"role":"user","content":"u"},{"role":"system","content":"late"}]}"#;
        let request = OpenAi.parse(body).expect("parses");
        assert_eq!(request.system().as_array().map(Vec::len), Some(2));
        assert_eq!(request.messages().len(), 2);
        assert_eq!(
            OpenAi.build(&request, &request.messages().iter().collect::<Vec<_>>()),
            serde_json::to_vec(&serde_json::from_slice::<Value>(body).expect("json"))
                .expect("json")
        );
    }

    #[test]
    fn a_single_text_part_hashes_like_a_string() {
        let string = json!({"role": "user", "content": "hi"});
        let parts = json!({"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]});
        assert_eq!(OpenAi.canonical(&string), OpenAi.canonical(&parts));
    }

    #[test]
    fn tool_links_name_calls_and_results() {
        let call = json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]});
        let result = json!({"role": "tool", "tool_call_id": "call_1", "content": "42"});
        assert_eq!(OpenAi.tool_links(&call).calls, ["call_1"]);
        assert_eq!(OpenAi.tool_links(&result).results, ["call_1"]);
    }

    #[test]
    fn unparseable_bodies_are_not_requests() {
        assert!(OpenAi.parse(b"{not json").is_none());
        assert!(OpenAi.parse(br#"{"model":"m"}"#).is_none());
    }
}
