use crate::config::FakeConfig;
use bytes::Bytes;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    /// A chat or messages call that is not a summary call.
    Chat,
    /// A chat or messages call carrying the summary marker's request token.
    Summary,
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    OpenAi,
    Anthropic,
    /// OpenAI Responses: OpenAI's credentials and error shapes.
    Responses,
}

impl Protocol {
    /// The dialect of credentials and error bodies.
    pub fn errors(self) -> Protocol {
        match self {
            Self::Responses => Self::OpenAi,
            other => other,
        }
    }
}

/// How a request reached the fake.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Transport {
    #[default]
    Http,
    /// A `response.create` frame on a Responses WebSocket
    /// (`responses_socket.rs`).
    Websocket,
}

#[derive(Debug, Clone)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    /// Lower-case names, as received.
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    pub json: Option<serde_json::Value>,
    pub kind: RequestKind,
    pub protocol: Option<Protocol>,
    /// What the fake answered.
    pub status: u16,
    /// The prompt's size as sent.
    pub input_tokens: Option<u64>,
    /// The fake cut the prompt to fit its window and answered 200 (a
    /// silently truncating server, as Ollama is).
    pub truncated: bool,
    pub transport: Transport,
    /// A WebSocket frame that continued the connection's last response
    /// with `previous_response_id`; `body` holds the full input.
    pub continued: bool,
    /// The summary the fake wrote, for a summary call it answered.
    pub written: Option<String>,
}

impl RecordedRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Overrides consumed, first in first out, by the next request of their kind.
#[derive(Debug, Clone)]
pub enum Scripted {
    Respond {
        kind: RequestKind,
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
    },
    Delay {
        kind: RequestKind,
        delay: Duration,
    },
    /// HTTP 200 with this SSE `data:` payload as the first event, for streamed requests.
    StreamError {
        kind: RequestKind,
        data: String,
    },
}

impl Scripted {
    fn kind(&self) -> RequestKind {
        match self {
            Self::Respond { kind, .. }
            | Self::Delay { kind, .. }
            | Self::StreamError { kind, .. } => *kind,
        }
    }
}

pub struct State {
    pub config: Mutex<FakeConfig>,
    log: Mutex<Vec<RecordedRequest>>,
    scripts: Mutex<VecDeque<Scripted>>,
    /// Summary calls being answered now, and the most there ever were.
    summaries_in_flight: Mutex<(usize, usize)>,
    /// Responses WebSocket handshakes accepted.
    websocket_connections: AtomicUsize,
}

impl State {
    pub fn new(config: FakeConfig) -> Self {
        Self {
            config: Mutex::new(config),
            log: Mutex::default(),
            scripts: Mutex::default(),
            summaries_in_flight: Mutex::default(),
            websocket_connections: AtomicUsize::new(0),
        }
    }

    pub fn config(&self) -> FakeConfig {
        self.config.lock().expect("config lock").clone()
    }

    pub fn set_window(&self, model: &str, tokens: u64) {
        self.config
            .lock()
            .expect("config lock")
            .context_windows
            .insert(model.to_string(), tokens);
    }

    pub fn record(&self, request: RecordedRequest) {
        if !self.config.lock().expect("config lock").record_requests {
            return;
        }
        self.log.lock().expect("log lock").push(request);
    }

    pub fn log(&self) -> Vec<RecordedRequest> {
        self.log.lock().expect("log lock").clone()
    }

    pub fn clear(&self) {
        self.log.lock().expect("log lock").clear();
    }

    pub fn push_script(&self, script: Scripted) {
        self.scripts.lock().expect("script lock").push_back(script);
    }

    pub fn take_script(&self, kind: RequestKind) -> Option<Scripted> {
        let mut scripts = self.scripts.lock().expect("script lock");
        let index = scripts.iter().position(|s| s.kind() == kind)?;
        scripts.remove(index)
    }

    /// Waits `delay` as a summary call in flight, counting overlaps.
    pub async fn summary_delay(&self, delay: Duration) {
        {
            let mut counts = self.summaries_in_flight.lock().expect("count lock");
            counts.0 += 1;
            counts.1 = counts.1.max(counts.0);
        }
        tokio::time::sleep(delay).await;
        self.summaries_in_flight.lock().expect("count lock").0 -= 1;
    }

    pub fn peak_concurrent_summaries(&self) -> usize {
        self.summaries_in_flight.lock().expect("count lock").1
    }

    pub fn summaries_in_flight(&self) -> usize {
        self.summaries_in_flight.lock().expect("count lock").0
    }

    pub fn scripts_pending(&self) -> usize {
        self.scripts.lock().expect("script lock").len()
    }

    pub fn websocket_accepted(&self) {
        self.websocket_connections.fetch_add(1, Ordering::SeqCst);
    }

    pub fn websocket_connections(&self) -> usize {
        self.websocket_connections.load(Ordering::SeqCst)
    }
}
