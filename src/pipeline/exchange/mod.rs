//! Steps 4 to 8, one request's round trips.
//!
//! Steps 4 to 8 for one client request: rewrite, forward, detect overflow,
//! compact and retry, at most `max_compactions` times, read top to bottom
//! in [`Exchange::run`].

mod compact;
mod events;
mod loops;
mod native;
mod on_demand;
mod served;

use super::budget::CompactionBudget;
use super::native::{Fallback, NativeAsk};
use super::persist::Persist;
use super::respond::{self, Degraded, Report};
use super::rewrite;
use crate::conversation::Conversation;
use crate::domain::{Compaction, Trigger};
use crate::error::ProxyError;
use crate::overflow::inspect::{inspect, Inspected};
use crate::overflow::OverflowSignal;
use crate::protocol::native::Lead;
use crate::protocol::{Adapter, ChatRequest};
use crate::state::AppState;
use crate::telemetry::genai;
use crate::tokens::usage::UsageTap;
use crate::upstream::headers;
use crate::upstream::routes::Route;
use crate::upstream::socket::UpstreamSocket;
use axum::response::Response;
use bytes::Bytes;
use http::request::Parts;
use http::{HeaderMap, HeaderValue};
use std::sync::Arc;
use tokio::sync::watch;
use tracing::{Instrument, Span};

/// One chat request as the pipeline received and identified it.
pub struct Incoming {
    pub route: Route,
    pub parts: Parts,
    /// The client's body, sent unchanged while no compaction applies.
    pub original: Bytes,
    pub adapter: &'static dyn Adapter,
    pub request: Arc<ChatRequest>,
    pub conversation: Conversation,
}

impl Incoming {
    /// Whether `sent` carries text alone: known from identification when
    /// it is the client's body, whose messages were searched once each
    /// (a re-sent history not again); searched whole when rewritten.
    fn text_only(&self, sent: &[u8]) -> bool {
        if sent.as_ptr() == self.original.as_ptr() && sent.len() == self.original.len() {
            return self.conversation.text_only;
        }
        crate::protocol::text_only(self.adapter, sent)
    }
}

pub struct Exchange {
    state: AppState,
    incoming: Incoming,
    /// The request's new messages, queued once the upstream accepts it.
    persist: Persist,
    /// Set while a summary is being written, so a streaming client gets
    /// keep-alives.
    compacting: Option<watch::Sender<bool>>,
    report: Report,
    /// What this request's exported spans share; empty when none are.
    origin: genai::Origin,
    /// Upstream calls made for the client's request so far.
    attempts: u32,
    /// The API's own context-management forms, forwarded or served.
    native: served::Native,
    /// What the client asked of its provider's own compaction that
    /// Condenser does itself (`native.rs`).
    ask: Option<NativeAsk>,
    /// The compaction item that leads the answer, once a threshold the
    /// client set was passed and Condenser compacted.
    lead: Option<Box<dyn Lead>>,
    /// The request as Condenser serves it, should the upstream refuse
    /// the provider's form it was forwarded with.
    fallback: Option<Fallback>,
    /// Set while compacting to below the client's own threshold: the
    /// plan aims at it, the summary calls at the model's window.
    below_threshold: bool,
    /// The last compaction failed as an earlier request's identical plan
    /// did (`FailedPlans`): said then, so logged at debug now. A server
    /// that keeps 400 tokens of a re-sent history would otherwise log two
    /// info lines on every request for as long as the history is sent.
    failure_remembered: bool,
}

/// What one attempt upstream came to.
enum Attempt {
    /// The response the client gets.
    Answered(Response),
    /// A context overflow, with the upstream's own error for the client if
    /// no compaction saves the request.
    Overflowed(OverflowSignal, Response),
    /// A native form refused as unknown: the request is to be served.
    Refused,
}

impl Exchange {
    pub fn new(state: AppState, incoming: Incoming, persist: Persist) -> Self {
        let route = &incoming.route;
        let conversation = &incoming.conversation;
        let origin = genai::Origin::new(
            route.upstream.protocol.provider().telemetry(),
            &route.url,
            || conversation.id.to_hex(),
        );
        let native = served::Native::new(
            incoming.adapter,
            &route.upstream,
            &incoming.original,
            &incoming.parts.headers,
        );
        Self {
            state,
            incoming,
            persist,
            compacting: None,
            report: Report::default(),
            origin,
            attempts: 0,
            native,
            ask: None,
            lead: None,
            fallback: None,
            below_threshold: false,
            failure_remembered: false,
        }
    }

