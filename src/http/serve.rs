//! Step 1, accept: hyper with the limits a listener
//! facing real clients needs and `axum::serve` does not set.
//!
//! - A request head must arrive within `server.header_read_timeout` (hyper's
//!   own timer, which also closes kept-alive connections idle that long),
//!   and a new connection must send its first request within it too, or
//!   it is closed: a client that connects and sends half a request line
//!   holds a file descriptor for that long at most.
//! - A connection with no request in flight for `server.idle_timeout` is
//!   closed, HTTP/2 too (`activity.rs`).
//! - At most `server.max_connections` client connections are served at
//!   once, fewer when the open-file limit would not allow that many (each
//!   may hold an upstream socket too). Past the cap, new connections wait in
//!   the listen backlog and one warning says so; valid requests are not
//!   refused by `accept` failing on a full file table. At the cap, the
//!   connections without a request in flight are closed after
//!   `server.header_read_timeout_at_cap`: a thousand silent connections
//!   cannot keep a valid request waiting in the backlog for the whole
//!   header timeout.
//!
//! - hyper reads a connection [`READ_BUFFER`] bytes at a time at most, which
//!   also bounds a request's head (a larger one is answered 431 and the
//!   connection closed).
//!
//! Handlers find the client's address as `ConnectInfo<SocketAddr>`. The
//! body read timeout is a layer in `app.rs`: it ends a request, not a
//! connection.

use super::activity::{self, Activity, Limits, Pressure};
use crate::config::ServerSettings;
use crate::threads::ConnectionThreads;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::Router;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulConnection;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

/// File descriptors kept for everything that is not a client connection:
/// the database pool, log files, the runtime.
const RESERVED_FDS: u64 = 64;

/// The most hyper reads from a connection at once, and so the largest
/// request head. hyper's default, about 400 KB, made each read of a large
/// body a fresh allocation of that size, a large object for mimalloc (past
/// its medium size, about 84 KiB), whose pages it hands back to the system
/// once free: the next large body faulted them in and zeroed them on its
/// request's path. Reads of 64 KiB are medium objects and stopped faulting:
/// an 800 KB history's p99 fell from 7.4-9.6 ms to 2.2-4.5 ms and its CPU
/// by a fifth (bench/HISTORY.md). A head of 64 KiB is still twice what
/// nginx takes by default.
const READ_BUFFER: usize = 64 * 1024;

/// How long an idle connection that served requests may take to close
/// gracefully (HTTP/2's GOAWAY, the rest of an answer a slow client reads).
const GRACEFUL_CLOSE: Duration = Duration::from_secs(5);

/// What a connection's task watches besides the connection itself.
struct Watch {
    activity: Arc<Activity>,
    limits: Limits,
    at_cap: watch::Receiver<bool>,
    stopping: CancellationToken,
}

/// Serves `router` until `shutdown` resolves, then waits for the open
/// connections to finish their requests. Connections are accepted here and
/// served on `threads`.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    settings: &ServerSettings,
    threads: &ConnectionThreads,
    shutdown: impl Future<Output = ()>,
) {
    let cap = connection_cap(settings.max_connections);
    let permits = Arc::new(Semaphore::new(cap));
    let pressure = Arc::new(Pressure::new(cap));
    let builder = Arc::new(builder(settings.header_read_timeout));
    let limits = Limits {
        before_first_request: settings.header_read_timeout,
        between_requests: settings.idle_timeout,
        at_cap: settings.header_read_timeout_at_cap,
    };
    let stopping = CancellationToken::new();
    let connections = TaskTracker::new();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = accept(&listener, &permits, &pressure) => accepted,
        };
        let Some((stream, peer, permit)) = accepted else {
            continue;
        };
        // Moved to the thread that serves it: its readiness is that
        // thread's runtime's to watch.
        let stream = match stream.into_std() {
            Ok(stream) => stream,
            Err(error) => {
                tracing::warn!(error.message = %error, "an accepted connection could not be handed over");
                continue;
            }
        };
        let connection = Connection {
            router: router.clone(),
            builder: builder.clone(),
            peer,
            at_cap: pressure.subscribe(),
            limits,
            stopping: stopping.clone(),
        };
        let (permits, pressure) = (permits.clone(), pressure.clone());
        let served = connections.track_future(async move {
            connection.serve(stream).await;
            drop(permit);
            pressure.free(permits.available_permits());
        });
        threads.serve(move || served);
    }
    drop(listener);
    stopping.cancel();
    connections.close();
    connections.wait().await;
}

