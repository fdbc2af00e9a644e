//! The OpenAI Responses API (`POST /v1/responses`): what it refuses, with
//! its messages, and the response object it answers with.
//!
//! Messages as the real API words them (each seen in public bug reports):
//! "No tool call found for function call output with call_id call_….",
//! "No tool output found for function call call_….",
//! "Item 'rs_…' of type 'reasoning' was provided without its required
//! following item.", "Item 'msg_…' of type 'message' was provided without
//! its required 'reasoning' item: 'rs_…'.", "The encrypted content for item
//! rs_… could not be verified.", and the overflow "Your input exceeds the
//! context window of this model. Please adjust your input and try again."

use crate::replies::{sign, Reply};
use serde_json::{json, Value};

pub const OVERFLOW: &str =
    "Your input exceeds the context window of this model. Please adjust your input and try again.";

const CREATED: u64 = 1_760_000_000;

fn kind(item: &Value) -> &str {
    match item["type"].as_str() {
        Some(kind) => kind,
        None if item.get("role").is_some() => "message",
        None => "",
    }
}

/// The input as a list of items (a string is one user message).
pub fn items(request: &Value) -> Vec<Value> {
    match &request["input"] {
        Value::String(text) => vec![json!({"role": "user", "content": text})],
        Value::Array(items) => items.clone(),
        _ => Vec::new(),
    }
}

/// Calls and outputs paired by `call_id`, reasoning items whole and next to
/// the item they lead into. A request that continues a stored response may
/// answer calls this one does not show.
pub fn validate(request: &Value, mode: crate::config::ResponsesMode) -> Result<(), String> {
    crate::responses_modes::refusal(mode, request)?;
    let items = items(request);
    let stateful = !request["previous_response_id"].is_null() || !request["conversation"].is_null();
    let mut open: Vec<(String, String)> = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let kind = kind(item);
        let call_id = item["call_id"].as_str().unwrap_or_default();
        if let Some(call_kind) = kind.strip_suffix("_output") {
            match open.iter().position(|(id, _)| id == call_id) {
                Some(position) => {
                    open.remove(position);
                }
                None if stateful => {}
                None => {
                    return Err(format!(
                        "No tool call found for {} output with call_id {call_id}.",
                        spoken(call_kind)
                    ))
                }
            }
        } else if kind.ends_with("_call") && !call_id.is_empty() {
            open.push((call_id.to_string(), kind.to_string()));
        }
        reasoning_pairing(&items, index)?;
    }
    match open.first() {
        Some((id, kind)) => Err(format!("No tool output found for {} {id}.", spoken(kind))),
        None => Ok(()),
    }
}

fn spoken(kind: &str) -> String {
    kind.replace('_', " ")
}

/// A reasoning item must lead into an output item, carry the encrypted
/// content this API gave it, and the items the fake produced after a
/// reasoning item (ids `fc_r…`, `msg_r…`) must come right after it.
fn reasoning_pairing(items: &[Value], index: usize) -> Result<(), String> {
    let item = &items[index];
    let id = item["id"].as_str().unwrap_or_default();
    if kind(item) == "reasoning" {
        let next = items.get(index + 1);
        let leads = next.is_some_and(|n| {
            let next_kind = kind(n);
            next_kind != "reasoning" && (next_kind != "message" || n["role"] == "assistant")
        });
        if !leads {
            return Err(format!(
                "Item '{id}' of type 'reasoning' was provided without its required following item."
            ));
        }
        if let Some(content) = item["encrypted_content"].as_str() {
            if content != encrypted_content(id) {
                return Err(format!(
                    "The encrypted content for item {id} could not be verified."
                ));
            }
        }
        return Ok(());
    }
    let Some(digest) = id.strip_prefix("fc_r").or_else(|| id.strip_prefix("msg_r")) else {
        return Ok(());
    };
    let reasoning = format!("rs_{digest}");
    let previous = index.checked_sub(1).map(|p| &items[p]);
    if previous.and_then(|p| p["id"].as_str()) != Some(reasoning.as_str()) {
        return Err(format!("Item '{id}' of type '{}' was provided without its required 'reasoning' item: '{reasoning}'.", kind(item)));
    }
    Ok(())
}

/// What the fake puts in `encrypted_content`: only it can produce it, so a
/// changed or misplaced reasoning item is refused as the real API would.
/// About as long as the real API's (which are a few hundred bytes and up).
pub fn encrypted_content(id: &str) -> String {
    format!("gAAAAB{}", sign(id).repeat(8))
}

/// The prompt's size: a quarter of its JSON bytes plus 3 per input item.
pub fn count_tokens(request: &Value) -> u64 {
    let items = items(request);
    let bytes = Value::Array(items.clone()).to_string().len()
        + request["instructions"].to_string().len()
        + request["tools"].to_string().len();
    (bytes as u64).div_ceil(4) + 3 * items.len() as u64
}

