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
use crate::protocol::native::{Asked, Forged, NativeForms};
use serde_json::{json, Map, Value};

/// Item types that ask the provider to compact, and that hold a compaction.
const TRIGGER: &str = "compaction_trigger";
const COMPACTION_ITEMS: &[&str] = &["compaction", "compaction_summary"];

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

    fn asked(&self, body: &[u8]) -> Asked {
        if memchr::memmem::find(body, TRIGGER.as_bytes()).is_none() {
            return Asked::Nothing;
        }
        let Ok(Value::Object(mut request)) = serde_json::from_slice::<Value>(body) else {
            return Asked::Nothing;
        };
        let Some(Value::Array(input)) = request.get_mut("input") else {
            return Asked::Nothing;
        };
        if input.last().and_then(|item| item.get("type")?.as_str()) != Some(TRIGGER) {
            return Asked::Nothing;
        }
        input.pop();
        let body = serde_json::to_vec(&request).unwrap_or_default();
        Asked::Compact { body: body.into() }
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
    fn answer(&self, request: &Value, sealed: &str, usage: (u64, u64)) -> (bool, Vec<u8>) {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let item =
            json!({"id": format!("cmp_{id}"), "type": "compaction", "encrypted_content": sealed});
        let mut response = completed_response(request, &id, usage);
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
        let Asked::Compact { body: asked } = Responses.asked(body.to_string().as_bytes()) else {
            panic!("a compaction request");
        };
        let asked: Value = serde_json::from_slice(&asked).unwrap();
        assert_eq!(asked["input"].as_array().unwrap().len(), 1);
        let elsewhere = json!({"input": [{"type": "compaction_trigger"}, {"type": "message", "role": "user", "content": "hi"}]});
        assert_eq!(
            Responses.asked(elsewhere.to_string().as_bytes()),
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
            .unwrap()
            .unwrap();
        let expanded: Value = serde_json::from_slice(&expanded).unwrap();
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
        let (streamed, body) =
            Responses.answer(&json!({"model": "m", "stream": true}), "sealed", (10, 2));
        assert!(streamed);
        let text = String::from_utf8(body).unwrap();
        assert_eq!(text.matches("event: response.output_item.done").count(), 1);
        let last = text.trim_end().lines().last().unwrap();
        let completed: Value = serde_json::from_str(last.strip_prefix("data: ").unwrap()).unwrap();
        assert_eq!(completed["type"], "response.completed");
        assert_eq!(completed["response"]["usage"]["total_tokens"], 12);
        assert_eq!(
            completed["response"]["output"][0]["encrypted_content"],
            "sealed"
        );
    }
}
