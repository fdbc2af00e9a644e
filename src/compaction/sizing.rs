//! Step 7, compact: budgets.
//!
//! How much room there is: the window, what the request spends outside its
//! messages, the summary's own budget, and the room left for the kept tail.
//! Every budget is relative to the window it must fit (ARCHITECTURE.md "Knowing
//! sizes"), so a 1k-token local model is planned for as carefully as a
//! 200k one. Numbers from the overflow error calibrate the byte-to-token
//! estimate for this request; what was learned from earlier requests comes
//! next.
//!
//! A window is evidence (stated by the error, configured, learned from the
//! upstream), documentation, or a guess. Only evidence may make Condenser
//! refuse a compaction as hopeless; the others only shape the plan.

use super::plan::{self, Item, Plan};
use super::{fit, CompactionError, Job};
use crate::conversation::ChainHash;
use crate::overflow::{OverflowCause, OverflowSignal};
use crate::tokens::{Calibration, ModelSize, SizeSource};
use std::collections::HashMap;
use std::time::Duration;

/// A summary takes at most this share of the window, however large
/// `summary_max_tokens` is.
pub const SUMMARY_SHARE: f64 = 0.15;

/// A summary needs at most this share of what it summarizes. Summaries of
/// conversations and tool work run at a tenth to a fifth of their source;
/// a third leaves room for dense histories (numbers, paths, identifiers)
/// without reserving, for a short history, room it will never use.
const SUMMARY_SOURCE_SHARE: f64 = 1.0 / 3.0;

/// The smallest summary Condenser writes or accepts: a few sentences of
/// goals and state. A summary budget never goes below it, whatever the
/// source's size, unless the window's own share is smaller.
pub const MIN_SUMMARY_TOKENS: u64 = 64;

/// Room after a compaction held free for the turns to come: at most this
/// share of the window.
const HEADROOM_SHARE: f64 = 0.25;

/// Room kept free for estimate error, as a share of the window.
const MARGIN_SHARE: f64 = 0.05;

/// Tokens the summary message adds around its text (role, marker, framing).
const SUMMARY_FRAMING_TOKENS: u64 = 16;

/// What a window rests on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowBasis {
    /// The upstream stated it, or the operator configured it.
    Evidence,
    /// The model's documented window, not contradicted by this upstream.
    Documented,
    /// Inferred from a request that overflowed without saying by how much.
    Guess,
}

/// A context window in tokens and what it rests on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub tokens: u64,
    pub basis: WindowBasis,
}

#[derive(Debug, Clone)]
pub struct Sizing {
    pub keep_share: f64,
    /// Turns of growth a compaction leaves room for (`headroom_turns`).
    pub headroom_turns: u32,
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
    pub calibration: Calibration,
    pub window: Window,
    pub tokens_before: u64,
    /// The largest summary this window allows (before its source bounds it).
    summary_cap: u64,
    /// The most recent history worth keeping: `keep_share` of the window.
    keep_budget: u64,
    /// Room left free after the compaction for the turns to come: the
    /// conversation's measured growth per turn, `headroom_turns` times.
    headroom: u64,
    /// Everything the retried request spends besides its summary and kept
    /// tail: overhead, framing, output reserve, estimate margin.
    reserved: u64,
    /// Tokens outside the messages: system, tools, the request's envelope.
    overhead: u64,
    /// The current summary's tokens with its framing, 0 without one.
    old_summary: u64,
    /// `max_tokens` when the upstream counts it against the window.
    counted_output: u64,
}

/// A cut and how many tokens the summary written for it may take.
#[derive(Debug)]
pub struct Sized {
    pub plan: Plan,
    /// The summary call's output budget.
    pub summary_tokens: u64,
}

impl Layout {
    fn tail_tokens(&self, plan: &Plan) -> u64 {
        let trimmed: HashMap<usize, u64> = plan.trims.iter().copied().collect();
        (plan.cut..self.items.len())
            .map(|i| *trimmed.get(&i).unwrap_or(&self.items[i].tokens))
            .fold(0, u64::saturating_add)
    }

