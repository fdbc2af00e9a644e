//! Beside the flow, tracing: OTLP export, batched, bounded, never in a
//! request's way.
//!
//! Off unless `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set (and neither `OTEL_SDK_DISABLED=true`
//! nor `OTEL_TRACES_EXPORTER=none`). Everything else is the standard
//! variables, most of them read by the OpenTelemetry crates themselves:
//! headers, sampler, batch sizes, resource attributes, service name.
//!
//! - **Transport**: OTLP over HTTP, protobuf by default, JSON with
//!   `OTEL_EXPORTER_OTLP_PROTOCOL=http/json`. gRPC is not built in: it is
//!   refused at start rather than sent to the wrong port. The batch
//!   processor exports from a thread of its own, with no Tokio runtime, so
//!   the client is reqwest's blocking one ([`BlockingClient`]): no second
//!   HTTP stack, and an async client there would panic.
//! - **Bounded**: spans wait in a queue of `OTEL_BSP_MAX_QUEUE_SIZE` (2,048)
//!   counting the batch being exported. Ending a span is a non-blocking
//!   try-send: a collector that is down or silent costs a request nothing;
//!   its spans are dropped and counted ([`DropCounting`]):
//!   `condenser_trace_spans_dropped_total{reason="queue_full"}`, and
//!   `{reason="export_failed"}` for batches the collector never took.
//! - **Shutdown**: what is queued gets [`SHUTDOWN_LIMIT`] to leave after the
//!   server drained; a dead collector does not hold the process longer.

use super::{set_exporting, TracesError};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::KeyValue;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider, SpanData, SpanExporter,
    SpanProcessor,
};
use opentelemetry_sdk::Resource;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tracing::Subscriber;
use tracing_subscriber::filter::{filter_fn, LevelFilter};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// How long the spans still queued at exit may take to leave.
pub const SHUTDOWN_LIMIT: Duration = Duration::from_secs(3);

/// The spans Condenser exports, by their `tracing` name: the server span
/// (also every log line's request context) and the spans only traces
/// show. Everything else (the crate's other spans, its dependencies'),
/// and every event, stays out of the export.
pub const EXPORTED_SPANS: &[&str] = &[
    "request",
    super::genai::CALL_SPAN,
    super::genai::COMPACTION_SPAN,
];

/// The installed exporter: its provider (flushed at exit) and its counts.
pub struct Traces {
    provider: SdkTracerProvider,
    counts: Counts,
}

/// Spans exported and lost since start.
#[derive(Debug, Clone, Default)]
pub struct Counts {
    pub exported: Arc<AtomicU64>,
    pub dropped: Arc<AtomicU64>,
    pub failed: Arc<AtomicU64>,
}

impl Traces {
    /// The exporter the environment asks for; `None` when it asks for none.
    pub fn from_env() -> Result<Option<Traces>, TracesError> {
        if !wanted() {
            return Ok(None);
        }
        let protocol = protocol()?;
        let client = BlockingClient::new(export_timeout())?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(protocol)
            .with_http_client(client)
            .build()
            .map_err(|e| TracesError(format!("OTLP trace exporter: {e}")))?;
        let (provider, counts) = provider(exporter);
        Ok(Some(Traces { provider, counts }))
    }

    /// The layer that turns Condenser's exported spans into OTel spans.
    /// Installing it switches span making on ([`super::exporting`]).
    pub fn layer<S>(&self) -> impl Layer<S>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        set_exporting();
        tracing_opentelemetry::layer()
            .with_tracer(self.provider.tracer("condenser"))
            .with_location(false)
            .with_threads(false)
            .with_target(false)
            .with_tracked_inactivity(false)
            .with_filter(
                filter_fn(|meta| {
                    meta.is_span()
                        && meta.target().starts_with(env!("CARGO_CRATE_NAME"))
                        && EXPORTED_SPANS.contains(&meta.name())
                })
                .with_max_level_hint(LevelFilter::INFO),
            )
    }

    pub fn counts(&self) -> &Counts {
        &self.counts
    }

    /// Sends what is queued, for at most [`SHUTDOWN_LIMIT`], and stops.
    /// Blocking work: off the runtime's workers.
    pub async fn shutdown(self) {
        let Traces { provider, counts } = self;
        let stopped =
            tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(SHUTDOWN_LIMIT))
                .await;
        let (exported, dropped, failed) = (
            counts.exported.load(Ordering::Relaxed),
            counts.dropped.load(Ordering::Relaxed),
            counts.failed.load(Ordering::Relaxed),
        );
        match stopped {
            Ok(Ok(())) => {
                tracing::info!(exported, dropped, failed, "traces: exporter stopped")
            }
            Ok(Err(error)) => {
                tracing::warn!(%error, exported, dropped, failed, "traces: spans still queued at exit are lost")
            }
            Err(_) => tracing::warn!("traces: the exporter's shutdown panicked"),
        }
    }
}

fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// An endpoint is set and nothing turns the SDK or the trace exporter off.
fn wanted() -> bool {
    let endpoint = [
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ]
    .iter()
    .any(|name| env_nonempty(name).is_some());
    let disabled =
        env_nonempty("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    let exporter_none =
        env_nonempty("OTEL_TRACES_EXPORTER").is_some_and(|v| v.trim().eq_ignore_ascii_case("none"));
    endpoint && !disabled && !exporter_none
}

/// `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`, else `OTEL_EXPORTER_OTLP_PROTOCOL`,
/// else `http/protobuf`.
fn protocol() -> Result<Protocol, TracesError> {
    let name = [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ]
    .iter()
    .find_map(|name| Some((*name, env_nonempty(name)?)));
    match name {
        None => Ok(Protocol::HttpBinary),
        Some((_, value)) if value.trim() == "http/protobuf" => Ok(Protocol::HttpBinary),
        Some((_, value)) if value.trim() == "http/json" => Ok(Protocol::HttpJson),
        Some((variable, value)) if value.trim() == "grpc" => Err(TracesError(format!(
            "{variable}=grpc: Condenser exports OTLP over HTTP only; set http/protobuf and \
             the collector's OTLP/HTTP endpoint (port 4318)"
        ))),
        Some((variable, value)) => Err(TracesError(format!(
            "{variable}={value}: expected http/protobuf or http/json"
        ))),
    }
}

/// `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`, else `OTEL_EXPORTER_OTLP_TIMEOUT`
/// (milliseconds), else 10 s: one export's limit, retries included. The
/// crate applies it only to a client it builds itself.
fn export_timeout() -> Duration {
    [
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
    ]
    .iter()
    .find_map(|name| env_nonempty(name)?.trim().parse::<u64>().ok())
    .map_or(Duration::from_secs(10), Duration::from_millis)
}

/// `OTEL_BSP_MAX_QUEUE_SIZE`, else 2,048. The other `OTEL_BSP_*`
/// variables are read by the SDK's batch configuration.
fn queue_size() -> usize {
    env_nonempty("OTEL_BSP_MAX_QUEUE_SIZE")
        .and_then(|v| v.trim().parse().ok())
        .filter(|&n: &usize| n > 0)
        .unwrap_or(2048)
}

/// service.name: `OTEL_SERVICE_NAME`, else `service.name` in
/// `OTEL_RESOURCE_ATTRIBUTES`, else `condenser`.
fn resource() -> Resource {
    let detected = Resource::builder().build();
    let unnamed = detected
        .get(&opentelemetry::Key::new("service.name"))
        .is_none_or(|name| name.as_str().starts_with("unknown_service"));
    let builder = Resource::builder();
    let builder = if unnamed {
        builder.with_service_name("condenser")
    } else {
        builder
    };
    builder
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build()
}

fn provider<E: SpanExporter + 'static>(exporter: E) -> (SdkTracerProvider, Counts) {
    let cap = queue_size();
    let in_flight = Arc::new(AtomicUsize::new(0));
    let counts = Counts::default();
    crate::metrics::handle();
    for reason in ["queue_full", "export_failed"] {
        metrics::counter!("condenser_trace_spans_dropped_total", "reason" => reason).absolute(0);
    }
    metrics::counter!("condenser_trace_spans_exported_total").absolute(0);
    let exporter = Releasing {
        inner: exporter,
        in_flight: in_flight.clone(),
        counts: counts.clone(),
    };
    // The processor's own queue is as large as the count's cap, so it
    // never drops a span this count let through.
    let config = BatchConfigBuilder::default()
        .with_max_queue_size(cap)
        .build();
    let batch = BatchSpanProcessor::builder(exporter)
        .with_batch_config(config)
        .build();
    let processor = DropCounting {
        inner: batch,
        in_flight,
        cap,
        dropped: counts.dropped.clone(),
        warned: AtomicBool::new(false),
    };
    // No sampler set: the SDK reads OTEL_TRACES_SAMPLER(_ARG) itself
    // (parentbased_always_on by default).
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(resource())
        .build();
    (provider, counts)
}

/// reqwest's blocking client as the OTLP/HTTP transport: the batch
/// processor exports on its own thread with `block_on`, where an async
/// client finds no reactor.
#[derive(Debug, Clone)]
pub struct BlockingClient(reqwest::blocking::Client);

