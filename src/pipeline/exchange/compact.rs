//! Step 7, compact, as one request spends it: the one path to a
//! compaction for both triggers, bounded by the request's budget (step 8).

use super::{Exchange, Incoming};
use crate::compaction::{
    self, CompactionError, Job, Sizing, Summarizer, SummaryBudget, REASONING_TOKENS,
};
use crate::overflow::{OverflowCause, OverflowSignal, SignatureName};
use crate::pipeline::budget::CompactionBudget;
use crate::store::{Compaction, CompactionFailure, Trigger};
use crate::tokens::{self, ModelSize};

impl Exchange {
    /// Spends one compaction of `budget` on replacing `current`, whatever
    /// triggered it: no path compacts without counting (invariant 2).
    pub(super) async fn compact_within(
        &mut self,
        budget: &mut CompactionBudget,
        current: Option<&Compaction>,
        signal: &OverflowSignal,
        sent_bytes: usize,
        trigger: Trigger,
    ) -> Result<Compaction, CompactionFailure> {
        if !budget.try_spend() {
            if trigger == Trigger::Overflow {
                metrics::counter!("condenser_compactions_exhausted_total").increment(1);
            }
            return Err(CompactionFailure::LimitReached);
        }
        if let Some(compacting) = &self.compacting {
            let _ = compacting.send(true);
        }
        let compacted = self.compact(current, signal, sent_bytes, trigger).await;
        let compaction = compacted.map_err(|error| {
            tracing::info!(error.kind = error.kind().as_str(), error.message = %error, ?trigger, "compaction not made");
            error.kind()
        })?;
        self.report.compactions = budget.spent();
        Ok(compaction)
    }

    /// A request the upstream will certainly refuse, by the calibrated
    /// estimate against a known window, as the overflow it would answer.
    /// A documented window counts only once this model's bytes-to-tokens
    /// rate is measured, and only for the input it documents: a guessed
    /// rate against a window this upstream never stated is not certainty.
    pub(super) fn certain_overflow(&self, sent_bytes: usize) -> Option<OverflowSignal> {
        let known = self.model_size();
        let documented = known.evidence_window().is_none();
        if documented && known.calibration.is_none() {
            return None;
        }
        let window = known.window_tokens()?;
        let estimate = known.calibration.unwrap_or_default().tokens(sent_bytes);
        let Incoming {
            adapter, request, ..
        } = &self.incoming;
        let output = (!known.ignores_output && !documented)
            .then(|| adapter.max_output_tokens(request))
            .flatten();
        let threshold = self.state.settings.compaction.proactive_threshold;
        let limit = (window as f64 * threshold) as u64;
        if estimate + output.unwrap_or(0) <= limit {
            return None;
        }
        let cause = if estimate > limit {
            OverflowCause::Input
        } else {
            OverflowCause::InputPlusOutput
        };
        Some(OverflowSignal {
            signature: SignatureName::Estimate,
            cause,
            limit: Some(window),
            actual: Some(estimate),
            requested_output: output,
        })
    }

    fn model_size(&self) -> ModelSize {
        let upstream = &self.incoming.route.upstream.name;
        self.state.sizes.get(upstream, &self.incoming.request.model)
    }

    async fn compact(
        &mut self,
        current: Option<&Compaction>,
        signal: &OverflowSignal,
        sent_bytes: usize,
        trigger: Trigger,
    ) -> Result<Compaction, CompactionError> {
        let settings = &self.state.settings.compaction;
        let sizing = Sizing {
            keep_share: settings.keep_share,
            summary_max_tokens: settings.summary_max_tokens,
            lease_ttl: settings.lease_ttl,
            known: self.model_size(),
        };
        let Incoming {
            adapter,
            request,
            conversation,
            route,
            ..
        } = &self.incoming;
        let model = settings.summary_model.as_deref().unwrap_or(&request.model);
        let headers = self.outgoing_headers();
        let job = Job {
            adapter: *adapter,
            request,
            conversation,
            current,
            signal,
            sent_bytes,
            trigger,
        };
        let summarizer = Summarizer {
            client: &self.state.upstream,
            route,
            headers: &headers,
            adapter: *adapter,
            request,
            overflow: &self.state.overflow,
            sizes: &self.state.sizes,
            model,
            budget: self.summary_budget(&sizing, signal, sent_bytes, model),
            timeout: settings.summary_timeout,
        };
        let planned = compaction::prepare(&sizing, &summarizer, &job)?;
        // The compaction names stored messages: let their write finish first.
        if let Some(Ok(persisted)) = self.persisted.take() {
            let _ = persisted.await;
        }
        let storage = &self.state.storage;
        compaction::compact(storage, &summarizer, sizing.lease_ttl, planned, &job).await
    }

    /// Summary calls sized to the summarizer's own window when another
    /// model writes summaries, else to this request's.
    fn summary_budget(
        &self,
        sizing: &Sizing,
        signal: &OverflowSignal,
        sent_bytes: usize,
        model: &str,
    ) -> SummaryBudget {
        let window = sizing.window(signal, sent_bytes).tokens;
        let calibration = sizing.calibration(signal, sent_bytes);
        let (own_window, own_calibration) = if model == self.incoming.request.model {
            (window, calibration)
        } else {
            let upstream = &self.incoming.route.upstream.name;
            let known = self.state.sizes.get(upstream, model);
            let own_window = known.window_tokens().unwrap_or(window);
            (own_window, known.calibration.unwrap_or(calibration))
        };
        let Incoming {
            adapter, request, ..
        } = &self.incoming;
        let reasoning_tokens = if adapter.reasons(request, model) {
            REASONING_TOKENS
        } else {
            0
        };
        // A request asking for more output than the model documents is
        // refused: the summary and its reasoning stay within that cap.
        let output_cap = tokens::documented_max_output(model).unwrap_or(u64::MAX);
        let max_tokens = sizing.summary_cap(window.min(own_window)).min(output_cap);
        SummaryBudget {
            window: own_window,
            calibration: own_calibration,
            max_tokens,
            reasoning_tokens: reasoning_tokens.min(output_cap - max_tokens),
            max_calls: self.state.settings.compaction.max_summary_calls as usize,
        }
    }
}
