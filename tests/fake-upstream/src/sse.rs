//! Server-sent events framed as each API frames them, usage in the final
//! events, with an optional delay between events.

use crate::config::FakeConfig;
use crate::replies::Reply;
use crate::state::Protocol;
use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::time::Duration;

pub fn stream(protocol: Protocol, request: &Value, reply: Reply, config: &FakeConfig) -> Response {
    let chunks = split(&reply.text, config.stream_chunks);
    let events = match protocol {
        Protocol::OpenAi => openai_events(request, &reply, &chunks),
        Protocol::Anthropic => anthropic_events(&reply, &chunks),
        Protocol::Responses => crate::responses_sse::events(request, &reply, config),
    };
    respond(events, config.chunk_delay)
}

/// A 200 whose stream opens with this payload, as when an API fails after
/// the headers have gone out.
pub fn single_event(data: &str) -> Response {
    let is_anthropic_error =
        serde_json::from_str::<Value>(data).is_ok_and(|v| v["type"] == "error");
    let event = if is_anthropic_error {
        format!("event: error\ndata: {data}\n\n")
    } else {
        format!("data: {data}\n\n")
    };
    respond(vec![Bytes::from(event)], Duration::ZERO)
}

pub fn respond(events: Vec<Bytes>, delay: Duration) -> Response {
    let paced = futures_util::stream::iter(events.into_iter().enumerate()).then(
        move |(index, event)| async move {
            if index > 0 && !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            Ok::<_, Infallible>(event)
        },
    );
    Response::builder()
        .header("content-type", "text/event-stream; charset=utf-8")
        .header("cache-control", "no-cache")
        .body(Body::from_stream(paced))
        .expect("static response parts")
}

/// `count` pieces of roughly equal length, on character boundaries.
pub fn split(text: &str, count: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let size = chars.len().div_ceil(count.max(1)).max(1);
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

fn data(value: &Value) -> Bytes {
    Bytes::from(format!("data: {value}\n\n"))
}

fn named(event: &str, value: &Value) -> Bytes {
    Bytes::from(format!("event: {event}\ndata: {value}\n\n"))
}

fn openai_events(request: &Value, reply: &Reply, chunks: &[String]) -> Vec<Bytes> {
    let include_usage = request["stream_options"]["include_usage"] == true;
    let chunk = |delta: Value, finish: Value| {
        let mut value = json!({
            "id": reply.id, "object": "chat.completion.chunk", "created": 1_760_000_000u64, "model": reply.model,
            "service_tier": "default", "system_fingerprint": "fp_fake0001",
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]
        });
        if include_usage {
            value["usage"] = Value::Null;
        }
        data(&value)
    };
    let mut events = vec![chunk(
        json!({"role": "assistant", "content": "", "refusal": null}),
        Value::Null,
    )];
    if reply.tool_calls.is_empty() {
        events.extend(
            chunks
                .iter()
                .map(|piece| chunk(json!({"content": piece}), Value::Null)),
        );
    }
    for (index, call) in reply.tool_calls.iter().enumerate() {
        let opening = json!({"index": index, "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}});
        events.push(chunk(json!({"tool_calls": [opening]}), Value::Null));
        for piece in split(&call.arguments, 2) {
            events.push(chunk(
                json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}),
                Value::Null,
            ));
        }
    }
    events.push(chunk(json!({}), json!(reply.openai_finish_reason())));
    if include_usage {
        let mut usage = json!({
            "id": reply.id, "object": "chat.completion.chunk", "created": 1_760_000_000u64, "model": reply.model,
            "service_tier": "default", "system_fingerprint": "fp_fake0001", "choices": []
        });
        usage["usage"] = reply.openai_usage();
        events.push(data(&usage));
    }
    events.push(Bytes::from_static(b"data: [DONE]\n\n"));
    events
}

fn anthropic_events(reply: &Reply, chunks: &[String]) -> Vec<Bytes> {
    let mut usage = reply.anthropic_usage();
    usage["output_tokens"] = json!(1);
    let message = json!({
        "id": reply.id, "type": "message", "role": "assistant", "model": reply.model, "content": [],
        "stop_reason": null, "stop_sequence": null, "usage": usage
    });
    let mut events = vec![named(
        "message_start",
        &json!({"type": "message_start", "message": message}),
    )];
    for (index, block) in reply.anthropic_blocks().iter().enumerate() {
        events.extend(anthropic_block(index, block, chunks));
        if index == 0 {
            events.push(named("ping", &json!({"type": "ping"})));
        }
    }
    let delta = json!({
        "type": "message_delta",
        "delta": {"stop_reason": reply.anthropic_stop_reason(), "stop_sequence": null},
        "usage": {"output_tokens": reply.output_tokens}
    });
    events.push(named("message_delta", &delta));
    events.push(named("message_stop", &json!({"type": "message_stop"})));
    events
}

/// One content block: its start with empty content, deltas, its stop.
fn anthropic_block(index: usize, block: &Value, text_chunks: &[String]) -> Vec<Bytes> {
    let delta = |delta: Value| {
        named(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": index, "delta": delta}),
        )
    };
    let (start, deltas) = match block["type"].as_str() {
        Some("thinking") => {
            let pieces = split(block["thinking"].as_str().unwrap_or_default(), 2);
            let mut deltas: Vec<Bytes> = pieces
                .iter()
                .map(|p| delta(json!({"type": "thinking_delta", "thinking": p})))
                .collect();
            deltas.push(delta(
                json!({"type": "signature_delta", "signature": block["signature"]}),
            ));
            (
                json!({"type": "thinking", "thinking": "", "signature": ""}),
                deltas,
            )
        }
        Some("tool_use") => {
            let pieces = split(&block["input"].to_string(), 2);
            let deltas = pieces
                .iter()
                .map(|p| delta(json!({"type": "input_json_delta", "partial_json": p})))
                .collect();
            (
                json!({"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}),
                deltas,
            )
        }
        _ => {
            let deltas = text_chunks
                .iter()
                .map(|p| delta(json!({"type": "text_delta", "text": p})))
                .collect();
            (json!({"type": "text", "text": ""}), deltas)
        }
    };
    let mut events = vec![named(
        "content_block_start",
        &json!({"type": "content_block_start", "index": index, "content_block": start}),
    )];
    events.extend(deltas);
    events.push(named(
        "content_block_stop",
        &json!({"type": "content_block_stop", "index": index}),
    ));
    events
}
