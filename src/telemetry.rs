//! Beside the flow, logging.
//!
//! Logging: human-readable by default, JSON on request; `RUST_LOG` filters.
//! Every line inside a request carries its `request_id` through the span.

use crate::config::LogFormat;
use tracing::Subscriber;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::EnvFilter;

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
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let registry = tracing_subscriber::registry().with(filter);
    match format {
        LogFormat::Human => Box::new(
            registry.with(
                tracing_subscriber::fmt::layer()
                    .with_ansi(ansi)
                    .with_writer(sink),
            ),
        ),
        LogFormat::Json => Box::new(
            registry.with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_current_span(true)
                    .with_writer(sink),
            ),
        ),
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
