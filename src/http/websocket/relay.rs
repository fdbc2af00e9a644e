//! Step 5, forward: an answer from the pipeline, sent as frames.
//!
//! The pipeline answers a socket's request as it answers HTTP: an event
//! stream, or an error. Each SSE event's `data` goes out as one text frame
//! holding the same JSON; an SSE comment (Condenser's keep-alive while a
//! summary is written) becomes a ping, the mode's own way to show the
//! connection is alive; an error status becomes the mode's error frame.
//! What the answer's events say of the response (its id, its output items,
//! whether it completed) is kept for the socket's history.

use super::frames;
use axum::extract::ws::Message;
use axum::response::Response;
use bytes::{Buf, Bytes, BytesMut};
use futures_util::StreamExt;
use http_body_util::BodyExt;
use serde_json::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::mpsc;

/// The events after which a response is over: the client may send its
/// next request then, while the rest of the stream (its end) drains.
const ENDS: &[&str] = &[
    "response.completed",
    "response.failed",
    "response.incomplete",
    "error",
];

/// What the client was sent, read off the events.
#[derive(Default)]
pub struct Relayed {
    pub status: u16,
    /// The response's id and output once `response.completed` arrived.
    pub completed: Option<(String, Vec<Value>)>,
    output: Vec<Value>,
}

/// Sends `response` to the client as frames, setting `ended` once the
/// frame that ends it is sent; `None` when the client is gone.
pub async fn relay(
    response: Response,
    out: &mpsc::Sender<Message>,
    ended: &AtomicBool,
) -> Option<Relayed> {
    let relayed = relay_answer(response, out, ended).await;
    ended.store(true, Ordering::Release);
    taken(out).await;
    relayed
}

/// Waits until the socket's writer took every frame queued. A graceful
/// stop waits for the request in flight, this task, not for the writer:
/// without this wait the process could stop with the answer's last frames
/// still queued. The writer runs on the same connection thread and writes
/// a frame in the poll that takes it, unless the client stopped reading.
async fn taken(out: &mpsc::Sender<Message>) {
    // Every slot free: the writer took all; an error: the client is gone.
    let _ = out.reserve_many(out.max_capacity()).await;
}

async fn relay_answer(
    response: Response,
    out: &mpsc::Sender<Message>,
    ended: &AtomicBool,
) -> Option<Relayed> {
    let status = response.status().as_u16();
    let mut relayed = Relayed {
        status,
        ..Relayed::default()
    };
    if !response.status().is_success() {
        let headers = response.headers().clone();
        let body = response.into_body().collect().await.ok()?.to_bytes();
        let error = serde_json::from_slice(&body).unwrap_or_else(
            |_| serde_json::json!({"error": {"message": String::from_utf8_lossy(&body)}}),
        );
        send(out, Message::text(frames::error(status, &error, &headers))).await?;
        return Some(relayed);
    }
    if !crate::overflow::inspect::is_event_stream(response.headers()) {
        let body = response.into_body().collect().await.ok()?.to_bytes();
        relay_whole(&body, &mut relayed, out).await?;
        return Some(relayed);
    }
    relay_events(response, &mut relayed, out, ended).await?;
    Some(relayed)
}

/// A JSON answer to a request that did not ask to stream: the response
/// object, sent as the event that ends a stream.
async fn relay_whole(
    body: &[u8],
    relayed: &mut Relayed,
    out: &mpsc::Sender<Message>,
) -> Option<()> {
    let response: Value = serde_json::from_slice(body).unwrap_or_default();
    let event = serde_json::json!({"type": "response.completed", "response": response});
    relayed.observe(&event);
    send(out, Message::text(event.to_string())).await
}

