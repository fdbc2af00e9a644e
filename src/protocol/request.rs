//! A parsed chat request: the parts Condenser reads, and the whole body so
//! that every field it does not understand is kept as sent.

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value};

#[derive(Debug, Clone)]
pub struct ChatRequest {
    /// The body as sent, key order preserved, with `messages` moved out
    /// (null in place) into `system` and `messages`.
    pub body: Map<String, Value>,
    /// The system part, identity's root: OpenAI's leading system/developer
    /// messages, Anthropic's `system` field (null when absent).
    pub system: Value,
    /// The conversation after the system part.
    pub messages: Vec<Value>,
    pub model: String,
    pub stream: bool,
}

impl ChatRequest {
    pub fn from_body(
        body: Map<String, Value>,
        system: Value,
        messages: Vec<Value>,
    ) -> Option<Self> {
        let model = body.get("model")?.as_str()?.to_string();
        let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
        Some(Self {
            body,
            system,
            messages,
            model,
            stream,
        })
    }
}

/// `body` with the list under `key` replaced by `list`, serialized without
/// copying either: a rewritten request costs one pass over its bytes.
pub fn serialize_replacing(body: &Map<String, Value>, key: &str, list: &[&Value]) -> Vec<u8> {
    let replaced = Replaced { body, key, list };
    // Serializing a JSON value into a Vec cannot fail.
    serde_json::to_vec(&replaced).unwrap_or_default()
}

struct Replaced<'a> {
    body: &'a Map<String, Value>,
    key: &'a str,
    list: &'a [&'a Value],
}

impl Serialize for Replaced<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let present = self.body.contains_key(self.key);
        let len = self.body.len() + usize::from(!present);
        let mut map = serializer.serialize_map(Some(len))?;
        for (name, value) in self.body {
            if name == self.key {
                map.serialize_entry(name, self.list)?;
            } else {
                map.serialize_entry(name, value)?;
            }
        }
        if !present {
            map.serialize_entry(self.key, self.list)?;
        }
        map.end()
    }
}
