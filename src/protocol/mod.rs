//! Steps 2 to 7, the protocol seam.
//!
//! The protocol seam (ARCHITECTURE.md "Adding a provider"): everything that
//! differs between LLM APIs sits behind one [`Provider`] per API family and
//! one [`Adapter`] per API it serves. The pipeline, the
//! planner and the store never look inside a message themselves.

pub mod anthropic;
mod anthropic_native;
pub mod bedrock;
pub mod canonical;
mod facts;
pub mod framing;
pub mod gemini;
mod head;
pub mod models;
pub mod native;
pub mod ollama;
pub mod openai;
mod provider;
mod registry;
mod request;
mod resent;
pub use resent::{as_caller, Arrived, Arriving};
pub mod responses;
mod scan;
mod served;
pub mod vertex;

use serde_json::Value;

pub use crate::domain::Usage;
use bytes::Bytes;
pub use facts::{AnswerFacts, AnswerMessage};
pub use models::OutputField;
pub use provider::{
    bearer_or_key, Endpoint, ErrorClass, ErrorInfo, Protocol, Provider, Root, Signer, SigningError,
    TelemetryNames, WindowProbe,
};
pub use registry::{providers, register};
pub use request::{ChatRequest, Outline, Piece, Span, SystemPart};
pub use served::{Served, ServedForms};

/// Starts the inserted summary message, and lets a later compaction (and
/// the test upstream) recognise it.
pub const SUMMARY_MARKER: &str = "[condenser:summary]";

/// An SSE comment: every SSE client skips it, and it keeps a connection
/// and its user waiting on a summary.
pub const SSE_KEEPALIVE: &[u8] = b": condenser is compacting the conversation\n\n";

/// Tool calls a message makes and tool results it carries, by id.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ToolLinks {
    pub calls: Vec<String>,
    pub results: Vec<String>,
}

pub trait Adapter: Send + Sync {
    /// Splits a request body into system part and messages, keeping every
    /// other field; the messages may stay spans of `body` until they are
    /// needed ([`Outline`]). `None` when the body is not a request this
    /// adapter understands: it is then forwarded unchanged.
    fn outline(&self, body: Bytes) -> Option<Outline>;

    /// [`Adapter::outline`] with every part parsed; `None` also when one
    /// does not parse.
    fn parse(&self, body: &[u8]) -> Option<ChatRequest> {
        self.outline(Bytes::copy_from_slice(body))?.parse_all()
    }

    /// The outline of a request to `path` of the upstream: what
    /// [`Adapter::outline`] gives, unless the API names the model in the
    /// URL (Gemini).
    fn outline_at(&self, body: Bytes, _path: &str) -> Option<Outline> {
        self.outline(body)
    }

