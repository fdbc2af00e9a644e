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
//! Each asks the kernel for a short scheduling slice
//! (`server.connection_thread_slice`, [`ask_for_slice`]): a request's work
//! is a short burst that ends in a write waking its peer, and with the
//! default slice the peer preempted the thread on about half of them.
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
use std::time::Duration;
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
    /// Starts `count` threads (at least one), each scheduled in slices
    /// of `slice` where the kernel takes one (zero: its default).
    pub fn start(count: usize, slice: Duration) -> std::io::Result<Self> {
        let threads = (0..count.max(1))
            .map(|index| start_thread(index, slice))
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

fn start_thread(index: usize, slice: Duration) -> std::io::Result<Thread> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let handle = runtime.handle().clone();
    let (stop, stopped) = oneshot::channel::<()>();
    std::thread::Builder::new()
        .name(format!("condenser-conn-{index}"))
        .spawn(move || {
            CONNECTION_THREAD.with(|thread| thread.set(Some(index)));
            if let Err(error) = ask_for_slice(slice) {
                // Once, not per thread: they all meet the same kernel.
                if index == 0 {
                    tracing::info!(%error, "connection threads keep the kernel's default slice");
                }
            }
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

/// Asks the kernel to schedule the calling thread in slices of `slice`
/// (EEVDF's `sched_attr.sched_runtime`, Linux 6.12 and later; earlier
/// kernels ignore it). Zero leaves the thread as it is.
///
/// A connection thread runs in bursts of a request's work, each ending in
/// a write that wakes its peer (the upstream, or a client on the same
/// host), which the kernel places on the writer's CPU. With the default
/// slice (a few milliseconds) the woken peer preempted the thread at that
/// write's return about half the time, one involuntary switch a request;
/// with a slice about a burst long it waits for the thread to sleep, or
/// moves to an idle CPU (bench/README.md, "Context switches per request").
/// The slice changes when a thread runs, not its share of the CPU: that is
/// its weight (nice), which is kept, as is its policy.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn ask_for_slice(slice: Duration) -> std::io::Result<()> {
    if slice.is_zero() {
        return Ok(());
    }
    let mut attr = SchedAttr::of_this_thread()?;
    if !matches!(attr.policy as i32, libc::SCHED_OTHER | libc::SCHED_BATCH) {
        // A real-time policy the operator chose: slices are not its terms.
        return Ok(());
    }
    attr.flags = 0;
    attr.runtime = u64::try_from(slice.as_nanos()).unwrap_or(u64::MAX);
    // SAFETY: `attr` is a whole `sched_attr` whose `size` says so, read
    // only; pid 0 is the calling thread.
    let written =
        unsafe { libc::syscall(libc::SYS_sched_setattr, 0, std::ptr::from_ref(&attr), 0) };
    if written != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn ask_for_slice(_slice: Duration) -> std::io::Result<()> {
    Ok(())
}

/// The kernel's `struct sched_attr` (include/uapi/linux/sched/types.h),
/// first version.
#[cfg(target_os = "linux")]
#[derive(Default)]
#[repr(C)]
struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    /// For the fair policies, the slice asked for, in nanoseconds.
    runtime: u64,
    deadline: u64,
    period: u64,
    util_min: u32,
    util_max: u32,
}

#[cfg(target_os = "linux")]
impl SchedAttr {
    /// The calling thread's policy, weight and slice.
    #[allow(unsafe_code)]
    fn of_this_thread() -> std::io::Result<Self> {
        let mut attr = Self::default();
        let size = std::mem::size_of::<Self>() as u32;
        // SAFETY: `attr` is a `sched_attr` of the size passed (the
        // kernel's first version, 56 bytes), valid for writes for the
        // whole call; pid 0 is the calling thread.
        let read = unsafe {
            libc::syscall(
                libc::SYS_sched_getattr,
                0,
                std::ptr::from_mut(&mut attr),
                size,
                0,
            )
        };
        if read != 0 {
            return Err(std::io::Error::last_os_error());
        }
        attr.size = size;
        Ok(attr)
    }
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
        let threads = ConnectionThreads::start(2, Duration::ZERO).expect("threads start");
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
        let threads = ConnectionThreads::start(1, Duration::ZERO).expect("threads start");
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

    /// Linux 6.12 (EEVDF's custom slices) or later.
    #[cfg(target_os = "linux")]
    fn kernel_takes_slices() -> bool {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let mut numbers = release
            .split(['.', '-'])
            .map(|n| n.parse::<u32>().unwrap_or(0));
        (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0)) >= (6, 12)
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_connection_thread_runs_in_the_slice_configured() {
        for (asked, expected) in [(Duration::from_micros(300), 300_000), (Duration::ZERO, 0)] {
            let threads = ConnectionThreads::start(1, asked).expect("threads start");
            let (tx, rx) = oneshot::channel();
            threads.serve(move || async move {
                let _ =
                    tx.send(SchedAttr::of_this_thread().map(|attr| (attr.policy, attr.runtime)));
            });
            let (policy, runtime) = rx.await.expect("ran").expect("sched_getattr");
            assert_eq!(policy as i32, libc::SCHED_OTHER);
            if kernel_takes_slices() && expected > 0 {
                assert_eq!(runtime, expected);
            } else if kernel_takes_slices() {
                assert_ne!(runtime, 300_000, "zero leaves the kernel's default");
            }
        }
    }

    #[test]
    fn zero_threads_is_one_per_cpu() {
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        assert_eq!(count(0), cpus);
        assert_eq!(count(3), 3);
    }
}
