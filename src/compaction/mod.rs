//! Step 7, compact: plan a cut, summarize what goes, store the result as a
//! compaction of that exact prefix. One summarizer per prefix across all
//! instances: a lease in the store elects it, the others wait and reuse.

mod call;
mod chunks;
mod fit;
pub mod plan;
pub mod progress;
mod sizing;
pub mod summarize;
mod summarizer;
mod trims;

use crate::conversation::Conversation;
use crate::conversation::{ChainHash, TenantId};
use crate::domain::{Compaction, CompactionFailure, Trigger};
use crate::overflow::OverflowSignal;
use crate::protocol::{Adapter, ChatRequest};
use crate::store::Storage;
use crate::telemetry::genai;
use plan::Plan;
pub use sizing::{exceeds, Layout, Numbers, Sizing, Window, WindowBasis};
use std::time::{Duration, Instant};
use summarize::Written;
pub use summarize::{longest_summary, REASONING_TOKENS};
pub use summarizer::{Summarizer, SummaryBudget, SummaryError};
pub use trims::apply_trims;

/// How often a waiting instance looks for the elected summarizer's result.
const POLL_EVERY: Duration = Duration::from_millis(200);

#[derive(Debug, thiserror::Error)]
pub enum CompactionError {
    #[error("nothing left to compact: the kept messages cannot be made smaller")]
    NothingToCompact,
    #[error("even the deepest compaction leaves {predicted} tokens for a {window}-token window")]
    CannotFit { predicted: u64, window: u64 },
    #[error(transparent)]
    Summary(#[from] SummaryError),
    #[error("gave up waiting for another instance's summary after {0:?}")]
    WaitedTooLong(Duration),
}

impl CompactionError {
    pub fn kind(&self) -> CompactionFailure {
        match self {
            Self::NothingToCompact => CompactionFailure::NothingToCompact,
            Self::CannotFit { .. } => CompactionFailure::CannotFit,
            Self::Summary(error) => error.kind(),
            Self::WaitedTooLong(_) => CompactionFailure::LeaseWaitTimeout,
        }
    }
}

/// Plans that came to nothing, by a digest of everything planning reads
/// (see `pipeline::exchange::compact`), so the same request is not
/// planned again only to fail the same way.
///
/// Planning reads every message: it parses the history into JSON values,
/// serializes each to weigh it and collects its tool links, about 15
/// million instructions for an 800 KB history. A proactive compaction that
/// cannot help (the kept tail alone is over the window, as when an
/// upstream's usage shows it keeps 400 tokens of an 800 KB history) would
/// otherwise pay that again on every re-send of the same history, for the
/// same answer, before the request goes upstream as it is anyway. Only
/// outcomes that depend on nothing but those inputs are kept; a summary
/// call's failure is never replayed.
pub struct FailedPlans(quick_cache::sync::Cache<u128, Unplannable>);

/// Plans remembered as failed: a few hundred bytes each at most.
const FAILED_PLANS: usize = 4096;

impl Default for FailedPlans {
    fn default() -> Self {
        Self(quick_cache::sync::Cache::new(FAILED_PLANS))
    }
}

impl FailedPlans {
    /// The error planning the request with inputs `key` came to, if it failed.
    pub fn get(&self, key: u128) -> Option<CompactionError> {
        self.0.get(&key).map(Unplannable::error)
    }

    /// Remembers `error` for the inputs `key`, when planning alone decided it.
    pub fn remember(&self, key: u128, error: &CompactionError) {
        if let Some(outcome) = Unplannable::of(error) {
            self.0.insert(key, outcome);
        }
    }
}

/// A planning failure that the same inputs always give again.
#[derive(Clone, Copy)]
enum Unplannable {
    NothingToCompact,
    CannotFit { predicted: u64, window: u64 },
    InputTooLarge { max_calls: usize },
}

impl Unplannable {
    fn of(error: &CompactionError) -> Option<Self> {
        match error {
            CompactionError::NothingToCompact => Some(Self::NothingToCompact),
            CompactionError::CannotFit { predicted, window } => Some(Self::CannotFit {
                predicted: *predicted,
                window: *window,
            }),
            CompactionError::Summary(SummaryError::InputTooLarge { max_calls }) => {
                Some(Self::InputTooLarge {
                    max_calls: *max_calls,
                })
            }
            _ => None,
        }
    }

    fn error(self) -> CompactionError {
        match self {
            Self::NothingToCompact => CompactionError::NothingToCompact,
            Self::CannotFit { predicted, window } => {
                CompactionError::CannotFit { predicted, window }
            }
            Self::InputTooLarge { max_calls } => {
                CompactionError::Summary(SummaryError::InputTooLarge { max_calls })
            }
        }
    }
}

/// Everything one compaction needs to know about the request.
pub struct Job<'a> {
    pub adapter: &'static dyn Adapter,
    pub request: &'a ChatRequest,
    pub conversation: &'a Conversation,
    pub current: Option<&'a Compaction>,
    pub signal: &'a OverflowSignal,
    /// Size of the upstream request that overflowed.
    pub sent_bytes: usize,
    pub trigger: Trigger,
}