    /// The field a body lists its history under, the one
    /// [`Adapter::outline`] reads as items: a large body's pass over its
    /// bytes is taken under this name as it arrives ([`Arriving`]).
    fn history_list(&self) -> &'static str {
        "messages"
    }

    /// The URL of a summary call for `model`, from the client's request
    /// URL: the same, unless the API names the model or the streaming in
    /// the URL (Gemini).
    fn summary_url(&self, client_url: &reqwest::Url, _model: &str) -> reqwest::Url {
        client_url.clone()
    }

    /// Serializes `request` with `messages` in place of its own.
    fn build(&self, request: &ChatRequest, messages: &[&Value]) -> Vec<u8>;

    /// The form of a message (or of the system part) that identity hashes:
    /// equal for what clients send interchangeably.
    fn canonical(&self, message: &Value) -> Vec<u8>;

    /// Names the function [`Adapter::canonical`] is: adapters whose
    /// canonical forms of one value may differ name themselves
    /// differently. It keys the memo of chain links
    /// ([`crate::conversation::ChainMemo`]), so a link computed for one
    /// API is never taken for another's.
    fn canonical_scheme(&self) -> &'static str;

    fn tool_links(&self, message: &Value) -> ToolLinks;

    fn role<'m>(&self, message: &'m Value) -> &'m str {
        message.get("role").and_then(Value::as_str).unwrap_or("")
    }

    /// The summary as its own message, marker first.
    fn summary_message(&self, role: &str, summary: &str) -> Value;

    /// A non-streaming request asking for a summary, built from `client`,
    /// the request the upstream accepted: its output-limit field, its
    /// provider-routing fields, no sampling parameter it did not send, the
    /// lowest reasoning effort where it reasons.
    fn summary_request(&self, client: &ChatRequest, call: &SummaryCall<'_>) -> Value;

    /// Whether `model`, asked by a request like `client`, spends output
    /// tokens on reasoning before it writes.
    fn reasons(&self, _client: &ChatRequest, _model: &str) -> bool {
        false
    }

    /// Byte strings that show a request carries inputs that are not text
    /// (images, audio, files) or server-side tools: such a request's token
    /// count says little about its bytes, so it calibrates nothing.
    fn non_text_markers(&self) -> &'static [&'static str];

    /// The text of a non-streamed response.
    fn response_text(&self, response: &Value) -> Option<String>;

    /// Whether a non-streamed response stopped at its output limit (a
    /// reasoning model can spend all of it before writing a word).
    fn ran_out(&self, response: &Value) -> bool;

    /// The output-limit field an error answer refuses, when it names one
    /// (OpenAI's `unsupported_parameter`).
    fn refused_field(&self, _error: &Value) -> Option<OutputField> {
        None
    }

    /// One message as compact transcript text for a summary call.
    fn transcript_entry(&self, message: &Value) -> String;

    /// The largest tool result in `message` cut to about `keep_bytes`: head
    /// and tail kept, an elision marker between. `None` if nothing to cut.
    fn trim_tool_result(&self, message: &Value, keep_bytes: usize) -> Option<Trimmed>;

    /// The request's own output budget (`max_tokens` or equivalent).
    fn max_output_tokens(&self, request: &ChatRequest) -> Option<u64>;

    /// The context window the request itself sets, where the API lets a
    /// client set it (Ollama's `options.num_ctx`).
    fn request_window(&self, _request: &ChatRequest) -> Option<u64> {
        None
    }

    /// Bytes a streaming client takes while a summary is written, and
    /// ignores: an SSE comment, unless the API streams otherwise.
    fn keepalive(&self) -> &'static [u8] {
        crate::protocol::SSE_KEEPALIVE
    }

    /// A note at the end of a stream that held keep-alives (how many
    /// compactions ran), where the framing has room for one a client
    /// ignores: an SSE comment.
    fn stream_trailer(&self, compactions: u32) -> Option<String> {
        Some(format!(": condenser compactions={compactions}\n\n"))
    }

    /// The content type of this API's streams.
    fn stream_content_type(&self) -> &'static str {
        "text/event-stream"
    }

    /// This API's own compaction forms, where it has some (README
    /// "Native compaction").
    fn native(&self) -> Option<&dyn native::NativeForms> {
        None
    }

    /// An event reporting an error (of HTTP `status`, its body in the
    /// provider's error shape) in this protocol's streaming framing.
    fn stream_error_event(&self, status: u16, error_body: &Value) -> Vec<u8>;

    /// How its streams are framed, when not as server-sent events.
    fn frames(&self) -> Option<&'static dyn framing::Frames> {
        None
    }

    /// Token counts a non-streamed response reports in its top-level
    /// `usage` object, which every API names so; `usage` is that object.
    fn usage(&self, usage: &Value) -> Option<Usage>;

    /// Token counts one SSE event's parsed `data` reports (final chunk /
    /// message_delta / response.completed).
    fn stream_usage(&self, event: &Value) -> Option<Usage>;

    /// Byte strings one of whose presence shows a stream event or line may
    /// carry token counts: `usage`, the key every API but Ollama names
    /// them by; events without any are not parsed for them.
    fn usage_markers(&self) -> &'static [&'static str] {
        &["usage"]
    }

    /// Adds to `facts` what a whole answer, or one event of a streamed
    /// one, says of itself: the model, the id, why it stopped, what the
    /// prompt cache served.
    fn answer_facts(&self, answer: &Value, facts: &mut AnswerFacts);

    /// Byte strings one of whose presence shows a stream event may carry
    /// an answer fact: events without any are not parsed for them.
    fn fact_markers(&self) -> &'static [&'static str];

    /// The messages of a whole answer, for content capture.
    fn answer_messages<'v>(&self, answer: &'v Value) -> Vec<AnswerMessage<'v>>;

    /// Whether a 200 stream's event (its `data`) is one the API sends
    /// before any output, after which it may still fail with an overflow
    /// (Responses' `response.created`). Condenser holds such events back
    /// until it has seen the first one that is not.
    fn is_stream_preamble(&self, _data: &str) -> bool {
        false
    }

    /// The API's own context-management forms, which Condenser serves
    /// where the upstream does not know them ([`ServedForms`]); `None`
    /// for an API that defines none.
    fn served_forms(&self) -> Option<&'static dyn ServedForms> {
        None
    }
}

