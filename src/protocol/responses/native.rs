//! Steps 2 to 7, the protocol seam: OpenAI's own compaction forms.
//!
//! Codex's remote compaction v2 ends `input` with
//! `{"type":"compaction_trigger"}` and expects exactly one
//! `{"type":"compaction","encrypted_content":…}` output item back
//! (openai/codex `core/src/compact_remote_v2.rs`); later requests carry
//! that item in `input` where the compacted history was (openai-python
//! `response_compaction_item_param.py`). Served by Condenser, the item's
//! content is a [`crate::protocol::native::Sealed`] summary, expanded into
//! Condenser's own summary message before the request goes upstream.

use super::Responses;
use crate::protocol::native::{Asked, Forged, NativeForms, Shape};
use crate::protocol::SUMMARY_MARKER;
use serde_json::{json, Map, Value};

/// Item types that ask the provider to compact, and that hold a compaction.
const TRIGGER: &str = "compaction_trigger";
const COMPACTION_ITEMS: &[&str] = &["compaction", "compaction_summary"];
/// The field that asks for server-side compaction past a threshold
/// (developers.openai.com, compaction guide).
const CONTEXT_MANAGEMENT: &str = "context_management";
/// OpenAI's compaction endpoint (openai-python `responses.compact`).
pub const COMPACT_PATH: &str = "/responses/compact";

/// Hosts of the provider that defines these forms: OpenAI, and Azure
/// OpenAI (`*.openai.azure.com`, `*.cognitiveservices.azure.com`).
const DEFINING_HOSTS: &[&str] = &[
    "api.openai.com",
    ".openai.azure.com",
    ".cognitiveservices.azure.com",
];

impl NativeForms for Responses {
    fn defined_by(&self, host: &str) -> bool {
        let host = host.to_ascii_lowercase();
        DEFINING_HOSTS
            .iter()
            .any(|defining| host == defining.trim_start_matches('.') || host.ends_with(defining))
    }

    /// `POST …/responses/compact` (openai-python `responses.compact`),
    /// or a request whose last input item is the trigger.
    fn asked(&self, path: &str, body: &[u8], serve: bool) -> Asked {
        if path.ends_with(COMPACT_PATH) {
            return match serve {
                true => Asked::Compact {
                    body: bytes::Bytes::copy_from_slice(body),
                    shape: Shape::Compacted,
                },
                false => Asked::Forward,
            };
        }
        let trigger = memchr::memmem::find(body, TRIGGER.as_bytes()).is_some();
        let managed = memchr::memmem::find(body, CONTEXT_MANAGEMENT.as_bytes()).is_some();
        if !serve || !(trigger || managed) {
            return Asked::Nothing;
        }
        let Ok(Value::Object(mut request)) = serde_json::from_slice::<Value>(body) else {
            return Asked::Nothing;
        };
        // Servers that do not know the field refuse it; Condenser's own
        // compaction keeps the conversation within the window instead.
        let stripped = request.remove(CONTEXT_MANAGEMENT).is_some();
        let asks = match request.get_mut("input") {
            Some(Value::Array(input)) => {
                let last = input.last().and_then(|item| item.get("type")?.as_str());
                let asks = last == Some(TRIGGER);
                if asks {
                    input.pop();
                }
                asks
            }
            _ => false,
        };
        let body = bytes::Bytes::from(serde_json::to_vec(&request).unwrap_or_default());
        match (asks, stripped) {
            (true, _) => Asked::Compact {
                body,
                shape: Shape::Response,
            },
            (false, true) => Asked::Rewritten { body },
            (false, false) => Asked::Nothing,
        }
    }

    fn expand(
        &self,
        body: &[u8],
        expand: &mut dyn FnMut(&str) -> Result<Option<Value>, Forged>,
    ) -> Result<Option<Vec<u8>>, Forged> {
        if memchr::memmem::find(body, b"encrypted_content").is_none() {
            return Ok(None);
        }
        let Ok(Value::Object(mut request)) = serde_json::from_slice::<Value>(body) else {
            return Ok(None);
        };
        let Some(Value::Array(input)) = request.get_mut("input") else {
            return Ok(None);
        };
        // Invariant 1: the summary goes right after the system part,
        // wherever the client kept the item.
        let mut summaries = Vec::new();
        let mut kept = Vec::with_capacity(input.len());
        for item in input.drain(..) {
            let kind = item.get("type").and_then(Value::as_str).unwrap_or("");
            let content = item.get("encrypted_content").and_then(Value::as_str);
            let expanded = match content {
                Some(content) if COMPACTION_ITEMS.contains(&kind) => expand(content)?,
                _ => None,
            };
            match expanded {
                Some(message) => summaries.push(message),
                None => kept.push(item),
            }
        }
        let changed = !summaries.is_empty();
        let system = kept.iter().take_while(|item| is_system(item)).count();
        kept.splice(system..system, summaries);
        *input = kept;
        Ok(changed.then(|| serde_json::to_vec(&request).unwrap_or_default()))
    }

