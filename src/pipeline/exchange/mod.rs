//! One client request's round trips with the upstream: send, and on an
//! overflow compact and send again, at most `max_compactions` times.

use super::budget::CompactionBudget;
use super::persist::Persisted;
use super::respond::{self, Report};
use super::rewrite;
use crate::compaction::{self, CompactionError, Job, Sizing, Summarizer, SummaryBudget};
use crate::conversation::Conversation;
use crate::error::ProxyError;
use crate::overflow::inspect::{inspect, Inspected};
use crate::overflow::{OverflowCause, OverflowSignal};
use crate::protocol::{Adapter, ChatRequest};
use crate::state::AppState;
use crate::store::{Compaction, QueueFull};
use crate::tokens::usage::UsageTap;
use crate::tokens::ModelSize;
use crate::upstream::headers;
use crate::upstream::routes::Route;
use axum::response::Response;
use bytes::Bytes;
use http::request::Parts;
use http::{HeaderMap, HeaderValue};
use std::sync::Arc;
use tokio::sync::watch;

pub struct Exchange {
    state: AppState,
    route: Route,
    parts: Parts,
    original: Bytes,
    adapter: &'static dyn Adapter,
    request: Arc<ChatRequest>,
    conversation: Conversation,
    persisted: Option<Persisted>,
    report: Report,
}

