//! Beside the flow, metrics.
//!
//! Prometheus metrics at `/metrics`. Labels are bounded enums only (route
//! kind, status, outcome), never a conversation id, a model or a key.

use axum::extract::{MatchedPath, Request, State};
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::sync::OnceLock;
use std::time::Instant;

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Latency buckets in seconds: from a fast relay to a minute-long summary.
const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];
const TOKEN_BUCKETS: &[f64] = &[1e3, 4e3, 16e3, 32e3, 64e3, 128e3, 200e3, 400e3, 1e6];
/// Estimate over actual: the buckets that tell a good estimate from a bad one.
const RATIO_BUCKETS: &[f64] = &[0.5, 0.8, 0.9, 0.95, 1.0, 1.05, 1.1, 1.25, 2.0];

/// The process-wide recorder; installed on first use (tests build many apps
/// in one process, and a process has one recorder).
pub fn handle() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Suffix("_tokens".into()), TOKEN_BUCKETS)
                })
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Suffix("_ratio".into()), RATIO_BUCKETS)
                })
                .map(PrometheusBuilder::build_recorder)
                .unwrap_or_else(|_| PrometheusBuilder::new().build_recorder());
            let handle = recorder.handle();
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!("a metrics recorder was already installed; /metrics may be empty");
            }
            describe();
            handle
        })
        .clone()
}

/// HELP lines, so a scrape explains itself. Declarative table: one
/// description per metric, longer than a function should be and no harder
/// to read for it.
fn describe() {
    use metrics::{describe_counter, describe_histogram, Unit};
    describe_counter!(
        "condenser_http_requests_total",
        "Requests served, by route kind, method and status."
    );
    describe_histogram!(
        "condenser_http_request_duration_seconds",
        Unit::Seconds,
        "Time to the response head, by route kind."
    );
    describe_histogram!(
        "condenser_upstream_response_seconds",
        Unit::Seconds,
        "Upstream time to response headers, by protocol."
    );
    describe_counter!(
        "condenser_overflows_total",
        "Context overflows recognized in upstream answers, by signature."
    );
    describe_counter!(
        "condenser_compactions_total",
        "Compactions by trigger and outcome (stored, reused, duplicate, unstored)."
    );
    describe_counter!(
        "condenser_summary_calls_total",
        "Summary calls by outcome (ok; overflow: retried smaller; retried: failed in passing; error)."
    );
    describe_counter!(
        "condenser_compactions_exhausted_total",
        "Requests that reached max_compactions and got the upstream's overflow."
    );
    describe_histogram!(
        "condenser_summary_seconds",
        Unit::Seconds,
        "Time to write one compaction's summary."
    );
    describe_histogram!(
        "condenser_compaction_tokens",
        "Estimated request tokens before and after a compaction."
    );
    describe_counter!(
        "condenser_degraded_requests_total",
        "Requests forwarded unstored: database unreachable or write queue full."
    );
    describe_counter!(
        "condenser_messages_stored_total",
        "Messages written to the store."
    );
    describe_counter!(
        "condenser_storage_errors_total",
        "Failed storage operations, by operation."
    );
    describe_counter!(
        "condenser_storage_skipped_total",
        "Storage operations skipped while degraded, by operation."
    );
    describe_histogram!(
        "condenser_write_batch_size",
        "Writes (a request's messages or figures) per group commit."
    );
    describe_counter!(
        "condenser_write_queue_full_total",
        "Writes refused because the write queue was full, by write (messages, record)."
    );
    describe_histogram!(
        "condenser_token_estimate_ratio",
        "A request's estimated input tokens over the upstream's own count, once calibrated."
    );
    describe_histogram!(
        "condenser_storage_seconds",
        Unit::Seconds,
        "Storage operation latency, by operation."
    );
    describe_counter!(
        "condenser_websocket_requests_total",
        "Requests answered over the Responses API's WebSocket mode, by status (closed: the client left first)."
    );
    describe_histogram!(
        "condenser_websocket_request_duration_seconds",
        Unit::Seconds,
        "Time from a WebSocket request's frame to the end of its answer."
    );
    describe_counter!(
        "condenser_websocket_frames_refused_total",
        "WebSocket frames answered with an error frame, by reason (flood: the socket was closed)."
    );
    metrics::describe_gauge!("condenser_websocket_connections", "WebSockets open.");
    describe_counter!(
        "condenser_upstream_websocket_opened_total",
        "Sockets opened to an upstream that serves the Responses API's WebSocket mode."
    );
    describe_counter!(
        "condenser_trace_spans_exported_total",
        "Spans the OTLP collector accepted (traces on)."
    );
    describe_counter!(
        "condenser_trace_spans_dropped_total",
        "Spans lost, by reason: queue_full (the export queue was full), export_failed (the collector did not take them)."
    );
}

pub async fn render(State(handle): State<PrometheusHandle>) -> impl IntoResponse {
    (
        [(http::header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        handle.render(),
    )
}

/// One request's count and time, labelled by the kind of route: started
/// as the request comes in, recorded when its answer's head goes out.
pub struct Tracked {
    route: &'static str,
    method: &'static str,
    started: Instant,
}

impl Tracked {
    pub fn start(request: &Request) -> Self {
        Self {
            route: route_label(request),
            method: standard_method(request.method()).unwrap_or("other"),
            started: Instant::now(),
        }
    }

    pub fn finish(self, response: &Response) {
        let Self {
            route,
            method,
            started,
        } = self;
        let status = response.status().as_u16().to_string();
        metrics::counter!("condenser_http_requests_total", "route" => route, "method" => method, "status" => status)
            .increment(1);
        metrics::histogram!("condenser_http_request_duration_seconds", "route" => route)
            .record(started.elapsed().as_secs_f64());
    }
}

/// The method's name when it is one of HTTP's standard methods. A method
/// is client input: any token is a valid one, so a label or attribute
/// made of it must fall back to a fixed name (a metric label is a series
/// kept for the life of the process).
pub fn standard_method(method: &http::Method) -> Option<&'static str> {
    use http::Method;
    const STANDARD: &[(Method, &str)] = &[
        (Method::GET, "GET"),
        (Method::POST, "POST"),
        (Method::PUT, "PUT"),
        (Method::DELETE, "DELETE"),
        (Method::HEAD, "HEAD"),
        (Method::OPTIONS, "OPTIONS"),
        (Method::PATCH, "PATCH"),
        (Method::CONNECT, "CONNECT"),
        (Method::TRACE, "TRACE"),
    ];
    STANDARD
        .iter()
        .find(|(standard, _)| standard == method)
        .map(|(_, name)| *name)
}

fn route_label(request: &Request) -> &'static str {
    if let Some(path) = request.extensions().get::<MatchedPath>() {
        return match path.as_str() {
            "/healthz" | "/readyz" | "/" | "/metrics" => "ops",
            _ => "other",
        };
    }
    let path = request.uri().path();
    if path.ends_with("/chat/completions") {
        "chat_completions"
    } else if path.ends_with("/v1/messages") {
        "messages"
    } else {
        "passthrough"
    }
}
