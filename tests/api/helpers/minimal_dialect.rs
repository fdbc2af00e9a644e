//! A provider defined outside the crate, as an embedding program would
//! add one, with a wire format of its own ("parley"): a request is
//! `{"model", "preamble", "turns": [{"speaker", "says"}], "limit"}`, an
//! answer `{"model", "reply", "why", "counts": {"in", "out"}}`, an error
//! FastAPI's `{"detail": {"msg", "type"}}`; its spans and metrics call it
//! `minimal`. This module and one `register` line are all it takes
//! (ARCHITECTURE.md, "Adding a provider"); [`ParleyServer`] is its
//! upstream, the fake that speaks it.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use condenser::protocol::canonical::canonical_json;
use condenser::protocol::{
    bearer_or_key, summary_text, Adapter, AnswerFacts, AnswerMessage, ChatRequest, Endpoint,
    ErrorInfo, Outline, Provider, Root, Signer, SummaryCall, SystemPart, TelemetryNames, ToolLinks,
    Trimmed, Usage, WindowProbe,
};
use http::{HeaderMap, Method, StatusCode};
use serde_json::{json, Map, Value};
use std::sync::{Arc, Mutex};

pub struct Minimal;

/// The parley adapter: its own bodies, read and written here alone.
pub struct Parley;

impl Adapter for Parley {
    fn outline(&self, body: Bytes) -> Option<Outline> {
        Outline::read(body, "turns", |body, _, _| {
            SystemPart::Value(body.get("preamble").cloned().unwrap_or(Value::Null))
        })
    }

    fn build(&self, request: &ChatRequest, messages: &[&Value]) -> Vec<u8> {
        // The preamble stays in the body, as it came.
        let mut body: Map<String, Value> = request.body.clone();
        let turns = messages.iter().map(|turn| (*turn).clone()).collect();
        body.insert("turns".into(), Value::Array(turns));
        serde_json::to_vec(&body).expect("a map serializes")
    }

    fn canonical(&self, message: &Value) -> Vec<u8> {
        canonical_json(message, &[])
    }

    fn canonical_scheme(&self) -> &'static str {
        "parley-turns"
    }

    /// Parley has no tools.
    fn tool_links(&self, _message: &Value) -> ToolLinks {
        ToolLinks::default()
    }

    fn role<'m>(&self, message: &'m Value) -> &'m str {
        message.get("speaker").and_then(Value::as_str).unwrap_or("")
    }

    fn summary_message(&self, role: &str, summary: &str) -> Value {
        json!({"speaker": role, "says": summary_text(summary)})
    }

    fn summary_request(&self, _client: &ChatRequest, call: &SummaryCall<'_>) -> Value {
        json!({
            "model": call.model,
            "preamble": call.instructions,
            "turns": [{"speaker": "user", "says": call.transcript}],
            "limit": call.output_limit(),
        })
    }

    fn non_text_markers(&self) -> &'static [&'static str] {
        &[]
    }

    fn response_text(&self, response: &Value) -> Option<String> {
        response.get("reply")?.as_str().map(str::to_string)
    }

    fn ran_out(&self, response: &Value) -> bool {
        response.get("why") == Some(&json!("limit"))
    }

    fn transcript_entry(&self, message: &Value) -> String {
        let says = message.get("says").and_then(Value::as_str).unwrap_or("");
        format!("[{}] {says}", self.role(message))
    }

    fn trim_tool_result(&self, _message: &Value, _keep_bytes: usize) -> Option<Trimmed> {
        None
    }

    fn max_output_tokens(&self, request: &ChatRequest) -> Option<u64> {
        request.body.get("limit")?.as_u64()
    }

    fn stream_error_event(&self, _status: u16, error_body: &Value) -> Vec<u8> {
        format!("data: {error_body}\n\n").into_bytes()
    }

    /// Parley's answers count under `counts`, not `usage`: the usage
    /// reader finds them through [`Adapter::usage_markers`] and
    /// [`Adapter::stream_usage`] on the whole answer.
    fn usage(&self, usage: &Value) -> Option<Usage> {
        self.stream_usage(&json!({"counts": usage}))
    }

    fn usage_markers(&self) -> &'static [&'static str] {
        &["\"counts\""]
    }

    fn stream_usage(&self, event: &Value) -> Option<Usage> {
        let counts = event.get("counts")?;
        Some(Usage {
            input_tokens: counts.get("in")?.as_u64()?,
            output_tokens: counts.get("out")?.as_u64()?,
            ..Usage::default()
        })
    }

    fn answer_facts(&self, answer: &Value, facts: &mut AnswerFacts) {
        facts.named(answer.get("model"), None);
        facts.finished(answer.get("why"));
    }

    fn fact_markers(&self) -> &'static [&'static str] {
        &["\"why\""]
    }

    /// A reply is text alone, in no message shape content capture reads.
    fn answer_messages<'v>(&self, _answer: &'v Value) -> Vec<AnswerMessage<'v>> {
        Vec::new()
    }
}

