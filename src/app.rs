//! Beside the flow, the process: build the listener and the state, serve, drain.
//!
//! Building and running the server.
//!
//! Layers, outermost first:
//! 1. `SetRequestId`: takes the client's `x-request-id` or makes a UUID.
//! 2. `Trace`: one span per request carrying `request_id`, so every log line
//!    inside the request has it; logs status and latency at the end.
//! 3. `RequestBodyTimeout`: a request body silent for
//!    `server.body_read_timeout` fails to read (a 408 for the client).
//! 4. Around every route (`http/around.rs`): the request id echoed, a
//!    handler's error logged, the request counted and timed, a request
//!    that must never be forwarded refused.
//!
//! Connection limits (header timeout, connection cap) are set where
//! connections are accepted, in [`crate::http::serve`].

use crate::config::{ServerSettings, Settings};
use crate::state::AppState;
use crate::threads::{self, ConnectionThreads};
use crate::upstream::routes::{Endpoint, RouteTable};
use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use axum::Router;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tower::ServiceBuilder;
use tower_http::request_id::{MakeRequestUuid, RequestId, SetRequestIdLayer};
use tower_http::timeout::{RequestBodyTimeoutLayer, TimeoutBody};
use tower_http::trace::{DefaultOnResponse, OnResponse, TraceLayer};

pub struct Application {
    listener: TcpListener,
    router: Router,
    server: ServerSettings,
    shutdown_grace: Duration,
    flush_deadline: Duration,
    background: tokio_util::task::TaskTracker,
    writer: crate::store::Writer,
    memory: crate::store::StoreMemory,
    threads: ConnectionThreads,
}

impl Application {
    /// Binds the listener now, so `port 0` works and the real port is known.
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        let listener = TcpListener::bind(settings.listen).await?;
        let shutdown_grace = settings.shutdown_grace;
        let flush_deadline = settings.storage.flush_deadline;
        let server = settings.server.clone();
        let threads = ConnectionThreads::start(
            threads::count(server.connection_threads),
            server.connection_thread_slice,
        )?;
        let state = AppState::new(settings).await?;
        crate::maintenance::spawn(&state.storage, &state.settings.storage);
        let background = state.background.clone();
        let writer = state.writer.clone();
        let memory = state.storage.memory().clone();
        let routes = state.routes.clone();
        Ok(Self {
            writer,
            memory,
            listener,
            router: with_layers(crate::http::router(state.clone()), state, &server, routes),
            server,
            shutdown_grace,
            flush_deadline,
            background,
            threads,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    pub fn port(&self) -> u16 {
        self.local_addr().port()
    }

    /// What this instance remembers of the store: tests wait on it to see
    /// that the instance noticed a deletion made beside it.
    pub fn memory(&self) -> crate::store::StoreMemory {
        self.memory.clone()
    }

    /// Serves until `shutdown` resolves, then lets in-flight requests (and
    /// streams) and their background work finish, for at most the
    /// configured grace period in all; then writes what they queued, past
    /// the grace period if need be, within `storage.flush_deadline`.
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let (stopping_tx, stopping_rx) = tokio::sync::oneshot::channel::<()>();
        let grace = self.shutdown_grace;
        let signal = async move {
            shutdown.await;
            tracing::info!(
                grace_seconds = grace.as_secs_f64(),
                "shutting down: draining requests"
            );
            let _ = stopping_tx.send(());
        };
        let background = self.background.clone();
        let (writer, flush_deadline) = (self.writer.clone(), self.flush_deadline);
        let threads = self.threads;
        let serving = &threads;
        let drained = async move {
            let (listener, router, server) = (self.listener, self.router, &self.server);
            crate::http::serve::serve(listener, router, server, serving, signal).await;
            background.close();
            background.wait().await;
            Ok(())
        };
        let deadline = async move {
            match stopping_rx.await {
                Ok(()) => tokio::time::sleep(grace).await,
                Err(_) => std::future::pending().await,
            }
        };
        let served = tokio::select! {
            served = drained => served,
            () = deadline => {
                tracing::warn!("shutdown grace period over: closing the remaining connections");
                Ok(())
            }
        };
        // Answered requests' messages are written before exit, however
        // long the streams took: a commit under way completes. Before the
        // connection threads stop: a pooled database connection opened by
        // a request there is driven by that thread's runtime, and the
        // writer may take it.
        flush_before_exit(&writer, flush_deadline).await;
        drop(threads);
        served
    }

    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        self.run_until(shutdown_signal()).await
    }
}

