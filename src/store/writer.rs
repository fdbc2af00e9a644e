//! Step 3, persist: the writer.
//!
//! Writes off the request path, in group commits: requests hand their new
//! messages and their figures to one writer task, which writes whatever has
//! queued up since its last commit in a single transaction. The queue is
//! bounded in bytes and in entries; a request that finds it full is
//! forwarded all the same, marked degraded, and its messages are written by
//! the conversation's next request, which re-sends them.

use super::{MessageBatch, NewMessage, RequestRecord, Storage};
use crate::conversation::{ChainHash, TenantId};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tracing::Instrument;

/// Writes waiting, whatever their size.
pub const QUEUE_ENTRIES: usize = 16_384;

/// Writes per transaction: large enough that a busy instance commits a few
/// dozen times a second, small enough that one commit stays short.
const MAX_BATCH: usize = 512;

/// How long the writer lets writes gather after the first of a batch.
const LINGER: std::time::Duration = std::time::Duration::from_millis(10);

/// Builds the rows of a request's messages from the first not yet stored.
pub type RowsFrom = Box<dyn FnOnce(usize) -> Vec<NewMessage> + Send>;

/// One request's messages, to be written from `known_stored` on (0: ask the
/// store how much of the chain it has).
pub struct MessageWrite {
    pub tenant: TenantId,
    pub label: Option<String>,
    pub chain: Vec<ChainHash>,
    pub known_stored: usize,
    pub rows_from: RowsFrom,
    /// Told whether the messages are stored (a compaction waits for it).
    pub done: oneshot::Sender<bool>,
}

/// The queue was full: nothing was queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueFull;

enum Job {
    Messages(MessageWrite, OwnedSemaphorePermit),
    Record(Box<RequestRecord>),
    /// Answered once everything queued before it is written.
    Flush(oneshot::Sender<()>),
}

/// Cheap to clone: clones share the queue.
#[derive(Clone)]
pub struct Writer {
    queue: mpsc::Sender<Job>,
    bytes: Arc<Semaphore>,
    queue_bytes: usize,
}

impl Writer {
    /// Starts the writer task for `storage`, holding at most `queue_bytes`
    /// of messages.
    pub fn start(storage: Storage, queue_bytes: usize) -> Self {
        let (queue, jobs) = mpsc::channel(QUEUE_ENTRIES);
        tokio::spawn(run(storage, jobs).in_current_span());
        let queue_bytes = queue_bytes.clamp(1, Semaphore::MAX_PERMITS);
        Self {
            queue,
            bytes: Arc::new(Semaphore::new(queue_bytes)),
            queue_bytes,
        }
    }

    /// Queues a request's messages; `bytes` is what they weigh in memory.
    pub fn messages(&self, write: MessageWrite, bytes: usize) -> Result<(), QueueFull> {
        // A write larger than the whole queue is taken only when it is empty.
        let weight = bytes.clamp(1, self.queue_bytes);
        let weight = u32::try_from(weight).unwrap_or(u32::MAX);
        let Ok(permit) = self.bytes.clone().try_acquire_many_owned(weight) else {
            return Err(full("messages"));
        };
        self.queue
            .try_send(Job::Messages(write, permit))
            .map_err(|_| full("messages"))
    }

    /// Queues a request's figures for the operator page.
    pub fn record(&self, record: RequestRecord) -> Result<(), QueueFull> {
        self.queue
            .try_send(Job::Record(Box::new(record)))
            .map_err(|_| full("record"))
    }

    /// Waits until everything queued so far is written (or failed).
    pub async fn flush(&self) {
        let (done, written) = oneshot::channel();
        if self.queue.send(Job::Flush(done)).await.is_ok() {
            let _ = written.await;
        }
    }
}

fn full(what: &'static str) -> QueueFull {
    metrics::counter!("condenser_write_queue_full_total", "write" => what).increment(1);
    QueueFull
}