impl Provider for Minimal {
    fn name(&self) -> &'static str {
        "minimal"
    }

    fn chat(&self) -> &'static dyn Adapter {
        &Parley
    }

    fn endpoint(&self, method: &Method, path: &str) -> Endpoint {
        if method == Method::POST && path == "/chat" {
            Endpoint::Chat
        } else {
            Endpoint::Passthrough
        }
    }

    fn adapter(&self, _endpoint: Endpoint) -> &'static dyn Adapter {
        &Parley
    }

    /// Its server serves the chat at `/talk` under its base URL.
    fn upstream_path<'p>(&self, path: &'p str) -> &'p str {
        match path {
            "/chat" => "/talk",
            other => other,
        }
    }

    /// Reached only under a configured path prefix.
    fn root(&self) -> Option<Root> {
        None
    }

    fn claims(&self, _path: &str, _headers: &HeaderMap) -> bool {
        false
    }

    fn error_body(&self, error: &ErrorInfo<'_>) -> Value {
        json!({"detail": {"msg": error.message, "type": error.kind}})
    }

    fn telemetry(&self) -> TelemetryNames {
        TelemetryNames {
            operation: "chat",
            provider: "minimal",
        }
    }

    fn window_probe(&self) -> Option<WindowProbe> {
        None
    }

    fn credential(&self, headers: &HeaderMap, _query: Option<&str>) -> Option<Vec<u8>> {
        bearer_or_key(headers).map(<[u8]>::to_vec)
    }

    fn signer(&self) -> Option<&'static dyn Signer> {
        None
    }
}

/// What the parley server was sent.
#[derive(Debug, Clone)]
pub struct Heard {
    pub body: Value,
    pub status: u16,
}

/// The parley server: a request's size is its bytes over four; one over
/// `window` is refused (`400`, "conversation too long: N tokens > W"), a
/// summary request (Condenser's marker opens its preamble) answered with a
/// summary, any other with a short reply and its counts.
pub struct ParleyServer {
    pub base_url: String,
    heard: Arc<Mutex<Vec<Heard>>>,
}

#[derive(Clone)]
struct Parleying {
    window: u64,
    heard: Arc<Mutex<Vec<Heard>>>,
}

impl ParleyServer {
    pub async fn start(window: u64) -> ParleyServer {
        let heard = Arc::new(Mutex::new(Vec::new()));
        let state = Parleying {
            window,
            heard: heard.clone(),
        };
        let app = axum::Router::new()
            .route("/talk", axum::routing::post(talk))
            .with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let base_url = format!("http://{}", listener.local_addr().expect("address"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        ParleyServer { base_url, heard }
    }

    pub fn heard(&self) -> Vec<Heard> {
        self.heard.lock().expect("lock").clone()
    }
}

async fn talk(State(state): State<Parleying>, body: Bytes) -> Response {
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        let error = json!({"detail": {"msg": "malformed body", "type": "bad_request"}});
        return (StatusCode::UNPROCESSABLE_ENTITY, axum::Json(error)).into_response();
    };
    let tokens = body.len() as u64 / 4;
    let marker = format!("{} REQUEST", condenser::protocol::SUMMARY_MARKER);
    let summary = request.to_string().contains(&marker);
    let (status, answer) = if tokens > state.window {
        let message = format!("conversation too long: {tokens} tokens > {}", state.window);
        let error = json!({"detail": {"msg": message, "type": "context_overflow"}});
        (StatusCode::BAD_REQUEST, error)
    } else {
        let reply = match summary {
            true => "The user noted facts; the assistant said ok each time.",
            false => "ok",
        };
        let answer = json!({"model": request["model"], "reply": reply, "why": "done",
            "counts": {"in": tokens, "out": 5}});
        (StatusCode::OK, answer)
    };
    state.heard.lock().expect("lock").push(Heard {
        body: request,
        status: status.as_u16(),
    });
    (status, axum::Json(answer)).into_response()
}
