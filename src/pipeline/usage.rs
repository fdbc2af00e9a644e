//! Reading `usage` off a relayed response without holding it back: the
//! client's chunks go on as they come, and a copy of each goes to a
//! background reader that finds the token counts in the JSON body or in the
//! stream's events (the final chunk, `message_delta`, `response.completed`).
//! What it finds calibrates the model's byte-to-token estimate.

use super::sizes::Sizes;
use crate::protocol::{Adapter, Usage};
use bytes::Bytes;
use eventsource_stream::Eventsource;
use futures_util::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

/// Chunks the reader may fall behind by; past that it stops reading rather
/// than slow the client down or buffer without bound.
const TAP_CHUNKS: usize = 256;

/// A JSON body larger than this is not parsed for its usage.
const MAX_JSON_BODY: usize = 8 * 1024 * 1024;

/// Which request a response answers, to learn from its usage.
pub struct UsageTap {
    pub sizes: Sizes,
    pub adapter: &'static dyn Adapter,
    pub upstream: String,
    pub model: String,
    /// Size of the request body the upstream counted.
    pub sent_bytes: usize,
    /// The request's `max_tokens`, 0 when it set none.
    pub requested_output: u64,
}

/// `body` unchanged for the client; its usage learned on the side. The
/// handle resolves to the usage found, if any.
pub fn tap<S>(
    body: S,
    event_stream: bool,
    usage_tap: UsageTap,
    background: &TaskTracker,
) -> (
    impl Stream<Item = S::Item> + Send + 'static,
    JoinHandle<Option<Usage>>,
)
where
    S: Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static,
{
    let (sender, receiver) = mpsc::channel::<Bytes>(TAP_CHUNKS);
    let reader = background.spawn(read_usage(receiver, event_stream, usage_tap).in_current_span());
    let mut sender = Some(sender);
    let body = body.map(move |chunk| {
        if let (Ok(bytes), Some(tx)) = (&chunk, &sender) {
            if tx.try_send(bytes.clone()).is_err() {
                // The reader fell behind: a partial copy would misread.
                sender = None;
            }
        }
        chunk
    });
    (body, reader)
}

async fn read_usage(
    receiver: mpsc::Receiver<Bytes>,
    event_stream: bool,
    usage_tap: UsageTap,
) -> Option<Usage> {
    let chunks = tokio_stream::wrappers::ReceiverStream::new(receiver);
    let usage = if event_stream {
        stream_usage(chunks, usage_tap.adapter).await
    } else {
        body_usage(chunks, usage_tap.adapter).await
    }?;
    let UsageTap {
        sizes,
        upstream,
        model,
        sent_bytes,
        requested_output,
        ..
    } = usage_tap;
    sizes.learn_usage(
        &upstream,
        &model,
        sent_bytes,
        usage.input_tokens,
        requested_output,
    );
    Some(usage)
}

async fn stream_usage(
    chunks: impl Stream<Item = Bytes> + Unpin,
    adapter: &dyn Adapter,
) -> Option<Usage> {
    let mut events = chunks.map(Ok::<_, std::io::Error>).eventsource();
    let mut found: Option<Usage> = None;
    while let Some(Ok(event)) = events.next().await {
        // Only the few events that carry usage are parsed.
        if !event.data.contains("usage") {
            continue;
        }
        let Ok(value) = serde_json::from_str(&event.data) else {
            continue;
        };
        if let Some(usage) = adapter.stream_usage(&value) {
            found = Some(found.map_or(usage, |earlier| earlier.merged(usage)));
        }
    }
    found.filter(|usage| usage.input_tokens > 0)
}

async fn body_usage(
    mut chunks: impl Stream<Item = Bytes> + Unpin,
    adapter: &dyn Adapter,
) -> Option<Usage> {
    let mut body = Vec::new();
    while let Some(chunk) = chunks.next().await {
        if body.len() + chunk.len() > MAX_JSON_BODY {
            return None;
        }
        body.extend_from_slice(&chunk);
    }
    let value = serde_json::from_slice(&body).ok()?;
    adapter.usage(&value).filter(|usage| usage.input_tokens > 0)
}
