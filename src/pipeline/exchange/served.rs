//! Step 4, rewrite: an API's own context-management forms, forwarded or
//! served.
//!
//! Per upstream, `native_compaction` says what happens to a request that
//! uses its API's own forms ([`ServedForms`]): `forward` sends it
//! untouched; `serve` applies the forms here and sends what any server of
//! the API accepts, then reports what was applied in the answer; `auto`
//! forwards to the API's maker and serves elsewhere, and serves from then
//! on where a forwarded form was refused as unknown.

use super::events::{edited, AnswerEdit};
use crate::config::NativeCompaction;
use crate::protocol::{Adapter, ServedForms};
use crate::upstream::routes::Upstream;
use axum::response::Response;
use bytes::Bytes;
use http::HeaderMap;
use serde_json::Value;
use std::sync::atomic::Ordering;

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

    /// The forms, when the request (of `input_tokens`) asks them for a
    /// summary in place of a reply and they are served.
    pub fn summary_asked(
        &self,
        body: &serde_json::Map<String, Value>,
        input_tokens: u64,
    ) -> Option<&'static dyn ServedForms> {
        self.forms
            .filter(|forms| self.serving && forms.summary_asked(body, input_tokens))
    }

    /// The forms, when the request (of `input_tokens`) asks for a
    /// compaction before its reply and they are served.
    pub fn compacts_before_reply(
        &self,
        body: &serde_json::Map<String, Value>,
        input_tokens: u64,
    ) -> Option<&'static dyn ServedForms> {
        self.forms
            .filter(|forms| self.serving && forms.compacts_before_reply(body, input_tokens))
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
        let report = Report {
            forms,
            applied: self.applied.clone(),
            reported: false,
        };
        edited(response, report).await
    }
}

/// The report of what was applied, added to the one event or JSON answer
/// that carries it.
struct Report {
    forms: &'static dyn ServedForms,
    applied: Value,
    reported: bool,
}

impl AnswerEdit for Report {
    fn event(&mut self, event: &[u8]) -> Option<Vec<u8>> {
        let rewritten = reported_event(event, self.forms, &self.applied)?;
        self.reported = true;
        Some(rewritten)
    }

    fn finished(&self) -> bool {
        self.reported
    }

    fn json(&mut self, answer: &mut Value) {
        self.forms.report_json(answer, &self.applied);
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
    use axum::body::Body;
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
            let report = Report {
                forms,
                applied: applied.clone(),
                reported: false,
            };
            let reported = super::super::events::edited_stream(body, report);
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
