//! Steps 2 and 7: Responses items as text.
//!
//! Reading Responses items as text: canonical forms for identity, transcript
//! lines for summary calls, tool outputs for trimming.

use super::units::{item_type, items};
use crate::protocol::canonical::canonical_json;
use crate::protocol::elide_middle;
// Message contents and tool outputs: a string, or parts with `text`.
use crate::protocol::text_of;
use serde_json::Value;
use std::borrow::Cow;

const TEXT_PARTS: &[&str] = &["input_text", "output_text", "text"];

/// A message item as clients send it interchangeably: `type: "message"` or
/// not, one text part or a string.
pub fn canonical(unit: &Value) -> Vec<u8> {
    match unit {
        Value::Array(items) => {
            let items: Vec<Value> = items
                .iter()
                .map(|i| canonical_item(i).into_owned())
                .collect();
            canonical_json(&Value::Array(items), &["cache_control"])
        }
        item => canonical_json(&canonical_item(item), &["cache_control"]),
    }
}

fn canonical_item(item: &Value) -> Cow<'_, Value> {
    if item_type(item) != "message" {
        return Cow::Borrowed(item);
    }
    let mut message = item.clone();
    if let Some(map) = message.as_object_mut() {
        map.remove("type");
        if let Some(text) = map.get("content").and_then(single_text_part) {
            map.insert("content".into(), Value::String(text));
        }
    }
    Cow::Owned(message)
}

fn single_text_part(content: &Value) -> Option<String> {
    let [part] = content.as_array()?.as_slice() else {
        return None;
    };
    let kind = part.get("type")?.as_str()?;
    TEXT_PARTS
        .contains(&kind)
        .then(|| part.get("text")?.as_str().map(str::to_string))?
}

/// Reasoning items are left out: they are the model's private reasoning,
/// encrypted, and not meant to be read back.
pub fn transcript(unit: &Value) -> String {
    items(unit)
        .iter()
        .filter_map(transcript_item)
        .collect::<Vec<_>>()
        .join("\n")
}

fn transcript_item(item: &Value) -> Option<String> {
    let str_field = |key: &str| item.get(key).and_then(Value::as_str).unwrap_or("?");
    let kind = item_type(item);
    Some(match kind {
        "message" => format!("[{}] {}", str_field("role"), text_of(item.get("content"))),
        "reasoning" => return None,
        "function_call" => format!(
            "[assistant] → tool call {}({})",
            str_field("name"),
            str_field("arguments")
        ),
        "custom_tool_call" => format!(
            "[assistant] → tool call {}({})",
            str_field("name"),
            str_field("input")
        ),
        _ if kind.ends_with("_call_output") => format!(
            "[tool] ← tool result ({}): {}",
            str_field("call_id"),
            text_of(item.get("output"))
        ),
        other => format!("[{other}, {} bytes]", item.to_string().len()),
    })
}

/// A unit with its largest tool output cut to about `keep_bytes`; the
/// output's original and kept sizes.
pub fn trim_largest_output(unit: &Value, keep_bytes: usize) -> Option<(Value, usize, usize)> {
    let (index, text) = items(unit)
        .iter()
        .enumerate()
        .filter(|(_, item)| item_type(item).ends_with("_call_output"))
        .map(|(index, item)| (index, text_of(item.get("output"))))
        .max_by_key(|(_, text)| text.len())?;
    let cut = elide_middle(&text, keep_bytes)?;
    let (original, kept) = (text.len(), cut.len());
    let mut trimmed = unit.clone();
    let item = match &mut trimmed {
        Value::Array(items) => &mut items[index],
        item => item,
    };
    item["output"] = Value::String(cut);
    Some((trimmed, original, kept))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn message_spellings_hash_alike_and_reasoning_is_kept_exact() {
        let short = json!({"role": "user", "content": "hi"});
        let long = json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]});
        assert_eq!(canonical(&short), canonical(&long));
        let a = json!([{"type": "reasoning", "encrypted_content": "a"}, short]);
        let b = json!([{"type": "reasoning", "encrypted_content": "b"}, long]);
        assert_ne!(canonical(&a), canonical(&b));
    }

    #[test]
    fn the_transcript_names_calls_and_outputs_but_not_reasoning() {
        let unit = json!([
            {"type": "reasoning", "encrypted_content": "secret"},
            {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{\"cmd\":\"ls\"}"}
        ]);
        assert_eq!(
            transcript(&unit),
            "[assistant] → tool call shell({\"cmd\":\"ls\"})"
        );
        let output = json!({"type": "function_call_output", "call_id": "c1", "output": "a.txt"});
        assert_eq!(transcript(&output), "[tool] ← tool result (c1): a.txt");
    }

    #[test]
    fn the_largest_output_is_trimmed_and_keeps_its_call_id() {
        let output =
            json!({"type": "function_call_output", "call_id": "c1", "output": "x".repeat(5000)});
        let (trimmed, original, kept) = trim_largest_output(&output, 1000).expect("trimmed");
        assert_eq!(trimmed["call_id"], "c1");
        assert_eq!(original, 5000);
        assert!(kept < 1200);
        assert!(trimmed["output"]
            .as_str()
            .expect("text")
            .contains("condenser trimmed"));
        let call = json!({"type": "function_call", "call_id": "c1", "arguments": "x".repeat(5000)});
        assert!(trim_largest_output(&call, 10).is_none());
    }
}
