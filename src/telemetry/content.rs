//! Beside the flow, tracing: message content, only where the operator
//! opted in (`traces.capture_message_content`).
//!
//! The GenAI conventions' `gen_ai.input.messages`,
//! `gen_ai.system_instructions` and `gen_ai.output.messages`, as JSON
//! strings in their schema (`{"role", "parts": [{"type", …}]}`), read from
//! the bodies of any of the APIs Condenser speaks: Chat Completions,
//! Messages, Responses, Ollama and Gemini; an answer's messages are the
//! ones its adapter finds (`Adapter::answer_messages`). Text, tool calls
//! and tool results are kept; images, audio and files are named by their type, not
//! copied. Nothing here runs unless content capture is on.

use crate::protocol::Adapter;
use serde_json::{json, Map, Value};

/// The request's messages and system instructions, in the conventions'
/// shape, as sent upstream.
pub fn input(body: &[u8]) -> (Option<String>, Option<String>) {
    let Ok(Value::Object(request)) = serde_json::from_slice::<Value>(body) else {
        return (None, None);
    };
    let items = ["messages", "input", "contents"]
        .iter()
        .find_map(|key| request.get(*key));
    let messages = items.map(|items| match items {
        Value::String(text) => vec![message("user", vec![text_part(text)])],
        Value::Array(items) => items.iter().map(input_message).collect(),
        _ => Vec::new(),
    });
    let system = ["system", "instructions", "systemInstruction"]
        .iter()
        .find_map(|key| request.get(*key))
        .map(parts)
        .filter(|parts| !parts.is_empty());
    (
        messages.map(|m| Value::Array(m).to_string()),
        system.map(|s| Value::Array(s).to_string()),
    )
}

/// The answer's messages, in the conventions' shape, from a whole JSON
/// answer, as its adapter finds them.
pub fn output(adapter: &dyn Adapter, answer: &Value) -> Option<String> {
    let messages: Vec<Value> = adapter
        .answer_messages(answer)
        .into_iter()
        .map(|answered| {
            let mut out = input_message(answered.message);
            if let Some(reason) = answered.finish_reason {
                out["finish_reason"] = reason.clone(); // semconv: the conventions' own field
            }
            out
        })
        .collect();
    (!messages.is_empty()).then(|| Value::Array(messages).to_string())
}

fn message(role: &str, parts: Vec<Value>) -> Value {
    json!({"role": role, "parts": parts})
}

/// One message or item of any API's list.
fn input_message(item: &Value) -> Value {
    let Some(object) = item.as_object() else {
        return message("user", parts(item));
    };
    let kind = object.get("type").and_then(Value::as_str).unwrap_or("");
    let role = match object.get("role").and_then(Value::as_str) {
        Some("model") => "assistant",
        Some(role) => role,
        // Responses items without a role are the assistant's calls and
        // the tools' outputs.
        None if kind.ends_with("_output") => "tool",
        None => "assistant",
    };
    let mut found = Vec::new();
    if object.contains_key("role") || object.contains_key("parts") {
        for key in ["content", "parts"] {
            if let Some(content) = object.get(key) {
                found.extend(parts(content));
            }
        }
    } else {
        found.push(part(item));
    }
    for call in object
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        found.push(tool_call(call));
    }
    if role == "tool" {
        if let Some(id) = object.get("tool_call_id") {
            let response = object.get("content").cloned().unwrap_or(Value::Null);
            found = vec![json!({"type": "tool_call_response", "id": id, "response": response})];
        }
    }
    message(role, found)
}

/// A content field: text, or a list of blocks.
fn parts(content: &Value) -> Vec<Value> {
    match content {
        Value::String(text) => vec![text_part(text)],
        Value::Array(blocks) => blocks.iter().map(part).collect(),
        Value::Object(_) => match content.get("parts") {
            Some(inner) => parts(inner),
            None => vec![part(content)],
        },
        _ => Vec::new(),
    }
}

fn text_part(text: &str) -> Value {
    json!({"type": "text", "content": text})
}

