//! A parsed chat request: the parts Condenser reads, and the whole body so
//! that every field it does not understand is kept as sent.

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