    /// The response OpenAI gives a compaction: one `compaction` item, then
    /// `response.completed`, streamed when the request streams.
    fn answer(
        &self,
        request: &Value,
        shape: Shape,
        sealed: &str,
        usage: (u64, u64),
    ) -> (bool, Vec<u8>) {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let item =
            json!({"id": format!("cmp_{id}"), "type": "compaction", "encrypted_content": sealed});
        let mut response = completed_response(request, &id, usage);
        if shape == Shape::Compacted {
            let compacted = compacted(response, request, item);
            return (false, compacted.to_string().into_bytes());
        }
        let stream = request.get("stream").and_then(Value::as_bool) == Some(true);
        if !stream {
            response["output"] = json!([item]);
            return (false, response.to_string().into_bytes());
        }
        let mut created = response.clone();
        created["status"] = json!("in_progress");
        created["usage"] = Value::Null;
        response["output"] = json!([item.clone()]);
        let events = [
            json!({"type": "response.created", "response": created}),
            json!({"type": "response.output_item.added", "output_index": 0, "item": item}),
            json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
            json!({"type": "response.completed", "response": response}),
        ];
        let mut body = String::new();
        for (sequence, mut event) in events.into_iter().enumerate() {
            event["sequence_number"] = json!(sequence);
            let kind = event["type"].as_str().unwrap_or_default().to_string();
            body.push_str(&format!("event: {kind}\ndata: {event}\n\n"));
        }
        (true, body.into_bytes())
    }
}

/// The compaction endpoint's answer: `{id, created_at, object:
/// "response.compaction", output: [every user message…, one compaction
/// item], usage}` (openai-python `compacted_response.py`). A summary
/// message Condenser expanded is not a user's message: the item stands
/// for it.
fn compacted(response: Value, request: &Value, item: Value) -> Value {
    let input = match &request["input"] {
        Value::String(text) => vec![json!({"type": "message", "role": "user", "content": text})],
        Value::Array(items) => items.clone(),
        _ => Vec::new(),
    };
    let mut output: Vec<Value> = input
        .into_iter()
        .filter(|item| item.get("role").and_then(Value::as_str) == Some("user"))
        .filter(|item| !crate::protocol::text_of(item.get("content")).starts_with(SUMMARY_MARKER))
        .collect();
    output.push(item);
    json!({
        "id": response["id"],
        "created_at": response["created_at"],
        "object": "response.compaction",
        "output": output,
        "usage": response["usage"],
    })
}

/// A `system` or `developer` message, of the system part when it opens
/// `input`.
fn is_system(item: &Value) -> bool {
    let role = item.get("role").and_then(Value::as_str).unwrap_or("");
    super::SYSTEM_ROLES.contains(&role)
}

