//! Steps 1 to 7, the protocol seam: Claude on Google Vertex AI.
//!
//! `POST …/projects/{p}/locations/{r}/publishers/anthropic/models/{model}:rawPredict`
//! and `:streamRawPredict`, with or without the leading `/v1` (the SDKs'
//! base URL holds it; a gateway's may not): the Messages body without
//! `model`, with `anthropic_version: "vertex-2023-10-16"`, betas in the
//! `anthropic-beta` header, and Messages' own server-sent events (plus
//! Vertex's `vertex_event`s, relayed as they come). Everything a message
//! is stays Anthropic's, so the adapter lends Messages' rules, its error
//! shape (Vertex answers Anthropic's, `"Prompt is too long"` with a 413)
//! and its context-management forms, which Vertex refuses
//! (`context_management: Extra inputs are not permitted`) and Condenser
//! therefore serves.

use super::anthropic::Anthropic;
use super::{
    Adapter, AnswerFacts, AnswerMessage, ChatRequest, Endpoint, ErrorInfo, Outline, OutputField,
    Protocol, Provider, Root, ServedForms, Signer, SummaryCall, SystemPart, TelemetryNames,
    ToolLinks, Trimmed, Usage, WindowProbe,
};
use bytes::Bytes;
use http::{HeaderMap, Method};
use serde_json::{json, Value};

pub struct Vertex;

/// Claude on Vertex AI's prediction API.
pub const PROTOCOL: Protocol = Protocol::of(&Vertex);

/// The `anthropic_version` Vertex takes, for the summary calls.
const VERSION: &str = "vertex-2023-10-16";

/// Where a publisher's model sits in a path.
const PUBLISHER: &str = "/publishers/anthropic/models/";

/// The model of a path `…/publishers/anthropic/models/{model}:{method}`
/// and the method; `None` for any other path.
pub fn model_and_method(path: &str) -> Option<(&str, &str)> {
    let (_, rest) = path.split_once(PUBLISHER)?;
    let (model, method) = rest.split_once(':')?;
    let plain = !model.is_empty() && !model.contains('/');
    plain.then_some((model, method))
}

impl Adapter for Vertex {
    /// A body alone does not say the model: only [`Adapter::outline_at`]
    /// outlines a Vertex request.
    fn outline(&self, _body: Bytes) -> Option<Outline> {
        None
    }

    fn outline_at(&self, body: Bytes, path: &str) -> Option<Outline> {
        let (model, method) = model_and_method(path)?;
        let stream = method == "streamRawPredict";
        Outline::read_as(
            body,
            "messages",
            Some((model.to_string(), stream)),
            |body, _, _| SystemPart::Value(body.get("system").cloned().unwrap_or(Value::Null)),
        )
    }

    fn build(&self, request: &ChatRequest, messages: &[&Value]) -> Vec<u8> {
        Anthropic.build(request, messages)
    }

    fn canonical(&self, message: &Value) -> Vec<u8> {
        Anthropic.canonical(message)
    }

    /// The same messages hash alike whichever door they came through.
    fn canonical_scheme(&self) -> &'static str {
        Anthropic.canonical_scheme()
    }

    fn tool_links(&self, message: &Value) -> ToolLinks {
        Anthropic.tool_links(message)
    }

    fn summary_message(&self, role: &str, summary: &str) -> Value {
        Anthropic.summary_message(role, summary)
    }

    /// Messages' summary request, without `model` (it is in the URL) and
    /// with the client's `anthropic_version`, which Vertex requires.
    fn summary_request(&self, client: &ChatRequest, call: &SummaryCall<'_>) -> Value {
        let mut summary = Anthropic.summary_request(client, call);
        if let Some(fields) = summary.as_object_mut() {
            fields.remove("model");
            let version = client.body.get("anthropic_version").cloned();
            fields.insert(
                "anthropic_version".into(),
                version.unwrap_or(json!(VERSION)),
            );
        }
        summary
    }

    /// `…/models/{summary model}:rawPredict`: a summary is asked for whole.
    fn summary_url(&self, client_url: &reqwest::Url, model: &str) -> reqwest::Url {
        let mut url = client_url.clone();
        if let Some((base, _)) = client_url.path().split_once(PUBLISHER) {
            url.set_path(&format!("{base}{PUBLISHER}{model}:rawPredict"));
        }
        url
    }

    fn non_text_markers(&self) -> &'static [&'static str] {
        Anthropic.non_text_markers()
    }

    fn response_text(&self, response: &Value) -> Option<String> {
        Anthropic.response_text(response)
    }

    fn ran_out(&self, response: &Value) -> bool {
        Anthropic.ran_out(response)
    }

    fn refused_field(&self, error: &Value) -> Option<OutputField> {
        Anthropic.refused_field(error)
    }

    fn transcript_entry(&self, message: &Value) -> String {
        Anthropic.transcript_entry(message)
    }

    fn trim_tool_result(&self, message: &Value, keep_bytes: usize) -> Option<Trimmed> {
        Anthropic.trim_tool_result(message, keep_bytes)
    }

    fn max_output_tokens(&self, request: &ChatRequest) -> Option<u64> {
        Anthropic.max_output_tokens(request)
    }

    fn stream_error_event(&self, status: u16, error_body: &Value) -> Vec<u8> {
        Anthropic.stream_error_event(status, error_body)
    }

    fn usage(&self, usage: &Value) -> Option<Usage> {
        Anthropic.usage(usage)
    }

    fn stream_usage(&self, event: &Value) -> Option<Usage> {
        Anthropic.stream_usage(event)
    }

    fn answer_facts(&self, answer: &Value, facts: &mut AnswerFacts) {
        Anthropic.answer_facts(answer, facts)
    }

    fn fact_markers(&self) -> &'static [&'static str] {
        Anthropic.fact_markers()
    }

    fn answer_messages<'v>(&self, answer: &'v Value) -> Vec<AnswerMessage<'v>> {
        Anthropic.answer_messages(answer)
    }

    fn served_forms(&self) -> Option<&'static dyn ServedForms> {
        Anthropic.served_forms()
    }
}

