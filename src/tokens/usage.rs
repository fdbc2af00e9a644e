//! Step 5, forward: usage read as the answer passes.
//!
//! Reading `usage` off a relayed response without holding it back: each of
//! the client's chunks is read as it passes, in the task that relays it,
//! for the token counts in the JSON body or in the stream's events (the
//! final chunk, `message_delta`, `response.completed`). What it finds
//! calibrates the model's byte-to-token estimate. No task and no channel
//! per request: on the hot path, a wake-up of another task costs more than
//! reading a kilobyte.

use super::Sizes;
use crate::conversation::TenantId;
use crate::domain::Usage;
use crate::protocol::framing::{is_framed, FrameDecoder};
use crate::protocol::Adapter;
use crate::telemetry::genai::Answer;
use bytes::{Bytes, BytesMut};
use eventsource_stream::{EventStream, Eventsource};
use futures_util::{FutureExt, Stream, StreamExt};
use serde_json::Value;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;

/// A JSON body larger than this is not parsed for its usage.
const MAX_JSON_BODY: usize = 8 * 1024 * 1024;

/// How a response body is framed, as far as reading its usage goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// One JSON document.
    Json,
    /// Server-sent events.
    Events,
    /// One JSON document per line (Ollama's streams).
    Lines,
    /// The adapter's own framing ([`Adapter::frames`]).
    Frames,
}

impl Framing {
    /// How the body with `headers`, an answer of `adapter`'s API, is framed.
    pub fn of(headers: &http::HeaderMap, adapter: &dyn Adapter) -> Self {
        let content_type = headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default();
        let framed = adapter
            .frames()
            .is_some_and(|frames| is_framed(frames, headers));
        if framed {
            Self::Frames
        } else if content_type.starts_with("text/event-stream") {
            Self::Events
        } else if content_type.starts_with("application/x-ndjson") {
            Self::Lines
        } else {
            Self::Json
        }
    }
}

/// Which request a response answers, to learn from its usage.
pub struct UsageTap {
    pub sizes: Sizes,
    pub adapter: &'static dyn Adapter,
    pub upstream: String,
    pub model: String,
    /// Whose request it was: each tenant calibrates its own rate.
    pub tenant: TenantId,
    /// Size of the request body the upstream counted.
    pub sent_bytes: usize,
    /// Whether that body held text alone (else it calibrates nothing).
    pub text_only: bool,
    /// The request's `max_tokens`, 0 when it set none.
    pub requested_output: u64,
    /// What the call's span reports of the answer, when spans are
    /// exported: read from the same chunks, recorded when the body ends.
    pub answer: Option<Answer>,
}

/// The usage of a response, known once its body has been relayed whole (or
/// the client hung up). Whoever wants it says what to do with it.
#[derive(Clone)]
pub struct UsageRead(Arc<Mutex<Slot>>);

type Then = Box<dyn FnOnce(Option<Usage>) + Send>;

enum Slot {
    Reading,
    Waiting(Then),
    Read(Option<Usage>),
    Taken,
}

impl std::fmt::Debug for UsageRead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UsageRead")
    }
}

impl UsageRead {
    fn new() -> Self {
        Self(Arc::new(Mutex::new(Slot::Reading)))
    }

    /// Runs `then` with the usage once it is read: now, if it already is.
    /// Usage already read.
    pub fn known(usage: Option<Usage>) -> Self {
        let read = Self::new();
        read.resolve(usage);
        read
    }

    pub fn then(self, then: impl FnOnce(Option<Usage>) + Send + 'static) {
        let mut slot = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match std::mem::replace(&mut *slot, Slot::Taken) {
            Slot::Read(usage) => {
                drop(slot);
                then(usage);
            }
            Slot::Reading => *slot = Slot::Waiting(Box::new(then)),
            Slot::Waiting(_) | Slot::Taken => {}
        }
    }

    fn resolve(&self, usage: Option<Usage>) {
        let mut slot = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match std::mem::replace(&mut *slot, Slot::Taken) {
            Slot::Waiting(then) => {
                drop(slot);
                then(usage);
            }
            Slot::Reading => *slot = Slot::Read(usage),
            Slot::Read(_) | Slot::Taken => {}
        }
    }
}

