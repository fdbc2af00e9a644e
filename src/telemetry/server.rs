//! Beside the flow, tracing: the server span and W3C trace context.
//!
//! The request span (`app.rs`) is also the server span of the HTTP
//! conventions when spans are exported: named `{method} {http.route}`
//! (the method alone where there is no route), kind SERVER, child of the
//! client's `traceparent` when it sent one. Its semantic attributes are
//! set on the exported span only, so log lines keep their fields. Every
//! upstream request carries the `traceparent` of the span it is sent in.

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::Status;
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Names the request span the server span and links it to the client's
/// trace. `route` is the endpoint's path where there is one (a chat
/// endpoint, an operational route), never a path a client made up. Must
/// run before the span is first entered.
pub fn started<B>(span: &Span, request: &http::Request<B>, route: Option<&str>) {
    if !super::exporting() {
        return;
    }
    let method = method(request.method());
    let name = match (method, route) {
        ("_OTHER", _) => "HTTP".to_string(),
        (method, Some(route)) => format!("{method} {route}"),
        (method, None) => method.to_string(),
    };
    span.record("otel.name", name.as_str());
    span.record("otel.kind", "server");
    let parent = TraceContextPropagator::new().extract(&HeaderExtractor(request.headers()));
    // Only an exported span has a parent to set.
    let _ = span.set_parent(parent);
    span.set_attribute("http.request.method", method);
    span.set_attribute("url.path", request.uri().path().to_string());
    span.set_attribute("url.scheme", "http");
    if let Some(route) = route {
        span.set_attribute("http.route", route.to_string());
    }
    if method == "_OTHER" {
        span.set_attribute("http.request.method_original", request.method().to_string());
    }
}

/// Records the answer's status: an error only for a 5xx, as the server
/// conventions say (a 4xx is the client's).
pub fn answered(span: &Span, status: http::StatusCode) {
    if !super::exporting() {
        return;
    }
    span.set_attribute("http.response.status_code", i64::from(status.as_u16()));
    if status.is_server_error() {
        span.set_attribute("error.type", status.as_str().to_string());
        span.set_status(Status::error(""));
    }
}

/// Sets `traceparent` (and `tracestate`) to the current span's, replacing
/// the client's: the upstream's spans become children of this call.
/// Without export, the client's own header passes unchanged.
pub fn inject(headers: &mut http::HeaderMap) {
    if !super::exporting() {
        return;
    }
    let context = Span::current().context();
    TraceContextPropagator::new().inject_context(&context, &mut HeaderInjector(headers));
    // The propagator writes an empty `tracestate` when there is none.
    if headers
        .get("tracestate")
        .is_some_and(|state| state.is_empty())
    {
        headers.remove("tracestate");
    }
}

/// The method as the conventions name it: one of the standard ones, else
/// `_OTHER`.
fn method(method: &http::Method) -> &'static str {
    crate::metrics::standard_method(method).unwrap_or("_OTHER")
}
