//! Beside the flow, the process: build the listener and the state, serve, drain.
//!
//! Building and running the server.
//!
//! Layers, outermost first:
//! 1. `SetRequestId`: takes the client's `x-request-id` or makes a UUID.
//! 2. `Trace`: one span per request carrying `request_id`, so every log line
//!    inside the request has it; logs status and latency at the end.
//! 3. `echo_request_id`: echoes the request's `x-request-id` on every
//!    response; an upstream's own `x-request-id` moves to
//!    `x-upstream-request-id`.
//! 4. `RequestBodyTimeout`: a request body silent for
//!    `server.body_read_timeout` fails to read (a 408 for the client).
//! 5. `log_proxy_errors`: logs a [`ProxyErrorLog`] the handler attached to
//!    its response extensions (handlers render, this layer logs).
//!
//! Connection limits (header timeout, connection cap) are set where
//! connections are accepted, in [`crate::http::serve`].

use crate::config::{ServerSettings, Settings};
use crate::error::ProxyErrorLog;
use crate::state::AppState;
use axum::body::Body;
use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::Router;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::TcpListener;
use tower::ServiceBuilder;
use tower_http::request_id::{MakeRequestUuid, RequestId, SetRequestIdLayer};
use tower_http::timeout::{RequestBodyTimeoutLayer, TimeoutBody};
use tower_http::trace::TraceLayer;

pub struct Application {
    listener: TcpListener,
    router: Router,
    server: ServerSettings,
    shutdown_grace: Duration,
    background: tokio_util::task::TaskTracker,
    writer: crate::store::Writer,
}

impl Application {
    /// Binds the listener now, so `port 0` works and the real port is known.
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        let listener = TcpListener::bind(settings.listen).await?;
        let shutdown_grace = settings.shutdown_grace;
        let server = settings.server.clone();
        let state = AppState::new(settings).await?;
        crate::maintenance::spawn(&state.storage, &state.settings.storage);
        let background = state.background.clone();
        let writer = state.writer.clone();
        Ok(Self {
            writer,
            listener,
            router: with_layers(crate::http::router(state), &server),
            server,
            shutdown_grace,
            background,
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

    /// Serves until `shutdown` resolves, then lets in-flight requests (and
    /// streams) and their background work (persisting what they carried)
    /// finish, for at most the configured grace period in all.
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
        let writer = self.writer.clone();
        let drained = async move {
            crate::http::serve::serve(self.listener, self.router, &self.server, signal).await;
            background.close();
            background.wait().await;
            // The requests are done; what they queued is written before exit.
            writer.flush().await;
            Ok(())
        };
        let deadline = async move {
            match stopping_rx.await {
                Ok(()) => tokio::time::sleep(grace).await,
                Err(_) => std::future::pending().await,
            }
        };
        tokio::select! {
            served = drained => served,
            () = deadline => {
                tracing::warn!("shutdown grace period over: closing the remaining connections");
                Ok(())
            }
        }
    }

    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        self.run_until(shutdown_signal()).await
    }
}

fn with_layers(router: Router, server: &ServerSettings) -> Router {
    router.layer(
        ServiceBuilder::new()
            .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
            .layer(TraceLayer::new_for_http().make_span_with(request_span))
            .layer(middleware::from_fn(echo_request_id))
            .layer(RequestBodyTimeoutLayer::new(server.body_read_timeout))
            .map_request(|request: http::Request<TimeoutBody<Body>>| request.map(Body::new))
            .layer(middleware::from_fn(log_proxy_errors)),
    )
}

/// The query string is left out: some APIs take keys there.
fn request_span(request: &Request) -> tracing::Span {
    let request_id = request
        .extensions()
        .get::<RequestId>()
        .and_then(|id| id.header_value().to_str().ok())
        .unwrap_or_default();
    tracing::info_span!("request", method = %request.method(), path = %request.uri().path(), request_id = %request_id)
}

/// The client's id is the one echoed, whatever the upstream answered: an
/// upstream that sets its own (OpenAI does) would otherwise replace it, and
/// the client could no longer find its request in Condenser's logs.
async fn echo_request_id(request: Request, next: Next) -> Response {
    let id = request
        .extensions()
        .get::<RequestId>()
        .map(|id| id.header_value().clone());
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    if let Some(upstream_id) = headers.remove(X_REQUEST_ID) {
        if Some(&upstream_id) != id.as_ref() {
            headers.insert(X_UPSTREAM_REQUEST_ID, upstream_id);
        }
    }
    if let Some(id) = id {
        headers.insert(X_REQUEST_ID, id);
    }
    response
}

const X_REQUEST_ID: &str = "x-request-id";
const X_UPSTREAM_REQUEST_ID: &str = "x-upstream-request-id";

async fn log_proxy_errors(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    if let Some(error) = response.extensions().get::<ProxyErrorLog>() {
        tracing::warn!(error.kind = error.kind, error.message = %error.message, status = response.status().as_u16(), "request failed in the proxy");
    }
    response
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