/// Whether `body`, a request for `adapter`'s API, carries text alone. A
/// byte search, not a parse: it runs on every relayed answer, and a false
/// "not text" only skips one calibration.
pub fn text_only(adapter: &dyn Adapter, body: &[u8]) -> bool {
    let markers = adapter.non_text_markers();
    // One pass for all the markers: a search per marker read an 800 KB
    // history four times (OpenAI's four markers), 1.5 million instructions
    // a request, about a fifth of what the release before spent on it all.
    markers.is_empty() || !marker_finder(markers).is_match(body)
}

/// An adapter's markers, searched at once: SIMD (Teddy) where the CPU has
/// it. Every marker starts with `"`, the commonest byte of JSON, so an
/// automaton led by its first byte would stop at every quote.
enum Markers {
    Packed(aho_corasick::packed::Searcher),
    Automaton(aho_corasick::AhoCorasick),
}

impl Markers {
    fn new(markers: &[&str]) -> Self {
        match aho_corasick::packed::Searcher::new(markers.iter()) {
            Some(packed) => Self::Packed(packed),
            None => Self::Automaton(
                aho_corasick::AhoCorasick::new(markers).expect("a few short literal markers build"),
            ),
        }
    }

    fn is_match(&self, body: &[u8]) -> bool {
        match self {
            Self::Packed(searcher) => searcher.find(body).is_some(),
            Self::Automaton(automaton) => automaton.is_match(body),
        }
    }
}

/// The searcher of an adapter's markers, built once per marker table.
fn marker_finder(markers: &'static [&'static str]) -> std::sync::Arc<Markers> {
    use std::sync::{Arc, RwLock};
    type Finders = Vec<(usize, Arc<Markers>)>;
    static FINDERS: RwLock<Finders> = RwLock::new(Vec::new());
    let key = markers.as_ptr() as usize;
    let found = |finders: &Finders| {
        finders
            .iter()
            .find(|(table, _)| *table == key)
            .map(|(_, finder)| finder.clone())
    };
    if let Some(finder) = found(&FINDERS.read().unwrap_or_else(|e| e.into_inner())) {
        return finder;
    }
    let mut finders = FINDERS.write().unwrap_or_else(|e| e.into_inner());
    if let Some(finder) = found(&finders) {
        return finder;
    }
    let finder = Arc::new(Markers::new(markers));
    finders.push((key, finder.clone()));
    finder
}

/// What a summary call asks for, beside the request it is built from.
#[derive(Debug, Clone, Copy)]
pub struct SummaryCall<'a> {
    pub model: &'a str,
    pub instructions: &'a str,
    pub transcript: &'a str,
    /// Tokens the summary itself may take.
    pub max_tokens: u64,
    /// Tokens allowed for reasoning on top of the summary (0 for a model
    /// that does not reason).
    pub reasoning_tokens: u64,
    /// The output-limit field an earlier refusal settled for this model.
    pub output_field: Option<OutputField>,
}

impl SummaryCall<'_> {
    /// The output limit: the summary and the reasoning before it.
    pub fn output_limit(&self) -> u64 {
        self.max_tokens.saturating_add(self.reasoning_tokens)
    }

    /// Whether the client's own request is for the model that summarizes:
    /// only then does it show what that model accepts.
    pub fn same_model(&self, client: &ChatRequest) -> bool {
        client.model == self.model
    }
}

/// Top-level fields that route a request rather than shape its
/// conversation (OpenRouter's model fallbacks and provider preferences):
/// the summary call carries them so it reaches the model the client's
/// request reached. `transforms` reshapes prompts (OpenRouter's middle-out
/// would cut the transcript being summarized): when the client sent it,
/// the summary call sends it empty.
pub const ROUTING_FIELDS: &[&str] = &["provider", "models", "route"];

