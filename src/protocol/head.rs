//! Step 2, identify: an item's kind read from its bytes.
//!
//! What an item of a message list is, read from its bytes: its `type` and
//! `role`, exactly as they read on the parsed item, without building the
//! rest of it (a tool output of many kilobytes is skipped, not copied).

use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use std::fmt;

/// The `role` of an item span, as `message.get("role")?.as_str()` would
/// read it on the parsed item (`""` for anything but a string), without
/// parsing the rest of the item.
pub fn role_of(text: &[u8]) -> String {
    ItemHead::read(text)
        .and_then(|head| head.role)
        .unwrap_or_default()
}

/// An item's `type` and `role` as `item.get(…)` reads them on the parsed
/// item, read without building the rest of it.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ItemHead {
    /// `type`, when it is a string.
    pub kind: Option<String>,
    /// `role`, when it is a string.
    pub role: Option<String>,
    /// Whether `role` is there at all, `null` included.
    pub has_role: bool,
}

/// The key serde_json's value parse takes, as an object's first key, for
/// raw JSON text to parse in the object's place.
const RAW_VALUE_MARKER: &str = "$serde_json::private::RawValue";

impl ItemHead {
    /// `None` when `item` is not JSON. An item serde_json scans but will
    /// not parse as a value (a lone surrogate escape, say) gets a head
    /// all the same: it is refused when its span is parsed.
    pub fn read(item: &[u8]) -> Option<Self> {
        match serde_json::from_slice::<HeadFields<'_>>(item) {
            Ok(fields) => Some(fields.head()),
            // Not an object, or one that names the raw-value marker, which
            // the value parse reads its own way: read it as it does.
            Err(_) => serde_json::from_slice::<Value>(item)
                .ok()
                .map(|item| Self::of(&item)),
        }
    }

    pub fn of(item: &Value) -> Self {
        let string = |key| item.get(key).and_then(Value::as_str).map(String::from);
        Self {
            kind: string("type"),
            role: string("role"),
            has_role: item.get("role").is_some(),
        }
    }
}

/// An object's `type` and `role`, unparsed, every other field skipped;
/// the last of repeated keys, as serde_json's map keeps.
struct HeadFields<'t> {
    kind: Option<&'t RawValue>,
    role: Option<&'t RawValue>,
}

impl HeadFields<'_> {
    fn head(&self) -> ItemHead {
        // Parsed as values, so a value naming the raw-value marker reads
        // as the value parse reads it.
        let string = |raw: Option<&RawValue>| match raw.map(Value::deserialize) {
            Some(Ok(Value::String(text))) => Some(text),
            _ => None,
        };
        ItemHead {
            kind: string(self.kind),
            role: string(self.role),
            has_role: self.role.is_some(),
        }
    }
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
                HeadKey::RawValueMarker => {
                    return Err(serde::de::Error::custom("the raw-value marker"))
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
    RawValueMarker,
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
                    RAW_VALUE_MARKER => HeadKey::RawValueMarker,
                    _ => HeadKey::Other,
                })
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_items_head_reads_as_on_the_parsed_item() {
        let marker = RAW_VALUE_MARKER;
        for item in [
            r#"{"type": "message", "role": "developer", "content": "x"}"#.to_string(),
            r#"{"role": "user", "role": "system", "type": "a", "type": "b"}"#.to_string(),
            r#"{"typ\u0065": "reasoning", "r\u006fle": "tool"}"#.to_string(),
            r#"{"type": 7, "role": null}"#.to_string(),
            r#"{"type": {"nested": "message"}, "role": ["system"]}"#.to_string(),
            r#"{"content": "no type, no role"}"#.to_string(),
            r#"42"#.to_string(),
            r#"["system"]"#.to_string(),
            format!(r#"{{"{marker}": "{{\"type\": \"reasoning\", \"role\": \"system\"}}"}}"#),
            format!(r#"{{"role": {{"{marker}": "\"developer\""}}, "type": "message"}}"#),
            format!(r#"{{"role": "user", "{marker}": "\"ignored: not the first key\""}}"#),
        ] {
            let parsed: Value = serde_json::from_str(&item).expect("the item parses");
            assert_eq!(
                ItemHead::read(item.as_bytes()),
                Some(ItemHead::of(&parsed)),
                "{item}"
            );
        }
    }

    #[test]
    fn an_item_that_is_not_json_has_no_head() {
        assert_eq!(ItemHead::read(br#"{"role": "user""#), None);
        assert_eq!(ItemHead::read(br#"{"role": "user"} x"#), None);
        assert_eq!(role_of(br#"{"role": "\ud800"}"#), "");
    }
}
