//! Step 7, compact, on the client's demand: a summary in place of a reply.
//!
//! An API whose clients may ask for a summary of the conversation instead
//! of a reply (Anthropic's on-demand compaction) gets it from Condenser
//! where the forms are served: the summary calls go through the same
//! upstream and credential, and the answer has the API's own shape. The
//! summary is Condenser's; a later request carrying it is rewritten by
//! the served forms.

use super::loops::{NotAsked, Weighed};
use super::{Exchange, Incoming};
use crate::compaction::progress::{Verdict, Written};
use crate::compaction::{Summarizer, SummaryBudget, SummaryError};
use crate::domain::Compaction;
use crate::protocol::{ErrorClass, ErrorInfo, ServedForms, Usage};
use axum::body::Body;
use axum::response::Response;
use http::{header, HeaderValue, StatusCode};

use super::respond::Report;

impl Exchange {
    /// The served forms, when the request asks for a summary in place of
    /// a reply: on demand, or past a compaction trigger that pauses.
    pub(super) fn summary_asked(&self) -> Option<&'static dyn ServedForms> {
        let calibration = self.model_size().calibration.unwrap_or_default();
        let input_tokens = calibration.tokens(self.incoming.original.len());
        let body = &self.incoming.request.body;
        self.native.summary_asked(body, input_tokens)
    }

    /// The compaction a request asks before its reply (Anthropic's
    /// `compact_20260112` that does not pause, past its trigger): every
    /// message summarized and stored, the reply asked of the summary, and
    /// the answer to be led by it. `None` when none is asked or it could
    /// not be written: the request then goes as it is.
    pub(super) async fn compact_before_reply(&mut self) -> Option<Compaction> {
        let calibration = self.model_size().calibration.unwrap_or_default();
        let input_tokens = calibration.tokens(self.incoming.original.len());
        let body = &self.incoming.request.body;
        let forms = self.native.compacts_before_reply(body, input_tokens)?;
        if let Some(compacting) = &self.compacting {
            let _ = compacting.send(true);
        }
        let started = std::time::Instant::now();
        let (summary, used) = match Box::pin(self.summarize_asked(false)).await {
            Ok(asked) => (asked.text, asked.used),
            Err(NotAsked::Failed(kind)) => {
                tracing::info!(error.kind = kind, "no compaction before the reply");
                return None;
            }
            // Logged as found: the request goes as it is.
            Err(NotAsked::Loop(_)) => return None,
        };
        let took = started.elapsed().as_millis() as i64;
        let compaction = Box::pin(self.keep_asked(&summary, took)).await?;
        let estimate = Usage {
            input_tokens,
            output_tokens: calibration.tokens(summary.len()),
            ..Usage::default()
        };
        self.lead = Some(forms.lead(&summary, used.unwrap_or(estimate)));
        self.report.compactions = 1;
        Some(compaction)
    }

    /// Writes the summary the request asks for and answers with it.
    pub(super) async fn summary_on_demand(
        mut self,
        forms: &'static dyn ServedForms,
    ) -> (Response, Report) {
        let weighed = self.weighed();
        if let Some(answered) = self.answered_without_a_call(forms, &weighed) {
            return self.finish(answered);
        }
        if let Some(compacting) = &self.compacting {
            let _ = compacting.send(true);
        }
        let settings = &self.state.settings.compaction;
        let headers = self.outgoing_headers();
        let budget = self.on_demand_budget();
        let (max_tokens, calibration) = (budget.max_tokens, budget.calibration);
        let Incoming { request, route, .. } = &self.incoming;
        let model = settings.summary_model.as_deref().unwrap_or(&request.model);
        let summarizer = Summarizer {
            client: &self.state.upstream,
            route,
            headers: &headers,
            adapter: self.incoming.adapter,
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
        let input_bytes: usize = entries.iter().map(String::len).sum();
        let written = summarizer.summarize(max_tokens, None, &entries).await;
        let usage = |text: &str| Usage {
            input_tokens: calibration.tokens(input_bytes),
            output_tokens: calibration.tokens(text.len()),
            ..Usage::default()
        };
        // What the summary calls reported, else the estimate.
        let reported = summarizer.used.total();
        let response = match written {
            Ok(written) => {
                let usage = reported.unwrap_or_else(|| usage(&written.text));
                let kept = Written {
                    summary: written.text.clone(),
                    used: reported,
                };
                self.made(&weighed, kept, false);
                self.summary_answer(forms, &written.text, usage)
            }
            Err(error) => self.summary_failed(&error),
        };
        self.finish(response)
    }

    /// An on-demand summary's budget: the client's output limit, within
    /// `summary_max_tokens`, in calls sized to the model's window.
    fn on_demand_budget(&self) -> SummaryBudget {
        let settings = &self.state.settings.compaction;
        let known = self.model_size();
        let Incoming {
            adapter, request, ..
        } = &self.incoming;
        let requested = adapter.max_output_tokens(request).unwrap_or(u64::MAX);
        SummaryBudget {
            window: known.window_tokens().unwrap_or(ON_DEMAND_WINDOW),
            calibration: known.calibration.unwrap_or_default(),
            max_tokens: settings.summary_max_tokens.min(requested).max(1),
            reasoning_tokens: 0,
            max_calls: settings.max_summary_calls as usize,
        }
    }

    /// The answer where the ledger has it without a summary call: the
    /// summary already written for the identical request, or the
    /// client's error for a loop.
    fn answered_without_a_call(
        &mut self,
        forms: &dyn ServedForms,
        weighed: &Weighed,
    ) -> Option<Response> {
        match self.verdict(weighed) {
            Verdict::Identical { written, .. } => {
                let usage =
                    (written.used).unwrap_or_else(|| self.estimated_usage(&written.summary));
                Some(self.summary_answer(forms, &written.summary, usage))
            }
            Verdict::Loop => {
                self.loop_found(weighed);
                let protocol = self.incoming.route.upstream.protocol;
                Some(self.cannot_progress(None).into_response_for(protocol))
            }
            Verdict::Repeat { .. } | Verdict::Fresh { .. } => None,
        }
    }

    /// A summary's usage as estimated, where no call reported one.
    fn estimated_usage(&self, summary: &str) -> Usage {
        let calibration = self.model_size().calibration.unwrap_or_default();
        Usage {
            input_tokens: calibration.tokens(self.incoming.original.len()),
            output_tokens: calibration.tokens(summary.len()),
            ..Usage::default()
        }
    }

    /// The answer holding the summary; the request's messages are kept,
    /// as for any answered request.
    fn summary_answer(&mut self, forms: &dyn ServedForms, summary: &str, usage: Usage) -> Response {
        let Incoming {
            adapter,
            request,
            conversation,
            ..
        } = &self.incoming;
        self.persist.accept(conversation, request);
        let body = forms.summary_answer(&request.body, summary, usage, request.stream);
        let content_type = if request.stream {
            adapter.stream_content_type()
        } else {
            "application/json"
        };
        answer(StatusCode::OK, content_type, body)
    }

    /// A 502 in the API's error shape, saying why.
    fn summary_failed(&mut self, error: &SummaryError) -> Response {
        tracing::warn!(%error, "the summary asked for was not written");
        self.report.compaction_error = Some(error.kind());
        let provider = self.incoming.route.upstream.protocol.provider();
        let message = format!("condenser: the summary was not written: {error}");
        let body = provider.error_body(&ErrorInfo {
            status: 502,
            kind: "summary_failed",
            message: &message,
            class: ErrorClass::Server,
        });
        let body = body.to_string().into_bytes();
        answer(StatusCode::BAD_GATEWAY, "application/json", body)
    }
}

/// The window assumed for the summary calls of a model whose window is
/// not known yet: the calls are refused and shrunk if it is smaller.
const ON_DEMAND_WINDOW: u64 = 200_000;

fn answer(status: StatusCode, content_type: &'static str, body: Vec<u8>) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    let content_type = HeaderValue::from_static(content_type);
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, content_type);
    response
}
