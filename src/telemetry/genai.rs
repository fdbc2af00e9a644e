//! Beside the flow, tracing: the GenAI spans of one request.
//!
//! - One **call span** per upstream call, the client's request and every
//!   summary call alike: named `{gen_ai.operation.name}
//!   {gen_ai.request.model}`, kind CLIENT, with the GenAI conventions'
//!   attributes (operation, provider, models, usage, finish reasons,
//!   `gen_ai.conversation.id`, `error.type`) and `condenser.call`
//!   (`request` or `summary`) and, for the client's request,
//!   `condenser.attempt` (1, then 2 for the retry after a compaction…).
//!   What the answer says (model, id, finish reasons, usage) is read by
//!   [`Answer`] as the answer passes to the client: the span of a streamed
//!   answer ends with its last event.
//! - One **compaction span** per compaction, its summary calls beneath it:
//!   trigger, messages covered and kept, tokens before and after, summary
//!   calls, trims, outcome (`stored`, `reused`, `duplicate`, `unstored`,
//!   `failed` with `error.type`), the wait for another instance's lease.
//!
//! No span carries a credential, a header or, unless the operator opted in
//! ([`super::content`]), a word of any message. None of this is made when
//! spans are not exported.

use crate::protocol::{Adapter, AnswerFacts, TelemetryNames, Usage};
use opentelemetry::trace::{Status, TraceContextExt};
use serde_json::Value;
use std::time::Duration;
use tracing::field::Empty;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The `tracing` name of call spans.
pub const CALL_SPAN: &str = "gen_ai";
/// The `tracing` name of compaction spans.
pub const COMPACTION_SPAN: &str = "compaction";
/// Spans only traces show: log lines do not list them in their context.
pub const TRACE_ONLY_SPANS: &[&str] = &[CALL_SPAN, COMPACTION_SPAN];

/// `error.type` of a call the upstream refused for its context window:
/// OpenAI's code for it, the one most tools know.
pub const CONTEXT_OVERFLOW: &str = "context_length_exceeded";

/// What every GenAI span of one request shares; empty when spans are not
/// exported.
#[derive(Debug, Clone, Default)]
pub struct Origin {
    operation: &'static str,
    provider: &'static str,
    address: Option<String>,
    port: Option<u16>,
    conversation: String,
}

impl Origin {
    /// `names` are the upstream's provider's, `url` where the calls go,
    /// `conversation` Condenser's conversation id (made only when spans
    /// are exported).
    pub fn new(
        names: TelemetryNames,
        url: &url::Url,
        conversation: impl FnOnce() -> String,
    ) -> Self {
        if !super::exporting() {
            return Self::default();
        }
        let host = url.host_str();
        Self {
            operation: names.operation,
            provider: provider(names, host),
            address: host.map(str::to_string),
            port: url.port_or_known_default(),
            conversation: conversation(),
        }
    }
}

/// `gen_ai.provider.name`: the well-known values of the conventions where
/// the upstream's host names the provider, else the name its provider
/// gives (a local or unlisted server).
pub fn provider(names: TelemetryNames, host: Option<&str>) -> &'static str {
    const HOSTS: &[(&str, &str)] = &[
        ("api.openai.com", "openai"),
        (".openai.azure.com", "azure.ai.openai"),
        (".services.ai.azure.com", "azure.ai.inference"),
        (".models.ai.azure.com", "azure.ai.inference"),
        ("api.anthropic.com", "anthropic"),
        ("generativelanguage.googleapis.com", "gcp.gemini"),
        ("aiplatform.googleapis.com", "gcp.vertex_ai"),
        ("api.groq.com", "groq"),
        ("api.deepseek.com", "deepseek"),
        ("api.mistral.ai", "mistral_ai"),
        ("api.x.ai", "x_ai"),
        ("api.perplexity.ai", "perplexity"),
        ("api.cohere.com", "cohere"),
        ("api.cohere.ai", "cohere"),
        ("api.moonshot.ai", "moonshot_ai"),
        ("api.moonshot.cn", "moonshot_ai"),
        ("openrouter.ai", "openrouter"),
    ];
    let host = host.unwrap_or("").to_ascii_lowercase();
    if host.starts_with("bedrock-") && host.ends_with(".amazonaws.com") {
        return "aws.bedrock";
    }
    if let Some((_, name)) = HOSTS
        .iter()
        .find(|(suffix, _)| host == suffix.trim_start_matches('.') || host.ends_with(suffix))
    {
        return name;
    }
    names.provider
}

