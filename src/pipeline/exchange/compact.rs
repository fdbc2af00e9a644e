//! Step 7, compact, as one request spends it: the one path to a
//! compaction for both triggers, bounded by the request's budget (step 8).

use super::{Exchange, Incoming};
use crate::compaction::progress::{Verdict, Written};
use crate::compaction::{
    self, CompactionError, Covered, Job, Sizing, Summarizer, SummaryBudget, REASONING_TOKENS,
};
use crate::conversation::Conversation;
use crate::domain::{Compaction, CompactionFailure, Trigger};
use crate::overflow::{OverflowSignal, SignatureName};
use crate::pipeline::budget::CompactionBudget;
use crate::pipeline::persist::Persist;
use crate::protocol::{ChatRequest, WindowProbe};
use crate::telemetry::genai;
use crate::tokens::{self, ModelSize, SizeSource};
use crate::upstream::routes::Upstream;
use std::sync::Arc;
use tracing::Instrument;

/// This request's messages, as the compaction covering them needs them.
pub(super) struct CoveredMessages<'a> {
    pub persist: &'a mut Persist,
    pub conversation: &'a Conversation,
    pub request: &'a Arc<ChatRequest>,
}

impl Covered for CoveredMessages<'_> {
    async fn durable(&mut self) -> bool {
        self.persist.durable(self.conversation, self.request).await
    }
}

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
        let weighed = self.weighed_if_known();
        if let Some(weighed) = &weighed {
            if let Verdict::Loop | Verdict::Identical { spent: true, .. } = self.verdict(weighed) {
                self.loop_found(weighed);
                return Err(CompactionFailure::Loop);
            }
        }
        if !budget.try_spend() {
            if trigger == Trigger::Overflow {
                metrics::counter!("condenser_compactions_exhausted_total").increment(1);
            }
            return Err(CompactionFailure::LimitReached);
        }
        if let Some(compacting) = &self.compacting {
            let _ = compacting.send(true);
        }
        let signature = signal.signature.to_string();
        let span = genai::compaction_span(&self.origin, trigger.as_str(), &signature);
        let compacted = self
            .compact(current, signal, sent_bytes, trigger)
            .instrument(span.clone())
            .await;
        let remembered = self.failure_remembered;
        let compaction = compacted.map_err(|error| {
            let kind = error.kind().as_str();
            genai::compaction_failed(&span, kind);
            let message = "compaction not made";
            match remembered {
                true => {
                    tracing::debug!(error.kind = kind, error.message = %error, ?trigger, message)
                }
                false => {
                    tracing::info!(error.kind = kind, error.message = %error, ?trigger, message)
                }
            }
            error.kind()
        })?;
        self.report.compactions = budget.spent();
        let weighed = weighed.unwrap_or_else(|| self.weighed());
        let written = Written {
            summary: compaction.summary.clone(),
            used: None,
        };
        self.made(&weighed, written, false);
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
        let cause = compaction::exceeds(window, threshold, estimate, output.unwrap_or(0))?;
        Some(OverflowSignal {
            signature: SignatureName::Estimate,
            cause,
            limit: Some(window),
            actual: Some(estimate),
            requested_output: output,
            matched: None,
        })
    }

    /// What is known of the model, with the window this request runs in:
    /// the one the request sets (Ollama's `num_ctx`), else what was
    /// learned or configured, else the upstream's configured default, which
    /// beats documentation; never above what the server gives the model
    /// (Ollama caps `num_ctx` at the trained length). A window learned
    /// smaller than the request's (a server that keeps half) stands.
    pub(super) fn model_size(&self) -> ModelSize {
        let Incoming {
            adapter,
            request,
            route,
            conversation,
            ..
        } = &self.incoming;
        let upstream = &route.upstream;
        let mut known = self
            .state
            .sizes
            .get(&upstream.name, &request.model, &conversation.tenant);
        let learned = known.evidence_window();
        let configured = |tokens| Some((tokens, SizeSource::Config));
        match (adapter.request_window(request), learned) {
            (Some(own), Some(learned)) if learned < own => {}
            (Some(own), _) => known.window = configured(own),
            (None, None) => {
                if let Some(default) = upstream.default_window {
                    known.window = configured(default);
                }
            }
            (None, Some(_)) => {}
        }
        if let (Some((window, source)), Some(ceiling)) = (known.window, known.ceiling) {
            known.window = Some((window.min(ceiling), source));
        }
        if let Some(probe) = upstream.protocol.provider().window_probe() {
            self.ask_ceiling(upstream, &request.model, probe);
        }
        known
    }

    /// Asks the server, once per model and in the background, for the
    /// model's trained context length, where its provider says how.
    fn ask_ceiling(&self, upstream: &Arc<Upstream>, model: &str, probe: WindowProbe) {
        let sizes = &self.state.sizes;
        if !sizes.first_ceiling_ask(&upstream.name, model) {
            return;
        }
        let (state, upstream, model) = (self.state.clone(), upstream.clone(), model.to_string());
        self.state.background.spawn(async move {
            let url = upstream.url(probe.path, None);
            let body = (probe.body)(&model).to_string();
            let mut headers = http::HeaderMap::new();
            let json = http::HeaderValue::from_static("application/json");
            headers.insert(http::header::CONTENT_TYPE, json);
            let sent =
                state
                    .upstream
                    .send(&upstream, http::Method::POST, &url, headers, body.into());
            let Ok(response) = sent.await else { return };
            let Ok(bytes) = response.bytes().await else {
                return;
            };
            let show = serde_json::from_slice(&bytes).unwrap_or_default();
            if let Some(tokens) = (probe.read)(&show) {
                state.sizes.learn_ceiling(&upstream.name, &model, tokens);
            }
        });
    }

    async fn compact(
        &mut self,
        current: Option<&Compaction>,
        signal: &OverflowSignal,
        sent_bytes: usize,
        trigger: Trigger,
    ) -> Result<Compaction, CompactionError> {
        let settings = &self.state.settings.compaction;
        let sizing = self.sizing(self.model_size());
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
            origin: &self.origin,
            calls_made: Default::default(),
            used: Default::default(),
        };
        let (planned, remembered) = self.prepare(&sizing, &summarizer, &job);
        self.failure_remembered = remembered;
        let planned = planned?;
        let persist = &mut self.persist;
        let mut covered = CoveredMessages {
            persist,
            conversation,
            request,
        };
        let storage = &self.state.storage;
        let ttl = sizing.lease_ttl;
        compaction::compact(storage, &summarizer, ttl, planned, &job, &mut covered).await
    }

    /// The settings a compaction is sized by, with what is `known` of
    /// the model.
    pub(super) fn sizing(&self, known: ModelSize) -> Sizing {
        let settings = &self.state.settings.compaction;
        Sizing {
            keep_share: settings.keep_share,
            headroom_turns: settings.headroom_turns,
            summary_max_tokens: settings.summary_max_tokens,
            lease_ttl: settings.lease_ttl,
            known,
        }
    }

    /// [`compaction::prepare`], unless the same proactive compaction of the
    /// same request was planned before and failed: planning parses and
    /// weighs every message, and an unhelpful one would otherwise cost a
    /// re-sent history that much on every request (`FailedPlans`). True
    /// beside a failure remembered so.
    fn prepare(
        &self,
        sizing: &Sizing,
        summarizer: &Summarizer<'_>,
        job: &compaction::Job<'_>,
    ) -> (Result<compaction::Planned, CompactionError>, bool) {
        // An overflow is the upstream's word, not an estimate: always planned.
        if job.trigger != Trigger::Proactive {
            return (compaction::prepare(sizing, summarizer, job), false);
        }
        let key = plan_key(sizing, summarizer, job);
        let failed = &self.state.failed_plans;
        if let Some(error) = failed.get(key) {
            return (Err(error), true);
        }
        let planned = compaction::prepare(sizing, summarizer, job)
            .inspect_err(|error| failed.remember(key, error));
        (planned, false)
    }

    /// Summary calls sized to the summarizer's own window when another
    /// model writes summaries, else to this request's.
    pub(super) fn summary_budget(
        &self,
        sizing: &Sizing,
        signal: &OverflowSignal,
        sent_bytes: usize,
        model: &str,
    ) -> SummaryBudget {
        let window = sizing.window(signal, sent_bytes).tokens;
        let calibration = sizing.calibration(signal, sent_bytes);
        // Below the client's threshold, the signal states the threshold,
        // not the model's window the summary calls run in.
        let call_window = match self.below_threshold {
            true => self.model_window(sent_bytes),
            false => window,
        };
        let (own_window, own_calibration) = if model == self.incoming.request.model {
            (call_window, calibration)
        } else {
            let upstream = &self.incoming.route.upstream.name;
            let tenant = &self.incoming.conversation.tenant;
            let known = self.state.sizes.get(upstream, model, tenant);
            let own_window = known.window_tokens().unwrap_or(call_window);
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

/// A digest of everything [`compaction::prepare`] reads: the chain's last
/// link (the tenant, the system part and every message, canonical), the
/// compaction it replaces, the bytes sent, the model and what is known of
/// its sizes, the signal and the summary budget. The message sizes planning
/// weighs follow from the chain and the bytes sent; a request that differs
/// only in what the canonical form leaves out (`cache_control`) may share a
/// digest, and then at worst goes upstream uncompacted, as the failure
/// would have sent it.
fn plan_key(sizing: &Sizing, summarizer: &Summarizer<'_>, job: &compaction::Job<'_>) -> u128 {
    use std::fmt::Write;
    let mut inputs = String::with_capacity(512);
    let chain = &job.conversation.chain;
    let _ = write!(
        inputs,
        "{:?}|{:?}|{}|{}|{}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{}|{:?}|{:?}",
        chain.last().map(|link| link.as_bytes()),
        job.current.map(|c| c.prefix_hash.as_bytes()),
        chain.len(),
        job.sent_bytes,
        job.request.model,
        job.adapter.max_output_tokens(job.request),
        sizing.known,
        job.signal.cause,
        (
            job.signal.limit,
            job.signal.actual,
            job.signal.requested_output
        ),
        (summarizer.budget.window, summarizer.budget.max_tokens),
        (
            summarizer.budget.reasoning_tokens,
            summarizer.budget.max_calls
        ),
        summarizer.model,
        (sizing.keep_share, sizing.headroom_turns),
        (sizing.summary_max_tokens, summarizer.budget.calibration),
    );
    xxhash_rust::xxh3::xxh3_128(inputs.as_bytes())
}
