use std::collections::HashMap;
use std::time::Duration;

/// How the fake behaves; every field has a default.
#[derive(Debug, Clone)]
pub struct FakeConfig {
    pub default_context_window: u64,
    pub context_windows: HashMap<String, u64>,
    /// When set, requests whose prompt holds `"{marker} REQUEST"` are
    /// summary calls, and chat requests are checked for one separate,
    /// correctly placed summary message starting with the marker.
    pub summary_marker: Option<String>,
    /// Before the response headers.
    pub first_byte_delay: Duration,
    /// Between SSE events.
    pub chunk_delay: Duration,
    /// Extra delay before answering a summary call.
    pub summary_delay: Duration,
    /// Content deltas a streamed reply is split into.
    pub stream_chunks: usize,
    /// Fixed assistant text; by default derived from the request.
    pub reply_text: Option<String>,
    /// Length of a summary reply in tokens (capped by its `max_tokens`).
    pub summary_reply_tokens: u64,
    /// Summaries are prose that runs until the output limit stops it,
    /// whatever `summary_reply_tokens` says: one short sentence, then no
    /// full stop (`facts::summary`, issue 52's real summary).
    pub summary_prose: bool,
    /// Reasoning tokens every reasoning answer spends, whatever its effort;
    /// by default they grow with the effort (`models::reasoning_tokens`).
    pub reasoning_tokens: Option<u64>,
    /// Who serves Anthropic Messages (`messages_modes.rs`).
    pub messages_mode: MessagesMode,
    /// Who serves the Responses API (`responses_modes.rs`).
    pub responses_mode: ResponsesMode,
    /// Ollama's `num_ctx` when a request sets none.
    pub ollama_context_window: u64,
    /// Chat Completions past the window is cut and answered 200, as
    /// Ollama's `/v1` does, instead of refused.
    pub silent_truncation: bool,
    /// `response.completed` lists no output (`"output": []`), the items
    /// coming only in their `response.output_item.done` events, as the
    /// ChatGPT backend's Codex endpoint answers (BerriAI/litellm#32724).
    pub responses_completed_without_output: bool,
    /// Keep every request for assertions. Off for benchmarks, which send
    /// thousands of large bodies.
    pub record_requests: bool,
    /// Serve the Responses API's WebSocket mode on `GET /v1/responses`
    /// (`responses_socket.rs`), as OpenAI does. Off, the GET is a 405, as
    /// from a server without it.
    pub responses_websocket: bool,
}

impl Default for FakeConfig {
    fn default() -> Self {
        Self {
            default_context_window: 8192,
            context_windows: HashMap::new(),
            summary_marker: None,
            first_byte_delay: Duration::ZERO,
            chunk_delay: Duration::ZERO,
            summary_delay: Duration::ZERO,
            stream_chunks: 4,
            reply_text: None,
            summary_reply_tokens: 200,
            summary_prose: false,
            reasoning_tokens: None,
            messages_mode: MessagesMode::default(),
            responses_mode: ResponsesMode::default(),
            ollama_context_window: 4096,
            silent_truncation: false,
            record_requests: true,
            responses_completed_without_output: false,
            responses_websocket: false,
        }
    }
}

/// Who serves Anthropic Messages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MessagesMode {
    /// The fake's long-standing behaviour: fields and flags it does not
    /// model are ignored.
    #[default]
    Plain,
    /// Anthropic: context management accepted and reported.
    Anthropic,
    /// A third-party service: Anthropic's betas and their fields refused.
    ThirdParty,
}

/// Who serves the Responses API.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ResponsesMode {
    /// A server other than OpenAI: OpenAI's compaction forms unknown.
    #[default]
    ThirdParty,
    /// OpenAI: its compaction forms served, with opaque items of its own.
    OpenAi,
}