    /// Input tokens of the retried request with a summary of
    /// `summary_tokens`.
    pub fn tokens_after(&self, plan: &Plan, summary_tokens: u64) -> u64 {
        self.overhead
            .saturating_add(summary_tokens)
            .saturating_add(self.tail_tokens(plan))
    }

    /// The deepest useful cut and the summary it needs. The summary is
    /// bounded by what it summarizes as well as by the window, so a short
    /// history before a huge new turn reserves little; the cut is planned
    /// with the full cap first, then again with the smaller budget, which
    /// only leaves more room for the tail.
    pub fn plan(&self) -> Option<(Plan, u64)> {
        let first = self.plan_reserving(self.summary_cap)?;
        let budget = self.summary_budget(&first);
        if budget >= self.summary_cap {
            return Some((first, budget));
        }
        let second = self.plan_reserving(budget)?;
        let budget = self.summary_budget(&second);
        Some((second, budget))
    }

    fn plan_reserving(&self, summary: u64) -> Option<Plan> {
        let room = self
            .window
            .tokens
            .saturating_sub(self.reserved.saturating_add(summary));
        // Hysteresis: the next compaction is some turns away, not one. The
        // tail still gets a quarter of the room, however fast it grows,
        // and no more than a quarter of the window is held free: past
        // that, what a compaction summarizes outgrows one summary call.
        let free_at_most = (self.window.tokens as f64 * HEADROOM_SHARE) as u64;
        let headroom = self.headroom.min(room / 4 * 3).min(free_at_most);
        let tail_budget = self.keep_budget.min(room - headroom);
        let min_kept = (tail_budget / 4).clamp(16, plan::MIN_KEPT_TOKENS);
        plan::plan(&self.items, self.compacted, tail_budget, min_kept)
    }

    /// What the summary of `plan` may take: a share of its source (the
    /// running summary and the messages it folds in), within the cap.
    fn summary_budget(&self, plan: &Plan) -> u64 {
        let source = self.items[self.compacted..plan.cut]
            .iter()
            .map(|item| item.tokens)
            .fold(self.old_summary, u64::saturating_add);
        let share = (source as f64 * SUMMARY_SOURCE_SHARE) as u64;
        share.max(MIN_SUMMARY_TOKENS).min(self.summary_cap)
    }

    /// The summary call's output budget for `plan`, within the room the
    /// window leaves; `None` when the window is evidence and not even the
    /// smallest acceptable summary fits beside the kept tail. A guessed or
    /// documented window never refuses: Condenser tries, and the upstream
    /// decides.
    pub fn size(&self, plan: Plan, budget: u64) -> Result<Sized, CompactionError> {
        let room = self.summary_room(&plan);
        if self.window.basis != WindowBasis::Evidence {
            return Ok(Sized {
                plan,
                summary_tokens: budget,
            });
        }
        let reused = plan.cut == self.compacted;
        let smallest = if reused {
            self.old_summary.saturating_sub(SUMMARY_FRAMING_TOKENS)
        } else {
            budget.min(MIN_SUMMARY_TOKENS)
        };
        if room < smallest {
            let predicted = self.tokens_after(&plan, smallest + SUMMARY_FRAMING_TOKENS);
            return Err(CompactionError::CannotFit {
                predicted: predicted.saturating_add(self.counted_output),
                window: self.window.tokens,
            });
        }
        Ok(Sized {
            plan,
            summary_tokens: budget.min(room),
        })
    }

    /// Tokens a summary's text may take for the request after `plan` to
    /// fit the window with its counted output.
    pub fn summary_room(&self, plan: &Plan) -> u64 {
        let rest = self
            .tokens_after(plan, SUMMARY_FRAMING_TOKENS)
            .saturating_add(self.counted_output);
        self.window.tokens.saturating_sub(rest)
    }

