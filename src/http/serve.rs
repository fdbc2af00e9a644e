//! Step 1, accept: hyper with the limits a listener
//! facing real clients needs and `axum::serve` does not set.
//!
//! - A request head must arrive within `server.header_read_timeout` (hyper's
//!   own timer, which also closes kept-alive connections idle that long),
//!   and a new connection must send its first request within it too, or
//!   it is closed: a client that connects and sends half a request line
//!   holds a file descriptor for that long at most.
//! - At most `server.max_connections` client connections are served at
//!   once, fewer when the open-file limit would not allow that many (each
//!   may hold an upstream socket too). Past the cap, new connections wait in
//!   the listen backlog and one warning says so; valid requests are not
//!   refused by `accept` failing on a full file table.
//!
//! The body read timeout is a layer in `app.rs`: it ends a request, not a
//! connection.

use crate::config::ServerSettings;
use axum::extract::Request;
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tower::ServiceExt;

/// File descriptors kept for everything that is not a client connection:
/// the database pool, log files, the runtime.
const RESERVED_FDS: u64 = 64;

/// Serves `router` until `shutdown` resolves, then waits for the open
/// connections to finish their requests.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    settings: &ServerSettings,
    shutdown: impl Future<Output = ()>,
) {
    let permits = Arc::new(Semaphore::new(connection_cap(settings.max_connections)));
    let builder = Arc::new(builder(settings.header_read_timeout));
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = accept(&listener, &permits) => accepted,
        };
        let Some((stream, permit)) = accepted else {
            continue;
        };
        let first_request = Arc::new(Notify::new());
        let seen = first_request.clone();
        let service = router.clone().map_request(move |request: Request<_>| {
            seen.notify_one();
            request
        });
        let connection = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), TowerToHyperService::new(service))
            .into_owned();
        let connection = graceful.watch(connection);
        let timeout = settings.header_read_timeout;
        tokio::spawn(async move {
            let _permit = permit;
            first_request_within(connection, &first_request, timeout).await;
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

fn builder(header_read_timeout: Duration) -> Builder<TokioExecutor> {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(header_read_timeout);
    builder
}

/// The next connection, once there is room for it.
async fn accept(
    listener: &TcpListener,
    permits: &Arc<Semaphore>,
) -> Option<(tokio::net::TcpStream, OwnedSemaphorePermit)> {
    let permit = match permits.clone().try_acquire_owned() {
        Ok(permit) => permit,
        Err(_) => {
            tracing::warn!(
                "connection limit reached (server.max_connections): new connections wait until one closes"
            );
            permits.clone().acquire_owned().await.ok()?
        }
    };
    match listener.accept().await {
        Ok((stream, _)) => {
            let _ = stream.set_nodelay(true);
            Some((stream, permit))
        }
        Err(error) => {
            // Out of file descriptors or memory: wait rather than spin.
            tracing::error!(error.message = %error, "accept failed");
            tokio::time::sleep(Duration::from_millis(50)).await;
            None
        }
    }
}

/// Runs a connection, but drops it when no request head arrives within
/// `timeout`: hyper's header timer starts only once it knows the protocol,
/// which takes the client's first bytes.
async fn first_request_within(connection: impl Future, first_request: &Notify, timeout: Duration) {
    tokio::pin!(connection);
    tokio::select! {
        _ = &mut connection => return,
        () = first_request.notified() => {}
        () = tokio::time::sleep(timeout) => return,
    }
    connection.await;
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