/// The messages a compaction covers, made durable before it is stored: a
/// stored compaction never stands for messages the store does not have
/// (they could then be reached by neither deletion nor retention).
pub trait Covered: Send {
    /// Writes the messages if they are not yet; whether they are stored.
    fn durable(&mut self) -> impl std::future::Future<Output = bool> + Send;
}

/// A cut that fits, with the sizes it was planned from, the summary's
/// output budget and the transcript of what it summarizes.
pub struct Planned {
    layout: Layout,
    plan: Plan,
    summary_tokens: u64,
    transcript: Vec<String>,
}

/// Plans the compaction of `job` and checks it is worth paying for: the
/// request after it can fit the window, and what it summarizes fits the
/// summary calls allowed. Needs nothing stored, so a request that cannot be
/// helped is answered before any write, lease or summary call.
pub fn prepare(
    sizing: &Sizing,
    summarizer: &Summarizer<'_>,
    job: &Job<'_>,
) -> Result<Planned, CompactionError> {
    let layout = sizing.layout(job);
    let (plan, budget) = layout.plan().ok_or(CompactionError::NothingToCompact)?;
    let sized = layout.size(plan, budget)?;
    let fresh = &job.request.messages()[layout.compacted..sized.plan.cut];
    let transcript = summarizer.transcript(fresh);
    let previous = job.current.map(|c| c.summary.as_str());
    summarizer.check(sized.summary_tokens, previous, &transcript)?;
    Ok(Planned {
        layout,
        plan: sized.plan,
        summary_tokens: sized.summary_tokens,
        transcript,
    })
}

/// Produces the compaction that replaces `job.current`, electing one
/// summarizer per prefix across instances. The lease is on the prefix this
/// plan summarizes, so conversations that merely share a key and a system
/// prompt never wait on each other; it is renewed while the summary runs,
/// so a slow summary keeps it and a dead holder loses it within one TTL.
pub async fn compact(
    storage: &Storage,
    summarizer: &Summarizer<'_>,
    lease_ttl: Duration,
    planned: Planned,
    job: &Job<'_>,
    covered: &mut impl Covered,
) -> Result<Compaction, CompactionError> {
    let planned = &planned;
    planned.trace(summarizer, job);
    let result = elect_and_summarize(storage, summarizer, lease_ttl, planned, job, covered).await;
    genai::summary_calls(summarizer.calls_made());
    result
}

