//! Step 7, "compact": plan a cut, summarize what goes, store the result as a
//! compaction of that exact prefix. One summarizer per prefix across all
//! instances: a lease in the store elects it, the others wait and reuse.

mod chunks;
pub mod plan;
mod sizing;
pub mod summarize;
mod trims;

use crate::conversation::ChainHash;
use crate::overflow::OverflowSignal;
use crate::pipeline::identify::Conversation;
use crate::pipeline::storage::Storage;
use crate::protocol::{Adapter, ChatRequest};
use crate::store::Compaction;
use plan::Plan;
use sizing::Layout;
pub use sizing::Sizing;
use std::time::{Duration, Instant};
pub use summarize::{Summarizer, SummaryBudget, SummaryError};
pub use trims::{apply_trims, TrimRecord};

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
    pub fn kind(&self) -> &'static str {
        match self {
            Self::NothingToCompact => "nothing_to_compact",
            Self::CannotFit { .. } => "cannot_fit",
            Self::Summary(error) => error.kind(),
            Self::WaitedTooLong(_) => "lease_wait_timeout",
        }
    }
}

/// Everything one compaction needs to know about the request.
pub struct Job<'a> {
    pub adapter: &'a dyn Adapter,
    pub request: &'a ChatRequest,
    pub conversation: &'a Conversation,
    pub current: Option<&'a Compaction>,
    pub signal: &'a OverflowSignal,
    /// Size of the upstream request that overflowed.
    pub sent_bytes: usize,
    pub trigger: &'static str,
}

/// A cut that fits, with the sizes it was planned from and the transcript
/// of what it summarizes.
pub struct Planned {
    layout: Layout,
    plan: Plan,
    transcript: Vec<String>,
}

/// Plans the compaction of `job` and checks it is worth paying for: the
/// request after it fits the window, and what it summarizes fits the
/// summary calls allowed. Needs nothing stored, so a request that cannot be
/// helped is answered before any write, lease or summary call.
pub fn prepare(
    sizing: &Sizing,
    summarizer: &Summarizer<'_>,
    job: &Job<'_>,
) -> Result<Planned, CompactionError> {
    let layout = sizing.layout(job);
    let plan = plan::plan(
        &layout.items,
        layout.compacted,
        layout.tail_budget,
        layout.min_kept,
    )
    .ok_or(CompactionError::NothingToCompact)?;
    if !layout.fits(&plan) {
        let predicted = layout.tokens_after(&plan, layout.summary_budget);
        return Err(CompactionError::CannotFit {
            predicted,
            window: layout.window,
        });
    }
    let fresh = &job.request.messages[layout.compacted..plan.cut];
    let transcript = summarizer.transcript(fresh);
    summarizer.check(job.current.map(|c| c.summary.as_str()), &transcript)?;
    Ok(Planned {
        layout,
        plan,
        transcript,
    })
}

