//! Step 2, identify: a parsed chat request.
//!
//! A parsed chat request: the parts Condenser reads, and the whole body so
//! that every field it does not understand is kept as sent.
//!
//! Agents re-send their whole history on every turn, and most requests go
//! upstream as the client's own bytes. So the messages of a request are
//! kept as spans of its body and parsed only when something needs them as
//! values: identity, from a memo keyed by their bytes, parses only the
//! messages it has not seen; a rewrite or a compaction parses them all.
//!
//! Scanning a span is not parsing it: serde_json accepts, as a raw value,
//! text it would refuse as a value (a lone surrogate escape, a number out
//! of range, nesting past its depth limit). An [`Outline`] is therefore not
//! yet a [`ChatRequest`]: it becomes one when every span has been parsed,
//! or recognised by identity's memo as bytes that parsed before
//! ([`Outline::verified`]), so a request's messages never fail to parse
//! later.

use super::resent::{split, Listed, Prefixes};
use bytes::Bytes;
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::ops::Range;
use std::sync::OnceLock;

#[derive(Debug, Clone)]
pub struct ChatRequest {
    /// The body as sent, key order preserved, with the message list moved
    /// out (null in place) into `system` and `messages`.
    pub body: Map<String, Value>,
    pub model: String,
    pub stream: bool,
    /// The body as sent, which the spans below index; empty when the
    /// request was parsed whole.
    text: Bytes,
    /// The system part, identity's root: OpenAI's leading system/developer
    /// messages, Anthropic's `system` field (null when absent).
    system: Lazy<Value>,
    /// The conversation after the system part.
    messages: Lazy<Vec<Value>>,
    /// The newest messages, parsed while the others were not.
    tail: OnceLock<Tail>,
}

/// Messages `first..` as identity parsed them: the ones its memo had not
/// seen, a growing conversation's newest. Storing them needs them parsed,
/// and does not parse them again.
#[derive(Debug, Clone)]
struct Tail {
    first: usize,
    messages: Vec<Value>,
}

/// A value given parsed, or parsed from its spans on first use.
#[derive(Debug, Clone)]
struct Lazy<T> {
    /// `None` when the value was given parsed.
    spans: Option<Vec<Span>>,
    value: OnceLock<T>,
}

/// Where one message is in the body: one item of the list, or several
/// items in a row that make one message (a Responses unit), which parse
/// as an array of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Span {
    Item(Range<usize>),
    Items(Range<usize>),
}

impl Span {
    /// The client's bytes: an item, or items with the commas between them.
    fn bytes<'t>(&self, text: &'t [u8]) -> &'t [u8] {
        &text[self.range()]
    }

    fn range(&self) -> Range<usize> {
        match self {
            Span::Item(range) | Span::Items(range) => range.clone(),
        }
    }

    fn parse(&self, text: &[u8]) -> serde_json::Result<Value> {
        match self {
            Span::Item(range) => serde_json::from_slice(&text[range.clone()]),
            Span::Items(range) => {
                let mut array = Vec::with_capacity(range.len() + 2);
                array.push(b'[');
                array.extend_from_slice(&text[range.clone()]);
                array.push(b']');
                serde_json::from_slice(&array)
            }
        }
    }
}

impl<T> Lazy<T> {
    fn parsed(value: T) -> Self {
        Self {
            spans: None,
            value: OnceLock::from(value),
        }
    }

    fn spans(spans: Vec<Span>) -> Self {
        Self {
            spans: Some(spans),
            value: OnceLock::new(),
        }
    }

    fn spans_or_none(&self) -> &[Span] {
        self.spans.as_deref().unwrap_or_default()
    }
}

/// Why the lazy parts of a verified request always parse.
const VERIFIED: &str = "a ChatRequest's spans all parsed, now or (memo) before";

impl ChatRequest {
    /// A request whose parts are all parsed already.
    pub fn from_body(
        body: Map<String, Value>,
        system: Value,
        messages: Vec<Value>,
    ) -> Option<Self> {
        let (model, stream) = model_and_stream(&body)?;
        Some(Self {
            body,
            model,
            stream,
            text: Bytes::new(),
            system: Lazy::parsed(system),
            messages: Lazy::parsed(messages),
            tail: OnceLock::new(),
        })
    }

    pub fn system(&self) -> &Value {
        self.system.value.get_or_init(|| {
            let items = parse_spans(&self.text, self.system.spans_or_none());
            Value::Array(items.expect(VERIFIED))
        })
    }

    pub fn messages(&self) -> &[Value] {
        self.messages
            .value
            .get_or_init(|| parse_spans(&self.text, self.messages.spans_or_none()).expect(VERIFIED))
    }

