//! Step 7, compact: one summary call, the one request Condenser writes
//! itself. It is built from the client's own request (the adapter's
//! `summary_request`), sent with the client's credential, query string and
//! provider headers, and asked once more when the model refused the
//! output-limit field (remembered for the model) or spent its whole
//! budget reasoning (asked again with more room for it). Its summary is
//! held to its budget by the upstream's own count of it.

use super::fit;
use super::summarizer::{Counted, Summarizer, SummaryBudget, SummaryError};
use crate::domain::{CompactionFailure, Usage};
use crate::overflow::OverflowSignal;
use crate::protocol::{OutputField, SummaryCall, SUMMARY_MARKER};
use crate::telemetry::genai;
use http::{HeaderValue, Method};
use serde_json::Value;
use std::sync::atomic::Ordering;
use tracing::Instrument;

/// Room for reasoning grows by this factor when a reasoning model spent
/// all of it before writing a word (OpenAI: `finish_reason: "length"`
/// with empty content, or `status: "incomplete"`).
const REASONING_GROWTH: u64 = 4;

/// Answers one summary call may ask for: the first, once more with the
/// other output-limit field when the model refused one, once more with more
/// room when a reasoning model spent it all. Each is bounded by the
/// summarizer's timeout.
pub(super) const ASKS_PER_CALL: u32 = 3;

pub(super) enum CallError {
    /// The call overflowed the summarizer's window; the size sent.
    Overflow(OverflowSignal, usize),
    Failed(SummaryError),
}

/// A summary one call wrote, within its budget.
pub(super) struct Bounded {
    pub text: String,
    /// How the upstream counted the text it wrote, where it said.
    pub counted: Option<Counted>,
}

/// What one answer to a summary call came to.
enum Answer {
    /// Text, and the usage the answer reported.
    Text(String, Option<Usage>),
    /// Refused the output-limit field it names.
    Refused(OutputField, SummaryError),
    /// Stopped at its output limit without text.
    RanOut,
}

/// The user turn of a summary call: the running summary and the
/// transcript, as data.
pub(super) fn input(previous: Option<&str>, transcript: &str) -> String {
    format!(
        "<previous_summary>\n{}\n</previous_summary>\n<transcript>\n{transcript}</transcript>",
        previous.unwrap_or("(none)")
    )
}

/// `text` held to the summary's own budget, `max_tokens` (invariant 5,
/// summaries stay bounded); `None` when nothing of it is left.
///
/// By the upstream's own count of the text where its answer reported one
/// (its output less its reasoning): within the budget, it is kept whole
/// whatever its bytes; over it (a reasoning model's limit covers its
/// reasoning too, so its text may run past the budget), about the
/// budget's share of it is kept. Where no count was reported, by the bytes
/// the budget comes to at the conversation's rate. Either cut goes no
/// further back than a line or a word (`fit`).
fn bounded(
    text: String,
    usage: Option<Usage>,
    max_tokens: u64,
    budget: &SummaryBudget,
) -> Option<Bounded> {
    let written = text.len();
    let reported = usage.map(|usage| usage.text_tokens()).filter(|&t| t > 0);
    let kept = match reported {
        Some(tokens) => fit::to_tokens(text, tokens, max_tokens),
        None => fit::within(text, budget.calibration.bytes(max_tokens)),
    };
    if kept.len() < written {
        tracing::info!(
            reported_tokens = reported,
            max_tokens,
            written_bytes = written,
            kept_bytes = kept.len(),
            "summary over its budget: cut to it"
        );
    }
    let counted = reported.map(|tokens| Counted {
        tokens,
        bytes: written,
    });
    let text = kept.replace(SUMMARY_MARKER, "[summary]");
    (!text.trim().is_empty()).then_some(Bounded { text, counted })
}

