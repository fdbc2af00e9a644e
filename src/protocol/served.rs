//! Step 4, rewrite: provider-native context management Condenser serves.
//!
//! Some APIs define their own context management (Anthropic's context
//! editing and compaction): request fields and beta flags that only the
//! API's maker knows. Where the upstream is not that maker, Condenser
//! applies them itself and sends what any server of the API accepts. An
//! adapter whose API has such forms returns them from
//! [`Adapter::served_forms`](super::Adapter::served_forms).

use super::native::Lead;
use super::Usage;
use http::HeaderMap;
use serde_json::{Map, Value};

/// One API's native context-management forms, as Condenser serves them.
pub trait ServedForms: Send + Sync {
    /// Whether `host` is the API's maker, to which `auto` forwards.
    fn made_by(&self, host: &str) -> bool;

    /// Whether a request (its body and headers) uses a form at all: a
    /// cheap look, so requests without any are sent as they came.
    fn asked(&self, body: &[u8], headers: &HeaderMap) -> bool;

    /// The body as an upstream without the forms takes it, with the
    /// edits applied; `tokens` turns a byte count into input tokens.
    /// `None` when the body needs no change.
    fn serve(&self, body: &[u8], tokens: &dyn Fn(usize) -> u64) -> Option<Served>;

    /// Removes what the forms add to the headers (their beta flags).
    fn strip_headers(&self, headers: &mut HeaderMap);

    /// Whether an error answer to a forwarded request refuses a form as
    /// unknown (a 400 naming its field or flag; for a form with an
    /// endpoint of its own, a 404 or 405 there).
    fn refuses(&self, status: u16, body: &[u8]) -> bool;

    /// Adds the report of what was applied to a whole JSON answer.
    fn report_json(&self, answer: &mut Value, applied: &Value);

    /// Adds the report to one streamed event's data, if it is the event
    /// that carries it; whether it did.
    fn report_event(&self, event: &mut Value, applied: &Value) -> bool;

    /// Whether a request (its body, messages aside, of `input_tokens`)
    /// asks for a summary of the conversation in place of a reply, which
    /// Condenser then writes.
    fn summary_asked(&self, body: &Map<String, Value>, input_tokens: u64) -> bool;

    /// Whether a request (of `input_tokens`) asks for a compaction before
    /// its reply: everything summarized, the reply made from the summary,
    /// and the answer led by the summary ([`ServedForms::lead`]).
    fn compacts_before_reply(&self, body: &Map<String, Value>, input_tokens: u64) -> bool;

    /// Puts the summary, which `usage` cost, before the reply of an
    /// answer, as the API does where it compacted first.
    fn lead(&self, summary: &str, usage: Usage) -> Box<dyn Lead>;

    /// The answer to `body` holding `summary` in place of a reply: a JSON
    /// body, or the events of a stream. `usage` is what the summary calls
    /// used.
    fn summary_answer(
        &self,
        body: &Map<String, Value>,
        summary: &str,
        usage: Usage,
        stream: bool,
    ) -> Vec<u8>;
}

/// A request as served: its new body and what was applied, in the API's
/// own report shape (`Value::Null` when nothing is reported).
#[derive(Debug, Clone, PartialEq)]
pub struct Served {
    pub body: Vec<u8>,
    pub applied: Value,
}
