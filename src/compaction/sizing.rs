//! How much room there is: the window, what the request spends outside its
//! messages, the summary's own budget, and the room left for the kept tail.
//! Every budget is relative to the window it must fit (DESIGN.md "Knowing
//! sizes"), so a 1k-token local model is planned for as carefully as a
//! 200k one. Numbers from the overflow error calibrate the byte-to-token
//! estimate for this request; what was learned from earlier requests comes
//! next.

use super::plan::{Item, Plan};
use super::Job;
use crate::overflow::{OverflowCause, OverflowSignal};
use crate::tokens::{Calibration, ModelSize};
use std::collections::HashMap;
use std::time::Duration;

/// A summary takes at most this share of the window, however large
/// `summary_max_tokens` is.
pub const SUMMARY_SHARE: f64 = 0.15;

/// Room kept free for estimate error, as a share of the window.
const MARGIN_SHARE: f64 = 0.05;

/// Tokens the summary message adds around its text (role, marker, framing).
const SUMMARY_FRAMING_TOKENS: u64 = 16;

#[derive(Debug, Clone)]
pub struct Sizing {
    pub keep_share: f64,
    pub summary_max_tokens: u64,
    pub lease_ttl: Duration,
    /// What is known of the model: window, calibration, output accounting.
    pub known: ModelSize,
}

/// The request as the planner sees it.
#[derive(Debug)]
pub struct Layout {
    pub items: Vec<Item>,
    /// Messages the current summary covers.
    pub compacted: usize,
    pub tail_budget: u64,
    /// Smallest a trimmed tool result is cut to.
    pub min_kept: u64,
    pub calibration: Calibration,
    pub window: u64,
    pub tokens_before: u64,
    /// The new summary's max tokens: what the plan reserves for it.
    pub summary_budget: u64,
    /// Tokens outside the messages: system, tools, the request's envelope.
    overhead: u64,
    /// `max_tokens` when the upstream counts it against the window.
    counted_output: u64,
}

impl Layout {
    fn tail_tokens(&self, plan: &Plan) -> u64 {
        let trimmed: HashMap<usize, u64> = plan.trims.iter().copied().collect();
        (plan.cut..self.items.len())
            .map(|i| *trimmed.get(&i).unwrap_or(&self.items[i].tokens))
            .sum()
    }

    /// Input tokens of the retried request with a summary of
    /// `summary_tokens`.
    pub fn tokens_after(&self, plan: &Plan, summary_tokens: u64) -> u64 {
        self.overhead + summary_tokens + self.tail_tokens(plan)
    }

    /// Whether the request after `plan` fits the window even with a summary
    /// of its full budget. When not, no summary call is worth paying for.
    pub fn fits(&self, plan: &Plan) -> bool {
        let summary = self.summary_budget + SUMMARY_FRAMING_TOKENS;
        self.tokens_after(plan, summary) + self.counted_output <= self.window
    }
}

impl Sizing {
    /// Bytes to tokens as the upstream counted the request that overflowed,
    /// else as learned from earlier requests.
    pub fn calibration(&self, signal: &OverflowSignal, sent_bytes: usize) -> Calibration {
        match signal.actual {
            Some(actual) => Calibration::measured(actual, sent_bytes),
            None => self.known.calibration.unwrap_or_default(),
        }
    }

    /// The window from the error, else as known; failing both, assume the
    /// request was a third too large.
    pub fn window(&self, signal: &OverflowSignal, sent_bytes: usize) -> u64 {
        let guess = || self.calibration(signal, sent_bytes).tokens(sent_bytes) * 3 / 4;
        signal
            .limit
            .or(self.known.window_tokens())
            .unwrap_or_else(guess)
    }

    /// Max tokens of a summary meant for a `window`-token context.
    pub fn summary_budget(&self, window: u64) -> u64 {
        let share = (window as f64 * SUMMARY_SHARE) as u64;
        self.summary_max_tokens.min(share).max(1)
    }

    pub fn layout(&self, job: &Job<'_>) -> Layout {
        let calibration = self.calibration(job.signal, job.sent_bytes);
        let tokens_before = job
            .signal
            .actual
            .unwrap_or_else(|| calibration.tokens(job.sent_bytes));
        let window = self.window(job.signal, job.sent_bytes);
        let compacted = job
            .current
            .map_or(0, |c| c.prefix_len as usize)
            .min(job.request.messages().len());
        let items = items(job, &calibration);
        let in_view: u64 = items[compacted..].iter().map(|item| item.tokens).sum();
        let old_summary = job.current.map_or(0, |c| {
            calibration.tokens(c.summary.len()) + SUMMARY_FRAMING_TOKENS
        });
        let overhead = tokens_before.saturating_sub(in_view + old_summary);
        let max_output = job.adapter.max_output_tokens(job.request).unwrap_or(0);
        let counts_output =
            !self.known.ignores_output || job.signal.cause == OverflowCause::InputPlusOutput;
        let summary_budget = self.summary_budget(window);
        let reserved = overhead
            + summary_budget
            + SUMMARY_FRAMING_TOKENS
            + max_output.min(window / 2)
            + (window as f64 * MARGIN_SHARE) as u64;
        let tail_budget =
            ((window as f64 * self.keep_share) as u64).min(window.saturating_sub(reserved));
        Layout {
            items,
            compacted,
            tail_budget,
            min_kept: (tail_budget / 4).clamp(16, super::plan::MIN_KEPT_TOKENS),
            calibration,
            window,
            tokens_before,
            summary_budget,
            overhead,
            counted_output: if counts_output { max_output } else { 0 },
        }
    }
}

/// Each message's size and tool links, as the current compaction sends it
/// (its trimmed tool results at their trimmed size).
fn items(job: &Job<'_>, calibration: &Calibration) -> Vec<Item> {
    let replaced = current_trims(job);
    job.request
        .messages()
        .iter()
        .enumerate()
        .map(|(index, message)| {
            let bytes = replaced
                .get(&index)
                .map_or_else(|| message.to_string().len(), |r| r.to_string().len());
            Item {
                tokens: calibration.tokens(bytes),
                links: job.adapter.tool_links(message),
            }
        })
        .collect()
}

/// Replacement messages the current compaction already trimmed, by index.
fn current_trims(job: &Job<'_>) -> HashMap<usize, serde_json::Value> {
    let Some(current) = job.current else {
        return HashMap::new();
    };
    let records = &current.trims;
    let position: HashMap<String, usize> = job
        .conversation
        .chain
        .iter()
        .enumerate()
        .skip(1)
        .map(|(i, hash)| (hash.to_hex(), i - 1))
        .collect();
    records
        .iter()
        .filter_map(|record| {
            let index = *position.get(&record.message_hash)?;
            Some((index, record.replacement.clone()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizing(summary_max_tokens: u64) -> Sizing {
        Sizing {
            keep_share: 0.5,
            summary_max_tokens,
            lease_ttl: Duration::from_secs(60),
            known: ModelSize::default(),
        }
    }

    #[test]
    fn the_summary_budget_is_a_share_of_a_small_window() {
        assert_eq!(sizing(2000).summary_budget(1024), 153);
        assert_eq!(sizing(2000).summary_budget(200_000), 2000);
    }
}
