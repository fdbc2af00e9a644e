//! Beside the flow, the process: the threads that serve connections, one runtime each.
//!
//! Each accepted connection is served to its end on one thread, by a
//! single-threaded runtime of that thread's own: its requests, their
//! upstream calls and their answers never change threads. On the
//! work-stealing runtime a request woke the other worker thread several
//! times on its way (a task handed to the upstream connection's task, its
//! answer handed back), and the scheduler's switches were the largest
//! share of Condenser's CPU (bench/README.md, "Context switches per
//! request"). nginx's workers serve their connections the same way.
//!
//! A connection goes to the thread serving the fewest. The upstream
//! clients keep a pool per thread (`upstream::UpstreamClient`), so an
//! upstream socket is driven by the thread whose request uses it. The
//! store's writer, maintenance and the accept loop stay on the process's
//! main runtime: a request hands them work, never waits on them (but a
//! compaction on its write).

use std::cell::Cell;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::oneshot;

thread_local! {
    /// Which connection thread this is, counted from 0; `None` elsewhere.
    static CONNECTION_THREAD: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The connection thread the caller runs on, if it is one.
pub fn current() -> Option<usize> {
    CONNECTION_THREAD.with(Cell::get)
}

/// How many connection threads `configured` asks for: 0 is one per CPU
/// the process may use (its cgroup's quota counted).
pub fn count(configured: usize) -> usize {
    match configured {
        0 => std::thread::available_parallelism().map_or(1, usize::from),
        count => count,
    }
}

/// The connection threads. Dropping it stops them: a connection still
/// open then is closed, as at the end of the shutdown grace period.
pub struct ConnectionThreads {
    threads: Vec<Thread>,
}

struct Thread {
    runtime: tokio::runtime::Handle,
    /// Connections it serves now.
    open: Arc<AtomicUsize>,
    stop: Option<oneshot::Sender<()>>,
}

impl ConnectionThreads {
    /// Starts `count` threads (at least one).
    pub fn start(count: usize) -> std::io::Result<Self> {
        let threads = (0..count.max(1))
            .map(start_thread)
            .collect::<std::io::Result<_>>()?;
        Ok(Self { threads })
    }

    /// Serves `connection` to its end on the thread serving the fewest.
    /// `connection` is made on that thread: a socket it opens is driven
    /// by that thread's runtime.
    pub fn serve<F, C>(&self, connection: C)
    where
        C: FnOnce() -> F + Send + 'static,
        F: Future<Output = ()> + Send + 'static,
    {
        let thread = self
            .threads
            .iter()
            .min_by_key(|thread| thread.open.load(Ordering::Relaxed))
            .expect("at least one connection thread");
        let open = OpenConnection::count(&thread.open);
        thread.runtime.spawn(async move {
            let _open = open;
            connection().await;
        });
    }
}

impl Drop for ConnectionThreads {
    fn drop(&mut self) {
        for thread in &mut self.threads {
            if let Some(stop) = thread.stop.take() {
                let _ = stop.send(());
            }
        }
    }
}

fn start_thread(index: usize) -> std::io::Result<Thread> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let handle = runtime.handle().clone();
    let (stop, stopped) = oneshot::channel::<()>();
    std::thread::Builder::new()
        .name(format!("condenser-conn-{index}"))
        .spawn(move || {
            CONNECTION_THREAD.with(|thread| thread.set(Some(index)));
            runtime.block_on(async {
                let _ = stopped.await;
            });
            // Blocking work still running (a large body's hashing) is not
            // waited for: the process is stopping, or a test's server is.
            runtime.shutdown_background();
        })?;
    Ok(Thread {
        runtime: handle,
        open: Arc::new(AtomicUsize::new(0)),
        stop: Some(stop),
    })
}

/// Counts a connection on its thread while it is open.
struct OpenConnection(Arc<AtomicUsize>);

impl OpenConnection {
    fn count(open: &Arc<AtomicUsize>) -> Self {
        open.fetch_add(1, Ordering::Relaxed);
        Self(open.clone())
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Serves a "connection" that stays open until the returned sender
    /// is dropped, and the connection thread it runs on.
    async fn open(threads: &ConnectionThreads) -> (oneshot::Sender<()>, usize) {
        let (close, closed) = oneshot::channel::<()>();
        let (ran_on_tx, ran_on) = oneshot::channel();
        threads.serve(move || async move {
            let _ = ran_on_tx.send(current());
            let _ = closed.await;
        });
        let thread = ran_on.await.ok().flatten();
        (close, thread.expect("on a connection thread"))
    }

    fn serving(threads: &ConnectionThreads) -> usize {
        threads
            .threads
            .iter()
            .map(|thread| thread.open.load(Ordering::Relaxed))
            .sum()
    }

    #[tokio::test]
    async fn a_connection_runs_on_a_connection_thread_and_the_least_busy_takes_the_next() {
        let threads = ConnectionThreads::start(2).expect("threads start");
        let (first, a) = open(&threads).await;
        let (second, b) = open(&threads).await;
        assert_ne!(a, b, "two open connections share the threads");
        // The first closes: the next connection goes to its thread.
        drop(first);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while serving(&threads) > 1 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let (_third, c) = open(&threads).await;
        assert_eq!(c, a, "the thread serving fewer connections takes the next");
        drop(second);
        assert_eq!(current(), None, "the caller is no connection thread");
    }

    #[tokio::test]
    async fn stopping_the_threads_ends_the_connections_they_serve() {
        let threads = ConnectionThreads::start(1).expect("threads start");
        let (ended_tx, ended) = oneshot::channel::<()>();
        threads.serve(move || async move {
            // Dropped unsent when the thread's runtime drops this task.
            let _ended = ended_tx;
            std::future::pending::<()>().await;
        });
        drop(threads);
        let ended = tokio::time::timeout(Duration::from_secs(5), ended).await;
        assert!(matches!(ended, Ok(Err(_))), "the connection was ended");
    }

    #[test]
    fn zero_threads_is_one_per_cpu() {
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        assert_eq!(count(0), cpus);
        assert_eq!(count(3), 3);
    }
}
