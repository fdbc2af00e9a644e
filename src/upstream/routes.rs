//! Step 1, route: which upstream, and which endpoint.
//!
//! Which upstream a request goes to, and whether Condenser handles it (a chat
//! endpoint) or forwards it untouched. The upstream URL comes only from
//! configuration: the request contributes its path and query, never a host.

use crate::config::{NativeCompaction, Settings, UpstreamSettings};
pub use crate::protocol::Endpoint;
use crate::protocol::{Adapter, Protocol};
use http::{HeaderMap, Method};
use reqwest::Url;
use std::sync::Arc;

#[derive(Debug)]
pub struct Upstream {
    pub name: String,
    /// Parsed once: a request's URL is this one with its path and query
    /// set, so the scheme and host are not parsed again per request.
    base_url: Url,
    pub protocol: Protocol,
    /// The window its models are served with when a request sets none
    /// (a local server's `num_ctx` default): configuration, so evidence.
    pub default_window: Option<u64>,
    /// What Condenser does with the providers' own compaction APIs here.
    pub native_compaction: NativeCompaction,
    /// Set once this upstream refused a forwarded native form as unknown:
    /// `auto` serves the forms here from then on.
    pub native_refused: std::sync::atomic::AtomicBool,
    /// Whether a client socket's requests may take a socket here.
    pub websocket: bool,
    /// Set once a handshake was refused: this upstream does not serve the
    /// Responses WebSocket mode, and HTTP is used from then on.
    pub websocket_refused: std::sync::atomic::AtomicBool,
}

impl Upstream {
    #[cfg(test)]
    fn new(name: &str, base_url: &str, protocol: Protocol) -> Result<Arc<Self>, url::ParseError> {
        Self::from_settings(&UpstreamSettings {
            name: name.into(),
            base_url: base_url.into(),
            protocol,
            path_prefix: String::new(),
            default_context_window: None,
            native_compaction: NativeCompaction::default(),
            websocket: true,
        })
    }

    fn from_settings(settings: &UpstreamSettings) -> Result<Arc<Self>, url::ParseError> {
        let mut base_url = Url::parse(&settings.base_url)?;
        let path = base_url.path().trim_end_matches('/').to_owned();
        base_url.set_path(&path);
        Ok(Arc::new(Self {
            name: settings.name.clone(),
            base_url,
            protocol: settings.protocol,
            default_window: settings.default_context_window,
            native_compaction: settings.native_compaction,
            native_refused: Default::default(),
            websocket: settings.websocket,
            websocket_refused: Default::default(),
        }))
    }

    /// The host of its base URL, as `auto` judges who made the API.
    pub fn host(&self) -> &str {
        self.base_url.host_str().unwrap_or_default()
    }

    /// This upstream's URL for `path` (appended to the base URL's own
    /// path) and `query`.
    pub fn url(&self, path: &str, query: Option<&str>) -> Url {
        let mut url = self.base_url.clone();
        let base_path = url.path().trim_end_matches('/');
        url.set_path(&format!("{base_path}{path}"));
        url.set_query(query);
        url
    }
}

#[derive(Debug, Clone)]
pub struct Route {
    pub upstream: Arc<Upstream>,
    pub endpoint: Endpoint,
    /// Full upstream URL, query string included.
    pub url: Url,
}

impl Route {
    /// The adapter for what this route handles.
    pub fn adapter(&self) -> &'static dyn Adapter {
        self.upstream.protocol.provider().adapter(self.endpoint)
    }
}

#[derive(Debug)]
pub struct RouteTable {
    /// Each provider's own upstream at Condenser's root, in the order a
    /// request is offered to them; the last is the catch-all.
    roots: Vec<Arc<Upstream>>,
    /// (path prefix, upstream), longest prefix first.
    prefixed: Vec<(String, Arc<Upstream>)>,
}

impl RouteTable {
    /// Fails only on settings that do not resolve or a base URL that does
    /// not parse, which validated settings never hold.
    pub fn from_settings(settings: &Settings) -> Result<Self, RouteError> {
        let mut roots = Vec::new();
        let mut prefixed = Vec::new();
        for u in settings.upstreams()? {
            let upstream = Upstream::from_settings(&u)?;
            match u.path_prefix.as_str() {
                "" => roots.push(upstream),
                prefix => prefixed.push((prefix.to_string(), upstream)),
            }
        }
        if roots.is_empty() {
            return Err(RouteError::NoRoot);
        }
        prefixed.sort_by_key(|(prefix, _)| std::cmp::Reverse(prefix.len()));
        Ok(Self { roots, prefixed })
    }