    /// Message `index`, without parsing the others.
    pub fn message(&self, index: usize) -> Cow<'_, Value> {
        try_message(&self.text, &self.messages, &self.tail, index).expect(VERIFIED)
    }

    #[cfg(test)]
    pub(crate) fn has_parsed_messages(&self) -> bool {
        self.messages.value.get().is_some()
    }

    /// Where the messages parsed on their own start, if some were.
    #[cfg(test)]
    pub(crate) fn parsed_tail(&self) -> Option<usize> {
        self.tail.get().map(|tail| tail.first)
    }

    pub fn message_count(&self) -> usize {
        match (&self.messages.spans, self.messages.value.get()) {
            (Some(spans), _) => spans.len(),
            (None, Some(messages)) => messages.len(),
            (None, None) => 0,
        }
    }

    /// The same request with only its first `len` messages.
    pub fn truncated(&self, len: usize) -> Self {
        let mut request = self.clone();
        if let Some(messages) = request.messages.value.get_mut() {
            messages.truncate(len);
        }
        if let Some(spans) = &mut request.messages.spans {
            spans.truncate(len);
        }
        if let Some(tail) = request.tail.get_mut() {
            tail.messages.truncate(len.saturating_sub(tail.first));
        }
        request
    }
}

/// A chat request whose messages are not all known to parse yet.
#[derive(Debug)]
pub struct Outline {
    request: ChatRequest,
    /// The digests of the body's bytes through each item of its list, when
    /// the re-sent memo keeps it.
    prefixes: Option<Prefixes>,
}

impl Outline {
    /// For an API that streams when `stream` is absent (Ollama's).
    pub fn with_stream_default(mut self, streams: bool) -> Self {
        if !self.request.body.contains_key("stream") {
            self.request.stream = streams;
        }
        self
    }
}