/// [`compact`], once planned: the lease, then the summary or the elected
/// summarizer's.
async fn elect_and_summarize(
    storage: &Storage,
    summarizer: &Summarizer<'_>,
    lease_ttl: Duration,
    planned: &Planned,
    job: &Job<'_>,
    covered: &mut impl Covered,
) -> Result<Compaction, CompactionError> {
    let prefix = job.conversation.chain[planned.plan.cut];
    let holder = uuid::Uuid::new_v4().to_string();
    let lease = Lease {
        storage,
        tenant: &job.conversation.tenant,
        prefix,
        holder: &holder,
        ttl: lease_ttl,
    };
    let longest = longest_summary(summarizer.timeout, summarizer.budget.max_calls);
    let patience = patience(longest, lease_ttl);
    let waiting = Instant::now();
    let deadline = waiting + patience;
    loop {
        let acquired = lease.acquire().await;
        if acquired != Some(false) {
            genai::lease_waited(waiting.elapsed());
            let work = summarize_and_store(storage, summarizer, planned, job, covered);
            // Renewal never ends: the summary's result ends the race.
            let result = tokio::select! {
                result = work => result,
                never = lease.keep_renewed() => match never {},
            };
            if acquired == Some(true) {
                lease.release().await;
            }
            return result;
        }
        if let Some(done) = newer_compaction(storage, job).await {
            metrics::counter!("condenser_compactions_total", "trigger" => job.trigger.as_str(), "outcome" => "reused").increment(1);
            genai::lease_waited(waiting.elapsed());
            trace_done(&done, "reused");
            return Ok(done);
        }
        if Instant::now() > deadline {
            genai::lease_waited(waiting.elapsed());
            return Err(CompactionError::WaitedTooLong(patience));
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// How long a request waits for another summarizer of its prefix: all
/// the holder may legitimately take ([`longest_summary`]: every call,
/// retry and backoff it is allowed), plus two lease TTLs, one for a holder
/// that died to lose its lease (a live one renews it), one for the
/// holder's round trips to the store (the messages its compaction covers
/// are written first, then the compaction). Waiting longer means
/// something else is wrong.
pub fn patience(longest_summary: Duration, lease_ttl: Duration) -> Duration {
    longest_summary.saturating_add(lease_ttl.saturating_mul(2))
}

/// One summarizer's claim on one prefix.
struct Lease<'a> {
    storage: &'a Storage,
    tenant: &'a TenantId,
    prefix: ChainHash,
    holder: &'a str,
    ttl: Duration,
}

impl Lease<'_> {
    /// `Some(true)` when held, `Some(false)` when another holder has it,
    /// `None` when the database cannot say (degraded: go on unelected).
    async fn acquire(&self) -> Option<bool> {
        let (tenant, prefix, holder, ttl) = (self.tenant, &self.prefix, self.holder, self.ttl);
        self.storage
            .run("acquire_lease", |s| async move {
                s.try_acquire_lease(tenant, prefix, holder, ttl).await
            })
            .await
    }

    /// Extends the lease every third of its TTL, for as long as it is polled.
    async fn keep_renewed(&self) -> std::convert::Infallible {
        loop {
            tokio::time::sleep(self.ttl / 3).await;
            if self.acquire().await == Some(false) {
                // Another instance took it after an expiry this one missed
                // (a stalled database): both may summarize; storing the
                // prefix twice is refused, so the cost is one summary.
                tracing::warn!("lost the lease on the prefix being summarized");
            }
        }
    }

    async fn release(&self) {
        let (tenant, prefix, holder) = (self.tenant, &self.prefix, self.holder);
        self.storage
            .run("release_lease", |s| async move {
                s.release_lease(tenant, prefix, holder).await
            })
            .await;
    }
}

/// A compaction of this chain deeper than the one the request started with.
async fn newer_compaction(storage: &Storage, job: &Job<'_>) -> Option<Compaction> {
    let tenant = &job.conversation.tenant;
    let chain = job.conversation.summarizable_chain();
    let latest = storage
        .run("latest_compaction", |s| async move {
            s.latest_compaction(tenant, chain).await
        })
        .await??;
    storage.memory().remember_compaction(tenant, &latest);
    let current_len = job.current.map_or(0, |c| c.prefix_len);
    (latest.prefix_len > current_len).then_some(latest)
}

async fn summarize_and_store(
    storage: &Storage,
    summarizer: &Summarizer<'_>,
    planned: &Planned,
    job: &Job<'_>,
    covered: &mut impl Covered,
) -> Result<Compaction, CompactionError> {
    // Another instance may have finished while this one was being elected.
    if let Some(done) = newer_compaction(storage, job).await {
        trace_done(&done, "reused");
        return Ok(done);
    }
    let started = Instant::now();
    let Written {
        text: summary,
        calls,
        counted,
    } = write_summary(summarizer, planned, job).await?;
    let Planned { layout, plan, .. } = planned;
    let size = |text: &str| {
        let message = job.adapter.summary_message("user", text).to_string();
        summarize::message_tokens(counted, layout.calibration, message.len(), text.len())
    };
    // Never send a request known not to fit.
    let too_large = || CompactionError::CannotFit {
        predicted: layout.tokens_after(plan, planned.summary_tokens),
        window: layout.window.tokens,
    };
    let summary = layout
        .fit_summary(plan, summary, size)
        .ok_or_else(too_large)?;
    let summary_tokens = size(&summary);
    let compaction = Compaction {
        prefix_hash: job.conversation.chain[plan.cut],
        base_hash: job
            .current
            .map_or(job.conversation.chain[0], |c| c.prefix_hash),
        prefix_len: plan.cut as i64,
        summary_tokens: summary_tokens as i64,
        summary,
        messages_compacted: (plan.cut - layout.compacted) as i64,
        tokens_before: layout.tokens_before as i64,
        tokens_after: layout.tokens_after(plan, summary_tokens) as i64,
        model: summarizer.model.to_string(),
        trigger: job.trigger,
        trims: trims::trims_for(job, plan, layout),
        duration_ms: started.elapsed().as_millis() as i64,
        created_at_ms: crate::store::now_ms(),
    };
    let stored = if covered.durable().await {
        store(storage, job, &compaction).await
    } else {
        tracing::warn!("the compacted messages were not stored: the compaction is not either");
        None
    };
    record(job, &compaction, stored);
    log_compaction(job, &compaction, calls);
    Ok(compaction)
}

/// A compaction a client asked for in its provider's own form, written
/// by Condenser: stored like the ones it makes, once the messages it
/// covers are (invariant 7), and counted and logged the same way, so the
/// operator page and the metrics show it. Whether it was stored.
pub async fn keep_asked(
    storage: &Storage,
    job: &Job<'_>,
    compaction: &Compaction,
    covered: &mut impl Covered,
) -> Option<bool> {
    let stored = match covered.durable().await {
        true => store(storage, job, compaction).await,
        false => None,
    };
    record(job, compaction, stored);
    log_compaction(job, compaction, 1);
    stored
}

/// The summary of what `planned` cuts, folded into the current one, and
/// the calls it took; the current summary as it is when the plan only
/// trims.
async fn write_summary(
    summarizer: &Summarizer<'_>,
    planned: &Planned,
    job: &Job<'_>,
) -> Result<Written, CompactionError> {
    if planned.plan.cut == planned.layout.compacted {
        let current = job.current.map(|c| c.summary.clone());
        return Ok(Written::reused(current.unwrap_or_default()));
    }
    let previous = job.current.map(|c| c.summary.as_str());
    Ok(summarizer
        .summarize(planned.summary_tokens, previous, &planned.transcript)
        .await?)
}

async fn store(storage: &Storage, job: &Job<'_>, compaction: &Compaction) -> Option<bool> {
    let (tenant, id) = (&job.conversation.tenant, &job.conversation.id);
    let stored = storage
        .run("insert_compaction", |s| async move {
            s.insert_compaction(tenant, id, compaction).await
        })
        .await;
    if stored == Some(true) {
        storage.memory().remember_compaction(tenant, compaction);
    }
    stored
}

fn record(job: &Job<'_>, compaction: &Compaction, stored: Option<bool>) {
    let outcome = match stored {
        Some(true) => "stored",
        Some(false) => "duplicate",
        None => "unstored",
    };
    trace_done(compaction, outcome);
    metrics::counter!("condenser_compactions_total", "trigger" => job.trigger.as_str(), "outcome" => outcome).increment(1);
    metrics::histogram!("condenser_summary_seconds").record(compaction.duration_ms as f64 / 1000.0);
    metrics::histogram!("condenser_compaction_tokens", "stage" => "before")
        .record(compaction.tokens_before as f64);
    metrics::histogram!("condenser_compaction_tokens", "stage" => "after")
        .record(compaction.tokens_after as f64);
}

/// A compaction's figures on its span (the current one).
fn trace_done(compaction: &Compaction, outcome: &'static str) {
    genai::compaction_done(&genai::Done {
        outcome,
        tokens_after: compaction.tokens_after,
        summary_tokens: compaction.summary_tokens,
        trims: compaction.trims.len(),
    });
}

impl Planned {
    /// The plan on the compaction's span (the current one).
    fn trace(&self, summarizer: &Summarizer<'_>, job: &Job<'_>) {
        let messages = job.request.messages().len();
        genai::compaction_planned(&genai::Planned {
            summary_model: summarizer.model,
            messages: self.plan.cut.saturating_sub(self.layout.compacted) as u64,
            kept: messages.saturating_sub(self.plan.cut) as u64,
            tokens_before: self.layout.tokens_before,
        });
    }
}

fn log_compaction(job: &Job<'_>, compaction: &Compaction, summary_calls: usize) {
    tracing::info!(
        conversation = %job.conversation.id,
        label = job.conversation.label.as_deref().unwrap_or(""),
        root = %job.conversation.chain[0],
        trigger = job.trigger.as_str(),
        overflow.signature = %job.signal.signature,
        overflow.cause = ?job.signal.cause,
        messages_compacted = compaction.messages_compacted,
        messages_kept = job.request.messages().len() as i64 - compaction.prefix_len,
        tokens_before = compaction.tokens_before,
        tokens_after = compaction.tokens_after,
        summary_tokens = compaction.summary_tokens,
        trims = compaction.trims.len(),
        summary_calls,
        duration_ms = compaction.duration_ms,
        "conversation compacted"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The defaults: 300 s a call, four calls. The holder may make 4
    /// chunk calls, 2 that overflowed and 2 that failed in passing, each
    /// asked up to three times (the other output field, more room to
    /// reason): 24 answers of up to 300 s, 1.5 s of backoff, then two
    /// 15 s lease TTLs.
    #[test]
    fn waiters_wait_out_everything_the_holder_may_take() {
        let longest = longest_summary(Duration::from_secs(300), 4);
        assert_eq!(longest, Duration::from_millis(24 * 300_000 + 1_500));
        let waited = patience(longest, Duration::from_secs(15));
        assert_eq!(waited, Duration::from_millis(7_201_500 + 30_000));
        // The old bound covered one call.
        assert!(waited > Duration::from_secs(300 + 30) * 20);
        assert_eq!(
            longest_summary(Duration::from_secs(10), 1),
            Duration::from_millis(15 * 10_000 + 1_500),
            "one chunk: 5 calls of 3 answers"
        );
        assert_eq!(
            patience(longest_summary(Duration::MAX, usize::MAX), Duration::MAX),
            Duration::MAX,
            "saturates"
        );
    }
}