async fn relay_events(
    response: Response,
    relayed: &mut Relayed,
    out: &mpsc::Sender<Message>,
    ended: &AtomicBool,
) -> Option<()> {
    let mut body = response.into_body().into_data_stream();
    let mut buffer = BytesMut::new();
    while let Some(chunk) = body.next().await {
        // A stream cut short ends the answer; the client sees no
        // `response.completed`, as over HTTP.
        let Ok(chunk) = chunk else { return Some(()) };
        buffer.extend_from_slice(&chunk);
        while let Some(event) = next_event(&mut buffer) {
            let kind = relay_event(&event, relayed, out).await?;
            if kind.is_some_and(|kind| ENDS.contains(&kind.as_str())) {
                ended.store(true, Ordering::Release);
                // The response is over; what is left of the stream (its
                // end, or an upstream slow to close) is read aside, so the
                // socket's next request never waits on it.
                tokio::spawn(body.for_each(|_| std::future::ready(())));
                return Some(());
            }
        }
    }
    Some(())
}

/// Sends one event; its type, if it has one.
async fn relay_event(
    event: &[u8],
    relayed: &mut Relayed,
    out: &mpsc::Sender<Message>,
) -> Option<Option<String>> {
    let Some(data) = event_data(event) else {
        send(out, Message::Ping(Bytes::new())).await?;
        return Some(None);
    };
    let value = serde_json::from_str::<Value>(&data).unwrap_or_default();
    relayed.observe(&value);
    send(out, Message::text(data)).await?;
    Some(value["type"].as_str().map(String::from))
}

impl Relayed {
    fn observe(&mut self, event: &Value) {
        match event["type"].as_str() {
            Some("response.output_item.done") => self.output.push(event["item"].clone()),
            Some("response.completed") => {
                let response = &event["response"];
                let Some(id) = response["id"].as_str() else {
                    return;
                };
                let output = match response["output"].as_array() {
                    Some(items) if !items.is_empty() => items.clone(),
                    _ => std::mem::take(&mut self.output),
                };
                self.completed = Some((id.to_string(), output));
            }
            _ => {}
        }
    }
}

/// The next whole event in `buffer` (up to its blank line), taken out.
fn next_event(buffer: &mut BytesMut) -> Option<Bytes> {
    let (end, separator) = [&b"\n\n"[..], b"\r\n\r\n"]
        .iter()
        .filter_map(|separator| {
            let at = buffer
                .windows(separator.len())
                .position(|w| w == *separator)?;
            Some((at, separator.len()))
        })
        .min()?;
    let event = buffer.split_to(end).freeze();
    buffer.advance(separator);
    Some(event)
}

/// An event's `data` lines joined as SSE joins them; `None` for an event
/// of comments only.
fn event_data(event: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(event);
    let lines: Vec<&str> = text
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(|data| data.strip_prefix(' ').unwrap_or(data))
        .collect();
    (!lines.is_empty()).then(|| lines.join("\n"))
}

async fn send(out: &mpsc::Sender<Message>, message: Message) -> Option<()> {
    out.send(message).await.ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_at_blank_lines_and_comments_carry_no_data() {
        let mut buffer = BytesMut::from(
            &b"event: response.created\ndata: {\"a\":1}\n\n: condenser is compacting\n\ndata: {\"b\":"[..],
        );
        let first = next_event(&mut buffer).expect("an event");
        assert_eq!(event_data(&first).as_deref(), Some("{\"a\":1}"));
        let comment = next_event(&mut buffer).expect("a comment");
        assert_eq!(event_data(&comment), None);
        assert!(next_event(&mut buffer).is_none(), "half an event waits");
        buffer.extend_from_slice(b"2}\r\n\r\n");
        let last = next_event(&mut buffer).expect("the rest");
        assert_eq!(event_data(&last).as_deref(), Some("{\"b\":2}"));
    }

    #[test]
    fn the_completed_response_is_kept_with_its_output() {
        let mut relayed = Relayed::default();
        let item = serde_json::json!({"type": "message", "id": "msg_1"});
        relayed.observe(&serde_json::json!({"type": "response.output_item.done", "item": item}));
        relayed.observe(&serde_json::json!({"type": "response.completed",
            "response": {"id": "resp_1", "output": []}}));
        assert_eq!(relayed.completed, Some(("resp_1".to_string(), vec![item])));
    }
}