impl Exchange {
    #[expect(
        clippy::too_many_arguments,
        reason = "the parts of one request, gathered once"
    )]
    pub fn new(
        state: AppState,
        route: Route,
        parts: Parts,
        original: Bytes,
        adapter: &'static dyn Adapter,
        request: Arc<ChatRequest>,
        conversation: Conversation,
        persisted: Persisted,
    ) -> Self {
        let report = Report::default();
        Self {
            state,
            route,
            parts,
            original,
            adapter,
            request,
            conversation,
            persisted: Some(persisted),
            report,
        }
    }

    pub async fn run(mut self, compacting: Option<watch::Sender<bool>>) -> (Response, Report) {
        let mut applied = self.stored_compaction();
        let mut budget = CompactionBudget::new(self.state.settings.compaction.max_compactions);
        let protocol = self.route.upstream.protocol;
        loop {
            let body = self.upstream_body(applied.as_ref());
            let sent_bytes = body.len();
            self.report.sent_bytes = sent_bytes;
            self.report.compacted_messages = applied.as_ref().map(|c| c.prefix_len);
            if let Some(signal) = self.certain_overflow(sent_bytes) {
                if budget.try_spend() {
                    notify(compacting.as_ref());
                    match self
                        .compact(applied.as_ref(), &signal, sent_bytes, "proactive")
                        .await
                    {
                        Ok(compaction) => {
                            self.report.compactions = budget.spent();
                            applied = Some(compaction);
                            continue;
                        }
                        // The estimate may be wrong: let the upstream decide.
                        Err(error) => {
                            tracing::info!(error.kind = error.kind(), error.message = %error, "compaction before sending failed: sending as it is");
                        }
                    }
                }
            }
            let response = match self.send(body).await {
                Ok(response) => response,
                Err(error) => return self.finish(error.into_response_for(protocol)),
            };
            let idle = self.state.upstream.idle_timeout();
            let inspected = inspect(response, &self.state.overflow, self.adapter, idle).await;
            let Ok(inspected) = inspected else {
                let error = ProxyError::UpstreamIdle {
                    upstream: self.route.upstream.name.clone(),
                    timeout: idle,
                };
                return self.finish(error.into_response_for(protocol));
            };
            let (status, headers, body, signal) = match inspected {
                Inspected::Overflow {
                    status,
                    headers,
                    body,
                    signal,
                } => (status, headers, body, signal),
                other => return self.relay(other, sent_bytes),
            };
            metrics::counter!("condenser_overflows_total", "signature" => signal.signature.clone())
                .increment(1);
            self.report.overflows += 1;
            tracing::info!(overflow.signature = %signal.signature, overflow.cause = ?signal.cause, limit = ?signal.limit, actual = ?signal.actual, "upstream reported context overflow");
            let (upstream, model) = (&self.route.upstream.name, &self.request.model);
            self.state
                .sizes
                .learn_overflow(upstream, model, &signal, sent_bytes);
            let upstream_error = respond::buffered(status, &headers, body);
            if !budget.try_spend() {
                metrics::counter!("condenser_compactions_exhausted_total").increment(1);
                self.report.compaction_error = Some("limit_reached");
                return self.finish(upstream_error);
            }
            notify(compacting.as_ref());
            match self
                .compact(applied.as_ref(), &signal, sent_bytes, "overflow")
                .await
            {
                Ok(compaction) => {
                    self.report.compactions = budget.spent();
                    applied = Some(compaction);
                }
                Err(error) => {
                    tracing::warn!(error.kind = error.kind(), error.message = %error, "compaction failed: returning the upstream's overflow error");
                    self.report.compaction_error = Some(error.kind());
                    return self.finish(upstream_error);
                }
            }
        }
    }

    /// A request the upstream will certainly refuse, by the calibrated
    /// estimate against a known window, as the overflow it would answer.
    /// A documented window counts only once this model's bytes-to-tokens
    /// rate is measured, and only for the input it documents: a guessed
    /// rate against a window this upstream never stated is not certainty.
    fn certain_overflow(&self, sent_bytes: usize) -> Option<OverflowSignal> {
        let known = self.model_size();
        let documented = known.evidence_window().is_none();
        if documented && known.calibration.is_none() {
            return None;
        }
        let window = known.window_tokens()?;
        let estimate = known.calibration.unwrap_or_default().tokens(sent_bytes);
        let output = (!known.ignores_output && !documented)
            .then(|| self.adapter.max_output_tokens(&self.request))
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
            signature: "estimate".into(),
            cause,
            limit: Some(window),
            actual: Some(estimate),
            requested_output: output,
        })
    }

    fn model_size(&self) -> ModelSize {
        let upstream = &self.route.upstream.name;
        self.state.sizes.get(upstream, &self.request.model)
    }

    /// Relays a response that needs no compaction, learning from its usage.
    fn relay(mut self, inspected: Inspected, sent_bytes: usize) -> (Response, Report) {
        let tap = UsageTap {
            sizes: self.state.sizes.clone(),
            adapter: self.adapter,
            upstream: self.route.upstream.name.clone(),
            model: self.request.model.clone(),
            sent_bytes,
            requested_output: self.adapter.max_output_tokens(&self.request).unwrap_or(0),
        };
        let idle = self.state.upstream.idle_timeout();
        let (response, usage) = respond::relayed(inspected, idle, Some(tap));
        self.report.usage = usage;
        self.finish(response)
    }

    fn finish(mut self, response: Response) -> (Response, Report) {
        let queue_full = matches!(self.persisted, Some(Err(QueueFull)));
        self.report.degraded = if self.state.storage.is_degraded() {
            Some("storage-unavailable")
        } else if queue_full {
            Some("write-queue-full")
        } else {
            None
        };
        if self.report.degraded.is_some() {
            metrics::counter!("condenser_degraded_requests_total").increment(1);
        }
        (response, self.report)
    }

    /// The compaction that applies, from memory: no round trip. One this
    /// instance has not heard of yet costs an overflow, after which the
    /// compaction step finds it in the store.
    fn stored_compaction(&self) -> Option<Compaction> {
        let chain = self.conversation.summarizable_chain();
        self.state.storage.memory().deepest_compaction(chain)
    }

    /// The client's bytes unchanged unless a compaction applies.
    fn upstream_body(&self, applied: Option<&Compaction>) -> Bytes {
        let Some(compaction) = applied else {
            return self.original.clone();
        };
        let role = &self.state.settings.compaction.summary_role;
        let (request, chain) = (&self.request, &self.conversation.chain);
        rewrite::upstream_body(self.adapter, request, chain, compaction, role).into()
    }

    async fn send(&self, body: Bytes) -> Result<reqwest::Response, ProxyError> {
        let outgoing = self.outgoing_headers();
        let upstream = &self.route.upstream;
        self.state
            .upstream
            .send(
                upstream,
                self.parts.method.clone(),
                &self.route.url,
                outgoing,
                body.into(),
            )
            .await
    }

    /// Condenser reads error bodies and first events: ask for them uncompressed.
    fn outgoing_headers(&self) -> HeaderMap {
        let mut outgoing = headers::request_headers(&self.parts.headers);
        outgoing.insert(
            http::header::ACCEPT_ENCODING,
            HeaderValue::from_static("identity"),
        );
        outgoing
    }

    async fn compact(
        &mut self,
        current: Option<&Compaction>,
        signal: &OverflowSignal,
        sent_bytes: usize,
        trigger: &'static str,
    ) -> Result<Compaction, CompactionError> {
        let settings = &self.state.settings.compaction;
        let sizing = Sizing {
            keep_share: settings.keep_share,
            summary_max_tokens: settings.summary_max_tokens,
            lease_ttl: settings.lease_ttl,
            known: self.model_size(),
        };
        let model = if settings.summary_model.is_empty() {
            &self.request.model
        } else {
            &settings.summary_model
        };
        let headers = self.outgoing_headers();
        let job = Job {
            adapter: self.adapter,
            request: &self.request,
            conversation: &self.conversation,
            current,
            signal,
            sent_bytes,
            trigger,
        };
        let summarizer = Summarizer {
            client: &self.state.upstream,
            route: &self.route,
            headers: &headers,
            adapter: self.adapter,
            overflow: &self.state.overflow,
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
        let (own_window, own_calibration) = if model == self.request.model {
            (window, calibration)
        } else {
            let known = self.state.sizes.get(&self.route.upstream.name, model);
            let own_window = known.window_tokens().unwrap_or(window);
            (own_window, known.calibration.unwrap_or(calibration))
        };
        SummaryBudget {
            window: own_window,
            calibration: own_calibration,
            max_tokens: sizing.summary_cap(window.min(own_window)),
            max_calls: self.state.settings.compaction.max_summary_calls as usize,
        }
    }
}

fn notify(compacting: Option<&watch::Sender<bool>>) {
    if let Some(sender) = compacting {
        let _ = sender.send(true);
    }
}
