//! Step 4, rewrite: an API's own context-management forms, forwarded or
//! served.
//!
//! Per upstream, `native_compaction` says what happens to a request that
//! uses its API's own forms ([`ServedForms`]): `forward` sends it
//! untouched; `serve` applies the forms here and sends what any server of
//! the API accepts, then reports what was applied in the answer; `auto`
//! forwards to the API's maker and serves elsewhere, and serves from then
//! on where a forwarded form was refused as unknown.

use crate::config::NativeCompaction;
use crate::protocol::{Adapter, ServedForms};
use crate::upstream::routes::Upstream;
use axum::body::Body;
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use http::{header, HeaderMap};
use serde_json::Value;
use std::sync::atomic::Ordering;

/// A JSON answer larger than this is relayed without the report.
const MAX_REPORTED_JSON: usize = 8 * 1024 * 1024;

/// The forms one request uses, and whether Condenser serves them.
pub(super) struct Native {
    forms: Option<&'static dyn ServedForms>,
    serving: bool,
    /// Whether a refusal may still switch this request to serving.
    may_fall_back: bool,
    /// What the last served body applied, reported in the answer.
    applied: Value,
}

impl Native {
    pub fn new(
        adapter: &dyn Adapter,
        upstream: &Upstream,
        body: &[u8],
        headers: &HeaderMap,
    ) -> Self {
        let forms = adapter.served_forms().filter(|f| f.asked(body, headers));
        let (serving, may_fall_back) = match (forms, upstream.native_compaction) {
            (None, _) | (_, NativeCompaction::Forward) => (false, false),
            (Some(_), NativeCompaction::Serve) => (true, false),
            (Some(forms), NativeCompaction::Auto) => {
                let refused = upstream.native_refused.load(Ordering::Relaxed);
                let serving = refused || !forms.made_by(upstream.host());
                (serving, !serving)
            }
        };
        Self {
            forms,
            serving,
            may_fall_back,
            applied: Value::Null,
        }
    }

    /// The forms, when the request asks them for a summary in place of a
    /// reply and they are served.
    pub fn summary_asked(
        &self,
        body: &serde_json::Map<String, Value>,
    ) -> Option<&'static dyn ServedForms> {
        self.forms
            .filter(|forms| self.serving && forms.summary_asked(body))
    }

    /// Whether the forms are served (and the body is to be rewritten).
    pub fn serves(&self) -> bool {
        self.forms.is_some() && self.serving
    }

    /// The body to send: `body`, or the forms applied to it.
    pub fn body(&mut self, body: Bytes, tokens: &dyn Fn(usize) -> u64) -> Bytes {
        let Some(forms) = self.forms.filter(|_| self.serving) else {
            return body;
        };
        match forms.serve(&body, tokens) {
            Some(served) => {
                self.applied = served.applied;
                served.body.into()
            }
            None => body,
        }
    }

    /// The headers to send: the forms' flags go where they are served.
    pub fn headers(&self, headers: &mut HeaderMap) {
        if let Some(forms) = self.forms.filter(|_| self.serving) {
            forms.strip_headers(headers);
        }
    }

    /// Whether an error answer to a forwarded request refused a form as
    /// unknown: the request is then served, and so are this upstream's
    /// later ones.
    pub fn refused(&mut self, upstream: &Upstream, status: u16, body: &[u8]) -> bool {
        let Some(forms) = self.forms.filter(|_| self.may_fall_back) else {
            return false;
        };
        if !forms.refuses(status, body) {
            return false;
        }
        tracing::info!(
            upstream = %upstream.name,
            status,
            "the upstream refused a native form: serving it from now on"
        );
        upstream.native_refused.store(true, Ordering::Relaxed);
        (self.serving, self.may_fall_back) = (true, false);
        true
    }

    /// The answer with what was applied reported in it, as the API
    /// reports it: in a JSON answer, or in the stream's event that
    /// carries it.
    pub async fn report(&self, response: Response) -> Response {
        let Some(forms) = self.forms.filter(|_| !self.applied.is_null()) else {
            return response;
        };
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
            let body = report_stream(body, forms, self.applied.clone());
            return Response::from_parts(parts, body);
        }
        if !content_type.starts_with("application/json") {
            return Response::from_parts(parts, body);
        }
        let Ok(read) = axum::body::to_bytes(body, MAX_REPORTED_JSON).await else {
            // Cut short or too large: what was read is lost either way.
            parts.headers.remove(header::CONTENT_LENGTH);
            return Response::from_parts(parts, Body::empty());
        };
        let Ok(mut answer) = serde_json::from_slice::<Value>(&read) else {
            return Response::from_parts(parts, Body::from(read));
        };
        forms.report_json(&mut answer, &self.applied);
        parts.headers.remove(header::CONTENT_LENGTH);
        let body = serde_json::to_vec(&answer).map_or(read, Bytes::from);
        Response::from_parts(parts, Body::from(body))
    }
}

