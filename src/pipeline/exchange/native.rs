//! Step 7, compact, as a client asks for it: a provider-native compaction
//! request (Codex's `compaction_trigger`) answered by Condenser.
//!
//! The whole conversation before the request's ask is summarized by
//! Condenser's own summary calls, through the same upstream and
//! credential; the summary goes back sealed in the API's compaction item
//! (`protocol::native`), which a later request carries and Condenser
//! expands into its summary message.

use super::{Exchange, Incoming};
use crate::compaction::{Sizing, Summarizer};
use crate::error::ProxyError;
use crate::overflow::{OverflowCause, OverflowSignal, SignatureName};
use crate::protocol::native::{Sealed, Shape};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::super::respond::Report;

impl Exchange {
    /// Summarizes the conversation and answers with one compaction item.
    pub(super) async fn serve_native(mut self, shape: Shape) -> (Response, Report) {
        if let Some(compacting) = &self.compacting {
            let _ = compacting.send(true);
        }
        let protocol = self.incoming.route.upstream.protocol;
        let summary = match self.summarize_all().await {
            Ok(summary) => summary,
            Err(kind) => {
                tracing::warn!(error.kind = kind, "native compaction not served");
                let error = ProxyError::CompactionFailed(kind);
                return self.finish(error.into_response_for(protocol));
            }
        };
        let Incoming {
            adapter,
            request,
            conversation,
            ..
        } = &self.incoming;
        self.persist.accept(conversation, request);
        self.report.compactions = 1;
        metrics::counter!("condenser_native_compactions_total").increment(1);
        let sealed = Sealed::seal(&self.state.item_key, conversation.tenant.as_str(), &summary);
        // The request as the client sent it (its ask removed): the body
        // alone may hold the input as spans.
        let original = &self.incoming.original;
        let body = serde_json::from_slice(original)
            .unwrap_or_else(|_| Value::Object(request.body.clone()));
        let input = self.report.sent_bytes as u64 / 4;
        let output = summary.len() as u64 / 4;
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

    /// One summary of every message of the request (the system part
    /// aside), folded in as few calls as the summarizer's window allows.
    async fn summarize_all(&mut self) -> Result<String, &'static str> {
        let sent_bytes = self.incoming.original.len();
        self.report.sent_bytes = sent_bytes;
        let settings = &self.state.settings.compaction;
        let known = self.model_size();
        let estimate = known.calibration.unwrap_or_default().tokens(sent_bytes);
        let window = known
            .window_tokens()
            .unwrap_or_else(|| known.answered_tokens.max(estimate + estimate / 4));
        let signal = OverflowSignal {
            signature: SignatureName::Estimate,
            cause: OverflowCause::Input,
            limit: Some(window),
            actual: Some(estimate),
            requested_output: None,
            matched: None,
        };
        let sizing = Sizing {
            keep_share: settings.keep_share,
            summary_max_tokens: settings.summary_max_tokens,
            lease_ttl: settings.lease_ttl,
            known,
        };
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
        };
        let entries = summarizer.transcript(request.messages());
        if entries.is_empty() {
            return Err("nothing_to_compact");
        }
        let written = summarizer
            .summarize(budget.max_tokens, None, &entries)
            .await;
        written
            .map(|written| written.text)
            .map_err(|error| error.kind().as_str())
    }
}