    /// Does what the client asked of its provider's own compaction.
    pub fn serving_native(mut self, ask: Option<NativeAsk>) -> Self {
        self.ask = ask;
        self
    }

    /// Serves `fallback` should the upstream refuse the form.
    pub fn falling_back(mut self, fallback: Option<Fallback>) -> Self {
        self.fallback = fallback;
        self
    }

    /// Reports on `compacting` while a summary is written.
    pub fn signalling(mut self, compacting: watch::Sender<bool>) -> Self {
        self.compacting = Some(compacting);
        self
    }

    /// Every summarizing path is boxed where it is awaited: its future is
    /// kilobytes, and inline it would make the request's future as large,
    /// copied whole each time it moves, on every request.
    pub async fn run(mut self) -> (Response, Report) {
        if let Some(NativeAsk::Compact(shape)) = self.ask {
            return Box::pin(self.serve_native(shape)).await;
        }
        if let Some(forms) = self.summary_asked() {
            return Box::pin(self.summary_on_demand(forms)).await;
        }
        if self.signed_by_client() {
            return Box::pin(self.forward_signed()).await;
        }
        let mut applied = self.stored_compaction();
        if let Some(compaction) = self.compact_before_reply().await {
            applied = Some(compaction);
        }
        let mut budget = CompactionBudget::new(self.state.settings.compaction.max_compactions);
        loop {
            let body = self.upstream_body(applied.as_ref());
            let sent_bytes = body.len();
            self.report.sent_bytes = sent_bytes;
            self.report.compacted_messages = applied.as_ref().map(|c| c.prefix_len);
            let current = applied.as_ref();
            let before = self.compact_before_sending(&mut budget, current, sent_bytes);
            if let Some(compaction) = before.await {
                applied = Some(compaction);
                continue;
            }
            let (signal, upstream_error) = match self.attempt(body).await {
                Attempt::Answered(response) => {
                    let response = self.native.report(response).await;
                    let response = self.led(response).await;
                    return self.finish(response);
                }
                Attempt::Overflowed(signal, error) => (signal, error),
                Attempt::Refused => continue,
            };
            let current = applied.as_ref();
            let overflow = Trigger::Overflow;
            match Box::pin(self.compact_within(&mut budget, current, &signal, sent_bytes, overflow))
                .await
            {
                Ok(compaction) => applied = Some(compaction),
                Err(kind) => {
                    tracing::warn!(
                        error.kind = kind.as_str(),
                        "compaction failed: returning the upstream's overflow error"
                    );
                    self.report.compaction_error = Some(kind);
                    return self.finish(upstream_error);
                }
            }
        }
    }

    /// A request its client signed goes as it came; where it overflows,
    /// the client learns why Condenser cannot compact it, in place of the
    /// upstream's overflow error.
    async fn forward_signed(mut self) -> (Response, Report) {
        let body = self.incoming.original.clone();
        self.report.sent_bytes = body.len();
        match self.attempt(body).await {
            Attempt::Answered(response) => self.finish(response),
            Attempt::Overflowed(..) | Attempt::Refused => {
                tracing::warn!("a request signed by its client overflowed: not compacted");
                self.report.compaction_error =
                    Some(crate::domain::CompactionFailure::SignedByClient);
                let protocol = self.incoming.route.upstream.protocol;
                self.finish(ProxyError::SignedByClient.into_response_for(protocol))
            }
        }
    }

    /// A compaction made before sending: past the client's own threshold,
    /// or where the upstream would certainly refuse the request.
    async fn compact_before_sending(
        &mut self,
        budget: &mut CompactionBudget,
        current: Option<&Compaction>,
        sent_bytes: usize,
    ) -> Option<Compaction> {
        let at_threshold = self.compact_at_threshold(budget, current, sent_bytes);
        if let Some(compaction) = at_threshold.await {
            return Some(compaction);
        }
        let signal = self.certain_overflow(sent_bytes)?;
        let proactive = Trigger::Proactive;
        let compacted =
            Box::pin(self.compact_within(budget, current, &signal, sent_bytes, proactive)).await;
        let remembered = self.failure_remembered;
        compacted
            // The estimate may be wrong: let the upstream decide.
            .inspect_err(|kind| {
                let kind = kind.as_str();
                let message = "no compaction before sending: sending as it is";
                match remembered {
                    true => tracing::debug!(error.kind = kind, message),
                    false => tracing::info!(error.kind = kind, message),
                }
            })
            .ok()
    }

