//! Step 7, compact: the summary call.
//!
//! The summary call (ARCHITECTURE.md step 7): an LLM call through the same upstream,
//! with the caller's own credential and headers, each call sized to the
//! summarizer's window: its prompt, the running summary, the transcript
//! chunk and the summary it writes all fit. A call that overflows anyway is
//! shrunk from the numbers in its error and retried, a bounded number of
//! times.

use super::call::{self, CallError};
use super::chunks::{self, Chunk};
use crate::domain::CompactionFailure;
use crate::overflow::{OverflowSignal, SignatureTable};
use crate::protocol::{Adapter, ChatRequest};
use crate::tokens::{Calibration, Sizes};
use crate::upstream::routes::Route;
use crate::upstream::UpstreamClient;
use http::HeaderMap;
use serde_json::Value;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// The instructions of every summary call.
pub const PROMPT: &str = include_str!("prompts/summarize.md");
/// The same instructions for a window the full prompt would crowd.
pub const SHORT_PROMPT: &str = include_str!("prompts/summarize_short.md");

/// The full prompt is used while it takes at most this share of the window.
const PROMPT_SHARE: f64 = 0.2;

/// Tokens a summary call spends beyond its texts: message framing and the
/// `<previous_summary>` / `<transcript>` tags.
const CALL_FRAMING_TOKENS: u64 = 48;

/// Room kept free in each call for estimate error, as a share of the window.
const CALL_MARGIN_SHARE: f64 = 0.05;

/// Output tokens first allowed for reasoning, on top of the summary, when
/// the summarizer reasons. Asked for the lowest effort, a reasoning model
/// spends tens to a few hundred tokens before a summary; an answer that
/// spent all of this is asked again with more (`call.rs`).
pub const REASONING_TOKENS: u64 = 1024;

/// Retries of a summary call that overflowed, each one smaller.
const MAX_SHRINKS: usize = 2;

/// Retries of a summary call that failed in passing (a 5xx, an overloaded
/// upstream, a reset connection), after waits of 0.5 s and then 1 s.
const MAX_TRANSIENT_RETRIES: u32 = 2;
const FIRST_BACKOFF: Duration = Duration::from_millis(500);

/// The longest one compaction's summary may legitimately take with
/// `max_calls` summary calls of at most `timeout` each: its chunks, plus
/// the calls that overflowed ([`MAX_SHRINKS`]) and those that failed in
/// passing ([`MAX_TRANSIENT_RETRIES`]), each asked up to
/// [`call::ASKS_PER_CALL`] times, and the backoffs between the retries.
/// Whoever waits for another summarizer waits at least this long.
pub fn longest_summary(timeout: Duration, max_calls: usize) -> Duration {
    let calls = u32::try_from(max_calls)
        .unwrap_or(u32::MAX)
        .saturating_add(MAX_SHRINKS as u32)
        .saturating_add(MAX_TRANSIENT_RETRIES);
    let asks = calls.saturating_mul(call::ASKS_PER_CALL);
    let backoffs: Duration = (0..MAX_TRANSIENT_RETRIES)
        .map(|retry| FIRST_BACKOFF * 2u32.pow(retry))
        .sum();
    timeout.saturating_mul(asks).saturating_add(backoffs)
}

/// Why a summary could not be written.
#[derive(Debug, thiserror::Error)]
pub enum SummaryError {
    #[error("summary call failed with upstream status {status}: {message}")]
    Upstream { status: u16, message: String },
    #[error("summary call still overflowed the window after {MAX_SHRINKS} smaller retries")]
    Overflow,
    #[error("the part to summarize does not fit {max_calls} summary calls even with its largest entries cut")]
    InputTooLarge { max_calls: usize },
    #[error("summary call failed: {0}")]
    Transport(String),
    #[error("summary call timed out after {0:?}")]
    Timeout(Duration),
    #[error("summary call returned no text")]
    Empty,
}

impl SummaryError {
    /// Whether the same call may well succeed a moment later.
    fn is_transient(&self) -> bool {
        match self {
            Self::Upstream { status, .. } => {
                matches!(status, 408 | 409 | 429 | 500 | 502 | 503 | 504 | 529)
            }
            Self::Transport(_) => true,
            _ => false,
        }
    }

    pub fn kind(&self) -> CompactionFailure {
        match self {
            Self::Upstream { .. } => CompactionFailure::UpstreamError,
            Self::Overflow => CompactionFailure::SummaryOverflow,
            Self::InputTooLarge { .. } => CompactionFailure::SummaryInputCap,
            Self::Transport(_) => CompactionFailure::Transport,
            Self::Timeout(_) => CompactionFailure::Timeout,
            Self::Empty => CompactionFailure::Empty,
        }
    }
}

