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
use crate::http::loops::{Dispatch, EventLoops};
use crate::http::{router, serve};
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
use tokio_util::sync::CancellationToken;
use tower::ServiceBuilder;
use tower_http::request_id::{MakeRequestUuid, RequestId, SetRequestIdLayer};
use tower_http::timeout::{RequestBodyTimeoutLayer, TimeoutBody};
use tower_http::trace::TraceLayer;

pub struct Application {
    listener: TcpListener,
    state: AppState,
    server: ServerSettings,
    shutdown_grace: Duration,
}

impl Application {
    /// Binds the listener now, so `port 0` works and the real port is known.
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        let listener = TcpListener::bind(settings.listen).await?;
        let shutdown_grace = settings.shutdown_grace;
        let server = settings.server.clone();
        let state = AppState::new(settings).await?;
        crate::maintenance::spawn(&state.storage, &state.settings.storage);
        Ok(Self {
            listener,
            state,
            server,
            shutdown_grace,
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

    /// Serves on `server.event_loops` loops, this runtime's among them,
    /// until `shutdown` resolves; then lets in-flight requests (and
    /// streams) and their background work (persisting what they carried)
    /// finish, for at most the configured grace period in all.
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let Self {
            listener,
            state,
            server,
            shutdown_grace: grace,
        } = self;
        let stop = CancellationToken::new();
        let (stopping_tx, stopping_rx) = tokio::sync::oneshot::channel::<()>();
        let signal = {
            let stop = stop.clone();
            async move {
                shutdown.await;
                tracing::info!(
                    grace_seconds = grace.as_secs_f64(),
                    "shutting down: draining requests"
                );
                stop.cancel();
                let _ = stopping_tx.send(());
            }
        };
        let permits = crate::http::serve::connection_permits(&server);
        let (dispatch, mut inboxes) = Dispatch::new(server.event_loop_count());
        let own_inbox = inboxes.remove(0);
        let others = inboxes
            .into_iter()
            .map(|inbox| {
                let state = state.for_another_event_loop()?;
                Ok((with_layers(router(state), &server), inbox))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let mut others = EventLoops::start(others, &server)?;
        let own_router = with_layers(router(state.clone()), &server);
        let drained = async move {
            tokio::join!(
                serve::accept_until(listener, permits, dispatch, stop.cancelled()),
                serve::serve_connections(own_inbox, own_router, &server),
            );
            others.drained().await;
            state.background.close();
            state.background.wait().await;
            // The requests are done; what they queued is written before exit.
            state.writer.flush().await;
            drop(others);
        };
        let deadline = async move {
            match stopping_rx.await {
                Ok(()) => tokio::time::sleep(grace).await,
                Err(_) => std::future::pending().await,
            }
        };
        tokio::select! {
            ((), ()) = async { tokio::join!(signal, drained) } => Ok(()),
            () = deadline => {
                tracing::warn!("shutdown grace period over: closing the remaining connections");
                Ok(())
            }
        }
    }

    pub async fn run_until_stopped(self) -> anyhow::Result<()> {
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