impl UsageTap {
    /// Learns what `usage` says of the request; whether it shows the
    /// upstream cut the prompt without saying so.
    pub fn learn(self, usage: &Usage) -> bool {
        self.sizes.learn_usage(
            (&self.upstream, &self.model),
            &self.tenant,
            (self.sent_bytes, self.text_only),
            (
                usage.input_tokens,
                usage.cached_tokens,
                self.requested_output,
            ),
        )
    }
}

/// The usage a whole JSON response reports.
pub fn json_usage(adapter: &dyn Adapter, body: &[u8]) -> Option<Usage> {
    // Most answers are one object with a `usage` field: only that field is
    // built, the rest (the reply's text, its choices) skipped unbuilt. A
    // whole value was half of what reading a small answer cost.
    #[derive(serde::Deserialize)]
    struct Counted<'a> {
        #[serde(borrow)]
        usage: Option<&'a serde_json::value::RawValue>,
    }
    let starts_object = body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    if starts_object {
        let counted: Counted = serde_json::from_slice(body).ok()?;
        if let Some(usage) = counted.usage {
            let usage: Value = serde_json::from_str(usage.get()).ok()?;
            return adapter.usage(&usage);
        }
    }
    let value: Value = serde_json::from_slice(body).ok()?;
    value_usage(adapter, &value)
}

/// The usage a parsed JSON response reports.
pub fn value_usage(adapter: &dyn Adapter, value: &Value) -> Option<Usage> {
    // Gemini's stream without `alt=sse` is one JSON array of chunks, its
    // counts in the last.
    if let Value::Array(chunks) = value {
        return chunks
            .iter()
            .filter_map(|chunk| adapter.stream_usage(chunk))
            .reduce(Usage::merged);
    }
    match value.get("usage") {
        Some(usage) => adapter.usage(usage),
        // Ollama puts its counts at the top level.
        None => adapter.stream_usage(value),
    }
}

/// [`json_usage`], and what the call's span reports of the answer
/// (recorded on it now) when `tap` reads for one.
pub fn json_usage_observed(tap: &mut UsageTap, body: &[u8]) -> Option<Usage> {
    let Some(mut answer) = tap.answer.take() else {
        return json_usage(tap.adapter, body);
    };
    let value: Option<Value> = serde_json::from_slice(body).ok();
    if let Some(value) = &value {
        answer.observe_whole(value);
    }
    let usage = value.and_then(|value| value_usage(tap.adapter, &value));
    answer.finish(usage.as_ref());
    usage
}