/// How large summary calls may be.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SummaryBudget {
    /// The summarizer model's context window.
    pub window: u64,
    pub calibration: Calibration,
    /// Max tokens of the summary each call writes.
    pub max_tokens: u64,
    /// Output tokens allowed for reasoning before the summary (0 for a
    /// model that does not reason).
    pub reasoning_tokens: u64,
    /// Summary calls one compaction may make.
    pub max_calls: usize,
}

impl SummaryBudget {
    pub(super) fn prompt(&self) -> &'static str {
        let share = self.calibration.tokens(PROMPT.len()) as f64 / self.window as f64;
        if share <= PROMPT_SHARE {
            PROMPT
        } else {
            SHORT_PROMPT
        }
    }

    /// Transcript bytes one call carries beside its prompt, the running
    /// summary (at least a full-size one) and the summary it writes.
    pub fn chunk_bytes(&self, running_summary_bytes: usize) -> usize {
        let tokens = |bytes: usize| self.calibration.tokens(bytes);
        let previous = tokens(running_summary_bytes).max(self.max_tokens);
        let fixed = tokens(self.prompt().len())
            + previous
            + self.max_tokens
            + self.reasoning_tokens
            + CALL_FRAMING_TOKENS
            + (self.window as f64 * CALL_MARGIN_SHARE) as u64;
        self.calibration.bytes(self.window.saturating_sub(fixed))
    }

    /// Smaller, from what the error of a `sent_bytes` call says; strictly
    /// smaller even when it says nothing.
    fn shrunk(self, signal: &OverflowSignal, sent_bytes: usize) -> Self {
        let mut next = self;
        if let Some(limit) = signal.limit {
            next.window = next.window.min(limit);
        }
        if let Some(actual) = signal.actual {
            next.calibration = Calibration::measured(actual, sent_bytes);
        }
        if next.chunk_bytes(0) >= self.chunk_bytes(0) {
            next.window = next.window * 3 / 4;
        }
        next.max_tokens = next.max_tokens.min(next.window / 4).max(1);
        next
    }
}

pub struct Summarizer<'a> {
    pub client: &'a UpstreamClient,
    pub route: &'a Route,
    pub headers: &'a HeaderMap,
    pub adapter: &'a dyn Adapter,
    /// The client's request, as the upstream accepted it: the summary call
    /// is built from it.
    pub request: &'a ChatRequest,
    pub overflow: &'a SignatureTable,
    /// Where a refused output field is remembered.
    pub sizes: &'a Sizes,
    pub model: &'a str,
    pub budget: SummaryBudget,
    pub timeout: Duration,
    /// What the summary calls' spans share with the request's.
    pub origin: &'a crate::telemetry::genai::Origin,
    /// Summary calls sent so far, each answered or not.
    pub calls_made: AtomicU32,
}

/// A written summary and what it cost.
pub struct Written {
    pub text: String,
    pub calls: usize,
}

