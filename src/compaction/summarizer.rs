//! Step 7, compact: the summarizer, what every summary call shares.
//!
//! Who is asked (the client's route, credential and model), with which
//! instructions, how large each call may be (`SummaryBudget`: the
//! summarizer's window, shrunk from an overflow's numbers), and what a
//! summary call can fail with. One call is `call.rs`'s; the calls one
//! summary takes are `summarize.rs`'s. Both import this, neither the
//! other's vocabulary, so the dependency goes one way:
//! summarize -> call -> summarizer.

use crate::domain::CompactionFailure;
use crate::domain::Usage;
use crate::overflow::{OverflowSignal, SignatureTable};
use crate::protocol::{Adapter, ChatRequest};
use crate::tokens::{Calibration, Sizes};
use crate::upstream::routes::Route;
use crate::upstream::UpstreamClient;
use http::HeaderMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
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

/// Retries of a summary call that overflowed, each one smaller.
pub(super) const MAX_SHRINKS: usize = 2;

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
    pub(super) fn is_transient(&self) -> bool {
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

/// How the upstream counted a summary it wrote: `tokens` for its first
/// `bytes`, the text's own rate (prose runs at more bytes a token than the
/// conversation it summarizes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counted {
    pub tokens: u64,
    pub bytes: usize,
}

impl Counted {
    /// Tokens of `bytes` of the same text, at its counted rate.
    pub fn tokens_of(&self, bytes: usize) -> u64 {
        let tokens = u128::from(self.tokens) * bytes as u128;
        let tokens = tokens.div_ceil(self.bytes.max(1) as u128);
        u64::try_from(tokens).unwrap_or(u64::MAX)
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
    pub(super) fn shrunk(self, signal: &OverflowSignal, sent_bytes: usize) -> Self {
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
    pub adapter: &'static dyn Adapter,
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
    /// What the answered summary calls reported they used.
    pub used: UsedTokens,
}

/// The tokens the summary calls' answers reported, added up: what a
/// compaction a client asked for really cost, for its answer's `usage`.
#[derive(Debug, Default)]
pub struct UsedTokens {
    input: AtomicU64,
    output: AtomicU64,
}

impl UsedTokens {
    pub fn add(&self, usage: &Usage) {
        self.input.fetch_add(usage.input_tokens, Ordering::Relaxed);
        self.output
            .fetch_add(usage.output_tokens, Ordering::Relaxed);
    }

    /// The sum, `None` when no answer reported any.
    pub fn total(&self) -> Option<Usage> {
        let input_tokens = self.input.load(Ordering::Relaxed);
        let output_tokens = self.output.load(Ordering::Relaxed);
        (input_tokens + output_tokens > 0).then_some(Usage {
            input_tokens,
            output_tokens,
            ..Usage::default()
        })
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