/// Produces the compaction that replaces `job.current`, electing one
/// summarizer per base across instances.
pub async fn compact(
    storage: &Storage,
    summarizer: &Summarizer<'_>,
    lease_ttl: Duration,
    planned: Planned,
    job: &Job<'_>,
) -> Result<Compaction, CompactionError> {
    let planned = &planned;
    let base = job
        .current
        .map_or(job.conversation.chain[0], |c| c.prefix_hash);
    let holder = uuid::Uuid::new_v4().to_string();
    let holder = holder.as_str();
    let tenant = &job.conversation.tenant;
    let ttl = lease_ttl;
    let deadline = Instant::now() + ttl * 2;
    loop {
        let acquired = storage
            .run("acquire_lease", |s| async move {
                s.try_acquire_lease(tenant, &base, holder, ttl).await
            })
            .await;
        if acquired != Some(false) {
            let result = summarize_and_store(storage, summarizer, planned, job, base).await;
            if acquired == Some(true) {
                storage
                    .run("release_lease", |s| async move {
                        s.release_lease(tenant, &base, holder).await
                    })
                    .await;
            }
            return result;
        }
        if let Some(done) = newer_compaction(storage, job).await {
            metrics::counter!("condenser_compactions_total", "trigger" => job.trigger, "outcome" => "reused").increment(1);
            return Ok(done);
        }
        if Instant::now() > deadline {
            return Err(CompactionError::WaitedTooLong(ttl * 2));
        }
        tokio::time::sleep(POLL_EVERY).await;
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
    let current_len = job.current.map_or(0, |c| c.prefix_len);
    (latest.prefix_len > current_len).then_some(latest)
}

async fn summarize_and_store(
    storage: &Storage,
    summarizer: &Summarizer<'_>,
    planned: &Planned,
    job: &Job<'_>,
    base: ChainHash,
) -> Result<Compaction, CompactionError> {
    // Another instance may have finished while this one was being elected.
    if let Some(done) = newer_compaction(storage, job).await {
        return Ok(done);
    }
    let started = Instant::now();
    let Planned {
        layout,
        plan,
        transcript,
    } = planned;
    let compacted = layout.compacted;
    let (summary, calls) = if plan.cut > compacted {
        let previous = job.current.map(|c| c.summary.as_str());
        let written = summarizer.summarize(previous, transcript).await?;
        (written.text, written.calls)
    } else {
        let current = job.current.map(|c| c.summary.clone());
        (current.unwrap_or_default(), 0)
    };
    let summary_tokens = layout.calibration.tokens(
        job.adapter
            .summary_message("user", &summary)
            .to_string()
            .len(),
    );
    let trims = trims::trims_for(job, plan, layout);
    let compaction = Compaction {
        prefix_hash: job.conversation.chain[plan.cut],
        base_hash: base,
        prefix_len: plan.cut as i64,
        summary_tokens: summary_tokens as i64,
        summary,
        messages_compacted: (plan.cut - compacted) as i64,
        tokens_before: layout.tokens_before as i64,
        tokens_after: layout.tokens_after(plan, summary_tokens) as i64,
        model: summarizer.model.to_string(),
        trigger: job.trigger.to_string(),
        trims: serde_json::to_string(&trims).unwrap_or_else(|_| "[]".into()),
        duration_ms: started.elapsed().as_millis() as i64,
        created_at_ms: crate::store::now_ms(),
    };
    store(storage, job, &compaction).await;
    log_compaction(job, &compaction, trims.len(), calls);
    Ok(compaction)
}

async fn store(storage: &Storage, job: &Job<'_>, compaction: &Compaction) {
    let tenant = &job.conversation.tenant;
    let stored = storage
        .run("insert_compaction", |s| async move {
            s.insert_compaction(tenant, compaction).await
        })
        .await;
    let outcome = match stored {
        Some(true) => "stored",
        Some(false) => "duplicate",
        None => "unstored",
    };
    metrics::counter!("condenser_compactions_total", "trigger" => job.trigger, "outcome" => outcome).increment(1);
    metrics::histogram!("condenser_summary_seconds").record(compaction.duration_ms as f64 / 1000.0);
    metrics::histogram!("condenser_compaction_tokens", "stage" => "before")
        .record(compaction.tokens_before as f64);
    metrics::histogram!("condenser_compaction_tokens", "stage" => "after")
        .record(compaction.tokens_after as f64);
}

fn log_compaction(job: &Job<'_>, compaction: &Compaction, trims: usize, summary_calls: usize) {
    tracing::info!(
        conversation = job.conversation.label.as_deref().unwrap_or(""),
        root = %job.conversation.chain[0],
        trigger = job.trigger,
        overflow.signature = %job.signal.signature,
        overflow.cause = ?job.signal.cause,
        messages_compacted = compaction.messages_compacted,
        messages_kept = job.request.messages.len() as i64 - compaction.prefix_len,
        tokens_before = compaction.tokens_before,
        tokens_after = compaction.tokens_after,
        summary_tokens = compaction.summary_tokens,
        trims,
        summary_calls,
        duration_ms = compaction.duration_ms,
        "conversation compacted"
    );
}
