//! A Responses body outlined: `input`'s items grouped into units from
//! their `type` alone, each unit kept as the span of its items' bytes, so
//! a re-sent history costs two scans of its bytes (the items, then their
//! types) instead of a parse into values. Bodies the outline does not
//! cover (`input` as a string, an item that is no object) are parsed
//! whole, as [`parse_whole`] does, which is also the reference the fuzz
//! target holds the outline to.

use super::{units, STATEFUL, SYSTEM_ROLES};
use crate::protocol::request::split;
use crate::protocol::{ChatRequest, Outline, Span};
use bytes::Bytes;
use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};
use std::borrow::Cow;
use std::fmt;

pub fn outline(body: Bytes) -> Option<Outline> {
    match outline_units(body.clone()) {
        Ok(outline) => outline,
        Err(Unusual) => parse_whole(&body),
    }
}

fn is_stateful(body: &Map<String, Value>) -> bool {
    STATEFUL
        .iter()
        .any(|key| body.get(*key).is_some_and(|v| !v.is_null()))
}

/// A body the outline leaves to a whole parse: `input` as a string, or an
/// item that is not a JSON object.
struct Unusual;

/// The outline of `body` with its units as spans; `Ok(None)` when it is
/// no conversation Condenser can handle.
fn outline_units(body: Bytes) -> Result<Option<Outline>, Unusual> {
    let Some((fields, items)) = split(&body, "input") else {
        return Ok(None);
    };
    if is_stateful(&fields) {
        return Ok(None);
    }
    let items = items.ok_or(Unusual)?;
    let heads = items
        .iter()
        .map(|span| Head::read(&body[span.clone()]))
        .collect::<Option<Vec<Head>>>()
        .ok_or(Unusual)?;
    let leading = heads.iter().take_while(|head| head.is_system()).count();
    let Ok(system_items) = items[..leading]
        .iter()
        .map(|span| serde_json::from_slice(&body[span.clone()]))
        .collect::<serde_json::Result<Vec<Value>>>()
    else {
        return Ok(None);
    };
    let instructions = fields.get("instructions").cloned().unwrap_or(Value::Null);
    let system = json!({"instructions": instructions, "input": system_items});
    let (items, heads) = (&items[leading..], &heads[leading..]);
    let spans = units::runs(heads.iter().map(|head| head.kind.as_ref()))
        .into_iter()
        .map(|run| match run.len() {
            1 => Span::Item(items[run.start].clone()),
            _ => Span::Items(items[run.start].start..items[run.end - 1].end),
        })
        .collect();
    Ok(Outline::with_spans(body, fields, system, spans))
}

/// What grouping and the system part need of an item: its type, as
/// [`units::item_type`] reads it, and its role.
struct Head {
    kind: Cow<'static, str>,
    role: String,
}

impl Head {
    /// `None` when `item` is not a JSON object.
    fn read(item: &[u8]) -> Option<Self> {
        let fields: HeadFields<'_> = serde_json::from_slice(item).ok()?;
        let string = |raw: Option<&RawValue>| raw.and_then(|raw| String::deserialize(raw).ok());
        let kind = match string(fields.kind) {
            Some(kind) => Cow::Owned(kind),
            None if fields.role.is_some() => Cow::Borrowed("message"),
            None => Cow::Borrowed(""),
        };
        let role = string(fields.role).unwrap_or_default();
        Some(Self { kind, role })
    }

    fn is_system(&self) -> bool {
        is_system(&self.kind, &self.role)
    }
}

/// An item's `type` and `role`, unparsed, every other field skipped; the
/// last of repeated keys, as serde_json's map keeps.
struct HeadFields<'t> {
    kind: Option<&'t RawValue>,
    role: Option<&'t RawValue>,
}

impl<'de> Deserialize<'de> for HeadFields<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(HeadVisitor)
    }
}

struct HeadVisitor;

impl<'de> Visitor<'de> for HeadVisitor {
    type Value = HeadFields<'de>;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<HeadFields<'de>, A::Error> {
        let mut head = HeadFields {
            kind: None,
            role: None,
        };
        while let Some(key) = map.next_key::<HeadKey>()? {
            match key {
                HeadKey::Type => head.kind = Some(map.next_value()?),
                HeadKey::Role => head.role = Some(map.next_value()?),
                HeadKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(head)
    }
}

/// A key of an item, read without keeping it.
enum HeadKey {
    Type,
    Role,
    Other,
}

impl<'de> Deserialize<'de> for HeadKey {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = HeadKey;

            fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
                formatter.write_str("a key")
            }

            fn visit_str<E>(self, key: &str) -> Result<HeadKey, E> {
                Ok(match key {
                    "type" => HeadKey::Type,
                    "role" => HeadKey::Role,
                    _ => HeadKey::Other,
                })
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
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

fn is_system_item(item: &Value) -> bool {
    let role = item.get("role").and_then(Value::as_str).unwrap_or("");
    is_system(units::item_type(item), role)
}

fn is_system(kind: &str, role: &str) -> bool {
    kind == "message" && SYSTEM_ROLES.contains(&role)
}