    /// Sends `body` and reads the start of the answer, in a span of its
    /// own when spans are exported.
    async fn attempt(&mut self, body: Bytes) -> Attempt {
        self.attempts += 1;
        let span = self.call_span(&body);
        if span.is_disabled() {
            // Not exported: no span to enter, and no wrapper to move the
            // attempt's kilobytes of future into.
            return self.attempt_in(body, &span).await;
        }
        self.attempt_in(body, &span).instrument(span.clone()).await
    }

    /// The span of this attempt: none unless spans are exported.
    fn call_span(&self, body: &[u8]) -> Span {
        if !crate::telemetry::exporting() {
            return Span::none();
        }
        let Incoming {
            adapter, request, ..
        } = &self.incoming;
        let asked = genai::Asked {
            model: &request.model,
            max_tokens: adapter.max_output_tokens(request),
            stream: request.stream,
        };
        let call = genai::Call::Request {
            attempt: self.attempts,
        };
        let span = genai::call_span(&self.origin, call, &asked);
        genai::sent(&span, body);
        span
    }

    async fn attempt_in(&mut self, body: Bytes, span: &Span) -> Attempt {
        let sent = body.clone();
        let protocol = self.incoming.route.upstream.protocol;
        let response = match self.send(body).await {
            Ok(response) => response,
            Err(error) => {
                genai::failed(span, error.kind());
                return Attempt::Answered(error.into_response_for(protocol));
            }
        };
        let (state, adapter) = (&self.state, self.incoming.adapter);
        let idle = state.upstream.idle_timeout();
        let Ok(inspected) = inspect(response, &state.overflow, adapter, idle).await else {
            let upstream = self.incoming.route.upstream.name.clone();
            let error = ProxyError::UpstreamIdle {
                upstream,
                timeout: idle,
            };
            genai::failed(span, error.kind());
            return Attempt::Answered(error.into_response_for(protocol));
        };
        match inspected {
            Inspected::Overflow {
                status,
                headers,
                body,
                signal,
            } => {
                genai::overflowed(span, status, &signal.signature.to_string());
                self.note_overflow(&signal, &sent);
                Attempt::Overflowed(signal, respond::buffered(status, &headers, body))
            }
            Inspected::Error { status, body, .. }
                if self
                    .native
                    .refused(&self.incoming.route.upstream, status.as_u16(), &body) =>
            {
                genai::status(span, status);
                Attempt::Refused
            }
            Inspected::Error { status, body, .. } if self.falls_back(status.as_u16(), &body) => {
                genai::status(span, status);
                Attempt::Refused
            }
            other => {
                genai::status(span, status_of(&other));
                if accepted(&other) {
                    let Incoming {
                        conversation,
                        request,
                        ..
                    } = &self.incoming;
                    self.persist.accept(conversation, request);
                }
                Attempt::Answered(self.relay(other, &sent, span).await)
            }
        }
    }

    /// Counts and logs an overflow, and learns what its numbers say.
    fn note_overflow(&mut self, signal: &OverflowSignal, sent: &[u8]) {
        metrics::counter!("condenser_overflows_total", "signature" => signal.signature.to_string())
            .increment(1);
        self.report.overflows += 1;
        tracing::info!(overflow.signature = %signal.signature, overflow.cause = ?signal.cause, limit = ?signal.limit, actual = ?signal.actual, "upstream reported context overflow");
        let Incoming {
            route,
            request,
            conversation,
            ..
        } = &self.incoming;
        let (upstream, model) = (route.upstream.name.as_str(), request.model.as_str());
        let tenant = &conversation.tenant;
        self.state
            .sizes
            .learn_overflow((upstream, model), tenant, signal, sent);
    }

