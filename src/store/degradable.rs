//! Step 3, persist: a store allowed to fail.
//!
//! The store as the pipeline sees it: optional, and allowed to fail. When
//! the database is down the proxy keeps forwarding (degraded), logs that once
//! per interval, counts it, says so in a response header, and tries the
//! database again every interval until it answers. "Down" is a circuit
//! breaker's verdict: the database could not be reached, or several
//! statements in a row failed. One failing statement degrades nothing.
//!
//! A pool timeout means either. While the database is down no connection
//! opens, and waiting for one times out; under a burst every connection is
//! busy, and waiting for one times out too. The second is a pool that is
//! busy, not a database that is down: degrading the instance for
//! `degraded_retry` would stop storing for seconds over a moment's queue.
//! So a timeout counts as busy while every connection of the pool is in
//! use or another statement completed meanwhile, and a busy pool opens the
//! circuit only once nothing has completed for `degraded_retry` (the
//! database hangs rather than refuses).

use super::{Store, StoreError, StoreMemory};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Failed statements in a row, on a reachable database, that open the
/// circuit.
const FAILURES_TO_TRIP: u32 = 3;

#[derive(Clone)]
pub struct Storage {
    store: Option<Store>,
    health: Arc<Health>,
    memory: StoreMemory,
}

struct Health {
    started: Instant,
    retry_every: Duration,
    /// Milliseconds since `started` the circuit opened; 0 = closed (healthy).
    failed_at_ms: AtomicU64,
    consecutive_failures: AtomicU32,
    /// When a statement last completed; 0 = never.
    succeeded_at_ms: AtomicU64,
    /// When the pool was first found busy since the last success; 0 = not.
    busy_since_ms: AtomicU64,
    warned_at_ms: AtomicU64,
    /// Set once migrations ran (they may not have at a degraded start).
    migrated: AtomicBool,
}

impl Storage {
    pub fn new(store: Option<Store>, migrated: bool, retry_every: Duration) -> Self {
        metrics::describe_counter!(
            "condenser_storage_pool_busy_total",
            "Storage operations skipped because every pooled connection was busy, by operation."
        );
        let health = Health {
            started: Instant::now(),
            retry_every,
            failed_at_ms: AtomicU64::new(0),
            consecutive_failures: AtomicU32::new(0),
            succeeded_at_ms: AtomicU64::new(0),
            busy_since_ms: AtomicU64::new(0),
            warned_at_ms: AtomicU64::new(0),
            migrated: AtomicBool::new(migrated),
        };
        Self {
            store,
            health: Arc::new(health),
            memory: StoreMemory::default(),
        }
    }

    pub fn store(&self) -> Option<&Store> {
        self.store.as_ref()
    }

    /// What this instance remembers of the store (see `store::coordination::memory`).
    pub fn memory(&self) -> &StoreMemory {
        &self.memory
    }

    /// Runs a store operation unless the database is known to be down and
    /// not yet due for another try. `None` means "degraded": carry on without.
    pub async fn run<T, F, Fut>(&self, operation: &'static str, call: F) -> Option<T>
    where
        F: FnOnce(Store) -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let store = self.store.clone()?;
        if !self.due_for_attempt() {
            metrics::counter!("condenser_storage_skipped_total", "operation" => operation)
                .increment(1);
            return None;
        }
        let started_ms = self.now_ms();
        if !self.health.migrated.load(Ordering::Acquire) {
            if let Err(error) = store.migrate().await {
                self.record_failure(operation, &error, started_ms);
                return None;
            }
            self.health.migrated.store(true, Ordering::Release);
        }
        let started = Instant::now();
        let result = call(store).await;
        metrics::histogram!("condenser_storage_seconds", "operation" => operation)
            .record(started.elapsed().as_secs_f64());
        match result {
            Ok(value) => {
                self.record_success();
                Some(value)
            }
            Err(error) => {
                self.record_failure(operation, &error, started_ms);
                None
            }
        }
    }

    pub fn is_degraded(&self) -> bool {
        self.store.is_none() || self.health.failed_at_ms.load(Ordering::Acquire) != 0
    }

    fn now_ms(&self) -> u64 {
        self.health.started.elapsed().as_millis() as u64 + 1
    }

    fn due_for_attempt(&self) -> bool {
        let failed_at = self.health.failed_at_ms.load(Ordering::Acquire);
        failed_at == 0
            || self.now_ms().saturating_sub(failed_at) >= self.health.retry_every.as_millis() as u64
    }

    fn record_success(&self) {
        self.health.consecutive_failures.store(0, Ordering::Release);
        self.health
            .succeeded_at_ms
            .store(self.now_ms(), Ordering::Release);
        self.health.busy_since_ms.store(0, Ordering::Release);
        if self.health.failed_at_ms.swap(0, Ordering::AcqRel) != 0 {
            tracing::info!("database reachable again: storing and compacting resumed");
        }
    }