impl Provider for Vertex {
    fn name(&self) -> &'static str {
        "vertex"
    }

    fn chat(&self) -> &'static dyn Adapter {
        &Vertex
    }

    fn endpoint(&self, method: &Method, path: &str) -> Endpoint {
        let chat = matches!(
            model_and_method(path),
            Some((model, "rawPredict" | "streamRawPredict")) if model != "count-tokens"
        );
        match chat && method == Method::POST {
            true => Endpoint::Chat,
            false => Endpoint::Passthrough,
        }
    }

    fn adapter(&self, _endpoint: Endpoint) -> &'static dyn Adapter {
        &Vertex
    }

    /// The base URL holds the version (`…/v1`, as the SDKs' default does):
    /// a path that repeats it loses it.
    fn upstream_path<'p>(&self, path: &'p str) -> &'p str {
        match path.strip_prefix("/v1") {
            Some(rest) if rest.starts_with('/') => rest,
            _ => path,
        }
    }

    /// The global endpoint; a deployment in one region names its own
    /// (`[upstreams.vertex] base_url = "https://REGION-aiplatform.googleapis.com/v1"`).
    fn root(&self) -> Option<Root> {
        Some(Root {
            base_url: "https://aiplatform.googleapis.com/v1",
            default_window: None,
            legacy_key: None,
        })
    }

    /// Paths of Anthropic's models on Vertex, which no other API uses.
    fn claims(&self, path: &str, _headers: &HeaderMap) -> bool {
        let path = self.upstream_path(path);
        path.starts_with("/projects/") && path.contains(PUBLISHER)
    }

    fn error_body(&self, error: &ErrorInfo<'_>) -> Value {
        Anthropic.error_body(error)
    }

    fn telemetry(&self) -> TelemetryNames {
        TelemetryNames {
            operation: "chat",
            provider: "gcp.vertex_ai",
        }
    }

    fn window_probe(&self) -> Option<WindowProbe> {
        None
    }

    /// The OAuth token, as for any bearer.
    fn credential(&self, headers: &HeaderMap, _query: Option<&str>) -> Option<Vec<u8>> {
        super::bearer_or_key(headers).map(<[u8]>::to_vec)
    }

    fn signer(&self) -> Option<&'static dyn Signer> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_and_the_streaming_are_in_the_path() {
        let path = "/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:streamRawPredict";
        let body = Bytes::from_static(
            br#"{"anthropic_version":"vertex-2023-10-16","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#,
        );
        let request = Vertex
            .outline_at(body, path)
            .and_then(Outline::parse_all)
            .expect("outlines");
        assert_eq!(request.model, "claude-sonnet-4-5@20250929");
        assert!(request.stream);
        assert_eq!(Vertex.endpoint(&Method::POST, path), Endpoint::Chat);
        let count =
            "/projects/p/locations/global/publishers/anthropic/models/count-tokens:rawPredict";
        assert_eq!(Vertex.endpoint(&Method::POST, count), Endpoint::Passthrough);
        assert!(Vertex.claims(count, &HeaderMap::new()));
        assert_eq!(Vertex.upstream_path(path), &path[3..]);
    }

    #[test]
    fn a_summary_is_asked_of_the_summary_model_whole() {
        let url: reqwest::Url = "https://vertex.example/v1/projects/p/locations/global/publishers/anthropic/models/claude-opus-4-1:streamRawPredict"
            .parse()
            .expect("url");
        let summary = Vertex.summary_url(&url, "claude-haiku-4-5");
        assert_eq!(
            summary.path(),
            "/v1/projects/p/locations/global/publishers/anthropic/models/claude-haiku-4-5:rawPredict"
        );
    }
}