/// Writes what is queued, for at most `deadline`; logs what could not be
/// written, with counts.
async fn flush_before_exit(writer: &crate::store::Writer, deadline: Duration) {
    let before = writer.backlog();
    if tokio::time::timeout(deadline, writer.flush())
        .await
        .is_err()
    {
        let left = writer.backlog();
        tracing::error!(
            requests = left.message_writes,
            message_bytes = left.message_bytes,
            records = left.records,
            deadline_seconds = deadline.as_secs_f64(),
            "shutdown: queued writes not written within storage.flush_deadline, lost: \
             each conversation's next request stores its messages again"
        );
        return;
    }
    let failed = writer.backlog().failed_writes - before.failed_writes;
    if failed > 0 {
        tracing::warn!(
            requests = failed,
            "shutdown: some queued messages could not be written: \
             each conversation's next request stores them again"
        );
    } else if before.message_writes + before.records > 0 {
        tracing::info!(
            requests = before.message_writes,
            records = before.records,
            "shutdown: queued writes written"
        );
    }
}

/// Every layer in one `Router::layer` call, so that each route is boxed
/// once more, not once per layer (`http::router`).
fn with_layers(
    router: Router,
    state: AppState,
    server: &ServerSettings,
    routes: Arc<RouteTable>,
) -> Router {
    let trace = TraceLayer::new_for_http()
        .make_span_with(move |request: &Request| request_span(request, &routes))
        .on_response(
            |response: &Response, latency: Duration, span: &tracing::Span| {
                crate::telemetry::server::answered(span, response.status());
                DefaultOnResponse::default().on_response(response, latency, span);
            },
        );
    router.layer(
        ServiceBuilder::new()
            .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
            .layer(trace)
            .layer(RequestBodyTimeoutLayer::new(server.body_read_timeout))
            .map_request(|request: http::Request<TimeoutBody<Body>>| request.map(Body::new))
            .layer(axum::middleware::from_fn_with_state(
                state,
                crate::http::every_request,
            )),
    )
}

/// The query string is left out: some APIs take keys there. Exported,
/// it is also the server span (`telemetry::server`).
fn request_span(request: &Request, routes: &RouteTable) -> tracing::Span {
    let request_id = request
        .extensions()
        .get::<RequestId>()
        .and_then(|id| id.header_value().to_str().ok())
        .unwrap_or_default();
    let span = tracing::info_span!(
        "request",
        method = %request.method(),
        path = %request.uri().path(),
        request_id = %request_id,
        otel.name = tracing::field::Empty,
        otel.kind = tracing::field::Empty,
    );
    if crate::telemetry::exporting() {
        crate::telemetry::server::started(&span, request, http_route(request, routes));
    }
    span
}

/// The route of a request, as the server span names it: an operational
/// route's pattern, or a chat endpoint's path; none for what is forwarded
/// untouched, whose paths are the client's to make up.
fn http_route<'r>(request: &'r Request, routes: &RouteTable) -> Option<&'r str> {
    if let Some(matched) = request.extensions().get::<axum::extract::MatchedPath>() {
        return Some(matched.as_str());
    }
    let uri = request.uri();
    let route = routes.resolve(request.method(), uri.path(), None, request.headers());
    (route.endpoint != Endpoint::Passthrough).then_some(uri.path())
}

async fn shutdown_signal() {
    let interrupt = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        () = interrupt => {},
        () = terminate => {},
    }
}
