//! A scripted, strict stand-in for the OpenAI Chat Completions, OpenAI
//! Responses, Anthropic Messages and Gemini APIs (and Ollama's, Azure's
//! and Gemini's OpenAI endpoint). It answers with the real APIs' shapes, SSE framing and
//! error bodies, counts tokens deterministically (`ceil(bytes / 4)` of the
//! prompt JSON plus 3 per message), refuses what the real APIs refuse (broken
//! tool pairs, altered thinking signatures, missing auth) and also checks
//! Condenser's own invariants (no credential in a body, one separate summary
//! message), so a proxy bug turns into a 400 here as it would upstream.

mod chat;
pub mod claude_clouds;
mod clouds;
mod config;
mod extras;
pub mod facts;
mod gemini;
mod gemini_rules;
mod messages_modes;
mod models;
mod ollama;
mod replies;
mod responses;
mod responses_modes;
mod responses_socket;
mod responses_sse;
mod sigv4;
mod sse;
mod state;
mod validate;

use axum::routing::{get, post};
use axum::Router;
use std::net::SocketAddr;
use std::sync::Arc;

pub use config::{FakeConfig, MessagesMode, ResponsesMode};
pub use state::{Protocol, RecordedRequest, RequestKind, Scripted, Transport};

pub struct FakeUpstream {
    addr: SocketAddr,
    state: Arc<state::State>,
}

impl FakeUpstream {
    /// Serves on a random local port until dropped with the runtime.
    pub async fn start(config: FakeConfig) -> FakeUpstream {
        Self::start_on(config, SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .expect("fake upstream binds")
    }

    pub async fn start_on(config: FakeConfig, addr: SocketAddr) -> anyhow::Result<FakeUpstream> {
        let state = Arc::new(state::State::new(config));
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let app = router(state.clone());
        // As the real APIs' servers: a stream's small writes (SSE events,
        // WebSocket frames) are not held back for an ACK.
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(FakeUpstream { addr, state })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The Anthropic SDK convention: no version in the base URL.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The OpenAI SDK convention: the base URL ends in `/v1`.
    pub fn openai_base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state.log()
    }

    pub fn chat_requests(&self) -> Vec<RecordedRequest> {
        self.requests()
            .into_iter()
            .filter(|r| r.kind == RequestKind::Chat)
            .collect()
    }

    /// The last chat request answered with 200 (for a stream, that may
    /// still be one that failed in-band).
    pub fn last_accepted(&self) -> Option<RecordedRequest> {
        self.chat_requests()
            .into_iter()
            .rev()
            .find(|r| r.status == 200)
    }

    pub fn summary_requests(&self) -> Vec<RecordedRequest> {
        self.requests()
            .into_iter()
            .filter(|r| r.kind == RequestKind::Summary)
            .collect()
    }

    /// Every fact a summary the fake wrote carried that did not reach the
    /// request the summary stands for (`facts::lost`), one line each.
    pub fn facts_lost(&self) -> Vec<String> {
        facts::lost(&self.requests())
    }

    /// Fails with what was lost unless every fact a summary carried
    /// reached the request the summary stands for; how many summaries the
    /// fake wrote.
    pub fn assert_facts_survive(&self) -> usize {
        let lost = self.facts_lost();
        assert!(
            lost.is_empty(),
            "facts lost through compactions:\n{}",
            lost.join("\n")
        );
        self.requests()
            .iter()
            .filter(|request| request.written.is_some())
            .count()
    }

    /// The most summary calls that were ever answered at the same time.
    pub fn peak_concurrent_summaries(&self) -> usize {
        self.state.peak_concurrent_summaries()
    }

    /// Summary calls being answered now (waiting out the summary delay).
    pub fn summaries_in_flight(&self) -> usize {
        self.state.summaries_in_flight()
    }

    /// Scripts no request has taken yet: a request takes its script as it
    /// arrives, so a `Delay` taken is a request waiting here now.
    pub fn scripts_pending(&self) -> usize {
        self.state.scripts_pending()
    }

    /// Responses WebSocket handshakes accepted (`responses_websocket`).
    pub fn websocket_connections(&self) -> usize {
        self.state.websocket_connections()
    }

    pub fn clear_requests(&self) {
        self.state.clear();
    }

    pub fn push_script(&self, script: Scripted) {
        self.state.push_script(script);
    }

    pub fn set_context_window(&self, model: &str, tokens: u64) {
        self.state.set_window(model, tokens);
    }
}

fn router(state: Arc<state::State>) -> Router {
    // Without the WebSocket mode the GET stays unrouted: axum's own 405.
    let responses = match state.config().responses_websocket {
        true => post(chat::responses).get(responses_socket::upgrade),
        false => post(chat::responses),
    };
    Router::new()
        .route("/v1/chat/completions", post(chat::openai))
        .route("/v1/messages", post(chat::anthropic))
        .route("/v1/responses", responses)
        .route("/v1/responses/compact", post(chat::compact))
        .route(
            "/openai/deployments/{deployment}/chat/completions",
            post(clouds::azure_chat),
        )
        .route(
            "/v1beta/openai/chat/completions",
            post(clouds::gemini_compat_chat),
        )
        .route("/v1beta/models/{call}", post(gemini::call))
        .route("/v1/models/{call}", post(gemini::call))
        .route("/model/{model}/{action}", post(claude_clouds::bedrock))
        .route("/v1/projects/{*rest}", post(claude_clouds::vertex))
        .route("/projects/{*rest}", post(claude_clouds::vertex))
        .route("/api/chat", post(ollama::chat))
        .route("/api/show", post(ollama::show))
        .route("/api/tags", get(ollama::tags))
        .route("/v1/messages/count_tokens", post(extras::count_tokens))
        .route("/v1/models", get(extras::models))
        .route("/v1/embeddings", post(extras::embeddings))
        .route("/v1/echo", post(extras::echo))
        .route("/v1/slow-stream", get(extras::slow_stream))
        .route("/_fake/stats", get(extras::stats))
        .with_state(state)
}
