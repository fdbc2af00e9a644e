//! Beside the flow, logging and tracing.
//!
//! Logging: human-readable by default, JSON on request; `RUST_LOG` filters.
//! Every line inside a request carries its `request_id` through the span.
//!
//! Tracing: OTLP export of one span per request, per upstream call, per
//! compaction and per summary call, with the OpenTelemetry GenAI
//! attributes, off unless an OTLP endpoint is configured ([`export`]).
//! Off, no span but the request's is made and nothing else is read.

pub mod content;
pub mod export;
pub mod genai;
pub mod server;

use crate::config::LogFormat;
use std::sync::atomic::{AtomicBool, Ordering};
use tracing::Subscriber;
use tracing_subscriber::filter::{filter_fn, FilterExt, LevelFilter};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::{EnvFilter, Layer};

pub use export::Traces;

/// Whether spans are exported: set once, when the export layer is built.
static EXPORTING: AtomicBool = AtomicBool::new(false);
/// Whether message content goes into spans (`traces.capture_message_content`).
static CAPTURE_CONTENT: AtomicBool = AtomicBool::new(false);

/// Whether spans are exported, so worth making and filling.
pub fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

fn set_exporting() {
    EXPORTING.store(true, Ordering::Relaxed);
}

/// Whether exported spans carry message content: off unless the operator
/// opted in, as the GenAI conventions ask.
pub fn capturing_content() -> bool {
    exporting() && CAPTURE_CONTENT.load(Ordering::Relaxed)
}

/// Opts in to (or out of) message content in exported spans.
pub fn capture_content(on: bool) {
    CAPTURE_CONTENT.store(on, Ordering::Relaxed);
}

/// A trace export that cannot start as configured.
#[derive(Debug, thiserror::Error)]
#[error("traces: {0}")]
pub struct TracesError(pub String);

/// Builds the subscriber; `sink` lets tests capture or silence output.
/// `ansi` colors the human format: see [`stderr_takes_colors`].
pub fn get_subscriber<W>(
    format: LogFormat,
    default_filter: &str,
    sink: W,
    ansi: bool,
) -> Box<dyn Subscriber + Send + Sync>
where
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    subscriber_with_traces(format, default_filter, sink, ansi, None)
}

/// [`get_subscriber`], exporting spans through `traces` when given.
/// `RUST_LOG` filters the logs only: it never hides a span from the export.
pub fn subscriber_with_traces<W>(
    format: LogFormat,
    default_filter: &str,
    sink: W,
    ansi: bool,
    traces: Option<&Traces>,
) -> Box<dyn Subscriber + Send + Sync>
where
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    // The spans only traces show stay out of log lines' context.
    let trace_only =
        filter_fn(|meta| !(meta.is_span() && genai::TRACE_ONLY_SPANS.contains(&meta.name())))
            .with_max_level_hint(LevelFilter::TRACE);
    let Some(traces) = traces else {
        // Logs alone: the filters apply to the whole subscriber, so a span
        // they leave out is never made. A per-layer filter would look each
        // span up at every enter and exit, several times a request.
        let registry = tracing_subscriber::registry().with(filter).with(trace_only);
        return Box::new(registry.with(log_layer(format, sink, ansi)));
    };
    let logged = filter.and(trace_only);
    let registry = tracing_subscriber::registry().with(traces.layer());
    Box::new(registry.with(log_layer(format, sink, ansi).with_filter(logged)))
}

/// The log lines' layer, in `format`.
fn log_layer<S, W>(format: LogFormat, sink: W, ansi: bool) -> Box<dyn Layer<S> + Send + Sync>
where
    S: Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    match format {
        LogFormat::Human => tracing_subscriber::fmt::layer()
            .with_ansi(ansi)
            .with_writer(sink)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_writer(sink)
            .boxed(),
    }
}

/// Colors only for a person at a terminal: a log file, journald or
/// `docker logs` would keep the escape codes. `NO_COLOR` turns them off.
pub fn stderr_takes_colors() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Installs the subscriber for the whole process.
pub fn init(subscriber: Box<dyn Subscriber + Send + Sync>) {
    // A second init (tests starting several apps) is harmless: keep the first.
    let _ = tracing::subscriber::set_global_default(subscriber);
}