/// A completed response object with no output yet.
fn completed_response(request: &Value, id: &str, (input, output): (u64, u64)) -> Value {
    let model = request.get("model").cloned().unwrap_or(Value::Null);
    let created_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs());
    let mut response = Map::new();
    response.insert("id".into(), json!(format!("resp_{id}")));
    response.insert("object".into(), json!("response"));
    response.insert("created_at".into(), json!(created_at));
    response.insert("status".into(), json!("completed"));
    response.insert("model".into(), model);
    response.insert("output".into(), json!([]));
    response.insert(
        "usage".into(),
        json!({
            "input_tokens": input,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input + output,
        }),
    );
    Value::Object(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_provider_that_defines_the_forms_is_told_by_its_host() {
        assert!(Responses.defined_by("api.openai.com"));
        assert!(Responses.defined_by("my-resource.openai.azure.com"));
        assert!(Responses.defined_by("x.cognitiveservices.azure.com"));
        assert!(!Responses.defined_by("openrouter.ai"));
        assert!(!Responses.defined_by("127.0.0.1"));
        assert!(!Responses.defined_by("evil-api.openai.com.example"));
    }

    #[test]
    fn a_trailing_trigger_asks_and_is_removed() {
        let body = json!({"model": "m", "input": [{"type": "message", "role": "user", "content": "hi"}, {"type": "compaction_trigger"}]});
        let Asked::Compact { body: asked, .. } =
            Responses.asked("/v1/responses", body.to_string().as_bytes(), true)
        else {
            panic!("a compaction request");
        };
        let asked: Value = serde_json::from_slice(&asked).expect("test value");
        assert_eq!(asked["input"].as_array().expect("test value").len(), 1);
        let elsewhere = json!({"input": [{"type": "compaction_trigger"}, {"type": "message", "role": "user", "content": "hi"}]});
        assert_eq!(
            Responses.asked("/v1/responses", elsewhere.to_string().as_bytes(), true),
            Asked::Nothing
        );
    }

    #[test]
    fn only_items_the_callback_claims_are_replaced_after_the_system_part() {
        let body = json!({"input": [
            {"type": "message", "role": "developer", "content": "rules"},
            {"type": "message", "role": "user", "content": "hi"},
            {"type": "compaction", "encrypted_content": "condenser.v1.x"},
            {"type": "compaction", "encrypted_content": "gAAAA"},
        ]});
        let expanded = Responses
            .expand(body.to_string().as_bytes(), &mut |content| {
                Ok(content
                    .starts_with("condenser")
                    .then(|| json!({"type": "message"})))
            })
            .expect("test value")
            .expect("test value");
        let expanded: Value = serde_json::from_slice(&expanded).expect("test value");
        assert_eq!(expanded["input"][0]["role"], "developer");
        assert_eq!(expanded["input"][1], json!({"type": "message"}));
        assert_eq!(expanded["input"][2]["role"], "user");
        assert_eq!(expanded["input"][3]["encrypted_content"], "gAAAA");
        let refused =
            Responses.expand(body.to_string().as_bytes(), &mut |_| Err(Forged::Signature));
        assert_eq!(refused, Err(Forged::Signature));
    }

    #[test]
    fn a_streamed_answer_has_exactly_one_item_done_then_completed() {
        let request = json!({"model": "m", "stream": true});
        let (streamed, body) = Responses.answer(&request, Shape::Response, "sealed", (10, 2));
        assert!(streamed);
        let text = String::from_utf8(body).expect("test value");
        assert_eq!(text.matches("event: response.output_item.done").count(), 1);
        let last = text.trim_end().lines().last().expect("test value");
        let completed: Value =
            serde_json::from_str(last.strip_prefix("data: ").expect("test value"))
                .expect("test value");
        assert_eq!(completed["type"], "response.completed");
        assert_eq!(completed["response"]["usage"]["total_tokens"], 12);
        assert_eq!(
            completed["response"]["output"][0]["encrypted_content"],
            "sealed"
        );
    }
}

#[cfg(test)]
mod compact_tests {
    use super::*;

    #[test]
    fn context_management_is_removed_where_condenser_serves() {
        let body = json!({"model": "m", "context_management": [{"type": "compaction", "compact_threshold": 2000}], "input": "hi"});
        let body = body.to_string();
        let Asked::Rewritten { body: stripped } =
            Responses.asked("/v1/responses", body.as_bytes(), true)
        else {
            panic!("rewritten");
        };
        let stripped: Value = serde_json::from_slice(&stripped).expect("test value");
        assert!(stripped.get("context_management").is_none());
        assert_eq!(stripped["input"], "hi");
        assert_eq!(
            Responses.asked("/v1/responses", body.as_bytes(), false),
            Asked::Nothing
        );
    }

    #[test]
    fn the_compact_endpoint_answers_user_messages_then_the_item() {
        let request = json!({"model": "m", "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "[condenser:summary] old"}]},
            {"type": "message", "role": "user", "content": "first"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
            {"role": "user", "content": "second"},
        ]});
        let (streamed, body) = Responses.answer(&request, Shape::Compacted, "sealed", (10, 2));
        assert!(!streamed);
        let body: Value = serde_json::from_slice(&body).expect("test value");
        assert_eq!(body["object"], "response.compaction");
        let output = body["output"].as_array().expect("test value");
        assert_eq!(output.len(), 3);
        assert_eq!(output[0]["content"], "first");
        assert_eq!(output[1]["content"], "second");
        assert_eq!(output[2]["type"], "compaction");
        assert!(body["created_at"].is_u64() && body["usage"]["input_tokens"] == 10);
        assert_eq!(
            Responses.asked("/v1/responses/compact", b"{}", false),
            Asked::Forward
        );
    }
}
