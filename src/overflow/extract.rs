//! Step 6, detect overflow: reading error bodies.
//!
//! Reading an error body of any shape: the message-like strings to run
//! patterns on, and the JSON fields (`code`, `type`, `n_ctx`, …) to check.
//!
//! Providers disagree on the envelope (OpenAI `{"error":{"message"}}`, vLLM's
//! flat `{"object":"error","message"}`, Gemini's array, FastAPI `detail`,
//! Ollama's `error` string, Bedrock's `errorMessage`, OpenRouter's upstream
//! body as a string in `metadata.raw`), so we walk the whole tree instead of
//! knowing each one.

use serde_json::Value;

/// Keys whose string values are human-readable error text.
const MESSAGE_KEYS: &[&str] = &[
    "message",
    "msg",
    "detail",
    "details",
    "error",
    "errormessage",
    "error_message",
    "status_msg",
    "raw",
];

/// Keys whose string values classify an error; vetoes look at them too
/// because a rate limit often says so only in its `code`.
const TAG_KEYS: &[&str] = &[
    "code",
    "type",
    "__type",
    "errortype",
    "error_type",
    "status",
];

/// Deep enough for every envelope seen, shallow enough to bound the walk.
const MAX_DEPTH: usize = 8;

/// Non-JSON bodies (HTML from a proxy, plain text) are read only this far.
const MAX_TEXT: usize = 16 * 1024;

/// An upstream error reduced to what signatures look at.
#[derive(Debug, Default)]
pub(super) struct ErrorView {
    /// Message-like strings, lower-cased (built-in patterns are written in
    /// lower case, which halves their compile time against `(?i)`), in
    /// document order; never empty for a body.
    pub messages: Vec<String>,
    /// Values of classifying fields such as `code` and `type`, lower-cased.
    pub tags: Vec<String>,
    root: Option<Value>,
}

impl ErrorView {
    /// Reads an HTTP error body. Text that is not JSON, or JSON without any
    /// message field, becomes the one message so patterns still see it.
    pub(super) fn from_body(body: &[u8]) -> Self {
        let text = String::from_utf8_lossy(body);
        let root = parse_json(&text);
        let mut view = Self::from_root(root);
        if view.messages.is_empty() {
            view.messages
                .push(truncate(text.trim(), MAX_TEXT).to_lowercase());
        }
        view
    }

    /// Reads one SSE `data:` payload; `None` unless it is a JSON error event,
    /// so a content chunk that merely quotes an error text never counts.
    pub(super) fn from_event(data: &str) -> Option<Self> {
        let data = data.trim_start();
        let data = data.strip_prefix("data:").unwrap_or(data);
        let root = parse_json(data)?;
        is_error_event(&root).then(|| Self::from_root(Some(root)))
    }

    fn from_root(root: Option<Value>) -> Self {
        let mut view = Self::default();
        if let Some(value) = &root {
            collect(value, 0, &mut view);
        }
        view.root = root;
        view
    }

    /// Every string vetoes are checked against.
    pub(super) fn texts(&self) -> impl Iterator<Item = &str> {
        self.messages.iter().chain(&self.tags).map(String::as_str)
    }

    /// True when some field `key` anywhere holds `expected` (any case).
    pub(super) fn field_equals(&self, key: &str, expected: &str) -> bool {
        self.find(key, |v| {
            v.as_str().filter(|s| s.eq_ignore_ascii_case(expected))
        })
        .is_some()
    }

    /// True when some field `key` exists anywhere, whatever its value.
    pub(super) fn has_field(&self, key: &str) -> bool {
        self.find(key, Some).is_some()
    }

    /// The first non-negative integer field `key` (llama.cpp's `n_ctx`).
    pub(super) fn number(&self, key: &str) -> Option<u64> {
        self.find(key, Value::as_u64)
    }

    /// The first field named `key` (any case) for which `pick` yields a value.
    fn find<'v, T>(&'v self, key: &str, pick: impl Fn(&'v Value) -> Option<T>) -> Option<T> {
        let root = self.root.as_ref()?;
        find(root, key, 0, &pick)
    }
}

fn parse_json(text: &str) -> Option<Value> {
    // Cheap gate: most non-JSON bodies (HTML, plain text) fail here.
    let first = text.trim_start().bytes().next()?;
    matches!(first, b'{' | b'[' | b'"')
        .then(|| serde_json::from_str(text).ok())
        .flatten()
}

/// The shapes an in-band stream error takes: OpenAI Responses `type` error
/// or response.failed, Anthropic `type` error, vLLM's `object: error`,
/// SGLang's non-null `error`, Venice's `error_type` / `error_message`.
fn is_error_event(root: &Value) -> bool {
    let Some(obj) = root.as_object() else {
        return false;
    };
    let str_field = |key: &str| obj.get(key).and_then(Value::as_str);
    matches!(str_field("type"), Some("error" | "response.failed"))
        || str_field("object") == Some("error")
        || obj.get("error").is_some_and(|e| !e.is_null())
        || obj.contains_key("error_type")
        || obj.contains_key("error_message")
}

fn collect(value: &Value, depth: usize, view: &mut ErrorView) {
    if depth > MAX_DEPTH {
        return;
    }
    match value {
        Value::String(s) if depth == 0 => view.messages.push(s.to_lowercase()),
        Value::Array(items) => items.iter().for_each(|v| collect(v, depth + 1, view)),
        Value::Object(map) => {
            for (key, v) in map {
                if let Some(s) = v.as_str() {
                    let key = key.to_ascii_lowercase();
                    if MESSAGE_KEYS.contains(&key.as_str()) {
                        view.messages.push(s.to_lowercase());
                    } else if TAG_KEYS.contains(&key.as_str()) {
                        view.tags.push(s.to_lowercase());
                    }
                } else {
                    collect(v, depth + 1, view);
                }
            }
        }
        _ => {}
    }
}

fn find<'v, T>(
    value: &'v Value,
    key: &str,
    depth: usize,
    pick: &impl Fn(&'v Value) -> Option<T>,
) -> Option<T> {
    if depth > MAX_DEPTH {
        return None;
    }
    match value {
        Value::Array(items) => items.iter().find_map(|v| find(v, key, depth + 1, pick)),
        Value::Object(map) => map.iter().find_map(|(k, v)| {
            let own = k.eq_ignore_ascii_case(key).then(|| pick(v)).flatten();
            own.or_else(|| find(v, key, depth + 1, pick))
        }),
        _ => None,
    }
}

fn truncate(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}
