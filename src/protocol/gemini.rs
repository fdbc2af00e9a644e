//! Steps 2 to 7, the protocol seam: Google's Gemini API
//! (`models/{model}:generateContent` and `:streamGenerateContent`).
//!
//! The model and whether the answer streams are in the URL, not the body.
//! `systemInstruction` is the system part; `contents` (roles `user` and
//! `model`) the history. A `functionCall` part and the `functionResponse`
//! answering it are linked by `id` when the client sets one (Gemini CLI
//! does), else by the function's name (the Python SDK sends no id), so no
//! cut separates them. Parts are kept as sent: `thoughtSignature`s (which
//! Gemini 2.5 and 3 require back with function calls), `inlineData` and
//! `fileData` reach the upstream byte for byte in the kept tail. Field
//! names arrive in camelCase or snake_case (the Python SDK mixes them;
//! protobuf's JSON mapping accepts both): every read tries both.

use super::request::serialize_replacing;
use super::summary_text;
use super::{
    elide_middle, Adapter, AnswerFacts, AnswerMessage, ChatRequest, Endpoint, ErrorInfo, Outline,
    Protocol, Provider, Root, SummaryCall, SystemPart, TelemetryNames, ToolLinks, Trimmed, Usage,
    WindowProbe,
};
use crate::protocol::canonical::canonical_json;
use bytes::Bytes;
use http::{HeaderMap, Method};
use serde_json::{json, Value};

pub struct Gemini;

/// Google's Gemini API, at its own paths (`/v1beta/…`,
/// `/v1/models/{model}:{method}`).
pub const PROTOCOL: Protocol = Protocol::of(&Gemini);

/// The model named in a request path `…/models/{model}:{method}`, and
/// whether the method streams; `None` for any other path.
pub fn model_and_method(path: &str) -> Option<(&str, &str)> {
    let (_, rest) = path.rsplit_once("/models/")?;
    let (model, method) = rest.split_once(':')?;
    let plain = !model.is_empty() && !model.contains('/');
    plain.then_some((model, method))
}

/// A key in camelCase or in the proto's snake_case.
fn field<'v>(value: &'v Value, camel: &str, snake: &str) -> Option<&'v Value> {
    value.get(camel).or_else(|| value.get(snake))
}