impl BlockingClient {
    pub fn new(timeout: Duration) -> Result<Self, TracesError> {
        // The blocking client runs a runtime of its own: built (and, on
        // drop, stopped) off the runtime's worker threads.
        let built = std::thread::spawn(move || {
            reqwest::blocking::Client::builder()
                .timeout(timeout)
                .connect_timeout(timeout)
                .redirect(reqwest::redirect::Policy::none())
                .build()
        })
        .join()
        .map_err(|_| TracesError("OTLP client: its builder panicked".into()))?;
        let client = built.map_err(|e| TracesError(format!("OTLP client: {e}")))?;
        Ok(Self(client))
    }
}

#[async_trait::async_trait]
impl HttpClient for BlockingClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let request = reqwest::blocking::Request::try_from(request)?;
        let response = self.0.execute(request)?;
        let status = response.status();
        let headers = response.headers().clone();
        let body = response.bytes()?;
        let mut out = Response::builder().status(status).body(body)?;
        *out.headers_mut() = headers;
        Ok(out)
    }
}

/// Refuses a span when `cap` spans are already queued or being exported,
/// and counts it: the SDK counts its own drops only to log them at exit.
#[derive(Debug)]
struct DropCounting<P> {
    inner: P,
    in_flight: Arc<AtomicUsize>,
    cap: usize,
    dropped: Arc<AtomicU64>,
    warned: AtomicBool,
}

impl<P: SpanProcessor> SpanProcessor for DropCounting<P> {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &opentelemetry::Context) {
        self.inner.on_start(span, cx)
    }

    fn on_end(&self, span: SpanData) {
        if self.in_flight.fetch_add(1, Ordering::AcqRel) >= self.cap {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            metrics::counter!("condenser_trace_spans_dropped_total", "reason" => "queue_full")
                .increment(1);
            if !self.warned.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    queue = self.cap,
                    "traces: the export queue is full, spans are dropped and counted \
                     (condenser_trace_spans_dropped_total); requests are not slowed"
                );
            }
            return;
        }
        self.inner.on_end(span)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource)
    }
}

/// Gives a batch's places in the queue back once its export returned, and
/// counts its spans exported or failed.
#[derive(Debug)]
struct Releasing<E> {
    inner: E,
    in_flight: Arc<AtomicUsize>,
    counts: Counts,
}

impl<E: SpanExporter> SpanExporter for Releasing<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len();
        let result = self.inner.export(batch).await;
        if result.is_ok() {
            self.counts
                .exported
                .fetch_add(spans as u64, Ordering::Relaxed);
            metrics::counter!("condenser_trace_spans_exported_total").increment(spans as u64);
        } else {
            self.counts
                .failed
                .fetch_add(spans as u64, Ordering::Relaxed);
            metrics::counter!("condenser_trace_spans_dropped_total", "reason" => "export_failed")
                .increment(spans as u64);
        }
        self.in_flight.fetch_sub(spans, Ordering::AcqRel);
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    // The OTLP exporter learns service.name and the rest here.
    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An exporter that never returns: a collector that accepted the
    /// connection and says nothing.
    #[derive(Debug)]
    struct Stuck;

    impl SpanExporter for Stuck {
        async fn export(&self, _batch: Vec<SpanData>) -> OTelSdkResult {
            std::thread::sleep(Duration::from_secs(3600));
            Ok(())
        }
    }

    #[test]
    fn a_full_queue_drops_and_counts_without_waiting() {
        let in_flight = Arc::new(AtomicUsize::new(0));
        let dropped = Arc::new(AtomicU64::new(0));
        let processor = DropCounting {
            inner: opentelemetry_sdk::trace::SimpleSpanProcessor::new(Stuck),
            in_flight: in_flight.clone(),
            cap: 2,
            dropped: dropped.clone(),
            warned: AtomicBool::new(false),
        };
        in_flight.store(2, Ordering::SeqCst);
        let started = std::time::Instant::now();
        for _ in 0..5 {
            processor.on_end(span_data());
        }
        assert!(started.elapsed() < Duration::from_millis(100));
        assert_eq!(dropped.load(Ordering::SeqCst), 5);
        assert_eq!(
            in_flight.load(Ordering::SeqCst),
            2,
            "refused spans hold no place"
        );
    }

    fn span_data() -> SpanData {
        use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status};
        SpanData {
            span_context: SpanContext::empty_context(),
            parent_span_id: SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: "test".into(),
            start_time: std::time::SystemTime::now(),
            end_time: std::time::SystemTime::now(),
            attributes: Vec::new(),
            dropped_attributes_count: 0,
            events: Default::default(),
            links: Default::default(),
            status: Status::Unset,
            instrumentation_scope: Default::default(),
        }
    }
}
