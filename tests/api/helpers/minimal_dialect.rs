//! A provider defined outside the crate, as an embedding program would
//! add one: an OpenAI-compatible dialect whose chat endpoint is `/chat`,
//! whose errors are FastAPI's `{"detail": …}` and whose spans and metrics
//! call it `minimal`. This module and one `register` line are all it
//! takes (ARCHITECTURE.md, "Adding a provider").

use condenser::protocol::openai::OpenAi;
use condenser::protocol::{
    bearer_or_key, Adapter, Endpoint, ErrorInfo, Provider, Root, Signer, TelemetryNames,
    WindowProbe,
};
use http::{HeaderMap, Method};
use serde_json::{json, Value};

pub struct Minimal;

impl Provider for Minimal {
    fn name(&self) -> &'static str {
        "minimal"
    }

    /// Its bodies are Chat Completions': OpenAI's adapter reads them.
    fn chat(&self) -> &'static dyn Adapter {
        &OpenAi
    }

    fn endpoint(&self, method: &Method, path: &str) -> Endpoint {
        if method == Method::POST && path == "/chat" {
            Endpoint::Chat
        } else {
            Endpoint::Passthrough
        }
    }

    fn adapter(&self, _endpoint: Endpoint) -> &'static dyn Adapter {
        &OpenAi
    }

    /// Its server serves the chat at the OpenAI path under its base URL.
    fn upstream_path<'p>(&self, path: &'p str) -> &'p str {
        match path {
            "/chat" => "/chat/completions",
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
