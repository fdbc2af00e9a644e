//! Step 5, forward: an answer edited on its way to the client, as the
//! provider-native forms Condenser serves require (a report added, an
//! item put first): a whole JSON answer, or a stream event by event.

use axum::body::Body;
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use http::header;
use serde_json::Value;

/// A JSON answer larger than this is relayed unedited.
const MAX_EDITED_JSON: usize = 8 * 1024 * 1024;

/// What is done to an answer's events, or to the whole JSON answer.
pub(super) trait AnswerEdit: Send + 'static {
    /// What to send for one whole event (its text, blank line included);
    /// `None` to send it as it came.
    fn event(&mut self, event: &[u8]) -> Option<Vec<u8>>;
    /// Whether every later event passes as it comes.
    fn finished(&self) -> bool;
    /// Edits a whole JSON answer.
    fn json(&mut self, answer: &mut Value);
}

/// A successful answer, edited by `edit` whether streamed or JSON; any
/// other answer as it came.
pub(super) async fn edited(response: Response, mut edit: impl AnswerEdit) -> Response {
    if !response.status().is_success() {
        return response;
    }
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let (mut parts, body) = response.into_parts();
    if content_type.starts_with("text/event-stream") {
        parts.headers.remove(header::CONTENT_LENGTH);
        return Response::from_parts(parts, edited_stream(body, edit));
    }
    if !content_type.starts_with("application/json") {
        return Response::from_parts(parts, body);
    }
    let Ok(read) = axum::body::to_bytes(body, MAX_EDITED_JSON).await else {
        // Cut short or too large: what was read is lost either way.
        parts.headers.remove(header::CONTENT_LENGTH);
        return Response::from_parts(parts, Body::empty());
    };
    let Ok(mut answer) = serde_json::from_slice::<Value>(&read) else {
        return Response::from_parts(parts, Body::from(read));
    };
    edit.json(&mut answer);
    parts.headers.remove(header::CONTENT_LENGTH);
    let body = serde_json::to_vec(&answer).map_or(read, Bytes::from);
    Response::from_parts(parts, Body::from(body))
}

/// A stream passed on event by event, each whole event offered to `edit`
/// until it is finished; the rest passes untouched.
pub(super) fn edited_stream(body: Body, edit: impl AnswerEdit) -> Body {
    let state = Relaying {
        upstream: body.into_data_stream(),
        pending: BytesMut::new(),
        edit,
    };
    let events = futures_util::stream::unfold(Some(state), |state| async move {
        let mut state = state?;
        match state.upstream.next().await {
            Some(Ok(chunk)) => {
                let out = state.pass(chunk);
                Some((Ok(out), Some(state)))
            }
            Some(Err(error)) => Some((Err(error), None)),
            // The end: what never ended an event goes as it came.
            None if state.pending.is_empty() => None,
            None => Some((Ok(state.pending.split().freeze()), None)),
        }
    });
    Body::from_stream(events)
}

struct Relaying<E> {
    upstream: axum::body::BodyDataStream,
    /// Bytes of an event not yet ended.
    pending: BytesMut,
    edit: E,
}

impl<E: AnswerEdit> Relaying<E> {
    /// The bytes to pass on for `chunk`: its whole events, edited.
    fn pass(&mut self, chunk: Bytes) -> Bytes {
        if self.edit.finished() && self.pending.is_empty() {
            return chunk;
        }
        self.pending.extend_from_slice(&chunk);
        let Some(end) = memchr::memmem::rfind(&self.pending, b"\n\n") else {
            return Bytes::new();
        };
        let complete = self.pending.split_to(end + 2);
        let mut out = BytesMut::with_capacity(complete.len());
        for event in split_inclusive_events(&complete) {
            let edited = (!self.edit.finished())
                .then(|| self.edit.event(event))
                .flatten();
            match edited {
                Some(edited) => out.extend_from_slice(&edited),
                None => out.extend_from_slice(event),
            }
        }
        if self.edit.finished() {
            out.extend_from_slice(&self.pending.split());
        }
        out.freeze()
    }
}

/// Splits SSE bytes into whole events, each with its blank line.
fn split_inclusive_events(bytes: &[u8]) -> Vec<&[u8]> {
    let mut events = Vec::new();
    let mut rest = bytes;
    while let Some(end) = memchr::memmem::find(rest, b"\n\n") {
        let (event, after) = rest.split_at(end + 2);
        events.push(event);
        rest = after;
    }
    if !rest.is_empty() {
        events.push(rest);
    }
    events
}