/// One block of any API.
fn part(block: &Value) -> Value {
    let Some(object) = block.as_object() else {
        return match block {
            Value::String(text) => text_part(text),
            other => json!({"type": "text", "content": other.to_string()}),
        };
    };
    let kind = object.get("type").and_then(Value::as_str).unwrap_or("");
    if let Some(text) = object.get("text").and_then(Value::as_str) {
        return text_part(text);
    }
    match kind {
        "tool_use" | "function_call" | "custom_tool_call" => tool_call(block),
        "tool_result" | "function_call_output" | "custom_tool_call_output" => {
            let id = first(object, &["tool_use_id", "call_id"]);
            let response = first(object, &["content", "output"]);
            json!({"type": "tool_call_response", "id": id, "response": response})
        }
        "" if object.contains_key("functionCall") => tool_call(&object["functionCall"]),
        "" if object.contains_key("functionResponse") => {
            let response = &object["functionResponse"];
            json!({"type": "tool_call_response", "id": response.get("name"), "response": response.get("response")})
        }
        // Images, audio, files, reasoning: named, not copied.
        "" => json!({"type": "unknown"}),
        other => json!({"type": other}),
    }
}

/// A tool call of any API.
fn tool_call(call: &Value) -> Value {
    let function = call.get("function").unwrap_or(call);
    let id = call.get("id").or_else(|| call.get("call_id")).cloned();
    let arguments = first(
        function.as_object().unwrap_or(&Map::new()),
        &["arguments", "input", "args"],
    );
    json!({"type": "tool_call", "id": id, "name": function.get("name"), "arguments": arguments})
}

fn first(object: &Map<String, Value>, keys: &[&str]) -> Value {
    keys.iter()
        .find_map(|key| object.get(*key))
        .cloned()
        .unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_completions_in_and_out() {
        let body = json!({"model": "m", "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": "data:x"}}]},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "file"}
        ]});
        let (messages, system) = input(body.to_string().as_bytes());
        let messages: Value = serde_json::from_str(&messages.expect("messages")).expect("json");
        assert_eq!(system, None);
        assert_eq!(
            messages[0],
            json!({"role": "system", "parts": [{"type": "text", "content": "Be brief."}]})
        );
        assert_eq!(
            messages[1]["parts"][1],
            json!({"type": "image_url"}),
            "an image is named, not copied"
        );
        assert_eq!(messages[2]["parts"][0]["type"], "tool_call");
        assert_eq!(messages[2]["parts"][0]["name"], "read");
        assert_eq!(
            messages[3]["parts"][0],
            json!({"type": "tool_call_response", "id": "c1", "response": "file"})
        );
        let answer = json!({"choices": [{"message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]});
        let adapter = &crate::protocol::openai::OpenAi;
        let out: Value =
            serde_json::from_str(&output(adapter, &answer).expect("output")).expect("json");
        assert_eq!(
            out,
            json!([{"role": "assistant", "parts": [{"type": "text", "content": "ok"}], "finish_reason": "stop"}])
        );
    }

    #[test]
    fn messages_in_and_out() {
        let body = json!({"model": "m", "system": "Be brief.", "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read", "input": {"p": 1}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "file"}]}
        ]});
        let (messages, system) = input(body.to_string().as_bytes());
        let messages: Value = serde_json::from_str(&messages.expect("messages")).expect("json");
        let system: Value = serde_json::from_str(&system.expect("system")).expect("json");
        assert_eq!(system, json!([{"type": "text", "content": "Be brief."}]));
        assert_eq!(messages[1]["parts"][0]["arguments"], json!({"p": 1}));
        assert_eq!(messages[2]["parts"][0]["type"], "tool_call_response");
        let answer = json!({"type": "message", "role": "assistant",
            "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn"});
        let adapter = &crate::protocol::anthropic::Anthropic;
        let out: Value =
            serde_json::from_str(&output(adapter, &answer).expect("output")).expect("json");
        assert_eq!(out[0]["finish_reason"], "end_turn");
        assert_eq!(out[0]["parts"][0]["content"], "ok");
    }

    #[test]
    fn responses_items() {
        let body = json!({"model": "m", "instructions": "Be brief.", "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {"type": "function_call", "call_id": "c1", "name": "read", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "file"}
        ]});
        let (messages, system) = input(body.to_string().as_bytes());
        let messages: Value = serde_json::from_str(&messages.expect("messages")).expect("json");
        assert!(system.is_some());
        assert_eq!(messages[0]["parts"][0]["content"], "hi");
        assert_eq!(messages[1]["role"], "assistant");
        assert_eq!(messages[1]["parts"][0]["id"], "c1");
        assert_eq!(messages[2]["role"], "tool");
        assert_eq!(messages[2]["parts"][0]["response"], "file");
    }
}
