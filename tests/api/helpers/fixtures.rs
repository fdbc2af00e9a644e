//! Official request shapes, from the providers' API references.

use serde_json::Value;

pub fn load(name: &str) -> Value {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing {path}: {e}"))
}

pub fn with_stream(mut request: Value) -> Value {
    request["stream"] = Value::Bool(true);
    request
}
