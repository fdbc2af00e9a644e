//! Steps 2 to 7, the protocol seam: OpenAI Responses.
//!
//! OpenAI Responses (`POST /v1/responses`), the API Codex CLI and the
//! Agents SDK speak.
//!
//! `instructions` and the `system`/`developer` items that open `input` are
//! the system part; the rest of `input` is grouped into units (see
//! [`units`]) that are stored, hashed and cut between like messages.
//! Requests that keep their history at the provider (`previous_response_id`,
//! `conversation`) are not parsed: Condenser cannot rewrite what it does not
//! see, so they go upstream byte for byte.

mod native;
mod outline;
mod text;
mod units;

use super::request::serialize_replacing;
use super::summary_text;
use super::{
    copy_routing, models, Adapter, AnswerFacts, AnswerMessage, ChatRequest, Outline, SummaryCall,
    ToolLinks, Trimmed, Usage,
};
use bytes::Bytes;
use serde_json::{json, Value};

pub use native::COMPACT_PATH;
pub use outline::parse_whole;

pub struct Responses;

/// Roles that make up the system part when they open `input`.
const SYSTEM_ROLES: &[&str] = &["system", "developer"];

/// Fields that hold the conversation at the provider.
const STATEFUL: &[&str] = &["previous_response_id", "conversation"];

/// Stream events that come before any output: held back while Condenser
/// waits to see whether the stream fails with an overflow.
const PREAMBLE_EVENTS: &[&str] = &[
    "response.created",
    "response.in_progress",
    "response.queued",
];

impl Adapter for Responses {
    /// Each unit kept as the span of its items, as chat messages are
    /// kept: a re-sent history costs a scan of its bytes, not a parse.
    fn outline(&self, body: Bytes) -> Option<Outline> {
        outline::outline(body)
    }

