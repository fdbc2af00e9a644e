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
use super::summarizer::{Counted, Summarizer, SummaryBudget, SummaryError, MAX_SHRINKS};
use crate::tokens::Calibration;
use serde_json::Value;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Output tokens first allowed for reasoning, on top of the summary, when
/// the summarizer reasons. Asked for the lowest effort, a reasoning model
/// spends tens to a few hundred tokens before a summary; an answer that
/// spent all of this is asked again with more (`call.rs`).
pub const REASONING_TOKENS: u64 = 1024;

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

/// A written summary and what it cost.
pub struct Written {
    pub text: String,
    pub calls: usize,
    /// How the upstream counted the summary, where its answer said.
    pub counted: Option<Counted>,
}

impl Written {
    /// A summary used as it is, no call made.
    pub fn reused(text: String) -> Self {
        Self {
            text,
            calls: 0,
            counted: None,
        }
    }
}

/// Tokens of a summary message of `message_bytes` that carries
/// `text_bytes` of a summary: the text at the upstream's own count of it
/// where it is `counted`, the rest (and an uncounted text) at the
/// conversation's `calibration`.
pub fn message_tokens(
    counted: Option<Counted>,
    calibration: Calibration,
    message_bytes: usize,
    text_bytes: usize,
) -> u64 {
    match counted {
        Some(counted) => calibration
            .tokens(message_bytes.saturating_sub(text_bytes))
            .saturating_add(counted.tokens_of(text_bytes)),
        None => calibration.tokens(message_bytes),
    }
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
        let mut counted = None;
        let (mut next, mut calls, mut shrinks, mut retries) = (0, 0, 0, 0);
        let deadline = tokio::time::Instant::now() + self.timeout;
        while next < entries.len() {
            let chunk = self.next_chunk(&budget, &entries[next..], running.as_deref(), calls)?;
            let input = call::input(running.as_deref(), &chunk.text);
            match self.call(&budget, &input).await {
                Ok(bounded) => {
                    metrics::counter!("condenser_summary_calls_total", "outcome" => "ok")
                        .increment(1);
                    running = Some(bounded.text);
                    counted = bounded.counted;
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
            counted,
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
