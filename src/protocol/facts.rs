//! Step 5, forward, the protocol seam: what an answer says of itself.
//!
//! The model that answered, the answer's id, why it stopped and what the
//! provider's prompt cache served, as each API words them in a whole
//! answer or in one of its stream's events. Each adapter reads its own
//! ([`Adapter::answer_facts`](super::Adapter::answer_facts)); telemetry
//! records what they found and never looks inside an answer itself.

use serde_json::Value;

/// What one answer says of itself, gathered from its events.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct AnswerFacts {
    pub model: Option<String>,
    pub id: Option<String>,
    /// In the order first seen, each once.
    pub finish_reasons: Vec<String>,
    /// Input tokens the provider's prompt cache served.
    pub cache_read: Option<u64>,
    /// Input tokens written to the provider's prompt cache.
    pub cache_creation: Option<u64>,
}

impl AnswerFacts {
    /// The first model and id named; later events repeat them.
    pub fn named(&mut self, model: Option<&Value>, id: Option<&Value>) {
        let text = |value: Option<&Value>| value?.as_str().map(str::to_string);
        if self.model.is_none() {
            self.model = text(model);
        }
        if self.id.is_none() {
            self.id = text(id);
        }
    }

    /// A finish reason, when `reason` is one.
    pub fn finished(&mut self, reason: Option<&Value>) {
        let Some(reason) = reason.and_then(Value::as_str) else {
            return;
        };
        if !self.finish_reasons.iter().any(|known| known == reason) {
            self.finish_reasons.push(reason.to_string());
        }
    }

    /// Cache counts; the largest seen stands (streams repeat them).
    pub fn cached(&mut self, read: Option<&Value>, creation: Option<&Value>) {
        let count = |value: Option<&Value>| value.and_then(Value::as_u64);
        self.cache_read = self.cache_read.max(count(read));
        self.cache_creation = self.cache_creation.max(count(creation));
    }
}

/// One message of a whole answer, in its API's own shape, and why it
/// ended: what content capture records of an answer.
#[derive(Debug, Clone, Copy)]
pub struct AnswerMessage<'v> {
    pub message: &'v Value,
    pub finish_reason: Option<&'v Value>,
}

impl<'v> AnswerMessage<'v> {
    pub fn new(message: &'v Value, finish_reason: Option<&'v Value>) -> Self {
        Self {
            message,
            finish_reason,
        }
    }
}