    /// `summary` as the retried request can carry it. Upstreams stop a
    /// summary at its `max_tokens`, but they count tokens their way: one
    /// that still makes the request too large for an evidence window, by
    /// `size` (the upstream's own count of the summary where it gave one),
    /// loses what is over, about that share of its bytes, at a line or
    /// word end (cheaper and surer than another summary call, and what
    /// goes is its least important end). `None` when nothing of it fits:
    /// the request is known not to.
    pub fn fit_summary(
        &self,
        plan: &Plan,
        summary: String,
        size: impl Fn(&str) -> u64,
    ) -> Option<String> {
        if self.window.basis != WindowBasis::Evidence {
            return Some(summary);
        }
        let allowed = self.window.tokens.saturating_sub(
            self.tokens_after(plan, 0)
                .saturating_add(self.counted_output),
        );
        let mut text = summary.as_str();
        loop {
            let tokens = size(text);
            let over = tokens.saturating_sub(allowed);
            if over == 0 {
                return Some(text.to_string());
            }
            let share = (text.len() as u128 * u128::from(over)).div_ceil(u128::from(tokens));
            let limit = text.len().saturating_sub((share as usize).max(1));
            text = Some(fit::cut(text, limit)).filter(|kept| !kept.is_empty())?;
        }
    }
}

/// A request's sizes as bare numbers, as a client (`max_tokens`) or an
/// upstream (an overflow's counts) may claim them: what the `sizing` fuzz
/// target drives through the planner's arithmetic.
#[derive(Debug, Clone, Default)]
pub struct Numbers {
    pub window: u64,
    pub evidence: bool,
    pub overhead: u64,
    pub max_output: u64,
    pub summary_max_tokens: u64,
    pub old_summary: u64,
    pub compacted: usize,
    pub items: Vec<u64>,
}

impl Layout {
    pub fn from_numbers(numbers: &Numbers) -> Self {
        let sizing = Sizing {
            keep_share: 0.5,
            headroom_turns: 0,
            summary_max_tokens: numbers.summary_max_tokens,
            lease_ttl: Duration::from_secs(60),
            known: ModelSize::default(),
        };
        let tokens = numbers.window;
        let basis = if numbers.evidence {
            WindowBasis::Evidence
        } else {
            WindowBasis::Guess
        };
        let items = numbers.items.iter().map(|&tokens| Item {
            tokens,
            links: Default::default(),
        });
        let reserved = [SUMMARY_FRAMING_TOKENS, numbers.max_output.min(tokens / 2)];
        Layout {
            items: items.collect(),
            compacted: numbers.compacted.min(numbers.items.len()),
            calibration: Calibration::default(),
            window: Window { tokens, basis },
            tokens_before: 0,
            summary_cap: sizing.summary_cap(tokens),
            keep_budget: tokens / 2,
            headroom: 0,
            reserved: reserved
                .into_iter()
                .fold(numbers.overhead, u64::saturating_add),
            overhead: numbers.overhead,
            old_summary: numbers.old_summary,
            counted_output: numbers.max_output,
        }
    }
}