/// Copies the client's routing fields into a summary request.
pub fn copy_routing(client: &ChatRequest, summary: &mut Value) {
    for field in ROUTING_FIELDS {
        if let Some(value) = client.body.get(*field) {
            summary[*field] = value.clone();
        }
    }
    if client.body.contains_key("transforms") {
        summary["transforms"] = Value::Array(Vec::new());
    }
}

/// A tool result cut down to size.
#[derive(Debug, Clone)]
pub struct Trimmed {
    pub message: Value,
    pub original_bytes: usize,
    pub kept_bytes: usize,
}

/// `message` with its content as a plain string when `single_text` finds it
/// is one text part, so both spellings hash alike; borrowed otherwise, which
/// is almost always (a copy per message of a long history adds up).
fn with_text_content(
    message: &Value,
    single_text: impl Fn(&Value) -> Option<String>,
) -> std::borrow::Cow<'_, Value> {
    let Some(text) = message.get("content").and_then(single_text) else {
        return std::borrow::Cow::Borrowed(message);
    };
    let mut message = message.clone();
    if let Some(content) = message.get_mut("content") {
        *content = Value::String(text);
    }
    std::borrow::Cow::Owned(message)
}

/// The summary message's text: the marker, then what the model should
/// know of it, then the summary.
pub fn summary_text(summary: &str) -> String {
    format!(
        "{SUMMARY_MARKER} Earlier parts of this conversation were compacted to fit the context window. \
         A summary of them follows; the conversation continues after it.\n\n{summary}"
    )
}

/// Text of a content that is a string or an array of parts; other parts
/// (images, audio) are named by type only.
pub fn text_of(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .map(|part| match part.get("text").and_then(Value::as_str) {
                Some(text) => text.to_string(),
                None => format!(
                    "[{}]",
                    part.get("type").and_then(Value::as_str).unwrap_or("part")
                ),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Head and tail of `text` around an explicit marker saying what went.
pub fn elide_middle(text: &str, keep_bytes: usize) -> Option<String> {
    if text.len() <= keep_bytes {
        return None;
    }
    let half = keep_bytes / 2;
    let head_end = floor_char_boundary(text, half);
    let tail_start = ceil_char_boundary(text, text.len() - half);
    let removed = tail_start - head_end;
    Some(format!(
        "{}\n[… condenser trimmed {removed} bytes of this tool result to fit the context window …]\n{}",
        &text[..head_end],
        &text[tail_start..]
    ))
}

fn floor_char_boundary(text: &str, mut index: usize) -> usize {
    while !text.is_char_boundary(index) {
        index -= 1;
    }
    index
}

fn ceil_char_boundary(text: &str, mut index: usize) -> usize {
    while !text.is_char_boundary(index) {
        index += 1;
    }
    index
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elision_keeps_head_and_tail_and_says_how_much_went() {
        let text = format!("{}{}{}", "a".repeat(100), "b".repeat(1000), "c".repeat(100));
        let cut = elide_middle(&text, 200).expect("cut");
        assert!(cut.starts_with(&"a".repeat(100)));
        assert!(cut.ends_with(&"c".repeat(100)));
        assert!(cut.contains("trimmed 1000 bytes"));
        assert_eq!(elide_middle("short", 200), None);
    }

    /// Found by the `anthropic_request` fuzz target: serde_json's fast
    /// float parser read `10e24` one ulp off, so a rewritten request
    /// carried a different number than the client sent.
    #[test]
    fn a_rebuilt_request_keeps_every_number_exactly() {
        let body = br#"{"model":"m","temperature":0.7,"messages":[{"role":"user","content":"x","n":10e24,"m":2.2250738585072011e-308}]}"#;
        for protocol in [openai::PROTOCOL, anthropic::PROTOCOL] {
            let adapter = protocol.adapter();
            let parsed = adapter.parse(body).expect("parses");
            let rebuilt = adapter.build(&parsed, &parsed.messages().iter().collect::<Vec<_>>());
            let again = adapter.parse(&rebuilt).expect("parses again");
            assert_eq!(again.messages(), parsed.messages());
            assert_eq!(again.messages()[0]["n"].as_f64(), Some(1e25));
        }
    }

    #[test]
    fn elision_respects_utf8() {
        let text = "é".repeat(500);
        let cut = elide_middle(&text, 101).expect("cut");
        assert!(cut.contains("condenser trimmed"));
    }
}
