//! Steps 1 to 7, the protocol seam: what a provider is, and the registry.
//!
//! A provider is one API family (OpenAI, Anthropic, Ollama, Gemini, or a
//! dialect registered from outside the crate): one module that says how
//! its requests are routed, which endpoints Condenser handles and with
//! which [`Adapter`], what its errors look like, what telemetry calls it,
//! and how its servers are asked for a model's window. Everything outside
//! `protocol/` asks the provider and never names one; `registry.rs` lists
//! them.

use super::Adapter;
use http::{HeaderMap, Method};
use serde_json::Value;
use std::fmt;

/// Which of the endpoints a provider serves a request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// A chat endpoint: parsed, persisted, compacted when needed.
    Chat,
    /// OpenAI's Responses API, handled like Chat by its own adapter.
    Responses,
    /// Anything else, byte for byte.
    Passthrough,
}

/// A provider's own upstream at Condenser's root, when it has one.
#[derive(Debug, Clone, Copy)]
pub struct Root {
    /// Where the provider's API lives unless configured otherwise.
    pub base_url: &'static str,
    /// The window its models are served with when a request sets none.
    pub default_window: Option<u64>,
    /// The setting that named its base URL before `[upstreams.NAME]`,
    /// still read; `None` for a provider that came later.
    pub legacy_key: Option<&'static str>,
}

/// What kind of failure a proxy error is, in the terms error shapes
/// distinguish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The request is wrong (malformed, a forbidden method or target).
    InvalidRequest,
    /// The request body is over a limit.
    TooLarge,
    /// The client took too long to send its request.
    ClientTimeout,
    /// The upstream took too long to answer.
    UpstreamTimeout,
    /// Condenser is out of room for now; retrying later helps.
    Overloaded,
    /// The upstream or Condenser failed.
    Server,
}

/// An error Condenser answers itself, for a provider to render.
#[derive(Debug, Clone, Copy)]
pub struct ErrorInfo<'a> {
    pub status: u16,
    /// Low-cardinality name, as in `x-condenser-error`.
    pub kind: &'a str,
    pub message: &'a str,
    pub class: ErrorClass,
}

/// The names OpenTelemetry's GenAI conventions give a provider's calls.
#[derive(Debug, Clone, Copy)]
pub struct TelemetryNames {
    /// `gen_ai.operation.name` of its chat endpoint.
    pub operation: &'static str,
    /// `gen_ai.provider.name` where the upstream's host names none.
    pub provider: &'static str,
}

/// A request that asks a server for a model's trained context length,
/// sent once per model in the background.
#[derive(Debug, Clone, Copy)]
pub struct WindowProbe {
    /// Path on the upstream, POSTed to.
    pub path: &'static str,
    /// The JSON body asking about `model`.
    pub body: fn(model: &str) -> Value,
    /// The trained length the answer states, if any.
    pub read: fn(answer: &Value) -> Option<u64>,
}

/// One API family. Every method is required: a provider that forgot one
/// would route, answer errors or name its spans wrongly without a word.
pub trait Provider: Send + Sync + 'static {
    /// Its name in configuration (`protocol = "NAME"`, `[upstreams.NAME]`),
    /// metrics and logs.
    fn name(&self) -> &'static str;

    /// The adapter of its chat endpoint.
    fn chat(&self) -> &'static dyn Adapter;

    /// Which endpoint a request to `path` (after any path prefix) is.
    fn endpoint(&self, method: &Method, path: &str) -> Endpoint;

    /// The adapter for an endpoint Condenser handles.
    fn adapter(&self, endpoint: Endpoint) -> &'static dyn Adapter;

    /// The path the upstream is sent for `path`, relative to its base URL.
    fn upstream_path<'p>(&self, path: &'p str) -> &'p str;

    /// Its own upstream at Condenser's root; `None` for a dialect reached
    /// only under a configured path prefix.
    fn root(&self) -> Option<Root>;

    /// Whether a request at Condenser's root is this provider's.
    fn claims(&self, path: &str, headers: &HeaderMap) -> bool;

    /// An error Condenser answers, in this API's error shape.
    fn error_body(&self, error: &ErrorInfo<'_>) -> Value;

    /// What telemetry calls this provider's calls.
    fn telemetry(&self) -> TelemetryNames;

    /// How its servers state a model's trained context length, where they
    /// do (Ollama's `/api/show`).
    fn window_probe(&self) -> Option<WindowProbe>;

    /// The credential that names the caller (its tenant), as sent in the
    /// request's headers and query: hashed at once, never kept. It must
    /// be the same on every request of one caller ([`bearer_or_key`] for
    /// most APIs; never a per-request signature).
    fn credential(&self, headers: &HeaderMap, query: Option<&str>) -> Option<Vec<u8>>;

    /// What signs requests to its upstreams, where the API wants them
    /// signed (AWS SigV4); `None` when requests go with the client's
    /// credential as sent.
    fn signer(&self) -> Option<&'static dyn Signer>;
}

/// The credential headers most APIs take, the first one present:
/// `Authorization`, `x-api-key` (Anthropic), `api-key` (Azure),
/// `x-goog-api-key` (Google).
pub fn bearer_or_key(headers: &HeaderMap) -> Option<&[u8]> {
    const CREDENTIAL_HEADERS: [&str; 4] =
        ["authorization", "x-api-key", "api-key", "x-goog-api-key"];
    CREDENTIAL_HEADERS
        .iter()
        .find_map(|name| headers.get(*name))
        .map(|value| value.as_bytes())
}

/// Signs requests for an API whose upstream takes signed requests.
pub trait Signer: Send + Sync {
    /// Whether the client signed its request itself, so that no byte of
    /// its body may change on the way (Condenser then forwards it as it
    /// came, or refuses what would need a change).
    fn signed_by_client(&self, headers: &HeaderMap) -> bool;

    /// Signs `request` when it carries no credential of the client's and
    /// Condenser holds signing credentials; else leaves it as it is.
    fn sign(&self, request: &mut reqwest::Request) -> Result<(), SigningError>;
}

/// Why Condenser could not sign a request.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SigningError(pub String);

/// A registered provider, by handle: cheap to copy, compared by name.
#[derive(Clone, Copy)]
pub struct Protocol(&'static dyn Provider);

impl Protocol {
    /// The handle of `provider`, for its own module's constant.
    pub const fn of(provider: &'static dyn Provider) -> Self {
        Self(provider)
    }

    pub fn provider(self) -> &'static dyn Provider {
        self.0
    }

    pub fn as_str(self) -> &'static str {
        self.0.name()
    }

    /// The adapter of its chat endpoint.
    pub fn adapter(self) -> &'static dyn Adapter {
        self.0.chat()
    }
}

impl PartialEq for Protocol {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Protocol {}

impl std::hash::Hash for Protocol {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl fmt::Debug for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