    fn record_failure(&self, operation: &'static str, error: &StoreError, started_ms: u64) {
        metrics::counter!("condenser_storage_errors_total", "operation" => operation).increment(1);
        // A refused write says the database answered: no step towards
        // degrading it.
        if matches!(error, StoreError::ParentMissing) {
            tracing::info!(operation, error.message = %error, "storage write refused");
            return;
        }
        if self.pool_busy(error, started_ms) {
            self.record_busy(operation, error);
            return;
        }
        let in_a_row = self
            .health
            .consecutive_failures
            .fetch_add(1, Ordering::AcqRel)
            + 1;
        if !error.is_unreachable() && in_a_row < FAILURES_TO_TRIP {
            tracing::warn!(operation, error.message = %error, "storage statement failed");
            return;
        }
        self.trip(operation, error);
    }

    /// Whether `error` is a pool timeout of a database that answers: every
    /// connection was in use, or a statement completed since this one
    /// started waiting.
    fn pool_busy(&self, error: &StoreError, started_ms: u64) -> bool {
        if !matches!(error, StoreError::Database(sqlx::Error::PoolTimedOut)) {
            return false;
        }
        let completed_meanwhile = self.health.succeeded_at_ms.load(Ordering::Acquire) >= started_ms;
        let all_in_use = self
            .store
            .as_ref()
            .is_some_and(|store| store.pool.size() > 0 && store.pool.num_idle() == 0);
        completed_meanwhile || all_in_use
    }

    /// A busy pool: the statement is lost, the instance stays healthy
    /// unless nothing has completed for a whole retry interval.
    fn record_busy(&self, operation: &'static str, error: &StoreError) {
        metrics::counter!("condenser_storage_pool_busy_total", "operation" => operation)
            .increment(1);
        let now = self.now_ms();
        let since = match self.health.busy_since_ms.compare_exchange(
            0,
            now,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => {
                // Once per busy spell: a burst times out many statements.
                tracing::warn!(
                    operation,
                    "storage pool busy: no connection free within storage.acquire_timeout, \
                     statements skipped (storage.max_connections may be too low)"
                );
                now
            }
            Err(since) => since,
        };
        if now.saturating_sub(since) >= self.health.retry_every.as_millis() as u64 {
            self.trip(operation, error);
        }
    }

    /// Opens the circuit: the instance forwards without storing until the
    /// next try succeeds.
    fn trip(&self, operation: &'static str, error: &StoreError) {
        let now = self.now_ms();
        self.health.failed_at_ms.store(now, Ordering::Release);
        let warned = self.health.warned_at_ms.load(Ordering::Acquire);
        let interval = self.health.retry_every.as_millis() as u64;
        if warned == 0 || now.saturating_sub(warned) >= interval {
            self.health.warned_at_ms.store(now, Ordering::Release);
            tracing::warn!(operation, error.message = %error, "database unavailable: forwarding without storing (degraded)");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreOptions;

    /// A store of one connection that gives up waiting for it after 100 ms.
    async fn one_connection_store() -> Store {
        let options = StoreOptions {
            max_connections: 1,
            acquire_timeout: Duration::from_millis(100),
        };
        Store::connect("sqlite::memory:", &options)
            .await
            .expect("an in-memory store")
    }

    async fn ping(storage: &Storage) -> Option<()> {
        storage
            .run("ping", |store| async move { store.ping().await })
            .await
    }

    #[tokio::test]
    async fn a_busy_pool_does_not_degrade_the_instance() {
        let store = one_connection_store().await;
        let storage = Storage::new(Some(store.clone()), true, Duration::from_secs(5));
        let busy = store.pool.acquire().await.expect("the one connection");
        assert_eq!(ping(&storage).await, None, "no connection within 100 ms");
        assert!(
            !storage.is_degraded(),
            "one pool timeout degraded the instance"
        );
        drop(busy);
        assert_eq!(ping(&storage).await, Some(()));
    }

    #[tokio::test]
    async fn a_pool_busy_for_longer_than_the_retry_interval_degrades_it() {
        let store = one_connection_store().await;
        let storage = Storage::new(Some(store.clone()), true, Duration::from_millis(300));
        let _stuck = store.pool.acquire().await.expect("the one connection");
        assert_eq!(ping(&storage).await, None);
        assert!(!storage.is_degraded());
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(ping(&storage).await, None);
        assert!(storage.is_degraded(), "nothing succeeded for 400 ms");
    }

    #[tokio::test]
    async fn a_database_that_refuses_connections_degrades_it_at_once() {
        let options = StoreOptions {
            max_connections: 2,
            acquire_timeout: Duration::from_millis(200),
        };
        // Port 1 on the loopback: nothing listens, every connect is refused.
        let store = Store::connect_lazy("postgres://condenser@127.0.0.1:1/none", &options)
            .expect("a lazy pool");
        let storage = Storage::new(Some(store), true, Duration::from_secs(5));
        assert_eq!(ping(&storage).await, None);
        assert!(storage.is_degraded());
    }
}