/// An accepted connection, and what serving it takes.
struct Connection {
    router: Router,
    builder: Arc<Builder<TokioExecutor>>,
    peer: SocketAddr,
    at_cap: watch::Receiver<bool>,
    limits: Limits,
    stopping: CancellationToken,
}

impl Connection {
    /// Serves the connection until it ends, on the thread it runs on.
    async fn serve(self, stream: std::net::TcpStream) {
        let stream = match tokio::net::TcpStream::from_std(stream) {
            Ok(stream) => stream,
            Err(error) => {
                tracing::warn!(error.message = %error, "an accepted connection could not be served");
                return;
            }
        };
        let activity = Activity::new();
        let service = tracked(self.router, activity.clone(), self.peer);
        let connection = self
            .builder
            .serve_connection_with_upgrades(TokioIo::new(stream), TowerToHyperService::new(service))
            .into_owned();
        let watch = Watch {
            activity,
            limits: self.limits,
            at_cap: self.at_cap,
            stopping: self.stopping,
        };
        run(connection, watch).await;
    }
}

fn builder(header_read_timeout: Duration) -> Builder<TokioExecutor> {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .max_buf_size(READ_BUFFER)
        .header_read_timeout(header_read_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(header_read_timeout);
    builder
}

/// The router as the connection's service: each request is in flight on
/// the connection's activity until its answer's body is dropped, and
/// carries the client's address.
fn tracked(
    router: Router,
    activity: Arc<Activity>,
    peer: SocketAddr,
) -> impl tower::Service<
    http::Request<Incoming>,
    Response = axum::response::Response,
    Error = std::convert::Infallible,
    Future = impl Future + Send,
> + Clone {
    tower::service_fn(move |mut request: http::Request<Incoming>| {
        let in_flight = activity.begin();
        request.extensions_mut().insert(ConnectInfo(peer));
        let router = router.clone();
        async move {
            let response = router.oneshot(request).await?;
            // The closure owns the guard, so it lives as long as the body.
            Ok(response.map(|body| {
                Body::new(body.map_frame(move |frame| {
                    let _in_flight = &in_flight;
                    frame
                }))
            }))
        }
    })
}

/// Runs a connection until it ends, idles out, or the server stops. One
/// that never sent a whole request head is dropped; one that served
/// requests is closed gracefully.
async fn run<C: GracefulConnection>(connection: C, watch: Watch) {
    tokio::pin!(connection);
    let idled = activity::idled(&watch.activity, watch.limits, watch.at_cap);
    tokio::select! {
        _ = connection.as_mut() => {}
        () = idled => {
            if watch.activity.served() {
                connection.as_mut().graceful_shutdown();
                let _ = tokio::time::timeout(GRACEFUL_CLOSE, connection).await;
            }
        }
        () = watch.stopping.cancelled() => {
            connection.as_mut().graceful_shutdown();
            let _ = connection.await;
        }
    }
}

/// The next connection, once there is room for it.
async fn accept(
    listener: &TcpListener,
    permits: &Arc<Semaphore>,
    pressure: &Pressure,
) -> Option<(tokio::net::TcpStream, SocketAddr, OwnedSemaphorePermit)> {
    let permit = match permits.clone().try_acquire_owned() {
        Ok(permit) => permit,
        Err(_) => {
            if pressure.reached() {
                tracing::warn!(
                    "connection limit reached (server.max_connections): new connections wait until one closes; \
                     connections without a request in flight close after server.header_read_timeout_at_cap"
                );
            }
            permits.clone().acquire_owned().await.ok()?
        }
    };
    match listener.accept().await {
        Ok((stream, peer)) => {
            let _ = stream.set_nodelay(true);
            Some((stream, peer, permit))
        }
        Err(error) => {
            // Out of file descriptors or memory: wait rather than spin.
            tracing::error!(error.message = %error, "accept failed");
            tokio::time::sleep(Duration::from_millis(50)).await;
            None
        }
    }
}

/// The configured cap, lowered to what the open-file limit allows after
/// raising the soft limit as far as the hard one.
fn connection_cap(configured: usize) -> usize {
    let limit = match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => limit,
        Err(error) => {
            tracing::warn!(error.message = %error, "could not read the open-file limit");
            return configured;
        }
    };
    let allowed = usize::try_from(limit.saturating_sub(RESERVED_FDS) / 2)
        .unwrap_or(usize::MAX)
        .max(1);
    if allowed < configured {
        tracing::warn!(
            configured,
            allowed,
            open_file_limit = limit,
            "server.max_connections lowered to fit the open-file limit"
        );
        return allowed;
    }
    configured
}