async fn run(storage: Storage, mut jobs: mpsc::Receiver<Job>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while jobs.recv_many(&mut batch, MAX_BATCH).await > 0 {
        // Nothing waits on a write but a compaction (which then waits for
        // a summary): a few milliseconds more make the commits larger and
        // fewer, and each costs both processes a round of statements.
        if batch.len() < MAX_BATCH {
            tokio::time::sleep(LINGER).await;
            while batch.len() < MAX_BATCH {
                let Ok(job) = jobs.try_recv() else { break };
                batch.push(job);
            }
        }
        metrics::histogram!("condenser_write_batch_size").record(batch.len() as f64);
        write(&storage, std::mem::take(&mut batch)).await;
    }
}

/// Writes one batch. When the transaction fails on a reachable database,
/// each write is tried on its own, so one refused row sinks no other
/// request's messages.
async fn write(storage: &Storage, batch: Vec<Job>) {
    let mut messages = Vec::new();
    // Held until the batch is written: the queue's byte bound covers
    // what is being written too.
    let mut permits = Vec::new();
    let mut records = Vec::new();
    let mut flushes = Vec::new();
    for job in batch {
        match job {
            Job::Messages(write, permit) => {
                messages.push(write);
                permits.push(permit);
            }
            Job::Record(record) => records.push(*record),
            Job::Flush(done) => flushes.push(done),
        }
    }
    let pending = prepare(storage, messages).await;
    if commit(storage, &pending, &records).await {
        pending.into_iter().for_each(|p| p.finish(storage, true));
    } else if storage.is_degraded() {
        pending.into_iter().for_each(|p| p.finish(storage, false));
    } else {
        for one in pending {
            let stored = commit(storage, std::slice::from_ref(&one), &[]).await;
            one.finish(storage, stored);
        }
        for record in &records {
            commit(storage, &[], std::slice::from_ref(record)).await;
        }
    }
    drop(permits);
    for done in flushes {
        let _ = done.send(());
    }
}

/// A request's new rows, ready to insert.
struct Pending {
    tenant: TenantId,
    label: Option<String>,
    head: Option<ChainHash>,
    rows: Vec<NewMessage>,
    done: Option<oneshot::Sender<bool>>,
}

impl Pending {
    fn finish(mut self, storage: &Storage, stored: bool) {
        if stored {
            if let Some(head) = self.head {
                storage.memory().remember_stored(head);
            }
        } else {
            // Writes queued after this one may count on it: every chain is
            // looked up again.
            storage.memory().forget_stored();
        }
        if let Some(done) = self.done.take() {
            let _ = done.send(stored);
        }
    }
}

/// Finds out what each write must insert: from what memory knew, or from
/// the store when memory knew nothing of the chain.
async fn prepare(storage: &Storage, writes: Vec<MessageWrite>) -> Vec<Pending> {
    let mut pending = Vec::with_capacity(writes.len());
    for write in writes {
        let stored = if write.known_stored > 0 {
            Some(write.known_stored)
        } else {
            let (tenant, chain) = (&write.tenant, &write.chain);
            storage
                .run("stored_prefix", |s| async move {
                    s.stored_prefix_len(tenant, chain).await
                })
                .await
        };
        let Some(stored) = stored else {
            storage.memory().forget_stored();
            let _ = write.done.send(false);
            continue;
        };
        let rows = if stored < write.chain.len() {
            (write.rows_from)(stored)
        } else {
            Vec::new()
        };
        pending.push(Pending {
            tenant: write.tenant,
            label: write.label,
            head: write.chain.last().copied(),
            rows,
            done: Some(write.done),
        });
    }
    pending
}

/// One transaction; true when it committed. Marks the writes done only on
/// success, so a failed batch can be retried write by write.
async fn commit(storage: &Storage, pending: &[Pending], records: &[RequestRecord]) -> bool {
    let batches: Vec<MessageBatch<'_>> = pending
        .iter()
        .map(|p| MessageBatch {
            tenant: &p.tenant,
            label: p.label.as_deref(),
            messages: &p.rows,
        })
        .collect();
    let batches = &batches;
    let written = storage
        .run("write_batch", |s| async move {
            s.write_batch(batches, records).await
        })
        .await;
    let Some(count) = written else {
        return false;
    };
    metrics::counter!("condenser_messages_stored_total").increment(count);
    true
}