/// Which call a call span stands for.
#[derive(Debug, Clone, Copy)]
pub enum Call {
    /// The client's request, sent for the `attempt`-th time.
    Request { attempt: u32 },
    /// A summary call of a compaction.
    Summary,
}

/// What the request of a call asks for.
pub struct Asked<'a> {
    pub model: &'a str,
    pub max_tokens: Option<u64>,
    pub stream: bool,
}

/// A call span, a child of the current span; [`Span::none`] when spans
/// are not exported.
pub fn call_span(origin: &Origin, call: Call, asked: &Asked<'_>) -> Span {
    if !super::exporting() {
        return Span::none();
    }
    let (kind, attempt) = match call {
        Call::Request { attempt } => ("request", Some(attempt)),
        Call::Summary => ("summary", None),
    };
    tracing::info_span!(
        "gen_ai",
        otel.name = %format_args!("{} {}", origin.operation, asked.model),
        otel.kind = "client",
        otel.status_code = Empty,
        gen_ai.operation.name = origin.operation,
        gen_ai.provider.name = origin.provider,
        gen_ai.request.model = asked.model,
        gen_ai.request.max_tokens = asked.max_tokens,
        gen_ai.request.stream = asked.stream.then_some(true),
        gen_ai.conversation.id = origin.conversation.as_str(),
        server.address = origin.address.as_deref(),
        server.port = origin.port,
        condenser.call = kind,
        condenser.attempt = attempt,
        http.response.status_code = Empty,
        error.type = Empty,
        condenser.overflow.signature = Empty,
        gen_ai.response.model = Empty,
        gen_ai.response.id = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        gen_ai.usage.cache_read.input_tokens = Empty,
        gen_ai.usage.cache_creation.input_tokens = Empty,
    )
}

/// Whether `span` is exported and sampled: worth reading answers for.
fn recording(span: &Span) -> bool {
    !span.is_none() && span.context().span().is_recording()
}

/// The messages a call sends, on its span, when content capture is on.
pub fn sent(span: &Span, body: &[u8]) {
    if !super::capturing_content() || !recording(span) {
        return;
    }
    let (messages, system) = super::content::input(body);
    if let Some(messages) = messages {
        span.set_attribute("gen_ai.input.messages", messages);
    }
    if let Some(system) = system {
        span.set_attribute("gen_ai.system_instructions", system);
    }
}

/// The upstream's answer status.
pub fn status(span: &Span, status: http::StatusCode) {
    if span.is_none() {
        return;
    }
    span.record("http.response.status_code", status.as_u16());
    if !status.is_success() {
        failed(span, status.as_str());
    }
}

/// The call failed: `kind` is a low-cardinality name (an HTTP status, a
/// transport failure's kind).
pub fn failed(span: &Span, kind: &str) {
    if span.is_none() {
        return;
    }
    span.record("error.type", kind);
    span.record("otel.status_code", "error");
}

/// The upstream refused the call for its context window.
pub fn overflowed(span: &Span, status: http::StatusCode, signature: &str) {
    if span.is_none() {
        return;
    }
    span.record("http.response.status_code", status.as_u16());
    span.record("condenser.overflow.signature", signature);
    failed(span, CONTEXT_OVERFLOW);
}

/// What a call's answer says, read as it passes and recorded on its span
/// when the answer ends (or is dropped). The adapter reads the answer's
/// facts; this records them.
pub struct Answer {
    span: Span,
    adapter: &'static dyn Adapter,
    facts: AnswerFacts,
    output: Option<String>,
}

impl std::fmt::Debug for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Answer")
            .field("facts", &self.facts)
            .finish()
    }
}

impl Answer {
    /// `None` for a span that is not exported or not sampled: nothing to
    /// read for.
    pub fn new(span: &Span, adapter: &'static dyn Adapter) -> Option<Self> {
        recording(span).then(|| Self {
            span: span.clone(),
            adapter,
            facts: AnswerFacts::default(),
            output: None,
        })
    }

    /// Whether an event that carries no usage may carry what the span
    /// reports (a finish reason, the model), so is worth parsing.
    pub fn wants(&self, data: &str) -> bool {
        let markers = self.adapter.fact_markers();
        markers.iter().any(|marker| data.contains(marker))
    }

    /// Reads one JSON answer or event.
    pub fn observe(&mut self, value: &Value) {
        self.adapter.answer_facts(value, &mut self.facts);
    }

    /// Reads a whole (not streamed) answer, its content too when captured.
    pub fn observe_whole(&mut self, value: &Value) {
        self.observe(value);
        if super::capturing_content() {
            self.output = super::content::output(self.adapter, value);
        }
    }

