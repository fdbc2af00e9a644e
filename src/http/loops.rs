//! Clients are served by one event loop per core, as nginx serves them by
//! one per worker process: each loop is a thread running a single-threaded
//! runtime, and a connection's requests, their upstream calls and the tasks
//! they spawn stay on the loop that accepted it. On a multi-threaded
//! runtime, threads woke each other for every request, about a quarter of
//! Condenser's CPU at a steady rate (bench/README.md, "One event loop per
//! core").
//!
//! The caller's runtime is the first loop, and accepts for all; the others
//! are started here. Each has its own upstream client
//! ([`AppState::for_another_event_loop`]); the store, the writer and
//! memory are shared.
//!
//! A loop keeps its runtime running after it has stopped serving, until
//! [`EventLoops`] is dropped: work its requests left behind (persisting, a
//! compaction finishing) runs there, and database connections it opened
//! are driven by it while the writer flushes.

use super::serve::serve_connections;
use crate::config::ServerSettings;
use axum::Router;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::runtime::Runtime;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit};
use tokio_util::sync::{CancellationToken, DropGuard};

/// Where the acceptor sends each loop its connections. Unbounded, but each
/// connection in it holds a place under `server.max_connections`.
pub type Inbox = mpsc::UnboundedReceiver<Handed>;

/// A connection handed to a loop.
pub struct Handed {
    pub stream: std::net::TcpStream,
    /// Kept while the connection is open.
    pub held: Held,
}

/// A connection's place under `server.max_connections`, and its count on
/// its loop.
pub struct Held {
    _permit: OwnedSemaphorePermit,
    on: Arc<Load>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.on.open.fetch_sub(1, Ordering::Relaxed);
        connections_gauge(self.on.index).decrement(1.0);
    }
}

/// How many connections a loop has open.
struct Load {
    index: usize,
    open: AtomicUsize,
}

fn connections_gauge(index: usize) -> metrics::Gauge {
    metrics::gauge!("condenser_client_connections", "event_loop" => index.to_string())
}

/// The acceptor's side of every loop's inbox.
pub struct Dispatch {
    loops: Vec<(Arc<Load>, mpsc::UnboundedSender<Handed>)>,
}

impl Dispatch {
    /// Inboxes for `count` loops, the first for the acceptor's own.
    pub fn new(count: usize) -> (Self, Vec<Inbox>) {
        let (loops, inboxes) = (0..count.max(1))
            .map(|index| {
                let (sender, inbox) = mpsc::unbounded_channel();
                let load = Load {
                    index,
                    open: AtomicUsize::new(0),
                };
                ((Arc::new(load), sender), inbox)
            })
            .unzip();
        (Self { loops }, inboxes)
    }

    /// Hands `stream` to the loop with the fewest connections open. The
    /// kernel would hand a shared listening socket's connections to
    /// whichever loop asks first, often the one already awake, and one loop
    /// could hold most of them while another core idles.
    pub fn hand_over(&self, stream: tokio::net::TcpStream, permit: OwnedSemaphorePermit) {
        let Some((load, inbox)) = self
            .loops
            .iter()
            .min_by_key(|(load, _)| load.open.load(Ordering::Relaxed))
        else {
            return;
        };
        // Leaves this loop's reactor, to be registered with the target's.
        let Ok(stream) = stream.into_std() else {
            return;
        };
        load.open.fetch_add(1, Ordering::Relaxed);
        connections_gauge(load.index).increment(1.0);
        let held = Held {
            _permit: permit,
            on: load.clone(),
        };
        // A loop that has stopped drops the connection, closing it.
        let _ = inbox.send(Handed { stream, held });
    }
}

/// The loops started besides the caller's; dropping this ends them.
pub struct EventLoops {
    drained: Vec<oneshot::Receiver<()>>,
    _release: DropGuard,
}

impl EventLoops {
    /// Starts a loop for each router, serving what arrives in its inbox.
    pub fn start(loops: Vec<(Router, Inbox)>, server: &ServerSettings) -> std::io::Result<Self> {
        let release = CancellationToken::new();
        let mut drained = Vec::with_capacity(loops.len());
        for (index, (router, inbox)) in loops.into_iter().enumerate() {
            let (done, finished) = oneshot::channel();
            let serving = Serving {
                inbox,
                router,
                server: server.clone(),
                done,
            };
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let release = release.clone();
            std::thread::Builder::new()
                .name(format!("condenser-loop-{}", index + 1))
                .spawn(move || run(&runtime, serving, &release))?;
            drained.push(finished);
        }
        Ok(Self {
            drained,
            _release: release.drop_guard(),
        })
    }

    /// Waits until every loop has been told no more connections will come
    /// and its connections are done.
    pub async fn drained(&mut self) {
        for finished in &mut self.drained {
            let _ = finished.await;
        }
    }
}

/// What one loop serves, and how it says it is done.
struct Serving {
    inbox: Inbox,
    router: Router,
    server: ServerSettings,
    done: oneshot::Sender<()>,
}

fn run(runtime: &Runtime, serving: Serving, release: &CancellationToken) {
    let Serving {
        inbox,
        router,
        server,
        done,
    } = serving;
    let served = async move {
        serve_connections(inbox, router, &server).await;
        let _ = done.send(());
        std::future::pending::<()>().await;
    };
    runtime.block_on(async {
        tokio::select! {
            () = served => {}
            () = release.cancelled() => {}
        }
    });
}
