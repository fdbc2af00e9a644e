//! Step 3, persist: a store allowed to fail.
//!
//! The store as the pipeline sees it: optional, and allowed to fail. When
//! the database is down the proxy keeps forwarding (degraded), logs that once
//! per interval, counts it, says so in a response header, and tries the
//! database again every interval until it answers. "Down" is a circuit
//! breaker's verdict: the database could not be reached, or several
//! statements in a row failed. One failing statement degrades nothing.

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
    warned_at_ms: AtomicU64,
    /// Set once migrations ran (they may not have at a degraded start).
    migrated: AtomicBool,
}

impl Storage {
    pub fn new(store: Option<Store>, migrated: bool, retry_every: Duration) -> Self {
        let health = Health {
            started: Instant::now(),
            retry_every,
            failed_at_ms: AtomicU64::new(0),
            consecutive_failures: AtomicU32::new(0),
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

    /// What this instance remembers of the store (see `store::memory`).
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
        if !self.health.migrated.load(Ordering::Acquire) {
            if let Err(error) = store.migrate().await {
                self.record_failure(operation, &error);
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
                self.record_failure(operation, &error);
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
        if self.health.failed_at_ms.swap(0, Ordering::AcqRel) != 0 {
            tracing::info!("database reachable again: storing and compacting resumed");
        }
    }

    fn record_failure(&self, operation: &'static str, error: &StoreError) {
        metrics::counter!("condenser_storage_errors_total", "operation" => operation).increment(1);
        let in_a_row = self
            .health
            .consecutive_failures
            .fetch_add(1, Ordering::AcqRel)
            + 1;
        if !error.is_unreachable() && in_a_row < FAILURES_TO_TRIP {
            tracing::warn!(operation, error.message = %error, "storage statement failed");
            return;
        }
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