fn parts(content: &Value) -> impl Iterator<Item = &Value> {
    content
        .get("parts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// A call or a response's link: its id, else its function's name.
fn link(part: &Value, camel: &str, snake: &str) -> Option<String> {
    let call = field(part, camel, snake)?;
    let id = call.get("id").and_then(Value::as_str);
    id.or_else(|| call.get("name")?.as_str()).map(String::from)
}

impl Adapter for Gemini {
    /// A body alone does not say the model: only [`Adapter::outline_at`]
    /// outlines a Gemini request.
    fn outline(&self, _body: Bytes) -> Option<Outline> {
        None
    }

    fn history_list(&self) -> &'static str {
        "contents"
    }

    fn outline_at(&self, body: Bytes, path: &str) -> Option<Outline> {
        let (model, method) = model_and_method(path)?;
        let stream = method == "streamGenerateContent";
        Outline::read_as(
            body,
            self.history_list(),
            Some((model.to_string(), stream)),
            |body, _, _| {
                let system = field(
                    &Value::Object(body.clone()),
                    "systemInstruction",
                    "system_instruction",
                )
                .cloned();
                SystemPart::Value(system.unwrap_or(Value::Null))
            },
        )
    }

    fn build(&self, request: &ChatRequest, messages: &[&Value]) -> Vec<u8> {
        serialize_replacing(&request.body, "contents", messages)
    }

    fn canonical(&self, message: &Value) -> Vec<u8> {
        canonical_json(message, &[])
    }

    fn canonical_scheme(&self) -> &'static str {
        "gemini-contents"
    }

    fn tool_links(&self, message: &Value) -> ToolLinks {
        ToolLinks {
            calls: parts(message)
                .filter_map(|p| link(p, "functionCall", "function_call"))
                .collect(),
            results: parts(message)
                .filter_map(|p| link(p, "functionResponse", "function_response"))
                .collect(),
        }
    }

    /// Gemini has two roles; a summary is always the user's turn.
    fn summary_message(&self, _role: &str, summary: &str) -> Value {
        json!({"role": "user", "parts": [{"text": summary_text(summary)}]})
    }

    /// Thinking at its lowest where the model thinks: Gemini 2.5 Flash
    /// turns it off with a budget of 0, 2.5 Pro takes no less than 128,
    /// Gemini 3 takes a level (ai.google.dev "Gemini thinking").
    fn summary_request(&self, _client: &ChatRequest, call: &SummaryCall<'_>) -> Value {
        let mut config = json!({"maxOutputTokens": call.output_limit()});
        if let Some(thinking) = lowest_thinking(call.model) {
            config["thinkingConfig"] = thinking;
        }
        json!({
            "systemInstruction": {"parts": [{"text": call.instructions}]},
            "contents": [{"role": "user", "parts": [{"text": call.transcript}]}],
            "generationConfig": config,
        })
    }

    fn reasons(&self, _client: &ChatRequest, model: &str) -> bool {
        lowest_thinking(model).is_some()
    }

    /// A summary is asked for whole: `:generateContent` of the summary
    /// model, the client's query kept but for `alt=sse`.
    fn summary_url(&self, client_url: &reqwest::Url, model: &str) -> reqwest::Url {
        let mut url = client_url.clone();
        if let Some((base, _)) = client_url.path().rsplit_once("/models/") {
            url.set_path(&format!("{base}/models/{model}:generateContent"));
        }
        let kept: Vec<(String, String)> = client_url
            .query_pairs()
            .filter(|(name, _)| name != "alt")
            .map(|(name, value)| (name.into_owned(), value.into_owned()))
            .collect();
        url.set_query(None);
        if !kept.is_empty() {
            url.query_pairs_mut().extend_pairs(kept);
        }
        url
    }

    /// The first candidate's text, its thoughts left out.
    fn response_text(&self, response: &Value) -> Option<String> {
        let content = response.pointer("/candidates/0/content")?;
        let text: String = parts(content)
            .filter(|part| part.get("thought") != Some(&Value::Bool(true)))
            .filter_map(|part| part.get("text")?.as_str())
            .collect();
        (!text.trim().is_empty()).then_some(text)
    }

    fn ran_out(&self, response: &Value) -> bool {
        let reason = response.pointer("/candidates/0/finishReason");
        let reason = reason.or_else(|| response.pointer("/candidates/0/finish_reason"));
        reason == Some(&json!("MAX_TOKENS"))
    }

    fn transcript_entry(&self, message: &Value) -> String {
        let role = self.role(message);
        let mut entry = format!("[{role}]");
        for part in parts(message) {
            entry.push_str(&part_text(part));
        }
        entry
    }

    fn trim_tool_result(&self, message: &Value, keep_bytes: usize) -> Option<Trimmed> {
        let responses: Vec<usize> = parts(message)
            .enumerate()
            .filter(|(_, part)| field(part, "functionResponse", "function_response").is_some())
            .map(|(index, _)| index)
            .collect();
        let largest = *responses
            .iter()
            .max_by_key(|&&i| message["parts"][i].to_string().len())?;
        let key = if message["parts"][largest].get("functionResponse").is_some() {
            "functionResponse"
        } else {
            "function_response"
        };
        let text = message["parts"][largest][key]["response"].to_string();
        let cut = elide_middle(&text, keep_bytes)?;
        let mut trimmed = message.clone();
        trimmed["parts"][largest][key]["response"] = json!({"output": cut});
        Some(Trimmed {
            message: trimmed,
            original_bytes: text.len(),
            kept_bytes: cut.len(),
        })
    }

    fn max_output_tokens(&self, request: &ChatRequest) -> Option<u64> {
        let config = request
            .body
            .get("generationConfig")
            .or_else(|| request.body.get("generation_config"))?;
        field(config, "maxOutputTokens", "max_output_tokens")?.as_u64()
    }

    fn non_text_markers(&self) -> &'static [&'static str] {
        &[
            "\"inlineData\"",
            "\"inline_data\"",
            "\"fileData\"",
            "\"file_data\"",
        ]
    }

    /// Blank lines, not an SSE comment: google-genai's stream reader
    /// parses any line that is not `data: ` as JSON (`_RawJsonLineBuffer`)
    /// and @google/genai only matches `^\s*data: ` (so a comment stalls
    /// it), while both skip blank lines. Whitespace before `[` also keeps
    /// the JSON-array stream valid.
    fn keepalive(&self) -> &'static [u8] {
        b"\r\n"
    }

    /// Neither client takes a comment (see `keepalive`).
    fn stream_trailer(&self, _compactions: u32) -> Option<String> {
        None
    }

    fn stream_error_event(&self, _status: u16, error_body: &Value) -> Vec<u8> {
        format!("data: {error_body}\r\n\r\n").into_bytes()
    }

    /// Gemini answers `usageMetadata`, not `usage`, in a whole answer and
    /// in every chunk of a stream (cumulative). Thoughts are output the
    /// candidates' count leaves out: the output is both.
    fn usage(&self, usage: &Value) -> Option<Usage> {
        let count = |camel: &str, snake: &str| field(usage, camel, snake).and_then(Value::as_u64);
        let thoughts = count("thoughtsTokenCount", "thoughts_token_count").unwrap_or(0);
        Some(Usage {
            input_tokens: count("promptTokenCount", "prompt_token_count")?,
            output_tokens: count("candidatesTokenCount", "candidates_token_count")
                .unwrap_or(0)
                .saturating_add(thoughts),
            cached_tokens: count("cachedContentTokenCount", "cached_content_token_count")
                .unwrap_or(0),
            reasoning_tokens: thoughts,
        })
    }

    fn stream_usage(&self, event: &Value) -> Option<Usage> {
        self.usage(field(event, "usageMetadata", "usage_metadata")?)
    }

    fn answer_facts(&self, answer: &Value, facts: &mut AnswerFacts) {
        let model = field(answer, "modelVersion", "model_version");
        facts.named(model, field(answer, "responseId", "response_id"));
        let candidates = answer.get("candidates").and_then(Value::as_array);
        for candidate in candidates.into_iter().flatten() {
            facts.finished(field(candidate, "finishReason", "finish_reason"));
        }
        let usage = field(answer, "usageMetadata", "usage_metadata");
        let cached =
            usage.and_then(|u| field(u, "cachedContentTokenCount", "cached_content_token_count"));
        facts.cached(cached, None);
    }

    fn fact_markers(&self) -> &'static [&'static str] {
        &[
            "finishReason",
            "finish_reason",
            "modelVersion",
            "model_version",
        ]
    }

    fn answer_messages<'v>(&self, answer: &'v Value) -> Vec<AnswerMessage<'v>> {
        let candidates = answer.get("candidates").and_then(Value::as_array);
        let message = |candidate: &'v Value| {
            let content = candidate.get("content").unwrap_or(&Value::Null);
            AnswerMessage::new(content, field(candidate, "finishReason", "finish_reason"))
        };
        candidates.into_iter().flatten().map(message).collect()
    }
}