/// A part of an outlined request as identity digests it: the client's
/// bytes, or the value when it was parsed whole.
#[derive(Debug, Clone, Copy)]
pub enum Piece<'a> {
    Text(&'a [u8]),
    Parsed(&'a Value),
}

impl Outline {
    /// A request parsed whole: nothing is left to verify.
    pub fn parsed(request: ChatRequest) -> Self {
        Self::of(request)
    }

    fn of(request: ChatRequest) -> Self {
        Self {
            request,
            prefixes: None,
        }
    }

    /// `text`, a JSON object, with the array under `list` kept as spans of
    /// its items and every other field parsed. `system` takes the field
    /// map and the item spans and returns the system part: a value, or how
    /// many leading items it is. `None` when `text` is not such an object
    /// or has no string `model`.
    pub fn read(
        text: Bytes,
        list: &str,
        system: impl FnOnce(&Map<String, Value>, &[Range<usize>], &Bytes) -> SystemPart,
    ) -> Option<Self> {
        Self::read_as(text, list, None, system)
    }

    /// As [`Outline::read`], for an API that names the model and whether
    /// it streams in the URL (Gemini's `models/{model}:streamGenerateContent`)
    /// rather than the body.
    pub fn read_as(
        text: Bytes,
        list: &str,
        model_and_stream: Option<(String, bool)>,
        system: impl FnOnce(&Map<String, Value>, &[Range<usize>], &Bytes) -> SystemPart,
    ) -> Option<Self> {
        let Listed {
            body,
            items,
            prefixes,
        } = split(&text, list)?;
        let items = items?;
        let system = system(&body, &items, &text);
        let mut items: Vec<Span> = items.into_iter().map(Span::Item).collect();
        let system = match system {
            SystemPart::Value(value) => Lazy::parsed(value),
            SystemPart::Leading(count) => {
                let rest = items.split_off(count.min(items.len()));
                Lazy::spans(std::mem::replace(&mut items, rest))
            }
        };
        let outline = match model_and_stream {
            Some((model, stream)) => Self::of(ChatRequest {
                body,
                model,
                stream,
                text,
                system,
                messages: Lazy::spans(items),
                tail: OnceLock::new(),
            }),
            None => Self::from_parts(text, body, system, items)?,
        };
        Some(outline.with_prefixes(prefixes))
    }

    /// `text`, with its fields `body` (the list's place null), its system
    /// part parsed, and its messages where `messages` says.
    pub fn with_spans(
        text: Bytes,
        body: Map<String, Value>,
        system: Value,
        messages: Vec<Span>,
    ) -> Option<Self> {
        Self::from_parts(text, body, Lazy::parsed(system), messages)
    }

    fn from_parts(
        text: Bytes,
        body: Map<String, Value>,
        system: Lazy<Value>,
        messages: Vec<Span>,
    ) -> Option<Self> {
        let (model, stream) = model_and_stream(&body)?;
        Some(Self::of(ChatRequest {
            body,
            model,
            stream,
            text,
            system,
            messages: Lazy::spans(messages),
            tail: OnceLock::new(),
        }))
    }

    /// With the digests of its body's bytes through each item of its list
    /// (which its message spans end on), from [`split`].
    pub(crate) fn with_prefixes(mut self, prefixes: Option<Prefixes>) -> Self {
        self.prefixes = prefixes;
        self
    }

    /// The digest naming the body's bytes from its start through message
    /// `index` (its caller's, under its list's name), when the re-sent
    /// memo keeps them: equal digests, equal messages up to there.
    pub fn prefix_digest(&self, index: usize) -> Option<u128> {
        let spans = self.request.messages.spans.as_deref()?;
        self.prefixes
            .as_ref()?
            .through(spans.get(index)?.range().end)
    }

    /// The system part's pieces.
    pub fn system_pieces(&self) -> Vec<Piece<'_>> {
        let system = &self.request.system;
        match (&system.spans, system.value.get()) {
            (Some(spans), _) => pieces(&self.request.text, spans),
            (None, value) => value.map(Piece::Parsed).into_iter().collect(),
        }
    }

    /// The client's bytes before and after the spans of its system part
    /// and messages: all the rest of the body (tools, options, a system
    /// prompt given apart). `None` when the messages were parsed whole.
    pub fn around_spans(&self) -> Option<[&[u8]; 2]> {
        let messages = self.request.messages.spans.as_deref()?;
        let spans = self.request.system.spans_or_none().iter().chain(messages);
        let (start, end) = spans
            .map(Span::range)
            .fold((usize::MAX, 0), |(start, end), range| {
                (start.min(range.start), end.max(range.end))
            });
        let text = &self.request.text[..];
        if start > end {
            return Some([text, &[]]);
        }
        Some([&text[..start], &text[end..]])
    }

    /// The body as the client sent it.
    pub fn text(&self) -> &[u8] {
        &self.request.text
    }

    /// One piece per message.
    pub fn message_pieces(&self) -> Vec<Piece<'_>> {
        let messages = &self.request.messages;
        match (&messages.spans, messages.value.get()) {
            (Some(spans), _) => pieces(&self.request.text, spans),
            (None, values) => values.into_iter().flatten().map(Piece::Parsed).collect(),
        }
    }

    pub fn message_count(&self) -> usize {
        self.request.message_count()
    }

    /// The system part, parsing it if need be; `None` when it does not
    /// parse.
    pub fn try_system(&self) -> Option<&Value> {
        if let Some(value) = self.request.system.value.get() {
            return Some(value);
        }
        let items = parse_spans(&self.request.text, self.request.system.spans_or_none()).ok()?;
        Some(
            self.request
                .system
                .value
                .get_or_init(|| Value::Array(items)),
        )
    }

    /// Message `index`, parsing it if need be; `None` when it does not
    /// parse.
    pub fn try_message(&self, index: usize) -> Option<Cow<'_, Value>> {
        try_message(
            &self.request.text,
            &self.request.messages,
            &self.request.tail,
            index,
        )
        .ok()
    }

    /// Messages `first..`, the last ones, parsed by the caller from their
    /// spans.
    pub(crate) fn keep_tail(&self, first: usize, messages: Vec<Value>) {
        debug_assert_eq!(first + messages.len(), self.message_count());
        if first == 0 {
            let _ = self.request.messages.value.set(messages);
        } else {
            let _ = self.request.tail.set(Tail { first, messages });
        }
    }

    /// Every part parsed, or `None` if one does not parse.
    pub fn parse_all(self) -> Option<ChatRequest> {
        self.try_system()?;
        if self.request.messages.value.get().is_none() {
            let messages =
                parse_spans(&self.request.text, self.request.messages.spans_or_none()).ok()?;
            let _ = self.request.messages.value.set(messages);
        }
        Some(self.request)
    }

    /// The request, once the caller has seen every span parse: here with
    /// [`Outline::try_system`] and [`Outline::try_message`], or earlier in
    /// the process as the very same bytes.
    pub(crate) fn verified(self) -> ChatRequest {
        self.request
    }
}

/// Where an adapter's system part is.
pub enum SystemPart {
    /// A field of the body, parsed.
    Value(Value),
    /// The first this many items of the list.
    Leading(usize),
}

fn model_and_stream(body: &Map<String, Value>) -> Option<(String, bool)> {
    let model = body.get("model")?.as_str()?.to_string();
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    Some((model, stream))
}

fn pieces<'a>(text: &'a [u8], spans: &[Span]) -> Vec<Piece<'a>> {
    spans
        .iter()
        .map(|span| Piece::Text(span.bytes(text)))
        .collect()
}

fn parse_spans(text: &[u8], spans: &[Span]) -> serde_json::Result<Vec<Value>> {
    spans.iter().map(|span| span.parse(text)).collect()
}

fn try_message<'a>(
    text: &[u8],
    messages: &'a Lazy<Vec<Value>>,
    tail: &'a OnceLock<Tail>,
    index: usize,
) -> serde_json::Result<Cow<'a, Value>> {
    if let Some(parsed) = messages.value.get() {
        return Ok(Cow::Borrowed(&parsed[index]));
    }
    let in_tail = tail.get().and_then(|tail| {
        let offset = index.checked_sub(tail.first)?;
        tail.messages.get(offset)
    });
    if let Some(message) = in_tail {
        return Ok(Cow::Borrowed(message));
    }
    messages.spans_or_none()[index].parse(text).map(Cow::Owned)
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
