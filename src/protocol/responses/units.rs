//! Steps 2 and 7: Responses items grouped into units.
//!
//! Responses `input` items grouped into the units the pipeline stores,
//! hashes and cuts between.
//!
//! A unit is one item, or a JSON array of items that must never be parted:
//! reasoning items with the item that follows them (the API refuses a
//! reasoning item "without its required following item", and an output item
//! "without its required 'reasoning' item"), and item types Condenser does
//! not know with the unit before them (they belong to that turn). Calls and
//! their outputs are paired by `call_id` through [`ToolLinks`], as in the
//! other protocols, so cuts keep them whole as well.

use crate::protocol::ToolLinks;
use serde_json::Value;
use std::ops::Range;

/// Item types whose pairing Condenser understands; every other type is
/// opaque and stays with the unit before it.
const KNOWN: &[&str] = &[
    "message",
    "reasoning",
    "function_call",
    "function_call_output",
    "custom_tool_call",
    "custom_tool_call_output",
];

pub fn item_type(item: &Value) -> &str {
    kind_of(
        item.get("type").and_then(Value::as_str),
        item.get("role").is_some(),
    )
}

/// An item's type from its `type` (when a string) and whether it has a
/// `role`: the short form `{"role": …, "content": …}` is a message.
pub fn kind_of(kind: Option<&str>, has_role: bool) -> &str {
    match kind {
        Some(kind) => kind,
        None if has_role => "message",
        None => "",
    }
}

fn is_known(kind: &str) -> bool {
    KNOWN.contains(&kind) || is_call(kind) || is_output(kind)
}

/// `function_call`, `custom_tool_call`, `local_shell_call`, `computer_call`, …
fn is_call(kind: &str) -> bool {
    kind.ends_with("_call")
}

fn is_output(kind: &str) -> bool {
    kind.ends_with("_call_output")
}

/// The items of a unit.
pub fn items(unit: &Value) -> &[Value] {
    match unit {
        Value::Array(items) => items,
        item => std::slice::from_ref(item),
    }
}

/// Groups `input` (after the system part) into units.
pub fn group(input: Vec<Value>) -> Vec<Value> {
    let runs = runs(input.iter().map(item_type));
    let mut input = input.into_iter();
    runs.into_iter()
        .map(|run| {
            let mut unit: Vec<Value> = input.by_ref().take(run.len()).collect();
            match unit.len() {
                1 => unit.pop().unwrap_or_default(),
                _ => Value::Array(unit),
            }
        })
        .collect()
}

/// The units of items of these types, in order: each a run of items.
pub fn runs<'k>(kinds: impl IntoIterator<Item = &'k str>) -> Vec<Range<usize>> {
    let mut units: Vec<Range<usize>> = Vec::new();
    // Where the reasoning items waiting for their following item start.
    let mut reasoning = None;
    let mut count = 0;
    for (index, kind) in kinds.into_iter().enumerate() {
        count = index + 1;
        if kind == "reasoning" {
            reasoning.get_or_insert(index);
        } else if let Some(start) = reasoning.take() {
            units.push(start..index + 1);
        } else if let (false, Some(last)) = (is_known(kind), units.last_mut()) {
            last.end = index + 1;
        } else {
            units.push(index..index + 1);
        }
    }
    if let Some(start) = reasoning {
        units.push(start..count);
    }
    units
}

/// The calls a unit makes and the outputs it carries, by `call_id`.
pub fn tool_links(unit: &Value) -> ToolLinks {
    let mut links = ToolLinks::default();
    for item in items(unit) {
        let kind = item_type(item);
        let Some(id) = item.get("call_id").and_then(Value::as_str) else {
            continue;
        };
        if is_output(kind) {
            links.results.push(id.to_string());
        } else if is_call(kind) {
            links.calls.push(id.to_string());
        }
    }
    links
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reasoning_stays_with_the_item_after_it() {
        let input = vec![
            json!({"role": "user", "content": "hi"}),
            json!({"type": "reasoning", "id": "rs_1", "encrypted_content": "e1"}),
            json!({"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}),
            json!({"type": "function_call_output", "call_id": "c1", "output": "42"}),
            json!({"type": "reasoning", "id": "rs_2", "encrypted_content": "e2"}),
            json!({"type": "reasoning", "id": "rs_3", "encrypted_content": "e3"}),
            json!({"type": "message", "role": "assistant", "content": []}),
        ];
        let units = group(input.clone());
        assert_eq!(units.len(), 4);
        assert_eq!(items(&units[1]), &input[1..3]);
        assert_eq!(items(&units[3]), &input[4..7]);
        assert_eq!(tool_links(&units[1]).calls, ["c1"]);
        assert_eq!(tool_links(&units[2]).results, ["c1"]);
    }

    #[test]
    fn unknown_items_belong_to_the_unit_before_them() {
        let input = vec![
            json!({"type": "web_search_call", "id": "ws_1", "status": "completed"}),
            json!({"role": "user", "content": "hi"}),
            json!({"type": "item_reference", "id": "msg_1"}),
            json!({"type": "local_shell_call", "call_id": "s1", "action": {}}),
            json!({"type": "local_shell_call_output", "call_id": "s1", "output": "ok"}),
        ];
        let units = group(input.clone());
        assert_eq!(units.len(), 4);
        assert_eq!(items(&units[1]), &input[1..3]);
        assert_eq!(tool_links(&units[2]).calls, ["s1"]);
        assert_eq!(tool_links(&units[3]).results, ["s1"]);
    }

    #[test]
    fn a_trailing_reasoning_item_is_a_unit_of_its_own() {
        let units = group(vec![json!({"type": "reasoning", "id": "rs_1"})]);
        assert_eq!(units, vec![json!({"type": "reasoning", "id": "rs_1"})]);
    }
}