/// The lowest thinking a thinking model takes; `None` for one that does
/// not think.
fn lowest_thinking(model: &str) -> Option<Value> {
    let name = model.trim_start_matches("models/");
    if name.starts_with("gemini-3") {
        Some(json!({"thinkingLevel": "LOW"}))
    } else if name.starts_with("gemini-2.5-pro") {
        Some(json!({"thinkingBudget": 128}))
    } else if name.starts_with("gemini-2.5") {
        Some(json!({"thinkingBudget": 0}))
    } else {
        None
    }
}

/// One part as transcript text.
fn part_text(part: &Value) -> String {
    if part.get("thought") == Some(&Value::Bool(true)) {
        return String::new();
    }
    if let Some(text) = part.get("text").and_then(Value::as_str) {
        return format!(" {text}");
    }
    if let Some(call) = field(part, "functionCall", "function_call") {
        let name = call.get("name").and_then(Value::as_str).unwrap_or("?");
        return format!(
            "\n  → tool call {name}({})",
            call.get("args").unwrap_or(&Value::Null)
        );
    }
    if let Some(response) = field(part, "functionResponse", "function_response") {
        let name = response.get("name").and_then(Value::as_str).unwrap_or("?");
        return format!(
            "\n  ← {name}: {}",
            response.get("response").unwrap_or(&Value::Null)
        );
    }
    let kind = part
        .as_object()
        .and_then(|p| p.keys().next().cloned())
        .unwrap_or_default();
    format!(" [{kind}]")
}

