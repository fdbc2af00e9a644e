//! One client request's round trips with the upstream: send, and on an
//! overflow compact and send again, at most `max_compactions` times.

use super::budget::CompactionBudget;
use super::identify::Conversation;
use super::inspect::{inspect, Inspected};
use super::respond::{self, Report};
use super::rewrite;
use crate::compaction::{self, CompactionError, Job, Sizing, Summarizer};
use crate::http::routes::Route;
use crate::overflow::OverflowSignal;
use crate::protocol::{Adapter, ChatRequest};
use crate::state::AppState;
use crate::store::Compaction;
use crate::upstream::headers;
use axum::response::Response;
use bytes::Bytes;
use http::request::Parts;
use http::{HeaderMap, HeaderValue};
use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub struct Exchange {
    state: AppState,
    route: Route,
    parts: Parts,
    original: Bytes,
    adapter: &'static dyn Adapter,
    request: Arc<ChatRequest>,
    conversation: Conversation,
    persisted: Option<JoinHandle<bool>>,
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
        persisted: JoinHandle<bool>,
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
        let mut applied = self.stored_compaction().await;
        let mut budget = CompactionBudget::new(self.state.settings.compaction.max_compactions);
        let protocol = self.route.upstream.protocol;
        let idle = self.state.upstream.idle_timeout();
        loop {
            let body = self.upstream_body(applied.as_ref());
            let sent_bytes = body.len();
            self.report.compacted_messages = applied.as_ref().map(|c| c.prefix_len);
            let response = match self.send(body).await {
                Ok(response) => response,
                Err(error) => return self.finish(error.into_response_for(protocol)),
            };
            let (status, headers, body, signal) =
                match inspect(response, &self.state.overflow).await {
                    Inspected::Overflow {
                        status,
                        headers,
                        body,
                        signal,
                    } => (status, headers, body, signal),
                    other => return self.finish(respond::relayed(other, idle)),
                };
            metrics::counter!("condenser_overflows_total", "signature" => signal.signature.clone())
                .increment(1);
            tracing::info!(overflow.signature = %signal.signature, overflow.cause = ?signal.cause, limit = ?signal.limit, actual = ?signal.actual, "upstream reported context overflow");
            let upstream_error = respond::buffered(status, &headers, body);
            if !budget.try_spend() {
                metrics::counter!("condenser_compactions_exhausted_total").increment(1);
                self.report.compaction_error = Some("limit_reached");
                return self.finish(upstream_error);
            }
            if let Some(sender) = &compacting {
                let _ = sender.send(true);
            }
            match self.compact(applied.as_ref(), &signal, sent_bytes).await {
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

    fn finish(mut self, response: Response) -> (Response, Report) {
        self.report.degraded = self.state.storage.is_degraded();
        if self.report.degraded {
            metrics::counter!("condenser_degraded_requests_total").increment(1);
        }
        (response, self.report)
    }

    async fn stored_compaction(&mut self) -> Option<Compaction> {
        let (tenant, chain) = (&self.conversation.tenant, &self.conversation.chain);
        let found = self
            .state
            .storage
            .run("latest_compaction", |s| async move {
                s.latest_compaction(tenant, chain).await
            })
            .await;
        found.flatten()
    }

    /// The client's bytes unchanged unless a compaction applies.
    fn upstream_body(&self, applied: Option<&Compaction>) -> Bytes {
        let Some(compaction) = applied else {
            return self.original.clone();
        };
        let role = &self.state.settings.compaction.summary_role;
        let messages = rewrite::upstream_messages(
            self.adapter,
            &self.request,
            &self.conversation.chain,
            compaction,
            role,
        );
        self.adapter.build(&self.request, &messages).into()
    }

    async fn send(&self, body: Bytes) -> Result<reqwest::Response, crate::error::ProxyError> {
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
    ) -> Result<Compaction, CompactionError> {
        // The compaction names stored messages: let their write finish first.
        if let Some(persisted) = self.persisted.take() {
            let _ = persisted.await;
        }
        let settings = &self.state.settings.compaction;
        let known_window = self.known_window(signal).await;
        let sizing = Sizing {
            keep_share: settings.keep_share,
            summary_max_tokens: settings.summary_max_tokens,
            lease_ttl: settings.lease_ttl,
            known_window,
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
            trigger: "overflow",
        };
        let summarizer = Summarizer {
            client: &self.state.upstream,
            route: &self.route,
            headers: &headers,
            adapter: self.adapter,
            model,
            max_tokens: settings.summary_max_tokens,
            window: sizing.window(signal, sent_bytes),
            calibration: Sizing::calibration(signal, sent_bytes),
            timeout: settings.summary_timeout,
        };
        compaction::compact(&self.state.storage, &summarizer, &sizing, &job).await
    }

    /// The window from the error, else configuration, else what was learned.
    async fn known_window(&self, signal: &OverflowSignal) -> Option<u64> {
        let upstream = self.route.upstream.name.as_str();
        let model = self.request.model.as_str();
        if let Some(limit) = signal.limit {
            self.state
                .storage
                .run("record_model_limit", |s| async move {
                    s.record_model_limit(upstream, model, limit, "overflow_error")
                        .await
                })
                .await;
            return Some(limit);
        }
        if let Some(window) = self.state.settings.context_windows.get(model) {
            return Some(*window);
        }
        self.state
            .storage
            .run("model_limit", |s| async move {
                s.model_limit(upstream, model).await
            })
            .await
            .flatten()
    }
}