impl Summarizer<'_> {
    pub(super) async fn call(
        &self,
        budget: &SummaryBudget,
        input: &str,
    ) -> Result<Bounded, CallError> {
        let known_field = self
            .sizes
            .output_field(&self.route.upstream.name, self.model);
        let mut call = SummaryCall {
            model: self.model,
            instructions: budget.prompt(),
            transcript: input,
            max_tokens: budget.max_tokens,
            reasoning_tokens: budget.reasoning_tokens,
            output_field: known_field,
        };
        let (mut field_retried, mut reasoning_retried) = (false, false);
        loop {
            match self.ask(&call).await? {
                Answer::Text(text, usage) => {
                    return bounded(text, usage, call.max_tokens, budget)
                        .ok_or(CallError::Failed(SummaryError::Empty));
                }
                Answer::Refused(field, _) if !field_retried => {
                    let accepted = field.other();
                    tracing::info!(
                        refused = field.as_str(),
                        "summary call refused its output field: asking with the other"
                    );
                    self.sizes
                        .learn_output_field(&self.route.upstream.name, self.model, accepted);
                    call.output_field = Some(accepted);
                    field_retried = true;
                }
                Answer::Refused(_, error) => return Err(CallError::Failed(error)),
                Answer::RanOut if call.reasoning_tokens > 0 && !reasoning_retried => {
                    metrics::counter!("condenser_summary_calls_total", "outcome" => "reasoning_exhausted").increment(1);
                    call.reasoning_tokens = self.more_reasoning(&call);
                    reasoning_retried = true;
                }
                Answer::RanOut => return Err(CallError::Failed(SummaryError::Empty)),
            }
        }
    }

    /// Room for reasoning grown, within the model's documented output cap.
    fn more_reasoning(&self, call: &SummaryCall<'_>) -> u64 {
        let grown = call.reasoning_tokens.saturating_mul(REASONING_GROWTH);
        match crate::tokens::documented_max_output(self.model) {
            Some(cap) => grown
                .min(cap.saturating_sub(call.max_tokens))
                .max(call.reasoning_tokens),
            None => grown,
        }
    }

    async fn ask(&self, call: &SummaryCall<'_>) -> Result<Answer, CallError> {
        let body = self.adapter.summary_request(self.request, call).to_string();
        let sent_bytes = body.len();
        let span = self.span(call);
        genai::sent(&span, body.as_bytes());
        self.calls_made.fetch_add(1, Ordering::Relaxed);
        let sent = self.send(body).instrument(span.clone()).await;
        let (status, bytes) = sent.map_err(|error| {
            genai::failed(&span, error.kind().as_str());
            CallError::Failed(error)
        })?;
        let parsed: Option<Value> = serde_json::from_slice(&bytes).ok();
        let code = http::StatusCode::from_u16(status).unwrap_or_default();
        if status != 200 {
            if let Some(signal) = self.overflow.detect(status, &bytes) {
                genai::overflowed(&span, code, &signal.signature.to_string());
                return Err(CallError::Overflow(signal, sent_bytes));
            }
            genai::status(&span, code);
            let message = String::from_utf8_lossy(&bytes).chars().take(300).collect();
            let error = SummaryError::Upstream { status, message };
            let refused = parsed.as_ref().and_then(|p| self.adapter.refused_field(p));
            return match refused {
                Some(field) => Ok(Answer::Refused(field, error)),
                None => Err(CallError::Failed(error)),
            };
        }
        let parsed = parsed.ok_or_else(|| {
            genai::failed(&span, CompactionFailure::Empty.as_str());
            CallError::Failed(SummaryError::Empty)
        })?;
        self.traced(&span, &parsed);
        let usage = crate::tokens::usage::value_usage(self.adapter, &parsed);
        if let Some(usage) = &usage {
            self.used.add(usage);
        }
        match self.adapter.response_text(&parsed) {
            Some(text) => Ok(Answer::Text(text, usage)),
            None if self.adapter.ran_out(&parsed) => Ok(Answer::RanOut),
            None => Err(CallError::Failed(SummaryError::Empty)),
        }
    }

    /// A span for one summary call, beneath the compaction's.
    fn span(&self, call: &SummaryCall<'_>) -> tracing::Span {
        let asked = genai::Asked {
            model: call.model,
            max_tokens: Some(call.output_limit()),
            stream: false,
        };
        genai::call_span(self.origin, genai::Call::Summary, &asked)
    }

    /// What a 200 answer says, on the call's span.
    fn traced(&self, span: &tracing::Span, parsed: &Value) {
        let Some(mut answer) = genai::Answer::new(span, self.adapter) else {
            return;
        };
        genai::status(span, http::StatusCode::OK);
        answer.observe_whole(parsed);
        let usage = crate::tokens::usage::value_usage(self.adapter, parsed);
        answer.finish(usage.as_ref());
    }

    async fn send(&self, body: String) -> Result<(u16, bytes::Bytes), SummaryError> {
        let mut headers = crate::upstream::headers::request_headers(self.headers);
        for (name, value) in [
            (http::header::CONTENT_TYPE, "application/json"),
            (http::header::ACCEPT, "application/json"),
            (http::header::ACCEPT_ENCODING, "identity"),
        ] {
            headers.insert(name, HeaderValue::from_static(value));
        }
        let url = self.adapter.summary_url(&self.route.url, self.model);
        let send = self.client.send(
            &self.route.upstream,
            Method::POST,
            &url,
            headers,
            body.into(),
        );
        tokio::time::timeout(self.timeout, async {
            let response = send
                .await
                .map_err(|e| SummaryError::Transport(e.to_string()))?;
            let status = response.status().as_u16();
            let bytes = response
                .bytes()
                .await
                .map_err(|e| SummaryError::Transport(e.without_url().to_string()))?;
            Ok((status, bytes))
        })
        .await
        .map_err(|_| SummaryError::Timeout(self.timeout))?
    }
}