/// Whether a request estimated at `estimate` input tokens, asking for
/// `output` more where the upstream counts them, exceeds `threshold` of a
/// `window`, and why. Client numbers (`max_tokens` near `u64::MAX`) and
/// upstream numbers saturate.
pub fn exceeds(window: u64, threshold: f64, estimate: u64, output: u64) -> Option<OverflowCause> {
    let limit = (window as f64 * threshold) as u64;
    if estimate.saturating_add(output) <= limit {
        None
    } else if estimate > limit {
        Some(OverflowCause::Input)
    } else {
        Some(OverflowCause::InputPlusOutput)
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

    /// The window from the error, else as known. A documented window the
    /// failed request contradicts (it overflowed below it) is dropped. A
    /// guess assumes the request was a third too large, and is never below
    /// the largest request this model answered.
    pub fn window(&self, signal: &OverflowSignal, sent_bytes: usize) -> Window {
        let window = |tokens, basis| Window { tokens, basis };
        if let Some(limit) = signal.limit {
            return window(limit, WindowBasis::Evidence);
        }
        let failed = self.calibration(signal, sent_bytes).tokens(sent_bytes);
        let answered = self.known.answered_tokens;
        match self.known.window {
            Some((tokens, SizeSource::Documented)) if tokens < failed => {
                window(tokens.max(answered), WindowBasis::Documented)
            }
            Some((_, SizeSource::Documented)) | None => {
                window((failed * 3 / 4).max(answered), WindowBasis::Guess)
            }
            Some((tokens, _)) => window(tokens, WindowBasis::Evidence),
        }
    }

    /// The largest summary meant for a `window`-token context.
    pub fn summary_cap(&self, window: u64) -> u64 {
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
        let headroom = turn_growth(job, &items).saturating_mul(self.headroom_turns.into());
        let in_view = items[compacted..]
            .iter()
            .map(|item| item.tokens)
            .fold(0, u64::saturating_add);
        let old_summary = job.current.map_or(0, |c| {
            calibration.tokens(c.summary.len()) + SUMMARY_FRAMING_TOKENS
        });
        let overhead = tokens_before.saturating_sub(in_view.saturating_add(old_summary));
        let max_output = job.adapter.max_output_tokens(job.request).unwrap_or(0);
        let counts_output =
            !self.known.ignores_output || job.signal.cause == OverflowCause::InputPlusOutput;
        let tokens = window.tokens;
        Layout {
            items,
            compacted,
            calibration,
            window,
            tokens_before,
            summary_cap: self.summary_cap(tokens),
            keep_budget: (tokens as f64 * self.keep_share) as u64,
            headroom,
            reserved: [
                SUMMARY_FRAMING_TOKENS,
                max_output.min(tokens / 2),
                (tokens as f64 * MARGIN_SHARE) as u64,
            ]
            .into_iter()
            .fold(overhead, u64::saturating_add),
            overhead,
            old_summary,
            counted_output: if counts_output { max_output } else { 0 },
        }
    }
}

/// Complete turns a conversation's growth is measured over: its newest.
const TURNS_MEASURED: usize = 4;

/// What one turn adds to the conversation, in tokens: the mean of its
/// newest complete turns (a turn opens with a user message that is not a
/// tool result, and runs to the next); 0 before two turns were seen. The
/// whole history counts, the compacted part too: the client sends it all.
fn turn_growth(job: &Job<'_>, items: &[Item]) -> u64 {
    let messages = job.request.messages();
    let opens: Vec<usize> = (0..items.len())
        .filter(|&i| job.adapter.role(&messages[i]) == "user" && items[i].links.results.is_empty())
        .collect();
    let recent = &opens[opens.len().saturating_sub(TURNS_MEASURED + 1)..];
    let (Some(&first), Some(&last)) = (recent.first(), recent.last()) else {
        return 0;
    };
    let turns = (recent.len() - 1) as u64;
    let tokens = items[first..last]
        .iter()
        .map(|item| item.tokens)
        .fold(0, u64::saturating_add);
    tokens.checked_div(turns).unwrap_or(0)
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
    let position: HashMap<ChainHash, usize> = job
        .conversation
        .chain
        .iter()
        .enumerate()
        .skip(1)
        .map(|(i, hash)| (*hash, i - 1))
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
    use crate::protocol::ToolLinks;

    fn sizing(summary_max_tokens: u64) -> Sizing {
        Sizing {
            keep_share: 0.5,
            headroom_turns: 0,
            summary_max_tokens,
            lease_ttl: Duration::from_secs(60),
            known: ModelSize::default(),
        }
    }

    fn text(tokens: u64) -> Item {
        Item {
            tokens,
            links: ToolLinks::default(),
        }
    }

    /// A layout of `items` for a `window` with `basis`, 20 tokens of
    /// overhead, a 60-token counted output and a 2,000-token summary cap.
    fn layout(items: Vec<Item>, window: u64, basis: WindowBasis) -> Layout {
        let sizing = sizing(2_000);
        Layout {
            items,
            compacted: 0,
            calibration: Calibration::default(),
            window: Window {
                tokens: window,
                basis,
            },
            tokens_before: 0,
            summary_cap: sizing.summary_cap(window),
            keep_budget: window / 2,
            headroom: 0,
            reserved: 20 + SUMMARY_FRAMING_TOKENS + 60 + window / 20,
            overhead: 20,
            old_summary: 0,
            counted_output: 60,
        }
    }

    /// Four short turns (640 tokens), then a new turn of 3,600 tokens.
    fn pasted_log() -> Vec<Item> {
        let mut items: Vec<Item> = (0..8).map(|_| text(80)).collect();
        items.push(text(3_600));
        items
    }

    /// Twenty turns of 400 tokens beside a 6,600-token fixed prompt in a
    /// 16k window: with no headroom the kept tail fills the room and the
    /// next turn compacts again; with two turns of headroom, two more
    /// turns fit before the next one.
    #[test]
    fn a_compaction_leaves_room_for_the_turns_to_come() {
        let items: Vec<Item> = (0..40).map(|_| text(200)).collect();
        let mut tight = layout(items, 16_000, WindowBasis::Evidence);
        tight.overhead = 6_600;
        tight.reserved += 6_600 - 20;
        let (plan, budget) = tight.plan().expect("a plan");
        let reserve = tight.reserved - tight.overhead;
        let free = |layout: &Layout, plan: &Plan| {
            16_000 - layout.tokens_after(plan, budget + SUMMARY_FRAMING_TOKENS) - reserve
        };
        assert!(free(&tight, &plan) < 800, "{} free", free(&tight, &plan));
        tight.headroom = 2 * 400;
        let (roomy, _) = tight.plan().expect("a plan");
        assert!(roomy.cut > plan.cut, "more is summarized");
        assert!(free(&tight, &roomy) >= 800, "{} free", free(&tight, &roomy));
    }

    #[test]
    fn the_summary_cap_is_a_share_of_a_small_window() {
        assert_eq!(sizing(2000).summary_cap(1024), 153);
        assert_eq!(sizing(2000).summary_cap(200_000), 2000);
    }

    #[test]
    fn a_short_history_before_a_huge_turn_is_planned_with_a_summary_it_can_afford() {
        let layout = layout(pasted_log(), 4_096, WindowBasis::Evidence);
        let (plan, budget) = layout.plan().expect("a plan");
        assert_eq!(plan.cut, 8, "everything before the new turn goes");
        assert_eq!(budget, 213, "a third of the 640 tokens summarized");
        let sized = layout.size(plan, budget).expect("it fits");
        assert_eq!(sized.summary_tokens, 213);
        let after = layout.tokens_after(&sized.plan, 213 + SUMMARY_FRAMING_TOKENS);
        assert!(after + 60 <= 4_096, "{after} tokens");
    }

    #[test]
    fn a_summary_of_a_tiny_history_still_gets_its_floor() {
        let items = vec![text(30), text(30), text(3_000)];
        let layout = layout(items, 4_096, WindowBasis::Evidence);
        let (_, budget) = layout.plan().expect("a plan");
        assert_eq!(budget, MIN_SUMMARY_TOKENS);
    }

    #[test]
    fn the_summary_call_gets_only_the_room_the_window_leaves() {
        let mut items = pasted_log();
        items[8] = text(3_900);
        let layout = layout(items, 4_096, WindowBasis::Evidence);
        let (plan, budget) = layout.plan().expect("a plan");
        let room = layout.summary_room(&plan);
        assert!(room < budget && room >= MIN_SUMMARY_TOKENS, "room {room}");
        assert_eq!(
            layout.size(plan, budget).expect("fits").summary_tokens,
            room
        );
    }

    #[test]
    fn a_turn_that_leaves_no_room_for_the_smallest_summary_cannot_fit() {
        let mut items = pasted_log();
        items[8] = text(4_000);
        let layout = layout(items, 4_096, WindowBasis::Evidence);
        let (plan, budget) = layout.plan().expect("a plan");
        let refused = layout.size(plan, budget).expect_err("cannot fit");
        let CompactionError::CannotFit { predicted, window } = refused else {
            panic!("{refused}");
        };
        assert_eq!(
            (predicted, window),
            (20 + MIN_SUMMARY_TOKENS + 16 + 4_000 + 60, 4_096)
        );
    }

    #[test]
    fn a_summary_longer_than_the_room_loses_what_is_over_at_a_word() {
        let layout = layout(pasted_log(), 4_096, WindowBasis::Evidence);
        let (plan, _) = layout.plan().expect("a plan");
        let room = layout.summary_room(&plan) + SUMMARY_FRAMING_TOKENS;
        let size = |text: &str| Calibration::default().tokens(text.len()) + SUMMARY_FRAMING_TOKENS;
        let sentence = "The user asked for the log to be read. ";
        let long = sentence.repeat(room as usize * 4 / sentence.len() + 5);
        let fitted = layout
            .fit_summary(&plan, long.clone(), size)
            .expect("fits once cut");
        assert!(long.starts_with(&fitted) && !fitted.ends_with(' '));
        assert!(size(&fitted) <= room && fitted.len() < long.len());
        // Only what is over goes: no more than a word beyond it.
        assert!(size(&fitted) + 4 >= room, "{} of {room}", size(&fitted));
        let short = sentence.to_string();
        assert_eq!(layout.fit_summary(&plan, short.clone(), size), Some(short));
        let one_sentence = "word ".repeat(room as usize * 2);
        let fitted = layout
            .fit_summary(&plan, one_sentence, size)
            .expect("cut at a word");
        assert!(size(&fitted) <= room && size(&fitted) + 4 >= room);
        let nothing_fits = |text: &str| size(text) + room;
        assert_eq!(layout.fit_summary(&plan, long, nothing_fits), None);
    }

    #[test]
    fn numbers_near_the_limits_of_u64_saturate() {
        for big in [u64::MAX, u64::MAX / 2, 1 << 63] {
            let numbers = Numbers {
                window: big,
                evidence: true,
                overhead: big,
                max_output: big,
                summary_max_tokens: big,
                old_summary: big,
                compacted: 1,
                items: vec![big, big, big],
            };
            let layout = Layout::from_numbers(&numbers);
            if let Some((plan, budget)) = layout.plan() {
                let _ = layout.summary_room(&plan);
                let _ = layout.size(plan, budget);
            }
            assert_eq!(
                exceeds(1_000, 1.0, 900, big),
                Some(OverflowCause::InputPlusOutput)
            );
            assert_eq!(exceeds(1_000, 1.0, big, big), Some(OverflowCause::Input));
        }
    }

    #[test]
    fn a_guessed_window_never_refuses() {
        let mut items = pasted_log();
        items[8] = text(4_000);
        for basis in [WindowBasis::Guess, WindowBasis::Documented] {
            let layout = layout(items.clone(), 4_096, basis);
            let (plan, budget) = layout.plan().expect("a plan");
            assert_eq!(
                layout.size(plan, budget).expect("tried").summary_tokens,
                budget
            );
        }
    }

    fn numberless() -> OverflowSignal {
        OverflowSignal {
            signature: crate::overflow::SignatureName::Builtin("openai"),
            cause: OverflowCause::Input,
            limit: None,
            actual: None,
            requested_output: None,
            matched: None,
        }
    }

    #[test]
    fn a_guessed_window_is_never_below_the_largest_answered_request() {
        let mut sizing = sizing(2_000);
        let failed_bytes = 14_538 * 4;
        let guess = sizing.window(&numberless(), failed_bytes);
        assert_eq!(guess.tokens, 14_538 * 3 / 4);
        assert_eq!(guess.basis, WindowBasis::Guess);
        sizing.known.answered_tokens = 13_909;
        assert_eq!(sizing.window(&numberless(), failed_bytes).tokens, 13_909);
    }

    #[test]
    fn a_documented_window_gives_way_to_a_request_that_overflowed_below_it() {
        let mut sizing = sizing(2_000);
        sizing.known.window = Some((14_000, SizeSource::Documented));
        let below = sizing.window(&numberless(), 15_000 * 4);
        assert_eq!(below.tokens, 14_000);
        assert_eq!(below.basis, WindowBasis::Documented);
        let contradicted = sizing.window(&numberless(), 10_000 * 4);
        assert_eq!(contradicted.basis, WindowBasis::Guess);
        sizing.known.window = Some((14_000, SizeSource::Config));
        assert_eq!(
            sizing.window(&numberless(), 10_000 * 4).basis,
            WindowBasis::Evidence
        );
    }
}