/// `body` unchanged for the client; its usage learned as it passes.
pub fn tap<S>(
    body: S,
    framing: Framing,
    usage_tap: UsageTap,
) -> (impl Stream<Item = S::Item> + Send + 'static, UsageRead)
where
    S: Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static,
{
    let read = UsageRead::new();
    let mut usage_tap = usage_tap;
    let mut reader = Reader {
        answer: usage_tap.answer.take(),
        parser: match framing {
            Framing::Events => Parser::events(usage_tap.adapter),
            Framing::Lines => Parser::Lines(BytesMut::new(), None),
            Framing::Json => Parser::Json(Some(BytesMut::new())),
            Framing::Frames => match usage_tap.adapter.frames() {
                Some(frames) => Parser::Frames(frames.decoder(), None),
                None => Parser::Abandoned,
            },
        },
        usage_tap: Some(usage_tap),
        read: read.clone(),
    };
    let body = body.map(move |chunk| {
        match &chunk {
            Ok(bytes) => reader.feed(bytes),
            // A broken body is not read to its end.
            Err(_) => reader.parser = Parser::Abandoned,
        }
        chunk
    });
    (body, read)
}

/// Reads the chunks it is fed; tells what it found when dropped, which is
/// when the body ends or the client leaves.
struct Reader {
    parser: Parser,
    usage_tap: Option<UsageTap>,
    read: UsageRead,
    /// What the call's span reports, read from the same events.
    answer: Option<Answer>,
}

enum Parser {
    /// The body so far; `None` once it is too large to parse.
    Json(Option<BytesMut>),
    Events(Box<Events>),
    /// The line read so far, and the usage found in earlier lines.
    Lines(BytesMut, Option<Usage>),
    /// The adapter's decoder, and the usage found in earlier events.
    Frames(Box<dyn FrameDecoder>, Option<Usage>),
    Abandoned,
}

type Chunks = UnboundedReceiverStream<Result<Bytes, std::io::Error>>;

/// An event stream's parser, handed each chunk as it passes.
struct Events {
    /// Dropped at the body's end, which ends the parser's input.
    chunks: Option<mpsc::UnboundedSender<Result<Bytes, std::io::Error>>>,
    events: EventStream<Chunks>,
    adapter: &'static dyn Adapter,
    found: Option<Usage>,
}

impl Parser {
    fn events(adapter: &'static dyn Adapter) -> Self {
        let (chunks, receiver) = mpsc::unbounded_channel();
        Parser::Events(Box::new(Events {
            chunks: Some(chunks),
            events: UnboundedReceiverStream::new(receiver).eventsource(),
            adapter,
            found: None,
        }))
    }
}

impl Events {
    /// Takes every event the parser holds complete; the chunks were handed
    /// to it already, so it never waits.
    fn read_ready(&mut self, mut answer: Option<&mut Answer>) {
        while let Some(Some(Ok(event))) = self.events.next().now_or_never() {
            // Only the few events that carry usage are parsed, and those
            // that carry what an exported span reports.
            let usage = carries(self.adapter.usage_markers(), event.data.as_bytes());
            let for_span = answer.as_ref().is_some_and(|a| a.wants(&event.data));
            if !usage && !for_span {
                continue;
            }
            let Ok(value) = serde_json::from_str(&event.data) else {
                continue;
            };
            if let Some(answer) = answer.as_deref_mut() {
                answer.observe(&value);
            }
            if !usage {
                continue;
            }
            if let Some(usage) = self.adapter.stream_usage(&value) {
                self.found = Some(self.found.map_or(usage, |earlier| earlier.merged(usage)));
            }
        }
    }
}

/// Whether `text` holds one of an adapter's markers.
fn carries(markers: &[&str], text: &[u8]) -> bool {
    let found = |marker: &&str| memchr::memmem::find(text, marker.as_bytes()).is_some();
    markers.iter().any(found)
}

/// Reads the complete lines of `pending`; only lines that carry counts
/// are parsed (the last line of a stream, which an exported span reads
/// too).
fn read_lines(
    adapter: &dyn Adapter,
    pending: &mut BytesMut,
    found: &mut Option<Usage>,
    mut answer: Option<&mut Answer>,
) {
    while let Some(end) = pending.iter().position(|&b| b == b'\n') {
        let line = pending.split_to(end + 1);
        if !carries(adapter.usage_markers(), &line) {
            continue;
        }
        let value: Option<Value> = serde_json::from_slice(&line).ok();
        if let (Some(answer), Some(value)) = (answer.as_deref_mut(), &value) {
            answer.observe(value);
        }
        if let Some(usage) = value.and_then(|value| adapter.stream_usage(&value)) {
            *found = Some(found.map_or(usage, |earlier| earlier.merged(usage)));
        }
    }
    if pending.len() > MAX_JSON_BODY {
        pending.clear();
    }
}

/// Reads the events `bytes` complete in a framed stream; only events
/// that carry counts (or what a span reports) are parsed.
fn read_frames(
    adapter: &dyn Adapter,
    decoder: &mut dyn FrameDecoder,
    bytes: &[u8],
    found: &mut Option<Usage>,
    mut answer: Option<&mut Answer>,
) {
    let mut events = Vec::new();
    decoder.feed(bytes, &mut events);
    for event in events {
        let usage = carries(adapter.usage_markers(), event.as_bytes());
        if !usage && !answer.as_ref().is_some_and(|a| a.wants(&event)) {
            continue;
        }
        let Ok(value) = serde_json::from_str::<Value>(&event) else {
            continue;
        };
        if let Some(answer) = answer.as_deref_mut() {
            answer.observe(&value);
        }
        if let Some(usage) = adapter.stream_usage(&value).filter(|_| usage) {
            *found = Some(found.map_or(usage, |earlier| earlier.merged(usage)));
        }
    }
}

impl Reader {
    fn feed(&mut self, bytes: &Bytes) {
        match &mut self.parser {
            Parser::Json(body) => {
                if let Some(buffer) = body {
                    if buffer.len() + bytes.len() > MAX_JSON_BODY {
                        *body = None;
                    } else {
                        buffer.extend_from_slice(bytes);
                    }
                }
            }
            Parser::Events(events) => {
                if let Some(chunks) = &events.chunks {
                    let _ = chunks.send(Ok(bytes.clone()));
                }
                events.read_ready(self.answer.as_mut());
            }
            Parser::Lines(pending, found) => {
                pending.extend_from_slice(bytes);
                if let Some(tap) = &self.usage_tap {
                    read_lines(tap.adapter, pending, found, self.answer.as_mut());
                }
            }
            Parser::Frames(decoder, found) => {
                if let Some(tap) = &self.usage_tap {
                    read_frames(
                        tap.adapter,
                        decoder.as_mut(),
                        bytes,
                        found,
                        self.answer.as_mut(),
                    );
                }
            }
            Parser::Abandoned => {}
        }
    }

    fn usage(&mut self) -> Option<Usage> {
        let usage = match std::mem::replace(&mut self.parser, Parser::Abandoned) {
            Parser::Json(body) => self.json_usage(&body?),
            Parser::Events(mut events) => {
                events.chunks = None;
                events.read_ready(self.answer.as_mut());
                events.found
            }
            Parser::Lines(mut pending, mut found) => {
                pending.extend_from_slice(b"\n");
                if let Some(tap) = &self.usage_tap {
                    read_lines(tap.adapter, &mut pending, &mut found, self.answer.as_mut());
                }
                found
            }
            Parser::Frames(_, found) => found,
            Parser::Abandoned => None,
        };
        usage.filter(|usage| usage.input_tokens > 0)
    }
}

impl Reader {
    /// The usage of a whole JSON body, read for the span too.
    fn json_usage(&mut self, body: &[u8]) -> Option<Usage> {
        let adapter = self.usage_tap.as_ref()?.adapter;
        let Some(answer) = self.answer.as_mut() else {
            return json_usage(adapter, body);
        };
        let value: Value = serde_json::from_slice(body).ok()?;
        answer.observe_whole(&value);
        value_usage(adapter, &value)
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        let usage = self.usage();
        if let Some(answer) = self.answer.take() {
            answer.finish(usage.as_ref());
        }
        if let (Some(usage), Some(tap)) = (&usage, self.usage_tap.take()) {
            // A stream's headers are gone: a cut prompt is counted and
            // logged, not marked.
            tap.learn(usage);
        }
        self.read.resolve(usage);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    fn usage(input_tokens: u64) -> Usage {
        Usage {
            input_tokens,
            output_tokens: 1,
            ..Usage::default()
        }
    }

    fn recorder() -> (Arc<AtomicU64>, impl FnOnce(Option<Usage>) + Send + 'static) {
        let seen = Arc::new(AtomicU64::new(0));
        let into = seen.clone();
        (seen, move |usage: Option<Usage>| {
            into.store(usage.map_or(u64::MAX, |u| u.input_tokens), Ordering::SeqCst)
        })
    }

    #[test]
    fn usage_read_before_anyone_asks_is_handed_over_when_asked() {
        let read = UsageRead::new();
        read.resolve(Some(usage(42)));
        let (seen, then) = recorder();
        read.then(then);
        assert_eq!(seen.load(Ordering::SeqCst), 42);
    }

    #[test]
    fn usage_asked_for_before_it_is_read_is_handed_over_when_read() {
        let read = UsageRead::new();
        let (seen, then) = recorder();
        read.clone().then(then);
        assert_eq!(seen.load(Ordering::SeqCst), 0, "not read yet");
        read.resolve(None);
        assert_eq!(seen.load(Ordering::SeqCst), u64::MAX);
    }

    /// Reads an Anthropic stream fed in `chunks`.
    fn read_events(chunks: &[&str]) -> Option<Usage> {
        let read = UsageRead::new();
        let mut reader = Reader {
            parser: Parser::events(crate::protocol::anthropic::PROTOCOL.adapter()),
            usage_tap: None,
            read: read.clone(),
            answer: None,
        };
        for chunk in chunks {
            reader.feed(&Bytes::copy_from_slice(chunk.as_bytes()));
        }
        drop(reader);
        let found = Arc::new(Mutex::new(None));
        let into = found.clone();
        read.then(move |usage| *into.lock().expect("unpoisoned") = usage);
        let usage = *found.lock().expect("unpoisoned");
        usage
    }

    #[test]
    fn usage_split_across_chunks_and_events_is_read_whole() {
        // Cut mid-event, as a network would.
        let usage = read_events(&[
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_",
            "tokens\":1200,\"output_tokens\":1}}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\"}\n",
            "\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":35}}\n",
            "\n",
        ])
        .expect("usage");
        assert_eq!(usage.input_tokens, 1200);
        assert_eq!(usage.output_tokens, 35);
    }

    #[test]
    fn geminis_json_array_stream_gives_its_last_chunks_counts() {
        let adapter = crate::protocol::gemini::PROTOCOL.adapter();
        let body = br#"[{"candidates":[{"content":{"role":"model","parts":[{"text":"he"}]}}],
            "usageMetadata":{"promptTokenCount":83,"totalTokenCount":83}},
            {"candidates":[{"content":{"role":"model","parts":[{"text":"llo"}]},"finishReason":"STOP"}],
            "usageMetadata":{"promptTokenCount":83,"candidatesTokenCount":14,"totalTokenCount":97}}]"#;
        let usage = json_usage(adapter, body).expect("usage");
        assert_eq!((usage.input_tokens, usage.output_tokens), (83, 14));
        assert_eq!(json_usage(adapter, b"[]"), None);
    }

    #[test]
    fn a_stream_without_usage_reads_as_none() {
        assert!(read_events(&["data: {\"type\":\"ping\"}\n\n"]).is_none());
    }

    #[test]
    fn a_json_response_gives_its_usage_whatever_else_it_holds() {
        use crate::protocol::responses::Responses;
        let openai = br#"{"id":"c","choices":[{"message":{"role":"assistant","content":"\ud83d\ude00 x"}}],"usage":{"prompt_tokens":120,"completion_tokens":8,"total_tokens":128}}"#;
        let anthropic = br#"{"content":[{"type":"text","text":"x"}],"usage":{"input_tokens":100,"cache_read_input_tokens":20,"output_tokens":8}}"#;
        let responses =
            br#"{"object":"response","output":[],"usage":{"input_tokens":120,"output_tokens":8}}"#;
        let expected = Some(Usage {
            input_tokens: 120,
            output_tokens: 8,
            ..Usage::default()
        });
        assert_eq!(
            json_usage(crate::protocol::openai::PROTOCOL.adapter(), openai),
            expected
        );
        assert_eq!(
            json_usage(crate::protocol::anthropic::PROTOCOL.adapter(), anthropic),
            expected
        );
        assert_eq!(json_usage(&Responses, responses), expected);
        let adapter = crate::protocol::openai::PROTOCOL.adapter();
        assert_eq!(json_usage(adapter, br#"{"choices":[]}"#), None);
        assert_eq!(json_usage(adapter, br#"{"usage":null}"#), None);
        assert_eq!(json_usage(adapter, br#"{"usage":{"prompt_tokens":1"#), None);
    }

    #[test]
    fn reasoning_reported_apart_is_read_and_left_out_of_the_text() {
        use crate::protocol::responses::Responses;
        // OpenAI's `completion_tokens_details` and the Responses API's
        // `output_tokens_details` (API reference, usage objects).
        let chat = br#"{"choices":[],"usage":{"prompt_tokens":900,"completion_tokens":2000,"completion_tokens_details":{"reasoning_tokens":1500}}}"#;
        let responses = br#"{"output":[],"usage":{"input_tokens":900,"output_tokens":2000,"output_tokens_details":{"reasoning_tokens":1500}}}"#;
        let openai = crate::protocol::openai::PROTOCOL.adapter();
        for usage in [json_usage(openai, chat), json_usage(&Responses, responses)] {
            let usage = usage.expect("usage");
            assert_eq!((usage.output_tokens, usage.reasoning_tokens), (2000, 1500));
            assert_eq!(usage.text_tokens(), 500);
        }
        let plain = json_usage(
            openai,
            br#"{"usage":{"prompt_tokens":9,"completion_tokens":20}}"#,
        );
        assert_eq!(plain.map(|usage| usage.text_tokens()), Some(20));
    }
}