    /// Records what was read, with the usage Condenser read from the same
    /// answer (input tokens count cached ones, as the conventions ask).
    pub fn finish(self, usage: Option<&Usage>) {
        let span = &self.span;
        let facts = &self.facts;
        if let Some(model) = &facts.model {
            span.record("gen_ai.response.model", model.as_str());
        }
        if let Some(id) = &facts.id {
            span.record("gen_ai.response.id", id.as_str());
        }
        if let Some(usage) = usage {
            span.record("gen_ai.usage.input_tokens", usage.input_tokens);
            span.record("gen_ai.usage.output_tokens", usage.output_tokens);
        }
        if let Some(read) = facts.cache_read {
            span.record("gen_ai.usage.cache_read.input_tokens", read);
        }
        if let Some(creation) = facts.cache_creation {
            span.record("gen_ai.usage.cache_creation.input_tokens", creation);
        }
        if !facts.finish_reasons.is_empty() {
            let reasons: Vec<opentelemetry::StringValue> = facts
                .finish_reasons
                .iter()
                .map(|r| r.clone().into())
                .collect();
            span.set_attribute(
                "gen_ai.response.finish_reasons",
                opentelemetry::Value::Array(reasons.into()),
            );
        }
        if let Some(output) = self.output {
            span.set_attribute("gen_ai.output.messages", output);
        }
    }
}

/// A compaction span, a child of the current span; [`Span::none`] when
/// spans are not exported.
pub fn compaction_span(origin: &Origin, trigger: &'static str, signature: &str) -> Span {
    if !super::exporting() {
        return Span::none();
    }
    tracing::info_span!(
        "compaction",
        otel.name = "compaction",
        otel.kind = "internal",
        otel.status_code = Empty,
        gen_ai.conversation.id = origin.conversation.as_str(),
        condenser.compaction.trigger = trigger,
        condenser.overflow.signature = signature,
        condenser.compaction.summary_model = Empty,
        condenser.compaction.messages = Empty,
        condenser.compaction.messages_kept = Empty,
        condenser.compaction.tokens_before = Empty,
        condenser.compaction.tokens_after = Empty,
        condenser.compaction.summary_tokens = Empty,
        condenser.compaction.summary_calls = Empty,
        condenser.compaction.trims = Empty,
        condenser.compaction.lease_wait_ms = Empty,
        condenser.compaction.outcome = Empty,
        error.type = Empty,
    )
}

/// What a compaction plans, before any summary call: the model that writes
/// the summary, the messages it covers and keeps, the request's size.
pub struct Planned<'a> {
    pub summary_model: &'a str,
    pub messages: u64,
    pub kept: u64,
    pub tokens_before: u64,
}

/// Records a compaction's plan on its span (the current one).
pub fn compaction_planned(planned: &Planned<'_>) {
    if !super::exporting() {
        return;
    }
    let span = Span::current();
    span.record("condenser.compaction.summary_model", planned.summary_model);
    span.record("condenser.compaction.messages", planned.messages);
    span.record("condenser.compaction.messages_kept", planned.kept);
    span.record("condenser.compaction.tokens_before", planned.tokens_before);
}

/// How long the compaction waited for the lease on its prefix (or for
/// another instance's summary).
pub fn lease_waited(waited: Duration) {
    if !super::exporting() {
        return;
    }
    let millis = u64::try_from(waited.as_millis()).unwrap_or(u64::MAX);
    Span::current().record("condenser.compaction.lease_wait_ms", millis);
}

/// What a compaction came to.
pub struct Done {
    /// `stored`, `reused` (another request's, or another instance's),
    /// `duplicate`, `unstored`.
    pub outcome: &'static str,
    pub tokens_after: i64,
    pub summary_tokens: i64,
    pub trims: usize,
}

/// Records a compaction's result on its span (the current one); what it
/// covers is recorded from its plan ([`compaction_planned`]), including
/// when the compaction reused is another's.
pub fn compaction_done(done: &Done) {
    if !super::exporting() {
        return;
    }
    let span = Span::current();
    span.record("condenser.compaction.outcome", done.outcome);
    span.record("condenser.compaction.tokens_after", done.tokens_after);
    span.record("condenser.compaction.summary_tokens", done.summary_tokens);
    span.record("condenser.compaction.trims", done.trims as u64);
}

/// The summary calls a compaction made (each a call span beneath it), on
/// its span (the current one).
pub fn summary_calls(calls: u32) {
    if !super::exporting() {
        return;
    }
    Span::current().record("condenser.compaction.summary_calls", calls);
}

