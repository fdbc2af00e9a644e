//! Step 1, accept: one socket, frame after frame.
//!
//! A socket answers one `response.create` at a time, in order, as the
//! mode does. Frames keep being read while one is answered, so a close is
//! seen at once; a request sent meanwhile is refused with an error frame,
//! and a client that keeps sending them (`MAX_REFUSED` in a row) is cut
//! off with a policy close. A socket silent for
//! `server.websocket_idle_timeout` with nothing in flight is closed.
//!
//! When the client goes, the request in flight is dropped like an HTTP
//! request whose client hung up: a compaction under way finishes in the
//! background and is stored (`pipeline::work`).

use super::exchange::{self, Head};
use super::frames::{self, ClientFrame};
use super::history::{Answered, History, Resolved};
use super::tenants::Slot;
use crate::error::ProxyError;
use crate::http::body::refusal;
use crate::http::budget::BodyBudget;
use crate::http::weight::weigh;
use crate::state::AppState;
use crate::upstream::routes::Route;
use axum::extract::ws::{close_code, CloseFrame, Message, WebSocket};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Map, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Requests refused in a row, while one is answered, before the socket
/// is closed: a client that does not wait for its answers is broken or
/// hostile, and each refusal costs a frame.
pub const MAX_REFUSED: usize = 8;

/// Frames queued for a client that reads slowly; past them the answer
/// waits, as an HTTP stream waits on its client.
const OUTGOING: usize = 64;

/// How long the last frames (a close among them) may take to leave.
const CLOSING: Duration = Duration::from_secs(2);

/// The request being answered, in a task of the server's background
/// tracker: shutdown waits for it as for an HTTP request in flight.
struct Answering {
    answer: tokio::task::JoinHandle<Option<Answered>>,
    /// Set once the frame that ends the response is sent: the client may
    /// send its next request from then on, while the stream's end drains.
    ended: Arc<AtomicBool>,
}

impl Answering {
    async fn finish(&mut self) -> Option<Answered> {
        (&mut self.answer).await.ok().flatten()
    }
}

impl Drop for Answering {
    /// The client left: the request ends as an HTTP request whose client
    /// hung up (a compaction under way goes on, `pipeline::work`).
    fn drop(&mut self) {
        self.answer.abort();
    }
}

pub struct Connection {
    state: AppState,
    route: Route,
    head: Arc<Head>,
    budget: Arc<BodyBudget>,
    /// Counts the socket against its tenant's limit until it ends.
    _slot: Slot,
    history: History,
}

/// What the socket does after a frame.
enum Next {
    Go,
    Close(CloseFrame),
    Gone,
}

impl Connection {
    pub fn new(
        state: AppState,
        route: Route,
        head: Head,
        budget: Arc<BodyBudget>,
        slot: Slot,
    ) -> Self {
        Self {
            state,
            route,
            head: Arc::new(head),
            budget,
            _slot: slot,
            history: History::default(),
        }
    }

    pub async fn run(mut self, socket: WebSocket) {
        let (sink, mut incoming) = socket.split();
        let (out, outgoing) = mpsc::channel(OUTGOING);
        let writer = tokio::spawn(write(sink, outgoing));
        let close = self.serve(&mut incoming, &out).await;
        if let Some(close) = close {
            let _ = out.send(Message::Close(Some(close))).await;
        }
        drop(out);
        if tokio::time::timeout(CLOSING, writer).await.is_err() {
            tracing::debug!("socket closed without its last frames");
        }
    }

    /// Reads frames until the socket ends; the close to send, if any.
    async fn serve(
        &mut self,
        incoming: &mut futures_util::stream::SplitStream<WebSocket>,
        out: &mpsc::Sender<Message>,
    ) -> Option<CloseFrame> {
        let idle = self.state.settings.server.websocket_idle_timeout;
        let mut answering: Option<Answering> = None;
        let mut refused = 0;
        let mut quiet_until = Instant::now() + idle;
        loop {
            tokio::select! {
                answered = async { answering.as_mut()?.finish().await }, if answering.is_some() => {
                    answering = None;
                    refused = 0;
                    quiet_until = Instant::now() + idle;
                    if let Some(answered) = answered {
                        self.history.remember(answered);
                    }
                }
                frame = incoming.next() => {
                    quiet_until = Instant::now() + idle;
                    match self.on_frame(frame, &mut answering, &mut refused, out).await {
                        Next::Go => {}
                        Next::Close(close) => return Some(close),
                        Next::Gone => return None,
                    }
                }
                () = tokio::time::sleep_until(quiet_until), if answering.is_none() => {
                    return Some(close(close_code::NORMAL, "idle (server.websocket_idle_timeout)"));
                }
            }
        }
    }

    async fn on_frame(
        &mut self,
        frame: Option<Result<Message, axum::Error>>,
        answering: &mut Option<Answering>,
        refused: &mut usize,
        out: &mpsc::Sender<Message>,
    ) -> Next {
        let text = match frame {
            Some(Ok(Message::Text(text))) => text,
            Some(Ok(Message::Binary(_))) => {
                return self
                    .refuse(
                        ProxyError::BadFrame("binary frames are not part of the mode".into()),
                        out,
                    )
                    .await;
            }
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => return Next::Go,
            Some(Ok(Message::Close(_))) | None => return Next::Gone,
            Some(Err(error)) => return self.read_failed(&error, out).await,
        };
        let frame = frames::read(text.as_str());
        if self.settle(answering).await {
            *refused = 0;
        }
        if answering.is_some() && !matches!(frame, ClientFrame::Processed) {
            *refused += 1;
            if *refused > MAX_REFUSED {
                refusals("flood");
                return Next::Close(close(
                    close_code::POLICY,
                    "requests sent before their answers",
                ));
            }
            return self.refuse(ProxyError::ResponseInProgress, out).await;
        }
        match frame {
            ClientFrame::Create(fields) => self.start(fields, answering, out).await,
            ClientFrame::Processed => Next::Go,
            ClientFrame::Unknown(kind) => {
                let error = ProxyError::BadFrame(format!("unknown frame type {kind:?}"));
                self.refuse(error, out).await
            }
            ClientFrame::Malformed(reason) => self.refuse(ProxyError::BadFrame(reason), out).await,
        }
    }