    /// Relays a response that needs no compaction, learning from its usage.
    async fn relay(&mut self, inspected: Inspected, sent: &[u8], span: &Span) -> Response {
        let Incoming {
            adapter,
            request,
            route,
            conversation,
            ..
        } = &self.incoming;
        let tap = UsageTap {
            sizes: self.state.sizes.clone(),
            adapter: *adapter,
            upstream: route.upstream.name.clone(),
            model: request.model.clone(),
            tenant: conversation.tenant.clone(),
            sent_bytes: sent.len(),
            text_only: self.incoming.text_only(sent),
            requested_output: adapter.max_output_tokens(request).unwrap_or(0),
            answer: genai::Answer::new(span, *adapter),
        };
        let idle = self.state.upstream.idle_timeout();
        let (response, usage) = respond::relayed(inspected, idle, Some(tap)).await;
        self.report.usage = usage;
        response
    }

    fn finish(mut self, response: Response) -> (Response, Report) {
        self.report.accepted = self.persist.accepted();
        let queue_full = self.persist.queue_full();
        self.report.degraded = if self.state.storage.is_degraded() {
            Some(Degraded::StorageUnavailable)
        } else if queue_full {
            Some(Degraded::WriteQueueFull)
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
        let chain = self.incoming.conversation.summarizable_chain();
        self.state.storage.memory().deepest_compaction(chain)
    }

    /// The client's bytes unchanged unless a compaction applies or native
    /// forms are served.
    fn upstream_body(&mut self, applied: Option<&Compaction>) -> Bytes {
        let body = self.rewritten_body(applied);
        if !self.native.serves() {
            return body;
        }
        let calibration = self.model_size().calibration.unwrap_or_default();
        self.native.body(body, &|bytes| calibration.tokens(bytes))
    }

    /// The client's bytes unchanged unless a compaction applies.
    fn rewritten_body(&self, applied: Option<&Compaction>) -> Bytes {
        let Some(compaction) = applied else {
            return self.incoming.original.clone();
        };
        let role = &self.state.settings.compaction.summary_role;
        let Incoming {
            adapter,
            request,
            conversation,
            ..
        } = &self.incoming;
        rewrite::upstream_body(*adapter, request, &conversation.chain, compaction, role).into()
    }

    /// Over the client socket's own upstream socket where it has one and
    /// the upstream serves the mode, else over HTTP.
    async fn send(&self, body: Bytes) -> Result<reqwest::Response, ProxyError> {
        let Incoming { route, parts, .. } = &self.incoming;
        let outgoing = match self.signed_by_client() {
            // Only the very bytes the client signed, with its headers.
            true if body != self.incoming.original => return Err(ProxyError::SignedByClient),
            true => headers::request_headers(&parts.headers),
            false => self.outgoing_headers(),
        };
        let upstream = &self.state.upstream;
        if let Some(socket) = parts.extensions.get::<UpstreamSocket>() {
            let (waits, url) = (upstream.socket_waits(), &route.url);
            // Boxed: a socket's handshake future is kilobytes, and only
            // requests from a client's socket take this path.
            let sent = Box::pin(socket.send(&route.upstream, url, &outgoing, &body, waits));
            if let Some(answer) = sent.await {
                return answer;
            }
        }
        let method = parts.method.clone();
        upstream
            .send(&route.upstream, method, &route.url, outgoing, body.into())
            .await
    }

    /// Whether the client signed the request itself, so that neither its
    /// body nor its headers may change on the way.
    fn signed_by_client(&self) -> bool {
        let Incoming { route, parts, .. } = &self.incoming;
        let signer = route.upstream.protocol.provider().signer();
        signer.is_some_and(|signer| signer.signed_by_client(&parts.headers))
    }

    /// Condenser reads error bodies and first events: ask for them uncompressed.
    fn outgoing_headers(&self) -> HeaderMap {
        let mut outgoing = headers::request_headers(&self.incoming.parts.headers);
        let identity = HeaderValue::from_static("identity");
        outgoing.insert(http::header::ACCEPT_ENCODING, identity);
        self.native.headers(&mut outgoing);
        outgoing
    }
}

/// The status of an answer that is not an overflow.
fn status_of(inspected: &Inspected) -> http::StatusCode {
    match inspected {
        Inspected::Relay { response, .. } => response.status(),
        Inspected::Error { status, .. } | Inspected::Overflow { status, .. } => *status,
    }
}

/// Whether the upstream accepted the request: a 2xx, whose messages are
/// then worth keeping.
fn accepted(inspected: &Inspected) -> bool {
    match inspected {
        Inspected::Relay { response, .. } => response.status().is_success(),
        _ => false,
    }
}
