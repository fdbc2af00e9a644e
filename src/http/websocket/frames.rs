//! Step 1, accept: the frames of the Responses API's WebSocket mode.
//!
//! What a client may send (`response.create`, and `response.processed`,
//! Codex's acknowledgement of an answer it has handled) and the error frame
//! Condenser answers with. Frames are read by their `type` alone; every
//! other field of a `response.create` is the request body, passed on as
//! the client wrote it.

use crate::error::ProxyError;
use crate::protocol::Protocol;
use http::HeaderMap;
use serde_json::{json, Map, Value};

/// One text frame from the client, as read.
pub enum ClientFrame {
    /// A request: the frame's fields without its `type`.
    Create(Map<String, Value>),
    /// An answer the client has handled: nothing to do here.
    Processed,
    /// A frame whose `type` the mode does not define.
    Unknown(String),
    /// Not a JSON object with a string `type`.
    Malformed(String),
}

pub fn read(text: &str) -> ClientFrame {
    let mut fields = match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(fields)) => fields,
        Ok(_) => return ClientFrame::Malformed("a frame is a JSON object".into()),
        Err(error) => return ClientFrame::Malformed(format!("not JSON: {error}")),
    };
    let kind = match fields.shift_remove("type") {
        Some(Value::String(kind)) => kind,
        _ => return ClientFrame::Malformed("a frame needs a string \"type\"".into()),
    };
    match kind.as_str() {
        "response.create" => ClientFrame::Create(fields),
        "response.processed" => ClientFrame::Processed,
        _ => ClientFrame::Unknown(kind),
    }
}

/// The mode's error frame for an answer of `status`: the `error` object
/// the HTTP path would have sent in its body, and Condenser's own headers
/// (what was tried), as the mode carries headers in an error frame.
pub fn error(status: u16, body: &Value, headers: &HeaderMap) -> String {
    let error = body.get("error").cloned().unwrap_or_else(|| body.clone());
    let mut frame = json!({"type": "error", "status": status, "error": error});
    let condenser: Map<String, Value> = headers
        .iter()
        .filter(|(name, _)| name.as_str().starts_with("x-condenser-"))
        .filter_map(|(name, value)| Some((name.to_string(), json!(value.to_str().ok()?))))
        .collect();
    if !condenser.is_empty() {
        frame["headers"] = Value::Object(condenser);
    }
    frame.to_string()
}

/// The error frame of an error Condenser raises itself.
pub fn proxy_error(error: &ProxyError, protocol: Protocol) -> String {
    self::error(
        error.status().as_u16(),
        &error.body(protocol),
        &HeaderMap::new(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_create_frame_is_its_fields_without_the_type() {
        let ClientFrame::Create(fields) =
            read(r#"{"type":"response.create","model":"m","input":[]}"#)
        else {
            panic!("not a create frame")
        };
        assert_eq!(Value::Object(fields), json!({"model": "m", "input": []}));
    }

    #[test]
    fn other_frames_are_told_apart() {
        assert!(matches!(
            read(r#"{"type":"response.processed","response_id":"r"}"#),
            ClientFrame::Processed
        ));
        assert!(
            matches!(read(r#"{"type":"session.update"}"#), ClientFrame::Unknown(kind) if kind == "session.update")
        );
        for malformed in ["{", "[]", r#"{"type":1}"#, r#"{"model":"m"}"#] {
            assert!(
                matches!(read(malformed), ClientFrame::Malformed(_)),
                "{malformed}"
            );
        }
    }

    #[test]
    fn an_error_frame_carries_the_error_object_and_condensers_headers() {
        let mut headers = HeaderMap::new();
        headers.insert(
            "x-condenser-compaction-error",
            "cannot_fit".parse().expect("value"),
        );
        headers.insert("authorization", "Bearer k".parse().expect("value"));
        let body = json!({"error": {"code": "context_length_exceeded", "message": "too long"}});
        let frame: Value = serde_json::from_str(&error(400, &body, &headers)).expect("json");
        assert_eq!(
            frame,
            json!({"type": "error", "status": 400, "error": body["error"],
                   "headers": {"x-condenser-compaction-error": "cannot_fit"}})
        );
    }
}
