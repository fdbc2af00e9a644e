//! Step 2, identify: a Responses body outlined.
//!
//! A Responses body outlined: `input`'s items grouped into units by their
//! `type` alone, each unit kept as the span of its items' bytes. A re-sent
//! history costs two scans of its bytes (the items' spans, then their
//! `type` and `role`) and a parse of the leading system items, instead of
//! a parse of everything into values. An `input` that is a string (one
//! user message) is parsed whole, as [`parse_whole`] does; that function
//! is also the reference the fuzz target holds the outline to.

use super::{units, STATEFUL, SYSTEM_ROLES};
use crate::protocol::head::ItemHead;
use crate::protocol::resent::{split, Listed};
use crate::protocol::{ChatRequest, Outline, Span};
use bytes::Bytes;
use serde_json::{json, Map, Value};

/// The field a Responses body lists its input items under.
pub(super) const INPUT: &str = "input";

/// The outline of `body` with its units as spans; `None` when it is no
/// conversation Condenser can handle, and `parse_whole` when `input` is
/// not an array (a string is one user message).
pub fn outline(body: Bytes) -> Option<Outline> {
    let Listed {
        body: fields,
        items,
        prefixes,
    } = split(&body, INPUT)?;
    if is_stateful(&fields) {
        return None;
    }
    let Some(items) = items else {
        return parse_whole(&body);
    };
    // An item with no head does not parse, nor does the body then.
    let heads = items
        .iter()
        .map(|span| ItemHead::read(&body[span.clone()]))
        .collect::<Option<Vec<ItemHead>>>()?;
    let kinds: Vec<&str> = heads
        .iter()
        .map(|head| units::kind_of(head.kind.as_deref(), head.has_role))
        .collect();
    let leading = kinds
        .iter()
        .zip(&heads)
        .take_while(|(kind, head)| is_system(kind, head.role.as_deref().unwrap_or("")))
        .count();
    let system_items = items[..leading]
        .iter()
        .map(|span| serde_json::from_slice(&body[span.clone()]))
        .collect::<serde_json::Result<Vec<Value>>>()
        .ok()?;
    let instructions = fields.get("instructions").cloned().unwrap_or(Value::Null);
    let system = json!({"instructions": instructions, "input": system_items});
    let items = &items[leading..];
    let spans = units::runs(kinds[leading..].iter().copied())
        .into_iter()
        .map(|run| match run.len() {
            1 => Span::Item(items[run.start].clone()),
            _ => Span::Items(items[run.start].start..items[run.end - 1].end),
        })
        .collect();
    Outline::with_spans(body, fields, system, spans).map(|outline| outline.with_prefixes(prefixes))
}

/// The body parsed as values, units grouped from them: for what the
/// outline leaves aside, and the reference the outline must agree with.
pub fn parse_whole(body: &[u8]) -> Option<Outline> {
    let mut body: Map<String, Value> = serde_json::from_slice(body).ok()?;
    if is_stateful(&body) {
        return None;
    }
    // Moved out, not copied: `build` puts them back in the same place.
    let mut input = match body.get_mut("input")?.take() {
        Value::Array(items) => items,
        Value::String(text) => vec![json!({"role": "user", "content": text})],
        _ => return None,
    };
    let leading = input.iter().take_while(|item| is_system_item(item)).count();
    let rest = input.split_off(leading);
    let instructions = body.get("instructions").cloned().unwrap_or(Value::Null);
    let system = json!({"instructions": instructions, "input": input});
    ChatRequest::from_body(body, system, units::group(rest)).map(Outline::parsed)
}

fn is_stateful(body: &Map<String, Value>) -> bool {
    STATEFUL
        .iter()
        .any(|key| body.get(*key).is_some_and(|v| !v.is_null()))
}

fn is_system_item(item: &Value) -> bool {
    let role = item.get("role").and_then(Value::as_str).unwrap_or("");
    is_system(units::item_type(item), role)
}

fn is_system(kind: &str, role: &str) -> bool {
    kind == "message" && SYSTEM_ROLES.contains(&role)
}
