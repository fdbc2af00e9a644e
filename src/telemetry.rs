//! Logging: human-readable by default, JSON on request; `RUST_LOG` filters.
//! Every line inside a request carries its `request_id` through the span.

use crate::config::LogFormat;
use tracing::Subscriber;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::EnvFilter;

/// Builds the subscriber; `sink` lets tests capture or silence output.
pub fn get_subscriber<W>(
    format: LogFormat,
    default_filter: &str,
    sink: W,
) -> Box<dyn Subscriber + Send + Sync>
where
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let registry = tracing_subscriber::registry().with(filter);
    match format {
        LogFormat::Human => {
            Box::new(registry.with(tracing_subscriber::fmt::layer().with_writer(sink)))
        }
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

/// Installs the subscriber for the whole process.
pub fn init(subscriber: Box<dyn Subscriber + Send + Sync>) {
    // A second init (tests starting several apps) is harmless: keep the first.
    let _ = tracing::subscriber::set_global_default(subscriber);
}