    pub fn resolve(
        &self,
        method: &Method,
        path: &str,
        query: Option<&str>,
        headers: &HeaderMap,
    ) -> Route {
        let (upstream, rest) = self.pick(path, headers);
        let provider = upstream.protocol.provider();
        let endpoint = provider.endpoint(method, rest);
        let url = upstream.url(provider.upstream_path(rest), query);
        Route {
            upstream: upstream.clone(),
            endpoint,
            url,
        }
    }

    /// The protocol a request to `path` speaks, for errors raised before routing.
    pub fn protocol(&self, path: &str, headers: &HeaderMap) -> Protocol {
        self.pick(path, headers).0.protocol
    }

    /// The upstream and the path left after its prefix.
    fn pick<'p>(&self, path: &'p str, headers: &HeaderMap) -> (&Arc<Upstream>, &'p str) {
        for (prefix, upstream) in &self.prefixed {
            if let Some(rest) = path.strip_prefix(prefix.as_str()) {
                if rest.is_empty() || rest.starts_with('/') {
                    return (upstream, rest);
                }
            }
        }
        let claimed = self
            .roots
            .iter()
            .find(|upstream| upstream.protocol.provider().claims(path, headers));
        let fallback = self.roots.last().expect("from_settings keeps one root");
        (claimed.unwrap_or(fallback), path)
    }
}

