//! How much room there is: the window, what the request spends outside its
//! messages, and the budget left for the kept tail. Numbers from the
//! overflow error calibrate the byte-to-token estimate for this request.

use super::plan::{Item, Plan};
use super::trims::TrimRecord;
use super::Job;
use crate::overflow::OverflowSignal;
use crate::tokens::Calibration;
use std::collections::HashMap;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Sizing {
    pub keep_share: f64,
    pub summary_max_tokens: u64,
    pub lease_ttl: Duration,
    /// From configuration or learned earlier.
    pub known_window: Option<u64>,
}

/// The request as the planner sees it.
#[derive(Debug)]
pub struct Layout {
    pub items: Vec<Item>,
    /// Messages the current summary covers.
    pub compacted: usize,
    pub tail_budget: u64,
    pub calibration: Calibration,
    pub tokens_before: u64,
    /// Tokens outside the kept messages once the new summary is in.
    fixed_after: u64,
}

impl Layout {
    pub fn tokens_after(&self, plan: &Plan) -> u64 {
        let trimmed: HashMap<usize, u64> = plan.trims.iter().copied().collect();
        let tail: u64 = (plan.cut..self.items.len())
            .map(|i| *trimmed.get(&i).unwrap_or(&self.items[i].tokens))
            .sum();
        self.fixed_after + tail
    }
}

impl Sizing {
    /// Bytes to tokens as the upstream counted the request that overflowed.
    pub fn calibration(signal: &OverflowSignal, sent_bytes: usize) -> Calibration {
        signal.actual.map_or_else(Calibration::default, |actual| {
            Calibration::measured(actual, sent_bytes)
        })
    }

    /// The window from the error, else as known; failing both, assume the
    /// request was a third too large.
    pub fn window(&self, signal: &OverflowSignal, sent_bytes: usize) -> u64 {
        let guess = || Self::calibration(signal, sent_bytes).tokens(sent_bytes) * 3 / 4;
        signal.limit.or(self.known_window).unwrap_or_else(guess)
    }

    pub fn layout(&self, job: &Job<'_>) -> Layout {
        let calibration = Self::calibration(job.signal, job.sent_bytes);
        let tokens_before = calibration.tokens(job.sent_bytes);
        let window = self.window(job.signal, job.sent_bytes);
        let messages = &job.request.messages;
        let compacted = job
            .current
            .map_or(0, |c| c.prefix_len as usize)
            .min(messages.len());
        let replaced = current_trims(job);
        let items: Vec<Item> = messages
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
            .collect();
        let in_view: u64 = items[compacted..].iter().map(|item| item.tokens).sum();
        let old_summary = job
            .current
            .map_or(0, |c| calibration.tokens(c.summary.len()));
        let overhead = tokens_before.saturating_sub(in_view + old_summary);
        let output = job
            .adapter
            .max_output_tokens(job.request)
            .unwrap_or(0)
            .min(window / 2);
        let fixed_after = overhead + self.summary_max_tokens;
        let available = window.saturating_sub(fixed_after + output + window / 20);
        let tail_budget = ((window as f64 * self.keep_share) as u64).min(available);
        Layout {
            items,
            compacted,
            tail_budget,
            calibration,
            tokens_before,
            fixed_after,
        }
    }
}

/// Replacement messages the current compaction already trimmed, by index.
fn current_trims(job: &Job<'_>) -> HashMap<usize, serde_json::Value> {
    let Some(current) = job.current else {
        return HashMap::new();
    };
    let records: Vec<TrimRecord> = serde_json::from_str(&current.trims).unwrap_or_default();
    let position: HashMap<String, usize> = job
        .conversation
        .chain
        .iter()
        .enumerate()
        .skip(1)
        .map(|(i, hash)| (hash.to_hex(), i - 1))
        .collect();
    records
        .into_iter()
        .filter_map(|record| Some((*position.get(&record.message_hash)?, record.replacement)))
        .collect()
}
