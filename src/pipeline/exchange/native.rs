//! Step 7, compact, as a client asks for it: a provider-native compaction
//! request (Codex's `compaction_trigger`) answered by Condenser.
//!
//! The whole conversation before the request's ask is summarized by
//! Condenser's own summary calls, through the same upstream and
//! credential; the summary goes back sealed in the API's compaction item
//! (`protocol::native`), which a later request carries and Condenser
//! expands into its summary message.

use super::compact::CoveredMessages;
use super::events::{edited, AnswerEdit};
use super::loops::AskedSummary;
use super::{Exchange, Incoming};
use crate::compaction::{self, Job, Summarizer};
use crate::domain::Usage;
use crate::domain::{Compaction, Trigger};
use crate::error::ProxyError;
use crate::overflow::{OverflowCause, OverflowSignal, SignatureName};
use crate::pipeline::budget::CompactionBudget;
use crate::pipeline::native::NativeAsk;
use crate::pipeline::rewrite;
use crate::protocol::native::{Lead, Sealed, Shape};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::super::respond::Report;

impl Exchange {
    /// The compaction threshold the client set (OpenAI's
    /// `compact_threshold`), as an overflow of that size, when the body
    /// about to be sent passes it. Asked once per request: the threshold
    /// is spent whether or not a compaction follows.
    fn threshold_passed(&mut self, sent_bytes: usize) -> Option<OverflowSignal> {
        let Some(NativeAsk::Threshold(threshold)) = self.ask else {
            return None;
        };
        self.ask = None;
        let calibration = self.model_size().calibration.unwrap_or_default();
        let estimate = calibration.tokens(sent_bytes);
        (estimate > threshold).then_some(OverflowSignal {
            signature: SignatureName::Estimate,
            cause: OverflowCause::Input,
            limit: Some(threshold),
            actual: Some(estimate),
            requested_output: None,
            matched: None,
        })
    }

    /// Where the request passed the client's threshold: Condenser's own
    /// compaction, to below it, and the compaction item that will lead
    /// the answer, sealed with the summary and the messages kept after
    /// it, so it stands for everything before it as the provider's does.
    /// `None` when no compaction was made: the request goes as it is.
    pub(super) async fn compact_at_threshold(
        &mut self,
        budget: &mut CompactionBudget,
        current: Option<&Compaction>,
        sent_bytes: usize,
    ) -> Option<Compaction> {
        let signal = self.threshold_passed(sent_bytes)?;
        let proactive = Trigger::Proactive;
        self.below_threshold = true;
        let compacted =
            Box::pin(self.compact_within(budget, current, &signal, sent_bytes, proactive)).await;
        self.below_threshold = false;
        let compaction = match compacted {
            Ok(compaction) => compaction,
            Err(kind) => {
                tracing::info!(
                    error.kind = kind.as_str(),
                    "no compaction at the client's threshold: sending as it is"
                );
                return None;
            }
        };
        let Incoming {
            adapter,
            request,
            conversation,
            ..
        } = &self.incoming;
        let forms = adapter.native()?;
        let kept = rewrite::kept_messages(request, &conversation.chain, &compaction);
        let carried = forms.items(&kept);
        let tenant = conversation.tenant.as_str();
        let key = &self.state.item_key;
        let sealed = Sealed::seal_carrying(key, tenant, &compaction.summary, &carried);
        self.lead = Some(forms.lead(&sealed));
        metrics::counter!("condenser_native_compactions_total").increment(1);
        Some(compaction)
    }

    /// Whether an error answer refused the provider's form this request
    /// was forwarded with: the request is then the one Condenser serves,
    /// on this attempt and for the upstream's later requests.
    pub(super) fn falls_back(&mut self, status: u16, body: &[u8]) -> bool {
        let Incoming { adapter, route, .. } = &self.incoming;
        let Some(forms) = adapter.native().filter(|_| self.fallback.is_some()) else {
            return false;
        };
        if !forms.refuses(route.url.path(), status, body) {
            return false;
        }
        let Some(fallback) = self.fallback.take() else {
            return false;
        };
        let Some(request) = adapter.parse(&fallback.body) else {
            return false;
        };
        crate::pipeline::native::remember_refused(route, status);
        self.incoming.request = std::sync::Arc::new(request);
        self.incoming.original = fallback.body;
        self.ask = fallback.threshold.map(NativeAsk::Threshold);
        true
    }

    /// The answer, led by the compaction item when one was made.
    pub(super) async fn led(&mut self, response: Response) -> Response {
        match self.lead.take() {
            Some(lead) => edited(response, Leading(lead)).await,
            None => response,
        }
    }

    /// Summarizes the conversation and answers with one compaction item.
    pub(super) async fn serve_native(mut self, shape: Shape) -> (Response, Report) {
        if let Some(compacting) = &self.compacting {
            let _ = compacting.send(true);
        }
        let protocol = self.incoming.route.upstream.protocol;
        let started = std::time::Instant::now();
        let AskedSummary {
            text: summary,
            used,
            folds,
        } = match Box::pin(self.summarize_asked(true)).await {
            Ok(asked) => asked,
            Err(not_asked) => return self.finish(not_asked.into_response_for(protocol)),
        };
        let Incoming {
            request,
            conversation,
            ..
        } = &self.incoming;
        self.persist.accept(conversation, request);
        self.report.compactions = 1;
        metrics::counter!("condenser_native_compactions_total").increment(1);
        self.keep_asked(&summary, started.elapsed().as_millis() as i64)
            .await;
        let Incoming {
            adapter,
            request,
            conversation,
            ..
        } = &self.incoming;
        let (key, tenant) = (&self.state.item_key, conversation.tenant.as_str());
        // Folded: the item stands for everything before it, so what the
        // client keeps beside it no longer goes upstream.
        let sealed = match folds {
            true => Sealed::seal_carrying(key, tenant, &summary, &[]),
            false => Sealed::seal(key, tenant, &summary),
        };
        // The request as the client sent it (its ask removed): the body
        // alone may hold the input as spans.
        let original = &self.incoming.original;
        let body = serde_json::from_slice(original)
            .unwrap_or_else(|_| Value::Object(request.body.clone()));
        // What the summary calls reported, else an estimate.
        let estimate = (self.report.sent_bytes as u64 / 4, summary.len() as u64 / 4);
        let (input, output) = used.map_or(estimate, |u| (u.input_tokens, u.output_tokens));
        let Some(forms) = adapter.native() else {
            return self.finish(ProxyError::Internal.into_response_for(protocol));
        };
        let (streamed, answer) = forms.answer(&body, shape, &sealed, (input, output));
        let content_type = match streamed {
            true => adapter.stream_content_type(),
            false => "application/json",
        };
        let response = ([(http::header::CONTENT_TYPE, content_type)], answer).into_response();
        self.finish(response)
    }

