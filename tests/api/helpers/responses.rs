//! The Responses API as the test agent speaks it, the way Codex CLI does:
//! `store: false`, the whole history resent as input items every time,
//! reasoning items with their encrypted content passed back as received.

use serde_json::{json, Value};

/// The `developer` item that opens every request, as Codex's prompt does.
pub fn developer_item() -> Value {
    json!({"type": "message", "role": "developer", "content": [
        {"type": "input_text", "text": "Sandbox: workspace-write."}]})
}

pub fn request(model: &str, instructions: &str, history: &[Value]) -> Value {
    let mut input = vec![developer_item()];
    input.extend(history.iter().cloned());
    json!({
        "model": model,
        "instructions": instructions,
        "input": input,
        "tools": [{"type": "function", "name": "read_file", "description": "Read a file", "strict": false,
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}],
        "tool_choice": "auto",
        "parallel_tool_calls": true,
        "reasoning": {"effort": "low"},
        "store": false,
        "stream": false,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "session-1",
    })
}

/// The response object of a JSON reply or of a stream's
/// `response.completed` event (else the stream's last event, to show).
pub async fn read(response: reqwest::Response, stream: bool) -> Value {
    if !stream {
        return response.json().await.expect("json body");
    }
    let text = response.text().await.expect("body");
    let mut last = Value::Null;
    for data in text.lines().filter_map(|l| l.strip_prefix("data: ")) {
        let Ok(event) = serde_json::from_str::<Value>(data) else {
            continue;
        };
        if event["type"] == "response.completed" {
            return event["response"].clone();
        }
        last = event;
    }
    last
}

pub fn user_item(text: &str) -> Value {
    json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
}

pub fn assistant_item(text: &str) -> Value {
    json!({"type": "message", "role": "assistant", "content": [
        {"type": "output_text", "text": text, "annotations": []}]})
}

/// Function calls in `history` that no output answers yet.
pub fn pending_calls(history: &[Value]) -> Vec<String> {
    let answered: Vec<&str> = history
        .iter()
        .filter(|i| i["type"] == "function_call_output")
        .filter_map(|i| i["call_id"].as_str())
        .collect();
    history
        .iter()
        .filter(|i| i["type"] == "function_call")
        .filter_map(|i| i["call_id"].as_str())
        .filter(|id| !answered.contains(id))
        .map(String::from)
        .collect()
}