/// Output items: a reasoning item first when reasoning was asked for, then
/// the tool call or the message.
pub fn output(request: &Value, reply: &Reply) -> Vec<Value> {
    let digest = reply.id.trim_start_matches("resp_");
    let reasoning = request["reasoning"].is_object();
    let mut output = Vec::new();
    let prefix = if reasoning {
        let id = format!("rs_{digest}");
        output.push(json!({"id": id, "type": "reasoning", "summary": [], "encrypted_content": encrypted_content(&id)}));
        "r"
    } else {
        ""
    };
    for call in &reply.tool_calls {
        output.push(json!({"id": format!("fc_{prefix}{digest}"), "type": "function_call", "status": "completed",
            "arguments": call.arguments, "call_id": call.id, "name": call.name}));
    }
    if reply.tool_calls.is_empty() {
        output.push(json!({"id": format!("msg_{prefix}{digest}"), "type": "message", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": reply.text, "annotations": [], "logprobs": []}]}));
    }
    output
}

pub fn usage(reply: &Reply) -> Value {
    json!({
        "input_tokens": reply.input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": reply.output_tokens,
        "output_tokens_details": {"reasoning_tokens": reply.reasoning_tokens},
        "total_tokens": reply.input_tokens + reply.output_tokens
    })
}

/// The response object; `output` and `usage` empty while in progress.
pub fn response(
    request: &Value,
    reply: &Reply,
    status: &str,
    output: Value,
    usage: Value,
) -> Value {
    json!({
        "id": reply.id, "object": "response", "created_at": CREATED, "status": status,
        "background": false, "error": null, "incomplete_details": null,
        "instructions": request["instructions"], "max_output_tokens": request["max_output_tokens"],
        "model": reply.model, "output": output, "parallel_tool_calls": true, "previous_response_id": null,
        "reasoning": {"effort": request["reasoning"]["effort"], "summary": null},
        "store": request["store"].as_bool().unwrap_or(true), "temperature": 1.0,
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": request.get("tool_choice").cloned().unwrap_or(json!("auto")),
        "tools": request.get("tools").cloned().unwrap_or(json!([])), "top_p": 1.0,
        "truncation": "disabled", "usage": usage, "user": null, "metadata": {}
    })
}

/// A reply its output limit stopped is `incomplete`, and one that spent
/// it all reasoning carries the reasoning item alone (OpenAI reasoning
/// guide: `incomplete_details.reason` is `max_output_tokens`).
pub fn to_json(request: &Value, reply: &Reply) -> Value {
    let mut output = output(request, reply);
    if reply.truncated && reply.text.is_empty() {
        output.retain(|item| item["type"] == "reasoning");
    }
    let status = if reply.truncated {
        "incomplete"
    } else {
        "completed"
    };
    let mut body = response(request, reply, status, Value::Array(output), usage(reply));
    if reply.truncated {
        body["incomplete_details"] = json!({"reason": "max_output_tokens"});
    }
    body
}

/// The overflow as a non-streamed request gets it.
pub fn overflow_body() -> Value {
    json!({"error": {"message": OVERFLOW, "type": "invalid_request_error", "param": "input", "code": "context_length_exceeded"}})
}

/// Whether the last input item asks for tools (`[tools]`, `[more]`).
pub fn last_item_text(request: &Value) -> String {
    items(request)
        .last()
        .map(Value::to_string)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_must_answer_a_call_and_calls_must_be_answered() {
        let orphan = json!({"input": [{"type": "function_call_output", "call_id": "call_1", "output": "x"}]});
        assert_eq!(
            validate(&orphan, Default::default()),
            Err("No tool call found for function call output with call_id call_1.".into())
        );
        let unanswered = json!({"input": [{"type": "function_call", "call_id": "call_2", "name": "f", "arguments": "{}"}]});
        assert_eq!(
            validate(&unanswered, Default::default()),
            Err("No tool output found for function call call_2.".into())
        );
        let continued = json!({"previous_response_id": "resp_1", "input": [{"type": "function_call_output", "call_id": "call_1", "output": "x"}]});
        assert_eq!(validate(&continued, Default::default()), Ok(()));
    }

    #[test]
    fn reasoning_must_lead_into_its_item_with_its_content_unchanged() {
        let id = "rs_abc";
        let reasoning = json!({"type": "reasoning", "id": id, "summary": [], "encrypted_content": encrypted_content(id)});
        let call = json!({"type": "function_call", "id": "fc_rabc", "call_id": "c", "name": "f", "arguments": "{}"});
        let output = json!({"type": "function_call_output", "call_id": "c", "output": "x"});
        let whole = json!({"input": [reasoning, call, output]});
        assert_eq!(validate(&whole, Default::default()), Ok(()));
        let alone = json!({"input": [call, output]});
        assert!(validate(&alone, Default::default())
            .expect_err("refused")
            .contains("without its required 'reasoning' item"));
        let trailing = json!({"input": [{"role": "user", "content": "hi"}, reasoning]});
        assert!(validate(&trailing, Default::default())
            .expect_err("refused")
            .contains("without its required following item"));
        let mut altered = reasoning.clone();
        altered["encrypted_content"] = json!("gAAAABforged");
        let forged = json!({"input": [altered, call, output]});
        assert!(validate(&forged, Default::default())
            .expect_err("refused")
            .contains("could not be verified"));
    }
}