/// Why routing could not be built from settings.
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    #[error(transparent)]
    Settings(#[from] crate::config::ConfigError),
    #[error("an upstream base URL does not parse: {0}")]
    Url(#[from] url::ParseError),
    #[error("no provider serves Condenser's root")]
    NoRoot,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::UpstreamTable;
    use crate::protocol::{anthropic, gemini, ollama, openai};

    fn table() -> RouteTable {
        let mut settings: Settings =
            serde_json::from_value(serde_json::json!({})).expect("defaults deserialize");
        settings.upstreams.push(UpstreamTable {
            name: "groq".into(),
            base_url: Some("https://api.groq.com/openai/v1".into()),
            protocol: Some(openai::PROTOCOL),
            path_prefix: Some("/groq".into()),
            default_context_window: None,
            native_compaction: None,
            websocket: None,
        });
        RouteTable::from_settings(&settings).expect("valid base URLs")
    }

    #[test]
    fn geminis_model_methods_go_to_gemini_and_openais_models_do_not() {
        for path in [
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
            "/v1/models/gemini-2.5-flash:generateContent",
        ] {
            let route = resolve(Method::POST, path, Some("alt=sse"));
            assert_eq!(route.upstream.protocol, gemini::PROTOCOL, "{path}");
            assert_eq!(route.endpoint, Endpoint::Chat, "{path}");
        }
        let count = resolve(
            Method::POST,
            "/v1beta/models/gemini-2.5-flash:countTokens",
            None,
        );
        assert_eq!(count.endpoint, Endpoint::Passthrough);
        assert_eq!(count.upstream.protocol, gemini::PROTOCOL);
        let openai = resolve(Method::GET, "/v1/models/gpt-4o", None);
        assert_eq!(openai.upstream.protocol, openai::PROTOCOL);
    }

    #[test]
    fn ollamas_own_paths_at_the_root_go_to_ollama() {
        let chat = resolve(Method::POST, "/api/chat", None);
        assert_eq!(chat.upstream.protocol, ollama::PROTOCOL);
        assert_eq!(chat.endpoint, Endpoint::Chat);
        assert_eq!(chat.url.as_str(), "http://127.0.0.1:11434/api/chat");
        assert_eq!(chat.upstream.default_window, Some(4096));
        let tags = resolve(Method::GET, "/api/tags", None);
        assert_eq!(tags.endpoint, Endpoint::Passthrough);
        assert_eq!(tags.upstream.protocol, ollama::PROTOCOL);
    }

    fn resolve(method: Method, path: &str, query: Option<&str>) -> Route {
        table().resolve(&method, path, query, &HeaderMap::new())
    }

    #[test]
    fn chat_completions_go_to_openai_without_the_duplicate_version() {
        let route = resolve(Method::POST, "/v1/chat/completions", None);
        assert_eq!(
            route.url.as_str(),
            "https://api.openai.com/v1/chat/completions"
        );
        assert_eq!(route.endpoint, Endpoint::Chat);
    }

    #[test]
    fn messages_go_to_anthropic_and_keep_the_query() {
        let route = resolve(Method::POST, "/v1/messages", Some("beta=true"));
        assert_eq!(
            route.url.as_str(),
            "https://api.anthropic.com/v1/messages?beta=true"
        );
        assert_eq!(route.endpoint, Endpoint::Chat);
        assert_eq!(route.upstream.protocol, anthropic::PROTOCOL);
    }

    #[test]
    fn other_paths_pass_through() {
        assert_eq!(
            resolve(Method::GET, "/v1/models", None).endpoint,
            Endpoint::Passthrough
        );
        let count = resolve(Method::POST, "/v1/messages/count_tokens", None);
        assert_eq!(count.endpoint, Endpoint::Passthrough);
        assert_eq!(
            count.url.as_str(),
            "https://api.anthropic.com/v1/messages/count_tokens"
        );
        assert_eq!(
            resolve(Method::GET, "/v1/chat/completions", None).endpoint,
            Endpoint::Passthrough
        );
    }

    #[test]
    fn responses_and_compact_have_their_own_endpoint_and_other_sub_paths_pass_through() {
        let route = resolve(Method::POST, "/v1/responses", None);
        assert_eq!(route.endpoint, Endpoint::Responses);
        assert_eq!(route.url.as_str(), "https://api.openai.com/v1/responses");
        assert_eq!(route.upstream.protocol, openai::PROTOCOL);
        let compact = resolve(Method::POST, "/v1/responses/compact", None);
        assert_eq!(compact.endpoint, Endpoint::Responses);
        assert_eq!(
            resolve(Method::POST, "/v1/responses/resp_1/cancel", None).endpoint,
            Endpoint::Passthrough
        );
        assert_eq!(
            resolve(Method::GET, "/v1/responses/resp_1", None).endpoint,
            Endpoint::Passthrough
        );
        let groq = resolve(Method::POST, "/groq/v1/responses", None);
        assert_eq!(groq.endpoint, Endpoint::Responses);
    }

    /// Setting the path and query on the parsed base URL gives what parsing
    /// the whole URL as one string gives: the same encoding, the same dot
    /// segments resolved.
    #[test]
    fn a_request_url_is_the_base_url_with_the_request_path_and_query() {
        let cases = [
            ("http://127.0.0.1:9000", "/v1/models", None),
            (
                "https://host.example/openai/v1/",
                "/chat/completions",
                Some("a=1&b=%20"),
            ),
            ("https://host.example/v1", "/files/a b/ü/%41", None),
            ("https://host.example/v1", "/x/../../y/./z", Some("")),
            ("https://host.example", "", Some("k=v")),
            ("https://host.example/v1", "/a//b/%2F/c\\d", None),
        ];
        for (base, path, query) in cases {
            let upstream = Upstream::new("u", base, openai::PROTOCOL).expect("parses");
            let whole = match query {
                Some(query) => format!("{}{path}?{query}", base.trim_end_matches('/')),
                None => format!("{}{path}", base.trim_end_matches('/')),
            };
            assert_eq!(
                upstream.url(path, query),
                Url::parse(&whole).expect("parses"),
                "{base} + {path}"
            );
        }
    }

    /// The guard refuses such paths first; should one get here, it stays a
    /// path on the configured host.
    #[test]
    fn a_path_never_names_the_host() {
        let upstream =
            Upstream::new("u", "https://api.anthropic.com", anthropic::PROTOCOL).expect("parses");
        for path in [
            "@evil.example/v1/messages",
            "//evil.example/x",
            "/@evil.example",
        ] {
            let url = upstream.url(path, Some("a=@evil.example"));
            assert_eq!(url.host_str(), Some("api.anthropic.com"), "{path}: {url}");
            assert_eq!(url.scheme(), "https");
            assert_eq!(url.port(), None);
        }
    }

    #[test]
    fn anthropic_clients_reach_anthropic_on_shared_paths() {
        let mut headers = HeaderMap::new();
        headers.insert(
            "anthropic-version",
            "2023-06-01".parse().expect("valid header"),
        );
        let route = table().resolve(&Method::GET, "/v1/models", None, &headers);
        assert_eq!(route.url.as_str(), "https://api.anthropic.com/v1/models");
    }

    #[test]
    fn a_prefixed_upstream_gets_its_requests_with_the_prefix_removed() {
        let route = resolve(Method::POST, "/groq/v1/chat/completions", None);
        assert_eq!(route.upstream.name, "groq");
        assert_eq!(
            route.url.as_str(),
            "https://api.groq.com/openai/v1/chat/completions"
        );
        assert_eq!(route.endpoint, Endpoint::Chat);
        assert_eq!(
            resolve(Method::GET, "/groqx/v1/models", None).upstream.name,
            "openai"
        );
    }
}