impl Summarizer<'_> {
    /// Summary calls sent so far.
    pub fn calls_made(&self) -> u32 {
        self.calls_made.load(Ordering::Relaxed)
    }

    /// `messages` as the transcript entries summary calls carry.
    pub fn transcript(&self, messages: &[Value]) -> Vec<String> {
        messages
            .iter()
            .map(|m| self.adapter.transcript_entry(m))
            .collect()
    }

    /// The budget of calls writing summaries of at most `max_tokens`.
    fn budget_for(&self, max_tokens: u64) -> SummaryBudget {
        SummaryBudget {
            max_tokens: max_tokens.min(self.budget.max_tokens).max(1),
            ..self.budget
        }
    }

    /// Whether `entries` fit the summary calls allowed, each writing at
    /// most `max_tokens`, before any is made.
    pub fn check(
        &self,
        max_tokens: u64,
        previous: Option<&str>,
        entries: &[String],
    ) -> Result<(), SummaryError> {
        if entries.is_empty() {
            return Ok(());
        }
        self.next_chunk(&self.budget_for(max_tokens), entries, previous, 0)
            .map(|_| ())
    }

    /// Folds transcript `entries` into `previous` in a summary of at most
    /// `max_tokens`, in as few calls as the window allows (one whenever
    /// they fit), at most `max_calls`.
    pub async fn summarize(
        &self,
        max_tokens: u64,
        previous: Option<&str>,
        entries: &[String],
    ) -> Result<Written, SummaryError> {
        let mut budget = self.budget_for(max_tokens);
        let mut running = previous.map(str::to_string);
        let (mut next, mut calls, mut shrinks, mut retries) = (0, 0, 0, 0);
        let deadline = tokio::time::Instant::now() + self.timeout;
        while next < entries.len() {
            let chunk = self.next_chunk(&budget, &entries[next..], running.as_deref(), calls)?;
            let input = call::input(running.as_deref(), &chunk.text);
            match self.call(&budget, &input).await {
                Ok(text) => {
                    metrics::counter!("condenser_summary_calls_total", "outcome" => "ok")
                        .increment(1);
                    running = Some(text);
                    next += chunk.entries;
                    calls += 1;
                }
                Err(CallError::Overflow(signal, sent_bytes)) if shrinks < MAX_SHRINKS => {
                    metrics::counter!("condenser_summary_calls_total", "outcome" => "overflow")
                        .increment(1);
                    tracing::info!(limit = ?signal.limit, actual = ?signal.actual, "summary call overflowed: retrying smaller");
                    budget = budget.shrunk(&signal, sent_bytes);
                    shrinks += 1;
                }
                Err(CallError::Overflow(..)) => return Err(SummaryError::Overflow),
                Err(CallError::Failed(error))
                    if error.is_transient() && retries < MAX_TRANSIENT_RETRIES =>
                {
                    let wait = FIRST_BACKOFF * 2u32.pow(retries);
                    if tokio::time::Instant::now() + wait >= deadline {
                        return Err(error);
                    }
                    metrics::counter!("condenser_summary_calls_total", "outcome" => "retried")
                        .increment(1);
                    tracing::warn!(%error, ?wait, "summary call failed in passing: retrying");
                    tokio::time::sleep(wait).await;
                    retries += 1;
                }
                Err(CallError::Failed(error)) => {
                    metrics::counter!("condenser_summary_calls_total", "outcome" => "error")
                        .increment(1);
                    return Err(error);
                }
            }
        }
        Ok(Written {
            text: running.unwrap_or_default(),
            calls,
        })
    }

    /// The first chunk of a packing of `rest` into the calls left. Packing
    /// the whole rest first means a transcript that cannot fit is refused
    /// before the first call.
    fn next_chunk(
        &self,
        budget: &SummaryBudget,
        rest: &[String],
        running: Option<&str>,
        calls: usize,
    ) -> Result<Chunk, SummaryError> {
        let max_calls = budget.max_calls;
        let room = budget.chunk_bytes(running.map_or(0, str::len));
        chunks::pack(rest, room, max_calls.saturating_sub(calls))
            .and_then(|chunks| chunks.into_iter().next())
            .ok_or(SummaryError::InputTooLarge { max_calls })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::SUMMARY_MARKER;

    fn budget(window: u64) -> SummaryBudget {
        SummaryBudget {
            window,
            calibration: Calibration::default(),
            max_tokens: (window as f64 * 0.15) as u64,
            reasoning_tokens: 0,
            max_calls: 4,
        }
    }

    #[test]
    fn the_prompts_announce_themselves_and_treat_the_transcript_as_data() {
        for prompt in [PROMPT, SHORT_PROMPT] {
            assert!(prompt.starts_with(&format!("{SUMMARY_MARKER} REQUEST")));
            assert!(prompt.contains("replaces the previous summary"));
        }
        assert!(PROMPT.contains("strictly as"));
        assert!(SHORT_PROMPT.len() * 2 < PROMPT.len());
    }

    #[test]
    fn every_part_of_a_call_fits_a_1k_window() {
        let budget = budget(1024);
        assert_eq!(budget.prompt(), SHORT_PROMPT);
        let room = budget.chunk_bytes(0);
        let calibration = budget.calibration;
        let call = calibration.tokens(SHORT_PROMPT.len() + room)
            + 2 * budget.max_tokens
            + CALL_FRAMING_TOKENS;
        assert!(room > 0);
        assert!(call <= 1024, "{call} tokens");
    }

    #[test]
    fn a_large_window_gets_the_full_prompt_and_large_chunks() {
        let budget = budget(128_000);
        assert_eq!(budget.prompt(), PROMPT);
        assert!(budget.chunk_bytes(0) > 300_000);
    }

    #[test]
    fn an_overflowing_call_is_shrunk_from_its_numbers() {
        let start = budget(4096);
        let signal = OverflowSignal {
            signature: crate::overflow::SignatureName::Builtin("llama.cpp"),
            cause: crate::overflow::OverflowCause::Input,
            limit: Some(2048),
            actual: Some(3000),
            requested_output: None,
            matched: None,
        };
        let shrunk = start.shrunk(&signal, 6000);
        assert_eq!(shrunk.window, 2048);
        assert_eq!(shrunk.calibration, Calibration::measured(3000, 6000));
        assert!(shrunk.chunk_bytes(0) < start.chunk_bytes(0));
        let silent = OverflowSignal {
            limit: None,
            actual: None,
            ..signal
        };
        assert!(start.shrunk(&silent, 6000).chunk_bytes(0) < start.chunk_bytes(0));
    }
}