    fn history_list(&self) -> &'static str {
        outline::INPUT
    }

    /// A summary asked from `…/responses/compact` is an ordinary
    /// `…/responses` call: the endpoint exists only at OpenAI.
    fn summary_url(&self, client_url: &reqwest::Url, _model: &str) -> reqwest::Url {
        let mut url = client_url.clone();
        if let Some(path) = url.path().strip_suffix("/compact") {
            let path = path.to_string();
            url.set_path(&path);
        }
        url
    }

    fn build(&self, request: &ChatRequest, messages: &[&Value]) -> Vec<u8> {
        let system = request.system()["input"]
            .as_array()
            .map_or(&[][..], Vec::as_slice);
        let units = messages.iter().flat_map(|unit| units::items(unit));
        let input: Vec<&Value> = system.iter().chain(units).collect();
        serialize_replacing(&request.body, "input", &input)
    }

    fn canonical(&self, message: &Value) -> Vec<u8> {
        text::canonical(message)
    }

    fn canonical_scheme(&self) -> &'static str {
        "openai-responses"
    }

    fn tool_links(&self, message: &Value) -> ToolLinks {
        units::tool_links(message)
    }

    /// A unit's role is its last item's: reasoning leads into the
    /// assistant's output.
    fn role<'m>(&self, message: &'m Value) -> &'m str {
        let last = units::items(message).last();
        match last.map(units::item_type) {
            Some("message") => last
                .and_then(|item| item.get("role")?.as_str())
                .unwrap_or(""),
            Some(kind) if kind.ends_with("_call_output") => "tool",
            Some(_) => "assistant",
            None => "",
        }
    }

    fn summary_message(&self, role: &str, summary: &str) -> Value {
        json!({"type": "message", "role": role, "content": [{"type": "input_text", "text": summary_text(summary)}]})
    }

    /// `max_output_tokens` is at least 16, the API's minimum
    /// (`integer_below_min_value` below it).
    fn summary_request(&self, client: &ChatRequest, call: &SummaryCall<'_>) -> Value {
        let mut request = json!({
            "model": call.model,
            "instructions": call.instructions,
            "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": call.transcript}]}],
            "max_output_tokens": call.output_limit().max(16),
            "store": false,
            "stream": false,
        });
        if self.reasons(client, call.model) {
            request["reasoning"] = json!({"effort": models::lowest_effort(call.model)});
        }
        copy_routing(client, &mut request);
        request
    }

    /// A reasoning model by name, or the client's own model when its
    /// request set `reasoning`.
    fn reasons(&self, client: &ChatRequest, model: &str) -> bool {
        let asked = client.body.get("reasoning").is_some_and(Value::is_object);
        (client.model == model && asked) || models::is_reasoning_model(model)
    }

    /// Image, file and audio input parts, and the built-in tools that run
    /// at the provider.
    fn non_text_markers(&self) -> &'static [&'static str] {
        &[
            "\"input_image\"",
            "\"input_file\"",
            "\"input_audio\"",
            "\"web_search",
            "\"file_search\"",
            "\"code_interpreter\"",
            "\"image_generation\"",
            "\"computer_use",
        ]
    }

    fn ran_out(&self, response: &Value) -> bool {
        response.get("status") == Some(&json!("incomplete"))
            && response.pointer("/incomplete_details/reason") == Some(&json!("max_output_tokens"))
    }

    fn response_text(&self, response: &Value) -> Option<String> {
        let text: Vec<&str> = response
            .get("output")?
            .as_array()?
            .iter()
            .filter(|item| units::item_type(item) == "message")
            .flat_map(|item| {
                item.get("content")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
            })
            .filter(|part| part.get("type").and_then(Value::as_str) == Some("output_text"))
            .filter_map(|part| part.get("text")?.as_str())
            .collect();
        Some(text.join("")).filter(|text| !text.trim().is_empty())
    }

    fn transcript_entry(&self, message: &Value) -> String {
        text::transcript(message)
    }

    fn trim_tool_result(&self, message: &Value, keep_bytes: usize) -> Option<Trimmed> {
        let (message, original_bytes, kept_bytes) = text::trim_largest_output(message, keep_bytes)?;
        Some(Trimmed {
            message,
            original_bytes,
            kept_bytes,
        })
    }

    fn max_output_tokens(&self, request: &ChatRequest) -> Option<u64> {
        request.body.get("max_output_tokens")?.as_u64()
    }

    /// A `response.failed` event: what Codex and the SDKs read as a failed
    /// response, with the upstream's own error inside.
    fn stream_error_event(&self, _status: u16, error_body: &Value) -> Vec<u8> {
        let error = error_body.get("error").unwrap_or(error_body);
        let event = json!({
            "type": "response.failed",
            "sequence_number": 0,
            "response": {
                "id": "resp_condenser",
                "object": "response",
                "status": "failed",
                "error": {"code": error.get("code").cloned().unwrap_or(Value::Null), "message": error.get("message").cloned().unwrap_or(Value::Null)},
                "output": [],
            },
        });
        format!("event: response.failed\ndata: {event}\n\n").into_bytes()
    }

    fn usage(&self, usage: &Value) -> Option<Usage> {
        Usage::read(usage, "input_tokens", "output_tokens")
    }

    /// `response.completed` (and `response.incomplete`) carry the whole
    /// response, usage included.
    fn stream_usage(&self, event: &Value) -> Option<Usage> {
        self.usage(event.get("response")?.get("usage")?)
    }

    /// The response object, whole or inside an event
    /// (`response.completed`); an incomplete one stopped for its reason.
    fn answer_facts(&self, answer: &Value, facts: &mut AnswerFacts) {
        let is_response = |v: &&Value| v.get("object").and_then(Value::as_str) == Some("response");
        let Some(response) = [Some(answer), answer.get("response")]
            .into_iter()
            .flatten()
            .find(is_response)
        else {
            return;
        };
        facts.named(response.get("model"), response.get("id"));
        let incomplete = response.pointer("/incomplete_details/reason");
        facts.finished(incomplete.or_else(|| response.get("status")));
        let cached = response.pointer("/usage/input_tokens_details/cached_tokens");
        facts.cached(cached, None);
    }

    fn fact_markers(&self) -> &'static [&'static str] {
        &["\"status\"", "\"model\""]
    }

    /// Each output item: messages, calls, reasoning.
    fn answer_messages<'v>(&self, answer: &'v Value) -> Vec<AnswerMessage<'v>> {
        let items = answer.get("output").and_then(Value::as_array);
        let item = |item: &'v Value| AnswerMessage::new(item, None);
        items.into_iter().flatten().map(item).collect()
    }

    fn native(&self) -> Option<&dyn super::native::NativeForms> {
        Some(self)
    }

    fn is_stream_preamble(&self, data: &str) -> bool {
        let Ok(event) = serde_json::from_str::<Value>(data) else {
            return false;
        };
        let kind = event.get("type").and_then(Value::as_str).unwrap_or("");
        PREAMBLE_EVENTS.contains(&kind)
    }
}

#[cfg(test)]
mod tests;