/// Records a compaction that failed, with its kind, on `span`.
pub fn compaction_failed(span: &Span, kind: &str) {
    if span.is_none() {
        return;
    }
    span.record("condenser.compaction.outcome", "failed");
    span.record("error.type", kind);
    span.set_status(Status::error(""));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{anthropic, gemini, openai, Protocol};
    use serde_json::json;

    #[test]
    fn providers_by_host_then_protocol() {
        let names = |protocol: Protocol| protocol.provider().telemetry();
        let (openai, anthropic) = (names(openai::PROTOCOL), names(anthropic::PROTOCOL));
        assert_eq!(provider(openai, Some("api.openai.com")), "openai");
        assert_eq!(
            provider(openai, Some("x.openai.azure.com")),
            "azure.ai.openai"
        );
        assert_eq!(provider(openai, Some("openrouter.ai")), "openrouter");
        assert_eq!(provider(openai, Some("127.0.0.1")), "openai");
        assert_eq!(provider(anthropic, Some("localhost")), "anthropic");
        assert_eq!(
            provider(anthropic, Some("bedrock-runtime.us-east-1.amazonaws.com")),
            "aws.bedrock"
        );
        assert_eq!(provider(names(gemini::PROTOCOL), None), "gcp.gemini");
    }

    fn read(adapter: &'static dyn Adapter, events: &[Value]) -> AnswerFacts {
        let mut answer = Answer {
            span: Span::none(),
            adapter,
            facts: AnswerFacts::default(),
            output: None,
        };
        for event in events {
            answer.observe(event);
        }
        answer.facts
    }

    #[test]
    fn every_api_gives_model_id_reasons_and_cache_counts() {
        let openai = read(
            &openai::OpenAi,
            &[
                json!({"id": "c1", "model": "gpt-4o", "choices": [{"delta": {"content": "x"}, "finish_reason": null}]}),
                json!({"id": "c1", "model": "gpt-4o", "choices": [{"delta": {}, "finish_reason": "stop"}]}),
                json!({"id": "c1", "model": "gpt-4o", "choices": [], "usage": {"prompt_tokens": 9, "prompt_tokens_details": {"cached_tokens": 4}}}),
            ],
        );
        assert_eq!(
            (openai.model.as_deref(), openai.id.as_deref()),
            (Some("gpt-4o"), Some("c1"))
        );
        assert_eq!(openai.finish_reasons, ["stop"]);
        assert_eq!(openai.cache_read, Some(4));
        let anthropic = read(
            &anthropic::Anthropic,
            &[
                json!({"type": "message_start", "message": {"id": "msg_1", "model": "claude", "usage": {"input_tokens": 3, "cache_read_input_tokens": 5, "cache_creation_input_tokens": 7}}}),
                json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}}),
            ],
        );
        assert_eq!(anthropic.model.as_deref(), Some("claude"));
        assert_eq!(anthropic.id.as_deref(), Some("msg_1"));
        assert_eq!(anthropic.finish_reasons, ["end_turn"]);
        assert_eq!(
            (anthropic.cache_read, anthropic.cache_creation),
            (Some(5), Some(7))
        );
        let responses = read(
            &crate::protocol::responses::Responses,
            &[
                json!({"type": "response.completed", "response": {"object": "response", "id": "resp_1", "model": "gpt-5", "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}}),
            ],
        );
        assert_eq!(responses.finish_reasons, ["max_output_tokens"]);
        assert_eq!(responses.id.as_deref(), Some("resp_1"));
        let gemini = read(
            &gemini::Gemini,
            &[
                json!({"candidates": [{"content": {"parts": [{"text": "x"}]}}], "modelVersion": "gemini-3-flash", "responseId": "r1"}),
                json!({"candidates": [{"finishReason": "STOP"}], "usageMetadata": {"cachedContentTokenCount": 6}}),
            ],
        );
        assert_eq!(gemini.model.as_deref(), Some("gemini-3-flash"));
        assert_eq!(gemini.id.as_deref(), Some("r1"));
        assert_eq!(gemini.finish_reasons, ["STOP"]);
        assert_eq!(gemini.cache_read, Some(6));
        let ollama = read(
            &crate::protocol::ollama::Ollama,
            &[
                json!({"model": "qwen3", "message": {"content": "x"}, "done": false}),
                json!({"model": "qwen3", "done": true, "done_reason": "length"}),
            ],
        );
        assert_eq!(ollama.model.as_deref(), Some("qwen3"));
        assert_eq!(ollama.finish_reasons, ["length"]);
    }
}