    /// The compaction the client asked for, of every message of the
    /// request, stored like Condenser's own: on the operator page, in the
    /// metrics, and applied to a later request that continues the whole
    /// conversation.
    pub(super) async fn keep_asked(
        &mut self,
        summary: &str,
        duration_ms: i64,
    ) -> Option<Compaction> {
        let settings = &self.state.settings.compaction;
        let calibration = self.model_size().calibration.unwrap_or_default();
        let Incoming {
            adapter,
            request,
            conversation,
            ..
        } = &self.incoming;
        let cut = request.messages().len();
        let &prefix_hash = conversation.chain.get(cut)?;
        let message = adapter.summary_message(&settings.summary_role, summary);
        let summary_tokens = calibration.tokens(message.to_string().len()) as i64;
        let compaction = Compaction {
            prefix_hash,
            base_hash: conversation.chain[0],
            prefix_len: cut as i64,
            summary: summary.to_string(),
            summary_tokens,
            messages_compacted: cut as i64,
            tokens_before: calibration.tokens(self.report.sent_bytes) as i64,
            tokens_after: summary_tokens,
            model: settings
                .summary_model
                .clone()
                .unwrap_or(request.model.clone()),
            trigger: Trigger::Asked,
            trims: Vec::new(),
            duration_ms,
            created_at_ms: crate::store::now_ms(),
        };
        let signal = OverflowSignal {
            signature: SignatureName::Estimate,
            cause: OverflowCause::Input,
            limit: None,
            actual: None,
            requested_output: None,
            matched: None,
        };
        let job = Job {
            adapter: *adapter,
            request,
            conversation,
            current: None,
            signal: &signal,
            sent_bytes: self.report.sent_bytes,
            trigger: Trigger::Asked,
        };
        let mut covered = CoveredMessages {
            persist: &mut self.persist,
            conversation,
            request,
        };
        compaction::keep_asked(&self.state.storage, &job, &compaction, &mut covered).await;
        Some(compaction)
    }

    /// The model's window as known, else a guess the request fits: the
    /// window summary calls are sized to when no overflow stated it.
    pub(super) fn model_window(&self, sent_bytes: usize) -> u64 {
        let known = self.model_size();
        let estimate = known.calibration.unwrap_or_default().tokens(sent_bytes);
        known
            .window_tokens()
            .unwrap_or_else(|| known.answered_tokens.max(estimate + estimate / 4))
    }

    /// One summary of every message of the request (the system part
    /// aside), folded in as few calls as the summarizer's window allows,
    /// and what its calls reported they used.
    pub(super) async fn summarize_all(&mut self) -> Result<(String, Option<Usage>), &'static str> {
        let sent_bytes = self.incoming.original.len();
        self.report.sent_bytes = sent_bytes;
        let settings = &self.state.settings.compaction;
        let known = self.model_size();
        let estimate = known.calibration.unwrap_or_default().tokens(sent_bytes);
        let window = self.model_window(sent_bytes);
        let signal = OverflowSignal {
            signature: SignatureName::Estimate,
            cause: OverflowCause::Input,
            limit: Some(window),
            actual: Some(estimate),
            requested_output: None,
            matched: None,
        };
        let sizing = self.sizing(known);
        let Incoming {
            adapter,
            request,
            route,
            ..
        } = &self.incoming;
        let model = settings.summary_model.as_deref().unwrap_or(&request.model);
        let headers = self.outgoing_headers();
        let budget = self.summary_budget(&sizing, &signal, sent_bytes, model);
        let summarizer = Summarizer {
            client: &self.state.upstream,
            route,
            headers: &headers,
            adapter: *adapter,
            request,
            overflow: &self.state.overflow,
            sizes: &self.state.sizes,
            model,
            budget,
            timeout: settings.summary_timeout,
            origin: &self.origin,
            calls_made: Default::default(),
            used: Default::default(),
        };
        let entries = summarizer.transcript(request.messages());
        if entries.is_empty() {
            return Err("nothing_to_compact");
        }
        let written = summarizer
            .summarize(budget.max_tokens, None, &entries)
            .await;
        let used = summarizer.used.total();
        written
            .map(|written| (written.text, used))
            .map_err(|error| error.kind().as_str())
    }
}

/// An answer led by a compaction item: every event is the lead's to edit.
struct Leading(Box<dyn Lead>);

impl AnswerEdit for Leading {
    fn event(&mut self, event: &[u8]) -> Option<Vec<u8>> {
        let text = std::str::from_utf8(event).ok()?;
        self.0.event(text).map(String::into_bytes)
    }

    fn finished(&self) -> bool {
        false
    }

    fn json(&mut self, answer: &mut Value) {
        self.0.json(answer);
    }
}
