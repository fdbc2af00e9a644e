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
use crate::protocol::native::{Asked, Expanded, Forged, Lead, NativeForms, Shape};
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
        // Servers that do not know the field refuse it: Condenser compacts
        // past its threshold itself.
        let management = request.remove(CONTEXT_MANAGEMENT);
        let stripped = management.is_some();
        let threshold = management.as_ref().and_then(compact_threshold);
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
            (false, true) => Asked::Rewritten { body, threshold },
            (false, false) => Asked::Nothing,
        }
    }

    fn expand(
        &self,
        body: &[u8],
        expand: &mut dyn FnMut(&str) -> Result<Option<Expanded>, Forged>,
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
                Some(Expanded {
                    message,
                    carried: Some(carried),
                }) => {
                    // It stands for everything before it, as OpenAI's
                    // server-side compaction item does (compaction guide).
                    let system = kept.iter().take_while(|item| is_system(item)).count();
                    kept.truncate(system);
                    kept.extend(carried);
                    summaries = vec![message];
                }
                Some(Expanded { message, .. }) => summaries.push(message),
                None => kept.push(item),
            }
        }
        let changed = !summaries.is_empty();
        let system = kept.iter().take_while(|item| is_system(item)).count();
        kept.splice(system..system, summaries);
        *input = kept;
        Ok(changed.then(|| serde_json::to_vec(&request).unwrap_or_default()))
    }

    fn items(&self, messages: &[&Value]) -> Vec<Value> {
        let units = messages.iter().flat_map(|unit| super::units::items(unit));
        units.cloned().collect()
    }

    /// A 404 or 405 counts only at the compaction endpoint: the chat
    /// endpoint answers those for a missing model or path alike. A 400 counts when it names a form and says it
    /// is unknown, in the words OpenAI-compatible servers use: OpenAI's
    /// own "Unknown parameter: 'context_management'." and "Invalid value:
    /// 'compaction_trigger'." (its invalid_request_error wording),
    /// pydantic's "Extra inputs are not permitted" and "does not match
    /// any of the expected tags" where a server forbids extra fields or
    /// checks item types. vLLM's request models allow extra fields and
    /// ignore them (`OpenAIBaseModel`, `extra="allow"`,
    /// vllm/entrypoints/openai/engine/protocol.py): there only the
    /// unanswered trigger shows ([`NativeForms::holds_compaction`]).
    fn refuses(&self, path: &str, status: u16, body: &[u8]) -> bool {
        let names = |needle: &str| memchr::memmem::find(body, needle.as_bytes()).is_some();
        let unknown = names("Unknown parameter")
            || names("Invalid value")
            || names("Extra inputs are not permitted")
            || names("does not match any of the expected tags")
            || names("not supported")
            || names("unsupported");
        let form = names(CONTEXT_MANAGEMENT) || names(TRIGGER);
        let endpoint = path.ends_with(COMPACT_PATH) && matches!(status, 404 | 405);
        endpoint || (status == 400 && unknown && form)
    }

    /// Any `compaction` item in the output of the JSON answer, or of a
    /// streamed `response.output_item.done` or `response.completed`.
    fn holds_compaction(&self, answer: &[u8]) -> bool {
        if memchr::memmem::find(answer, b"compaction").is_none() {
            return false;
        }
        let holds = |value: &Value| {
            let response = value.get("response").unwrap_or(value);
            let output = response.get("output").and_then(Value::as_array);
            let item = value.get("item").into_iter();
            output
                .into_iter()
                .flatten()
                .chain(item)
                .any(|item| COMPACTION_ITEMS.contains(&item["type"].as_str().unwrap_or("")))
        };
        if let Ok(value) = serde_json::from_slice::<Value>(answer) {
            return holds(&value);
        }
        let text = String::from_utf8_lossy(answer);
        text.lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .filter_map(|data| serde_json::from_str::<Value>(data.trim_start()).ok())
            .any(|event| holds(&event))
    }

    fn lead(&self, sealed: &str) -> Box<dyn Lead> {
        Box::new(LeadItem {
            item: compaction_item(sealed),
            inserted: false,
        })
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
        let item = compaction_item(sealed);
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

/// `compact_threshold` of the `compaction` entry of `context_management`
/// (developers.openai.com, compaction guide).
fn compact_threshold(management: &Value) -> Option<u64> {
    let entries = management.as_array()?;
    let entry = entries
        .iter()
        .find(|entry| entry.get("type").and_then(Value::as_str) == Some("compaction"))?;
    entry.get("compact_threshold").and_then(Value::as_u64)
}

/// An output compaction item: `{id, type: "compaction", encrypted_content}`
/// (openai-python `response_compaction_item.py`).
fn compaction_item(sealed: &str) -> Value {
    let id = uuid::Uuid::new_v4().simple().to_string();
    json!({"id": format!("cmp_{id}"), "type": "compaction", "encrypted_content": sealed})
}

/// A reply led by a compaction item, as OpenAI's server-side compaction
/// emits it: the item first in `output`, streamed as its own
/// `response.output_item.added` and `.done` (a compaction item has no
/// other events) before the reply's first output event, every later
/// `output_index` and `sequence_number` moved up to make room.
struct LeadItem {
    item: Value,
    inserted: bool,
}

/// Events that come before any output item.
const BEFORE_OUTPUT: &[&str] = &[
    "response.created",
    "response.in_progress",
    "response.queued",
];
/// Events that carry the whole response, output included.
const WHOLE_RESPONSE: &[&str] = &[
    "response.completed",
    "response.incomplete",
    "response.failed",
];

impl Lead for LeadItem {
    fn json(&mut self, answer: &mut Value) {
        if let Some(Value::Array(output)) = answer.get_mut("output") {
            output.insert(0, self.item.clone());
        }
    }

    fn event(&mut self, event: &str) -> Option<String> {
        let data = event
            .lines()
            .find_map(|line| line.strip_prefix("data:"))?
            .trim_start();
        let mut data: Value = serde_json::from_str(data).ok()?;
        let kind = data.get("type").and_then(Value::as_str).unwrap_or("");
        let kind = kind.to_string();
        if BEFORE_OUTPUT.contains(&kind.as_str()) {
            return None;
        }
        let mut out = String::new();
        let sequence = data.get("sequence_number").and_then(Value::as_u64);
        if !self.inserted {
            self.inserted = true;
            for (step, kind) in ["response.output_item.added", "response.output_item.done"]
                .into_iter()
                .enumerate()
            {
                let mut added = json!({"type": kind, "output_index": 0, "item": self.item});
                if let Some(sequence) = sequence {
                    added["sequence_number"] = json!(sequence + step as u64);
                }
                out.push_str(&sse_event(&added));
            }
        }
        self.shift(&mut data, &kind);
        out.push_str(&sse_event(&data));
        Some(out)
    }
}

impl LeadItem {
    /// One event of the reply, renumbered after the item.
    fn shift(&self, data: &mut Value, kind: &str) {
        for (key, by) in [("output_index", 1), ("sequence_number", 2)] {
            if let Some(number) = data.get(key).and_then(Value::as_u64) {
                data[key] = json!(number + by);
            }
        }
        if WHOLE_RESPONSE.contains(&kind) {
            if let Some(response) = data.get_mut("response") {
                let mut lead = LeadItem {
                    item: self.item.clone(),
                    inserted: true,
                };
                lead.json(response);
            }
        }
    }
}

fn sse_event(data: &Value) -> String {
    let kind = data
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("message");
    format!("event: {kind}\ndata: {data}\n\n")
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
                Ok(content.starts_with("condenser").then(|| Expanded {
                    message: json!({"type": "message"}),
                    carried: None,
                }))
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
        let Asked::Rewritten {
            body: stripped,
            threshold,
        } = Responses.asked("/v1/responses", body.as_bytes(), true)
        else {
            panic!("rewritten");
        };
        assert_eq!(threshold, Some(2000));
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

    #[test]
    fn an_item_carrying_its_kept_items_replaces_everything_before_it() {
        let body = json!({"input": [
            {"type": "message", "role": "developer", "content": "rules"},
            {"type": "message", "role": "user", "content": "old"},
            {"type": "compaction", "encrypted_content": "condenser.v1.x"},
            {"type": "message", "role": "assistant", "content": "reply"},
        ]});
        let expanded = Responses
            .expand(body.to_string().as_bytes(), &mut |_| {
                Ok(Some(Expanded {
                    message: json!({"role": "user", "content": "summary"}),
                    carried: Some(vec![json!({"role": "user", "content": "kept"})]),
                }))
            })
            .expect("opens")
            .expect("changed");
        let expanded: Value = serde_json::from_slice(&expanded).expect("test value");
        let contents: Vec<&Value> = expanded["input"]
            .as_array()
            .expect("input")
            .iter()
            .map(|item| &item["content"])
            .collect();
        assert_eq!(contents, ["rules", "summary", "kept", "reply"]);
    }

    #[test]
    fn a_led_stream_has_the_item_first_and_the_reply_renumbered() {
        let mut lead = Responses.lead("sealed");
        let created = "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0}\n\n";
        assert_eq!(lead.event(created), None);
        let added = "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"output_index\":0,\"sequence_number\":1}\n\n";
        let led = lead.event(added).expect("led");
        let events: Vec<Value> = led
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(|d| serde_json::from_str(d).expect("json"))
            .collect();
        assert_eq!(events.len(), 3);
        assert_eq!(events[0]["item"]["encrypted_content"], "sealed");
        assert_eq!(events[1]["type"], "response.output_item.done");
        assert_eq!(
            (
                events[1]["output_index"].clone(),
                events[1]["sequence_number"].clone()
            ),
            (json!(0), json!(2))
        );
        assert_eq!(events[2]["output_index"], 1);
        assert_eq!(events[2]["sequence_number"], 3);
        let completed = "event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":5,\"response\":{\"output\":[{\"type\":\"message\"}]}}\n\n";
        let completed = lead.event(completed).expect("renumbered");
        let data = completed.lines().find_map(|l| l.strip_prefix("data: "));
        let data: Value = serde_json::from_str(data.expect("data")).expect("json");
        assert_eq!(data["sequence_number"], 7);
        assert_eq!(data["response"]["output"][0]["type"], "compaction");
        assert_eq!(data["response"]["output"][1]["type"], "message");
        let mut answer = json!({"output": [{"type": "message"}]});
        Responses.lead("sealed").json(&mut answer);
        assert_eq!(answer["output"][0]["type"], "compaction");
    }

    #[test]
    fn refusals_name_a_form_and_say_it_is_unknown() {
        let unknown = br#"{"error":{"message":"Unknown parameter: 'context_management'.","type":"invalid_request_error"}}"#;
        let refuses = |status, body: &[u8]| Responses.refuses("/v1/responses", status, body);
        assert!(refuses(400, unknown));
        let item = br#"{"error":{"message":"Invalid value: 'compaction_trigger'. Supported values are: 'message', 'function_call'."}}"#;
        assert!(refuses(400, item));
        assert!(!refuses(404, b"model not found"));
        assert!(Responses.refuses("/v1/responses/compact", 404, b"Not Found"));
        assert!(!refuses(
            400,
            b"Your input exceeds the context window of this model."
        ));
        assert!(!refuses(400, b"Unknown parameter: 'temperature'."));
        assert!(!refuses(500, unknown));
    }

    #[test]
    fn a_compaction_item_is_found_in_json_or_a_stream() {
        let json = br#"{"output":[{"type":"compaction","encrypted_content":"x"}]}"#;
        assert!(Responses.holds_compaction(json));
        let plain = br#"{"output":[{"type":"message","content":[{"type":"output_text","text":"compaction"}]}]}"#;
        assert!(!Responses.holds_compaction(plain));
        let (_, stream) = Responses.answer(&json!({"stream": true}), Shape::Response, "s", (1, 1));
        assert!(Responses.holds_compaction(&stream));
        let message = "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"output\":[{\"type\":\"message\",\"content\":\"compaction\"}]}}\n\n";
        assert!(!Responses.holds_compaction(message.as_bytes()));
    }
}