    /// Finishes the request in flight if its response is over (the client
    /// read its last event and sent the next request before the stream's
    /// end drained); whether it did.
    async fn settle(&mut self, answering: &mut Option<Answering>) -> bool {
        let Some(in_flight) = answering.as_mut() else {
            return false;
        };
        if !in_flight.ended.load(Ordering::Acquire) {
            return false;
        }
        if let Some(answered) = in_flight.finish().await {
            self.history.remember(answered);
        }
        *answering = None;
        true
    }

    /// A frame too large closes the socket (the frame was not read whole,
    /// so the stream cannot go on): an error frame first says why.
    async fn read_failed(&self, error: &axum::Error, out: &mpsc::Sender<Message>) -> Next {
        // tungstenite's capacity error, the only one axum lets through as text.
        if !error.to_string().contains("Space limit exceeded") {
            tracing::debug!(error.message = %error, "socket read failed");
            return Next::Gone;
        }
        let limit = self.max_frame();
        self.refuse(ProxyError::BodyTooLarge { limit }, out).await;
        Next::Close(close(
            close_code::SIZE,
            "frame larger than server.websocket_max_frame_bytes",
        ))
    }

    fn max_frame(&self) -> usize {
        let settings = &self.state.settings;
        settings.server.websocket_max_frame(settings.max_body_bytes)
    }

    /// Answers `error` with an error frame; the socket stays open.
    async fn refuse(&self, error: ProxyError, out: &mpsc::Sender<Message>) -> Next {
        refusals(error.kind());
        let frame = frames::proxy_error(&error, self.route.upstream.protocol);
        match out.send(Message::text(frame)).await {
            Ok(()) => Next::Go,
            Err(_) => Next::Gone,
        }
    }

    /// Starts answering a `response.create`.
    async fn start(
        &mut self,
        mut fields: Map<String, Value>,
        answering: &mut Option<Answering>,
        out: &mpsc::Sender<Message>,
    ) -> Next {
        let resolved = self.history.resolve(&mut fields);
        let input = (resolved != Resolved::Unknown).then(|| exchange::input_of(&fields));
        if fields.get("generate") == Some(&Value::Bool(false)) {
            return self.prewarm(&fields, input, out).await;
        }
        let body = exchange::body(fields);
        let max_body = self.state.settings.max_body_bytes;
        if body.len() > max_body {
            return self
                .refuse(ProxyError::BodyTooLarge { limit: max_body }, out)
                .await;
        }
        let weight = weigh(&body);
        let Some(lease) = self.budget.lease(weight) else {
            let refusal = refusal(self.budget.fits_alone(weight));
            return self.refuse(refusal, out).await;
        };
        let request = exchange::Request { body, input, lease };
        let (state, route, head, out) = (
            self.state.clone(),
            self.route.clone(),
            self.head.clone(),
            out.clone(),
        );
        let ended = Arc::new(AtomicBool::new(false));
        let signal = ended.clone();
        let background = self.state.background.clone();
        let answer = background
            .spawn(async move { exchange::run(state, route, &head, request, out, signal).await });
        *answering = Some(Answering { answer, ended });
        Next::Go
    }

    /// `generate: false`: the client warms the socket up with its request
    /// and asks for no answer. Condenser answers it itself, with an empty
    /// response to continue from; nothing reaches the upstream.
    async fn prewarm(
        &mut self,
        fields: &Map<String, Value>,
        input: Option<Vec<Value>>,
        out: &mpsc::Sender<Message>,
    ) -> Next {
        let id = format!("resp_{}", uuid::Uuid::new_v4().simple());
        let model = fields.get("model").cloned().unwrap_or(Value::Null);
        let response = |status: &str| {
            serde_json::json!({"id": id, "object": "response", "status": status,
                "model": model, "output": []})
        };
        for (kind, status) in [
            ("response.created", "in_progress"),
            ("response.completed", "completed"),
        ] {
            let event = serde_json::json!({"type": kind, "response": response(status)});
            if out.send(Message::text(event.to_string())).await.is_err() {
                return Next::Gone;
            }
        }
        if let Some(items) = input {
            self.history.remember(Answered { id, items });
        }
        Next::Go
    }
}

fn close(code: u16, reason: &'static str) -> CloseFrame {
    CloseFrame {
        code,
        reason: reason.into(),
    }
}

fn refusals(reason: &'static str) {
    metrics::counter!("condenser_websocket_frames_refused_total", "reason" => reason).increment(1);
}

/// Sends the frames queued for the client until the queue closes or the
/// client is gone.
async fn write(
    mut sink: futures_util::stream::SplitSink<WebSocket, Message>,
    mut outgoing: mpsc::Receiver<Message>,
) {
    while let Some(message) = outgoing.recv().await {
        let closing = matches!(message, Message::Close(_));
        if sink.send(message).await.is_err() || closing {
            return;
        }
    }
}