impl Provider for Gemini {
    fn name(&self) -> &'static str {
        "gemini"
    }

    fn chat(&self) -> &'static dyn Adapter {
        &Gemini
    }

    fn endpoint(&self, method: &Method, path: &str) -> Endpoint {
        let chat = matches!(
            model_and_method(path),
            Some((_, "generateContent" | "streamGenerateContent"))
        );
        if method == Method::POST && chat {
            Endpoint::Chat
        } else {
            Endpoint::Passthrough
        }
    }

    fn adapter(&self, _endpoint: Endpoint) -> &'static dyn Adapter {
        &Gemini
    }

    fn upstream_path<'p>(&self, path: &'p str) -> &'p str {
        path
    }

    fn root(&self) -> Option<Root> {
        Some(Root {
            base_url: "https://generativelanguage.googleapis.com",
            default_window: None,
            legacy_key: Some("gemini_base_url"),
        })
    }

    /// Everything under `/v1beta/` and `/upload/`, and a model's methods
    /// under `/v1/` (`/v1/models/{model}:generateContent`, which the `:`
    /// tells from OpenAI's `/v1/models/{model}`).
    fn claims(&self, path: &str, _headers: &HeaderMap) -> bool {
        path.starts_with("/v1beta/")
            || path.starts_with("/upload/")
            || (path.starts_with("/v1/models/") && model_and_method(path).is_some())
    }

    /// Google's: google.rpc.Status as JSON.
    fn error_body(&self, error: &ErrorInfo<'_>) -> Value {
        let status = match error.status {
            400 | 405 | 413 => "INVALID_ARGUMENT",
            408 | 504 => "DEADLINE_EXCEEDED",
            503 => "UNAVAILABLE",
            _ => "INTERNAL",
        };
        json!({"error": {"code": error.status, "message": error.message, "status": status}})
    }

    fn telemetry(&self) -> TelemetryNames {
        TelemetryNames {
            operation: "generate_content",
            provider: "gcp.gemini",
        }
    }

    fn window_probe(&self) -> Option<WindowProbe> {
        None
    }

    /// Google's APIs also take the key as `?key=`, the same key as the
    /// `x-goog-api-key` header: either names the same tenant.
    fn credential(&self, headers: &HeaderMap, query: Option<&str>) -> Option<Vec<u8>> {
        let header = super::bearer_or_key(headers).map(<[u8]>::to_vec);
        header.or_else(|| {
            url::form_urlencoded::parse(query?.as_bytes())
                .find(|(name, _)| name == "key")
                .map(|(_, key)| key.into_owned().into_bytes())
        })
    }

    fn signer(&self) -> Option<&'static dyn super::Signer> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outline(body: Value, path: &str) -> ChatRequest {
        Gemini
            .outline_at(body.to_string().into(), path)
            .and_then(Outline::parse_all)
            .expect("outlines")
    }

    #[test]
    fn the_model_and_the_streaming_come_from_the_path() {
        let body = json!({"systemInstruction": {"parts": [{"text": "sys"}]},
            "contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
        let request = outline(
            body.clone(),
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
        );
        assert_eq!(
            (request.model.as_str(), request.stream),
            ("gemini-2.5-flash", true)
        );
        assert_eq!(request.system()["parts"][0]["text"], "sys");
        assert_eq!(request.messages().len(), 1);
        let plain = outline(body, "/v1/models/gemini-3-pro:generateContent");
        assert_eq!(
            (plain.model.as_str(), plain.stream),
            ("gemini-3-pro", false)
        );
        assert_eq!(model_and_method("/v1/models"), None);
        assert_eq!(model_and_method("/v1/models/a/b:generateContent"), None);
    }

    #[test]
    fn calls_and_responses_link_by_id_else_by_name() {
        let call = json!({"role": "model", "parts": [
            {"functionCall": {"id": "c1", "name": "f", "args": {}}, "thoughtSignature": "c2ln"},
            {"function_call": {"name": "g", "args": {}}}]});
        let answers = json!({"role": "user", "parts": [
            {"functionResponse": {"id": "c1", "name": "f", "response": {"output": "ok"}}},
            {"function_response": {"name": "g", "response": {"output": "ok"}}}]});
        assert_eq!(Gemini.tool_links(&call).calls, ["c1", "g"]);
        assert_eq!(Gemini.tool_links(&answers).results, ["c1", "g"]);
    }

    #[test]
    fn a_summary_is_asked_for_whole_with_the_clients_key() {
        let client = reqwest::Url::parse(
            "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse&key=k",
        )
        .expect("url");
        let url = Gemini.summary_url(&client, "gemini-2.5-flash-lite");
        assert_eq!(
            url.as_str(),
            "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash-lite:generateContent?key=k"
        );
    }

    #[test]
    fn usage_comes_from_usage_metadata() {
        let chunk = json!({"usageMetadata": {"promptTokenCount": 83, "candidatesTokenCount": 14,
            "thoughtsTokenCount": 104, "cachedContentTokenCount": 20}});
        let usage = Gemini.stream_usage(&chunk).expect("usage");
        assert_eq!(
            (usage.input_tokens, usage.output_tokens, usage.cached_tokens),
            (83, 118, 20)
        );
        assert_eq!((usage.reasoning_tokens, usage.text_tokens()), (104, 14));
    }
}
