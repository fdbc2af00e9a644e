//! Step 1, accept: what a connection is doing, and when it has idled enough.
//!
//! A connection is busy while a request on it is in flight, from its
//! complete head to the end of its answer's body, and idle otherwise:
//! before its first head is complete, and between requests. An idle
//! connection is closed once it has idled for its limit:
//!
//! - `server.header_read_timeout` before its first request: a client that
//!   connects and sends nothing, or half a head, holds a descriptor that
//!   long at most;
//! - `server.idle_timeout` after it, for HTTP/2 as well, which hyper
//!   otherwise keeps open as long as the client answers its pings;
//! - `server.header_read_timeout_at_cap` while the server is at its
//!   connection cap, whatever the above say, so silent connections make
//!   room for clients waiting in the listen backlog (Envoy's overload
//!   manager shrinks its idle and header timeouts the same way).
//!
//! Requests only mark the activity (two atomics); the watch is notified
//! once, at the first request, whose limit may be shorter. Otherwise it
//! wakes on its own timer, when the connection could first have idled its
//! limit, and looks: a wake-up per limit, not two per request, which on a
//! keep-alive connection woke its own task (and often the other worker
//! thread) twice per request for nothing.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

pub struct Activity {
    started: Instant,
    in_flight: AtomicUsize,
    /// Milliseconds after `started` the connection last became idle.
    idle_since_ms: AtomicU64,
    served: AtomicBool,
    /// Told when the first request arrives: the limit changes then.
    first_request: Notify,
}

/// One request in flight on a connection, until dropped.
pub struct InFlight(Arc<Activity>);

/// How long a connection may idle.
#[derive(Clone, Copy)]
pub struct Limits {
    pub before_first_request: Duration,
    pub between_requests: Duration,
    pub at_cap: Duration,
}

impl Activity {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            started: Instant::now(),
            in_flight: AtomicUsize::new(0),
            idle_since_ms: AtomicU64::new(0),
            served: AtomicBool::new(false),
            first_request: Notify::new(),
        })
    }

    /// A request head arrived: the connection is busy until the returned
    /// guard is dropped.
    pub fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        if !self.served.swap(true, Ordering::AcqRel) {
            self.first_request.notify_one();
        }
        InFlight(self.clone())
    }

    /// Whether a request head ever arrived.
    pub fn served(&self) -> bool {
        self.served.load(Ordering::Acquire)
    }

    fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// How long the connection has been idle; `None` while busy.
    fn idle_for(&self) -> Option<Duration> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        let since = self.idle_since_ms.load(Ordering::Acquire);
        Some(Duration::from_millis(
            self.elapsed_ms().saturating_sub(since),
        ))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let activity = &self.0;
        activity
            .idle_since_ms
            .store(activity.elapsed_ms(), Ordering::Release);
        activity.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Limits {
    fn limit(&self, served: bool, at_cap: bool) -> Duration {
        let limit = if served {
            self.between_requests
        } else {
            self.before_first_request
        };
        if at_cap {
            limit.min(self.at_cap)
        } else {
            limit
        }
    }
}

/// Resolves once the connection has idled for its limit, which shrinks
/// while `at_cap` says the server is at its connection cap. Looks when
/// the limit could first have passed (a busy connection cannot idle it
/// out sooner than one limit from now), and when the first request
/// changes the limit.
pub async fn idled(activity: &Activity, limits: Limits, mut at_cap: watch::Receiver<bool>) {
    loop {
        let limit = limits.limit(activity.served(), *at_cap.borrow_and_update());
        let wait = match activity.idle_for() {
            Some(idle) if idle >= limit => return,
            Some(idle) => limit - idle,
            None => limit,
        };
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = activity.first_request.notified() => {}
            () = changed(&mut at_cap) => {}
        }
    }
}

/// The next change; never, once the server stopped accepting.
async fn changed(at_cap: &mut watch::Receiver<bool>) {
    if at_cap.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Whether the server is at its connection cap, told to every connection.
pub struct Pressure {
    at_cap: watch::Sender<bool>,
    /// Free places that end the pressure: some room, so that it does not
    /// flicker on and off with every connection.
    relief: usize,
}

impl Pressure {
    pub fn new(cap: usize) -> Self {
        Self {
            at_cap: watch::Sender::new(false),
            relief: (cap / 16).max(1),
        }
    }

    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.at_cap.subscribe()
    }

    /// The cap is reached; true when it was not before.
    pub fn reached(&self) -> bool {
        self.at_cap
            .send_if_modified(|at_cap| !std::mem::replace(at_cap, true))
    }

    /// `free` places are open again.
    pub fn free(&self, free: usize) {
        if free >= self.relief {
            self.at_cap
                .send_if_modified(|at_cap| std::mem::replace(at_cap, false));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        before_first_request: Duration::from_secs(30),
        between_requests: Duration::from_millis(600),
        at_cap: Duration::from_millis(200),
    };

    fn watch(activity: &Arc<Activity>, pressure: &Pressure) -> tokio::task::JoinHandle<()> {
        let activity = activity.clone();
        let at_cap = pressure.subscribe();
        tokio::spawn(async move { idled(&activity, LIMITS, at_cap).await })
    }

    async fn sleep_ms(ms: u64) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }

    #[tokio::test]
    async fn a_connection_idles_out_after_its_limit_and_not_while_busy() {
        let activity = Activity::new();
        let pressure = Pressure::new(100);
        let request = activity.begin();
        let idled = watch(&activity, &pressure);
        sleep_ms(900).await;
        assert!(!idled.is_finished(), "a busy connection idled out");
        drop(request);
        sleep_ms(300).await;
        assert!(!idled.is_finished(), "idle for half its limit");
        sleep_ms(700).await;
        assert!(idled.is_finished(), "idle past its limit");
    }

    #[tokio::test]
    async fn the_first_request_brings_the_shorter_limit_between_requests() {
        let activity = Activity::new();
        let pressure = Pressure::new(100);
        let idled = watch(&activity, &pressure);
        sleep_ms(100).await;
        drop(activity.begin());
        sleep_ms(400).await;
        assert!(!idled.is_finished(), "idle 400 ms of its 600");
        sleep_ms(400).await;
        assert!(
            idled.is_finished(),
            "still open 800 ms after its request: the 30 s before a first request held"
        );
    }

    #[tokio::test]
    async fn at_the_cap_a_silent_connection_idles_out_sooner() {
        let activity = Activity::new();
        let pressure = Pressure::new(100);
        let idled = watch(&activity, &pressure);
        sleep_ms(300).await;
        assert!(!idled.is_finished(), "30 s before a first request");
        assert!(pressure.reached());
        assert!(!pressure.reached(), "told once");
        sleep_ms(100).await;
        assert!(
            idled.is_finished(),
            "idle 300 ms, past the 200 ms at the cap"
        );
        pressure.free(5);
        assert!(
            *pressure.subscribe().borrow(),
            "5 free of 100: still at the cap"
        );
        pressure.free(6);
        assert!(!*pressure.subscribe().borrow());
    }
}