/// A stream passed on event by event until the event that carries the
/// report, which gets it; the rest passes untouched.
fn report_stream(body: Body, forms: &'static dyn ServedForms, applied: Value) -> Body {
    let state = Relaying {
        upstream: body.into_data_stream(),
        pending: BytesMut::new(),
        reported: false,
        forms,
        applied,
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

struct Relaying {
    upstream: axum::body::BodyDataStream,
    /// Bytes of an event not yet ended.
    pending: BytesMut,
    reported: bool,
    forms: &'static dyn ServedForms,
    applied: Value,
}

impl Relaying {
    /// The bytes to pass on for `chunk`: its whole events, one of them
    /// perhaps with the report.
    fn pass(&mut self, chunk: Bytes) -> Bytes {
        if self.reported {
            return chunk;
        }
        self.pending.extend_from_slice(&chunk);
        let Some(end) = memchr::memmem::rfind(&self.pending, b"\n\n") else {
            return Bytes::new();
        };
        let complete = self.pending.split_to(end + 2);
        let mut out = BytesMut::with_capacity(complete.len());
        for event in complete.split_inclusive_events() {
            let rewritten = (!self.reported)
                .then(|| reported_event(event, self.forms, &self.applied))
                .flatten();
            match rewritten {
                Some(rewritten) => {
                    self.reported = true;
                    out.extend_from_slice(&rewritten);
                }
                None => out.extend_from_slice(event),
            }
        }
        if self.reported {
            out.extend_from_slice(&self.pending.split());
        }
        out.freeze()
    }
}

/// Splits SSE bytes into whole events, each with its blank line.
trait SplitEvents {
    fn split_inclusive_events(&self) -> Vec<&[u8]>;
}

impl SplitEvents for [u8] {
    fn split_inclusive_events(&self) -> Vec<&[u8]> {
        let mut events = Vec::new();
        let mut rest = self;
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
}

/// The event with the report in its data, if it is the one to carry it.
fn reported_event(event: &[u8], forms: &dyn ServedForms, applied: &Value) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(event).ok()?;
    let mut lines: Vec<String> = Vec::new();
    let mut done = false;
    for line in text.split('\n') {
        let data = line.strip_prefix("data:").map(str::trim_start);
        let mut parsed = data
            .filter(|_| !done)
            .and_then(|d| serde_json::from_str::<Value>(d).ok());
        let reported = parsed
            .as_mut()
            .is_some_and(|value| forms.report_event(value, applied));
        match parsed.filter(|_| reported) {
            Some(value) => {
                done = true;
                lines.push(format!("data: {value}"));
            }
            None => lines.push(line.to_string()),
        }
    }
    done.then(|| lines.join("\n").into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Settings;
    use crate::upstream::routes::{Route, RouteTable};
    use http::{HeaderValue, Method};
    use serde_json::json;

    /// The route of `POST /v1/messages` with `native_compaction` set so.
    fn messages_route(native: &str) -> Route {
        let settings: Settings = serde_json::from_value(json!({
            "upstreams": {"anthropic": {"native_compaction": native}}
        }))
        .expect("settings");
        let table = RouteTable::from_settings(&settings).expect("routes");
        let mut headers = HeaderMap::new();
        headers.insert("anthropic-version", HeaderValue::from_static("2023-06-01"));
        table.resolve(&Method::POST, "/v1/messages", None, &headers)
    }

    const BODY: &[u8] =
        br#"{"model":"m","max_tokens":9,"messages":[],"context_management":{"edits":[]}}"#;
    const REFUSAL: &[u8] = br#"{"type":"error","error":{"type":"invalid_request_error","message":"context_management: Extra inputs are not permitted"}}"#;

    #[test]
    fn auto_forwards_to_the_maker_until_a_refusal_and_then_serves_there() {
        let route = messages_route("auto");
        let (adapter, upstream) = (route.adapter(), &route.upstream);
        let headers = HeaderMap::new();
        let mut native = Native::new(adapter, upstream, BODY, &headers);
        assert!(!native.serves(), "api.anthropic.com is the API's maker");
        assert!(!native.refused(upstream, 400, b"prompt is too long"));
        assert!(native.refused(upstream, 400, REFUSAL));
        assert!(native.serves());
        assert!(!native.refused(upstream, 400, REFUSAL), "one switch");
        let later = Native::new(adapter, upstream, BODY, &headers);
        assert!(later.serves(), "remembered for the upstream");
    }

    #[test]
    fn forward_never_serves_and_serve_always_does() {
        let headers = HeaderMap::new();
        let route = messages_route("forward");
        let mut native = Native::new(route.adapter(), &route.upstream, BODY, &headers);
        assert!(!native.serves());
        assert!(!native.refused(&route.upstream, 400, REFUSAL));
        let route = messages_route("serve");
        let mut native = Native::new(route.adapter(), &route.upstream, BODY, &headers);
        assert!(native.serves());
        let served = native.body(Bytes::from_static(BODY), &|bytes| bytes as u64);
        assert!(!served.windows(18).any(|w| w == b"context_management"));
        let plain = br#"{"model":"m","max_tokens":9,"messages":[]}"#;
        assert!(!Native::new(route.adapter(), &route.upstream, plain, &headers).serves());
    }

    #[tokio::test]
    async fn the_report_joins_the_message_delta_event_whatever_the_chunking() {
        let stream = "event: message_start\ndata: {\"type\":\"message_start\"}\n\n\
            event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"}}\n\n\
            event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
        let forms = messages_route("serve")
            .adapter()
            .served_forms()
            .expect("forms");
        let applied = json!({"applied_edits": []});
        for size in [1, 7, 40, stream.len()] {
            let chunks: Vec<Result<Bytes, std::io::Error>> = stream
                .as_bytes()
                .chunks(size)
                .map(|c| Ok(Bytes::copy_from_slice(c)))
                .collect();
            let body = Body::from_stream(futures_util::stream::iter(chunks));
            let reported = report_stream(body, forms, applied.clone());
            let read = axum::body::to_bytes(reported, usize::MAX)
                .await
                .expect("body");
            let text = String::from_utf8(read.to_vec()).expect("utf-8");
            let expected = stream.replace(
                "\"end_turn\"}}",
                "\"end_turn\"},\"context_management\":{\"applied_edits\":[]}}",
            );
            assert_eq!(text, expected, "chunks of {size}");
        }
    }
}
