//! Who serves the Responses API: a third-party server (the default: vLLM,
//! SGLang, llama.cpp, a gateway), or OpenAI itself with its own
//! compaction forms. Each rule names its source.

use crate::config::ResponsesMode;
use crate::replies::{sign, Reply};
use bytes::Bytes;
use serde_json::{json, Value};

const TRIGGER: &str = "compaction_trigger";

/// What a third-party Responses server refuses of OpenAI's own compaction
/// forms: `context_management` is unknown to it, and servers whose
/// request models forbid extra fields answer "context_management: Extra
/// inputs are not permitted" (anthropics/claude-code#21612 for the same
/// refusal of `context_management`; pydantic's `extra="forbid"`
/// wording). A `compaction_trigger` item is answered as a plain message,
/// as measured with Codex 0.169.0 against such a server (same section),
/// and `/responses/compact` is a 404 ([`compact`]). OpenAI refuses a
/// compaction item it did not make (below).
pub fn refusal(mode: ResponsesMode, request: &Value) -> Result<(), String> {
    match mode {
        ResponsesMode::ThirdParty if request.get("context_management").is_some() => {
            Err("context_management: Extra inputs are not permitted".into())
        }
        ResponsesMode::ThirdParty => Ok(()),
        ResponsesMode::OpenAi => own_items_only(request),
    }
}

/// A compaction item's content is opaque and only its maker reads it
/// (openai-python `response_compaction_item_param.py`: `encrypted_content`
/// "The encrypted content of the compaction summary"): one the fake did
/// not make is refused in the words OpenAI uses for encrypted reasoning
/// content it cannot verify ("The encrypted content for item rs_… could
/// not be verified.", `responses.rs`).
fn own_items_only(request: &Value) -> Result<(), String> {
    let items = crate::responses::items(request);
    let compactions = items.iter().filter(|item| item["type"] == "compaction");
    for item in compactions {
        let content = item["encrypted_content"].as_str().unwrap_or_default();
        if !verifies(content) {
            let id = item["id"].as_str().unwrap_or("cmp");
            return Err(format!(
                "The encrypted content for item {id} could not be verified."
            ));
        }
    }
    Ok(())
}

/// The fake's compaction content: a nonce and its signature.
fn sealed(nonce: &str) -> String {
    format!("gAAAAC{nonce}.{}", sign(&format!("compaction:{nonce}")))
}

fn verifies(content: &str) -> bool {
    let Some((nonce, _)) = content
        .strip_prefix("gAAAAC")
        .and_then(|rest| rest.split_once('.'))
    else {
        return false;
    };
    sealed(nonce) == content
}

/// An output compaction item, `{id, type: "compaction", encrypted_content}`
/// (openai-python `response_compaction_item.py`), derived from `digest`
/// so the same request gets the same item.
fn compaction_item(digest: &str) -> Value {
    json!({"id": format!("cmp_{digest}"), "type": "compaction", "encrypted_content": sealed(digest)})
}

/// OpenAI's answer where the request uses a compaction form it serves:
/// a trailing `compaction_trigger` is answered with exactly one
/// compaction item (Codex's remote compaction v2 requires it:
/// openai/codex `core/src/compact_remote_v2.rs`); past a
/// `context_management` `compact_threshold` the reply is led by one
/// ("the response stream includes the encrypted compaction item",
/// developers.openai.com compaction guide). `None` otherwise.
pub fn answer(mode: ResponsesMode, request: &Value, reply: &Reply, tokens: u64) -> Option<Value> {
    if mode != ResponsesMode::OpenAi {
        return None;
    }
    let digest = reply.id.trim_start_matches("resp_");
    let items = crate::responses::items(request);
    if items.last().is_some_and(|item| item["type"] == TRIGGER) {
        let usage = crate::responses::usage(reply);
        let output = json!([compaction_item(digest)]);
        return Some(crate::responses::response(
            request,
            reply,
            "completed",
            output,
            usage,
        ));
    }
    let threshold = request["context_management"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|entry| entry["type"] == "compaction")
        .and_then(|entry| entry["compact_threshold"].as_u64())?;
    if tokens <= threshold {
        return None;
    }
    let mut response = crate::responses::to_json(request, reply);
    if let Some(output) = response["output"].as_array_mut() {
        output.insert(0, compaction_item(digest));
    }
    Some(response)
}

/// A whole response streamed: `response.created`, `response.in_progress`,
/// each output item added and done (a compaction item has no other
/// events), `response.completed`, `sequence_number` counting up.
pub fn events(response: &Value) -> Vec<Bytes> {
    let mut started = response.clone();
    started["status"] = json!("in_progress");
    started["output"] = json!([]);
    started["usage"] = Value::Null;
    let mut events = vec![
        json!({"type": "response.created", "response": started}),
        json!({"type": "response.in_progress", "response": started}),
    ];
    let output = response["output"].as_array().into_iter().flatten();
    for (index, item) in output.enumerate() {
        for kind in ["response.output_item.added", "response.output_item.done"] {
            events.push(json!({"type": kind, "output_index": index, "item": item}));
        }
    }
    events.push(json!({"type": "response.completed", "response": response}));
    let numbered = events.into_iter().enumerate().map(|(number, mut event)| {
        event["sequence_number"] = json!(number);
        let kind = event["type"].as_str().unwrap_or_default().to_string();
        Bytes::from(format!("event: {kind}\ndata: {event}\n\n"))
    });
    numbered.collect()
}

/// `POST /v1/responses/compact` (openai-python `responses.compact`):
/// `{id, created_at, object: "response.compaction", output: [every user
/// message…, one compaction item], usage}` (`compacted_response.py`).
pub fn compacted(request: &Value, reply: &Reply) -> Value {
    let digest = reply.id.trim_start_matches("resp_");
    let items = crate::responses::items(request);
    let mut output: Vec<Value> = items
        .into_iter()
        .filter(|item| item["role"] == "user")
        .collect();
    output.push(compaction_item(digest));
    json!({"id": reply.id, "created_at": 1_760_000_000, "object": "response.compaction",
        "output": output, "usage": crate::responses::usage(reply)})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_fakes_own_compaction_items_are_accepted() {
        let own = compaction_item("abc");
        let request = json!({"input": [own]});
        assert_eq!(refusal(ResponsesMode::OpenAi, &request), Ok(()));
        let mut altered = compaction_item("abc");
        altered["encrypted_content"] = json!("gAAAACabd.0000");
        let request = json!({"input": [altered]});
        assert!(refusal(ResponsesMode::OpenAi, &request).is_err());
        let managed = json!({"context_management": [], "input": []});
        assert!(refusal(ResponsesMode::ThirdParty, &managed).is_err());
        assert_eq!(refusal(ResponsesMode::OpenAi, &managed), Ok(()));
    }
}
