//! Responses streaming as the real API frames it: `event:` + `data:` per
//! event, `sequence_number` counting up, `response.created` and
//! `response.in_progress` first, each output item added, filled and done,
//! then `response.completed` with the whole response and its usage.

use crate::replies::Reply;
use crate::responses;
use crate::sse::split;
use bytes::Bytes;
use serde_json::{json, Value};

/// Numbers events as they are framed.
struct Events(Vec<Bytes>);

impl Events {
    fn push(&mut self, mut event: Value) {
        let kind = event["type"].as_str().unwrap_or_default().to_string();
        event["sequence_number"] = json!(self.0.len());
        self.0
            .push(Bytes::from(format!("event: {kind}\ndata: {event}\n\n")));
    }
}

pub fn events(request: &Value, reply: &Reply, config: &crate::FakeConfig) -> Vec<Bytes> {
    let mut events = Events(Vec::new());
    opening(&mut events, request, reply);
    let output = responses::output(request, reply);
    for (index, item) in output.iter().enumerate() {
        item_events(&mut events, index, item, config.stream_chunks);
    }
    let listed = match config.responses_completed_without_output {
        true => Vec::new(),
        false => output,
    };
    let done = responses::response(
        request,
        reply,
        "completed",
        Value::Array(listed),
        responses::usage(reply),
    );
    events.push(json!({"type": "response.completed", "response": done}));
    events.0
}

/// A stream that fails before any output, as the API reports an input
/// larger than the window when streaming.
pub fn overflow(request: &Value, reply: &Reply) -> Vec<Bytes> {
    let mut events = Events(Vec::new());
    opening(&mut events, request, reply);
    let mut failed = responses::response(request, reply, "failed", json!([]), Value::Null);
    failed["error"] = json!({"code": "context_length_exceeded", "message": responses::OVERFLOW});
    events.push(json!({"type": "response.failed", "response": failed}));
    events.0
}

fn opening(events: &mut Events, request: &Value, reply: &Reply) {
    let started = responses::response(request, reply, "in_progress", json!([]), Value::Null);
    events.push(json!({"type": "response.created", "response": started}));
    events.push(json!({"type": "response.in_progress", "response": started}));
}

fn item_events(events: &mut Events, index: usize, item: &Value, chunks: usize) {
    let id = &item["id"];
    let mut added = item.clone();
    added["status"] = json!("in_progress");
    match item["type"].as_str() {
        Some("message") => {
            added["content"] = json!([]);
            events.push(
                json!({"type": "response.output_item.added", "output_index": index, "item": added}),
            );
            let text = item["content"][0]["text"].as_str().unwrap_or_default();
            let at = |extra: Value| {
                let mut event = json!({"item_id": id, "output_index": index, "content_index": 0});
                for (key, value) in extra.as_object().into_iter().flatten() {
                    event[key] = value.clone();
                }
                event
            };
            let empty =
                json!({"type": "output_text", "text": "", "annotations": [], "logprobs": []});
            events.push(at(
                json!({"type": "response.content_part.added", "part": empty}),
            ));
            for piece in split(text, chunks) {
                events.push(at(
                    json!({"type": "response.output_text.delta", "delta": piece, "logprobs": []}),
                ));
            }
            events.push(at(
                json!({"type": "response.output_text.done", "text": text, "logprobs": []}),
            ));
            events.push(at(
                json!({"type": "response.content_part.done", "part": item["content"][0]}),
            ));
        }
        Some("function_call") => {
            added["arguments"] = json!("");
            events.push(
                json!({"type": "response.output_item.added", "output_index": index, "item": added}),
            );
            let arguments = item["arguments"].as_str().unwrap_or_default();
            for piece in split(arguments, 2) {
                events.push(json!({"type": "response.function_call_arguments.delta", "item_id": id, "output_index": index, "delta": piece}));
            }
            events.push(json!({"type": "response.function_call_arguments.done", "item_id": id, "output_index": index, "arguments": arguments}));
        }
        _ => {
            events.push(
                json!({"type": "response.output_item.added", "output_index": index, "item": added}),
            );
        }
    }
    events.push(json!({"type": "response.output_item.done", "output_index": index, "item": item}));
}
