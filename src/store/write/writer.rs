//! Step 3, persist: the writer.
//!
//! Writes off the request path, in group commits: requests hand their new
//! messages and their figures to one writer task, which writes whatever has
//! queued up since its last commit in a single transaction. The queue is
//! bounded in bytes and in entries; a request that finds it full is
//! forwarded all the same, marked degraded, and its messages are written by
//! the conversation's next request, which re-sends them.
//!
//! A write carries only what memory did not know stored (`known_stored`),
//! and what memory knew may be a write still queued before it. So a write
//! that fails forgets the links of its own chain (no other's), and a write
//! whose first row's parent memory no longer vouches for looks it up: when
//! the store lacks it, the write fails too. A chain is never stored past a
//! gap; the conversation's next request re-sends it and stores it whole.

use super::{MessageBatch, NewMessage, RequestRecord};
use crate::conversation::{ChainHash, ConversationId, TenantId};
use crate::store::Storage;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, Notify, OwnedSemaphorePermit, Semaphore};
use tracing::Instrument;

/// Writes waiting, whatever their size.
pub const QUEUE_ENTRIES: usize = 16_384;

/// Writes per transaction: large enough that a busy instance commits a few
/// dozen times a second, small enough that one commit stays short.
const MAX_BATCH: usize = 512;

/// The share of the queue's bytes that ends a linger early: a commit that
/// large is not made cheaper by waiting, and the queue must not fill, and
/// turn requests away, while the writer waits.
const LINGER_QUEUE_SHARE: usize = 4;

/// Builds the rows of a request's messages from the first not yet stored.
pub type RowsFrom = Box<dyn FnOnce(usize) -> Vec<NewMessage> + Send>;

/// One request's messages, to be written from `known_stored` on (0: ask the
/// store how much of the chain it has), and its head recorded for its
/// conversation.
pub struct MessageWrite {
    pub tenant: TenantId,
    pub conversation: ConversationId,
    pub label: Option<String>,
    pub chain: Vec<ChainHash>,
    pub known_stored: usize,
    /// When the request arrived.
    pub at_ms: i64,
    pub rows_from: RowsFrom,
    /// Told whether the messages are stored (a compaction waits for it).
    pub done: oneshot::Sender<bool>,
    /// Someone waits on `done`: the batch is written without lingering.
    pub waited: bool,
}

/// The queue was full: nothing was queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueFull;

/// What is queued and not yet written, and what failed: what a shutdown
/// that cannot wait longer reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Backlog {
    /// Requests whose messages wait to be written.
    pub message_writes: usize,
    /// What those messages weigh.
    pub message_bytes: usize,
    /// Requests' figures waiting to be written.
    pub records: usize,
    /// Requests whose messages could not be written, since start.
    pub failed_writes: u64,
}

/// What [`Backlog`] reports, kept as the queue changes: a write is counted
/// in before it is sent to the writer task and out once that task wrote
/// it, so a count never goes below zero.
#[derive(Default)]
struct Counts {
    message_writes: AtomicUsize,
    records: AtomicUsize,
    failed_writes: AtomicU64,
}

enum Job {
    Messages(MessageWrite, OwnedSemaphorePermit),
    Record(Box<RequestRecord>),
    /// Answered once everything queued before it is written.
    Flush(oneshot::Sender<()>),
}

impl Job {
    /// Whether someone waits for this job's batch to be written.
    fn waited(&self) -> bool {
        match self {
            Job::Messages(write, _) => write.waited,
            Job::Record(_) => false,
            Job::Flush(_) => true,
        }
    }
}

/// Cheap to clone: clones share the queue.
#[derive(Clone)]
pub struct Writer {
    queue: mpsc::Sender<Job>,
    bytes: Arc<Semaphore>,
    queue_bytes: usize,
    counts: Arc<Counts>,
    /// Told when a write someone waits on is queued, or enough has
    /// gathered for a batch.
    urgent: Arc<Notify>,
}

impl Writer {
    /// Starts the writer task for `storage`, holding at most `queue_bytes`
    /// of messages, letting each commit gather for up to `linger`.
    ///
    /// The writer lets writes gather after the first of a batch, unless
    /// something waits on the batch (a compaction, a flush) or enough has
    /// gathered ([`Writer::gathered_enough`]). Each commit costs a round of
    /// about six statements, and on SQLite a hand-off to its connection's
    /// thread and back for each: at 1,000 requests a second, 10 ms made 100
    /// commits and about 1.7 context switches a request, 50 ms about 0.7;
    /// at an agent's pace (a history every 50 ms) 50 ms made every request
    /// a commit of its own, 22 switches each on SQLite (bench/README.md,
    /// "Context switches per request"). A request's answer never waits on
    /// it; a crash loses what lingers, as it loses whatever is queued (the
    /// conversation's next request re-sends its messages).
    pub fn start(storage: Storage, queue_bytes: usize, linger: Duration) -> Self {
        let (queue, jobs) = mpsc::channel(QUEUE_ENTRIES);
        let counts = Arc::new(Counts::default());
        let urgent = Arc::new(Notify::new());
        let writing = run(storage, jobs, counts.clone(), urgent.clone(), linger);
        tokio::spawn(writing.in_current_span());
        let queue_bytes = queue_bytes.clamp(1, Semaphore::MAX_PERMITS);
        Self {
            queue,
            bytes: Arc::new(Semaphore::new(queue_bytes)),
            queue_bytes,
            counts,
            urgent,
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
        // Counted before it is sent: the writer may take it, and count it
        // out, before `try_send` returns.
        self.counts.message_writes.fetch_add(1, Ordering::AcqRel);
        let waited = write.waited;
        if self.queue.try_send(Job::Messages(write, permit)).is_err() {
            self.counts.message_writes.fetch_sub(1, Ordering::AcqRel);
            return Err(full("messages"));
        }
        if waited || self.gathered_enough() {
            self.urgent.notify_one();
        }
        Ok(())
    }

    /// Queues a request's figures for the operator page.
    pub fn record(&self, record: RequestRecord) -> Result<(), QueueFull> {
        self.counts.records.fetch_add(1, Ordering::AcqRel);
        if self.queue.try_send(Job::Record(Box::new(record))).is_err() {
            self.counts.records.fetch_sub(1, Ordering::AcqRel);
            return Err(full("record"));
        }
        if self.gathered_enough() {
            self.urgent.notify_one();
        }
        Ok(())
    }

    /// Whether what waits makes a batch worth writing without lingering: a
    /// full batch of writes, or a share of the queue's bytes (both counted
    /// until written, so the batch the writer lingers on counts too).
    fn gathered_enough(&self) -> bool {
        let writes = self.counts.message_writes.load(Ordering::Acquire)
            + self.counts.records.load(Ordering::Acquire);
        writes >= MAX_BATCH || self.held_bytes() >= self.queue_bytes / LINGER_QUEUE_SHARE
    }

    /// Bytes of messages queued or being written.
    fn held_bytes(&self) -> usize {
        self.queue_bytes - self.bytes.available_permits().min(self.queue_bytes)
    }

    /// Waits until everything queued so far is written (or failed).
    pub async fn flush(&self) {
        let (done, written) = oneshot::channel();
        if self.queue.send(Job::Flush(done)).await.is_ok() {
            self.urgent.notify_one();
            let _ = written.await;
        }
    }

    /// What waits to be written now, and what failed so far.
    pub fn backlog(&self) -> Backlog {
        Backlog {
            message_writes: self.counts.message_writes.load(Ordering::Acquire),
            message_bytes: self.held_bytes(),
            records: self.counts.records.load(Ordering::Acquire),
            failed_writes: self.counts.failed_writes.load(Ordering::Acquire),
        }
    }
}

fn full(what: &'static str) -> QueueFull {
    metrics::counter!("condenser_write_queue_full_total", "write" => what).increment(1);
    QueueFull
}

async fn run(
    storage: Storage,
    mut jobs: mpsc::Receiver<Job>,
    counts: Arc<Counts>,
    urgent: Arc<Notify>,
    lingering: Duration,
) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while jobs.recv_many(&mut batch, MAX_BATCH).await > 0 {
        // Nothing waits on a write but a compaction or a flush, which cut
        // the linger short: otherwise lingering makes the commits larger
        // and fewer, and each costs a round of statements.
        if batch.len() < MAX_BATCH {
            linger(&mut jobs, &mut batch, &urgent, lingering).await;
        }
        metrics::histogram!("condenser_write_batch_size").record(batch.len() as f64);
        write(&storage, std::mem::take(&mut batch), &counts).await;
    }
}

/// Lets the batch gather for `lingering`, or until a write someone waits
/// on is queued or enough has gathered, then takes up to [`MAX_BATCH`].
/// Writes queued meanwhile do not wake the writer, but the one that makes
/// the batch worth writing: it takes them all at the end.
async fn linger(
    jobs: &mut mpsc::Receiver<Job>,
    batch: &mut Vec<Job>,
    urgent: &Notify,
    lingering: Duration,
) {
    if !lingering.is_zero() && !batch.iter().any(Job::waited) {
        tokio::select! {
            () = tokio::time::sleep(lingering) => {}
            () = urgent.notified() => {}
        }
    }
    while batch.len() < MAX_BATCH {
        let Ok(job) = jobs.try_recv() else { break };
        batch.push(job);
    }
}

/// Writes one batch, then answers the flushes queued in it.
async fn write(storage: &Storage, batch: Vec<Job>, counts: &Counts) {
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
    let writes = messages.len();
    let failed = write_all(storage, messages, &records).await;
    counts.message_writes.fetch_sub(writes, Ordering::AcqRel);
    counts.records.fetch_sub(records.len(), Ordering::AcqRel);
    counts.failed_writes.fetch_add(failed, Ordering::AcqRel);
    drop(permits);
    for done in flushes {
        let _ = done.send(());
    }
}

/// Writes the messages and records of one batch in one transaction. When
/// it fails on a reachable database, each write is tried on its own, so
/// one refused row sinks no other request's messages; a write that relied
/// on one that failed fails too. Returns how many message writes failed.
async fn write_all(
    storage: &Storage,
    messages: Vec<MessageWrite>,
    records: &[RequestRecord],
) -> u64 {
    let mut failed = 0;
    let pending = prepare(storage, messages, &mut failed).await;
    if commit(storage, &pending, records).await {
        pending.into_iter().for_each(|p| {
            p.finish(storage, true);
        });
    } else if storage.is_degraded() {
        for one in pending {
            failed += u64::from(!one.finish(storage, false));
        }
    } else {
        for one in pending {
            let stored = one.still_extends_stored(storage).await
                && commit(storage, std::slice::from_ref(&one), &[]).await;
            failed += u64::from(!one.finish(storage, stored));
        }
        for record in records {
            commit(storage, &[], std::slice::from_ref(record)).await;
        }
    }
    failed
}

/// A request's new rows, ready to insert.
struct Pending {
    tenant: TenantId,
    conversation: ConversationId,
    label: Option<String>,
    chain: Vec<ChainHash>,
    at_ms: i64,
    start: Start,
    rows: Vec<NewMessage>,
    done: Option<oneshot::Sender<bool>>,
}

impl Pending {
    fn new(write: MessageWrite, start: Start) -> Self {
        let rows = if start.from < write.chain.len() {
            (write.rows_from)(start.from)
        } else {
            Vec::new()
        };
        Self {
            tenant: write.tenant,
            conversation: write.conversation,
            label: write.label,
            chain: write.chain,
            at_ms: write.at_ms,
            start,
            rows,
            done: Some(write.done),
        }
    }

    fn batch(&self) -> MessageBatch<'_> {
        MessageBatch {
            tenant: &self.tenant,
            conversation: &self.conversation,
            label: self.label.as_deref(),
            chain: &self.chain,
            messages: &self.rows,
            at_ms: self.at_ms,
        }
    }

    /// Whether the prefix this write extends is still stored, when memory
    /// vouched for it: the write that was to store it may have failed
    /// since.
    async fn still_extends_stored(&self, storage: &Storage) -> bool {
        let Start { from, vouched } = self.start;
        if !vouched || from == 0 {
            return true;
        }
        let link = &self.chain[from - 1];
        if storage.memory().is_stored(&self.conversation, link) {
            return true;
        }
        let stored = stored_prefix(storage, &self.tenant, &self.chain[..from]).await;
        stored == Some(from)
    }

    /// Tells the waiter whether the messages are stored, and memory;
    /// returns `stored`.
    fn finish(mut self, storage: &Storage, stored: bool) -> bool {
        let memory = storage.memory();
        if stored {
            if let Some(head) = self.chain.last() {
                memory.remember_stored(&self.conversation, *head);
            }
        } else {
            // Writes queued after this one may count on these links: they
            // look them up again. Other chains keep what memory knew.
            let from = self.start.from.min(self.chain.len().saturating_sub(1));
            memory.forget_links(&self.conversation, &self.chain[from..]);
        }
        if let Some(done) = self.done.take() {
            let _ = done.send(stored);
        }
        stored
    }
}

/// Finds out what each write must insert: from what memory knew, checked
/// against writes that failed since, or from the store when memory knew
/// nothing of the chain. A write that cannot start is failed at once.
async fn prepare(storage: &Storage, writes: Vec<MessageWrite>, failed: &mut u64) -> Vec<Pending> {
    let mut pending: Vec<Pending> = Vec::with_capacity(writes.len());
    for write in writes {
        let known = Known {
            tenant: &write.tenant,
            conversation: &write.conversation,
            chain: &write.chain,
            stored: write.known_stored,
            // Memory may have let the link go; a write before this one in
            // the batch stores it all the same.
            in_batch: write.known_stored > 0
                && pending.iter().any(|p| {
                    let at = write.known_stored - 1;
                    p.tenant == write.tenant && p.chain.get(at) == Some(&write.chain[at])
                }),
        };
        match first_row_to_write(storage, known).await {
            Some(start) => pending.push(Pending::new(write, start)),
            None => {
                *failed += 1;
                let from = write.known_stored.min(write.chain.len().saturating_sub(1));
                storage
                    .memory()
                    .forget_links(&write.conversation, &write.chain[from..]);
                let _ = write.done.send(false);
            }
        }
    }
    pending
}

/// What a write counted on, as [`first_row_to_write`] reads it (a write
/// itself is not `Sync`: its parts are passed).
struct Known<'a> {
    tenant: &'a TenantId,
    conversation: &'a ConversationId,
    chain: &'a [ChainHash],
    /// Links memory knew stored when the write was queued.
    stored: usize,
    /// A write before it in the same batch stores the link it extends.
    in_batch: bool,
}

/// Where a write's rows start.
#[derive(Debug, Clone, Copy)]
struct Start {
    /// The first link written: those before it are stored, by the store's
    /// word, or by memory's when `vouched`.
    from: usize,
    /// Memory said `chain[from - 1]` was stored, perhaps by a write still
    /// queued before this one.
    vouched: bool,
}

/// Where a write's rows start: from memory's word, while it still holds;
/// else the store's. `None` when the store cannot say, or lacks the prefix
/// the write's rows extend: storing them would leave a gap. The store's
/// word may be stale by the time the rows are inserted (a deletion of
/// another conversation); `Store::write_batch` checks it again there.
async fn first_row_to_write(storage: &Storage, known: Known<'_>) -> Option<Start> {
    let Known {
        tenant,
        conversation,
        chain,
        stored,
        in_batch,
    } = known;
    if stored == 0 {
        let found = stored_prefix(storage, tenant, chain).await?;
        return Some(Start {
            from: found,
            vouched: false,
        });
    }
    if in_batch || storage.memory().is_stored(conversation, &chain[stored - 1]) {
        return Some(Start {
            from: stored,
            vouched: true,
        });
    }
    let found = stored_prefix(storage, tenant, &chain[..stored]).await?;
    (found == stored).then_some(Start {
        from: stored,
        vouched: false,
    })
}

/// How much of `chain` the store has; `None` when it cannot say.
async fn stored_prefix(storage: &Storage, tenant: &TenantId, chain: &[ChainHash]) -> Option<usize> {
    storage
        .run("stored_prefix", |s| async move {
            s.stored_prefix_len(tenant, chain).await
        })
        .await
}

/// One transaction; true when it committed. Marks the writes done only on
/// success, so a failed batch can be retried write by write.
async fn commit(storage: &Storage, pending: &[Pending], records: &[RequestRecord]) -> bool {
    let batches: Vec<MessageBatch<'_>> = pending.iter().map(Pending::batch).collect();
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    const LINGER: Duration = Duration::from_millis(200);

    /// A write of one message of a conversation of its own, whose `done`
    /// tells when its batch was written.
    fn one_message(n: u8) -> (MessageWrite, oneshot::Receiver<bool>) {
        let tenant = TenantId::from_credential(b"salt", Some(&[n; 40]));
        let root = ChainHash::root(&tenant, b"system");
        let (done, written) = oneshot::channel();
        let write = MessageWrite {
            conversation: ConversationId::session(&tenant, &[n]),
            tenant,
            label: None,
            chain: vec![root, root.next(b"user")],
            known_stored: 0,
            at_ms: 0,
            rows_from: Box::new(|_| Vec::new()),
            done,
            waited: false,
        };
        (write, written)
    }

    /// Lets the writer take what is queued and start lingering.
    async fn lingering() {
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
    }

    /// How long, on the runtime's paused clock, a write of `bytes` waits
    /// for its batch, queued after `before` bytes of other writes.
    async fn batch_wait(queue_bytes: usize, before: usize, bytes: usize) -> Duration {
        // No database: a batch is "written" (failed) at once, so the
        // paused clock only moves while the writer lingers.
        let writer = Writer::start(
            Storage::new(None, true, Duration::from_secs(5)),
            queue_bytes,
            LINGER,
        );
        let started = Instant::now();
        let (first, _) = one_message(0);
        writer.messages(first, before).expect("queued");
        lingering().await;
        let (write, written) = one_message(1);
        writer.messages(write, bytes).expect("queued");
        let _ = written.await;
        started.elapsed()
    }

    #[tokio::test(start_paused = true)]
    async fn small_writes_linger_for_company() {
        assert_eq!(batch_wait(1 << 20, 1_000, 1_000).await, LINGER);
    }

    #[tokio::test(start_paused = true)]
    async fn the_linger_is_the_one_configured() {
        for linger in [Duration::ZERO, Duration::from_millis(30)] {
            let storage = Storage::new(None, true, Duration::from_secs(5));
            let writer = Writer::start(storage, 1 << 20, linger);
            let started = Instant::now();
            let (write, written) = one_message(0);
            writer.messages(write, 1_000).expect("queued");
            let _ = written.await;
            assert_eq!(started.elapsed(), linger);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_quarter_of_the_queue_is_written_without_lingering() {
        let queue = 1 << 20;
        assert_eq!(
            batch_wait(queue, queue / 8, queue / 8).await,
            Duration::ZERO,
            "two writes that fill a quarter of the queue are a batch worth writing"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_batch_of_writes_is_written_without_lingering() {
        let storage = Storage::new(None, true, Duration::from_secs(5));
        let writer = Writer::start(storage, 1 << 30, LINGER);
        let started = Instant::now();
        let mut last = None;
        for n in 0..MAX_BATCH {
            let (write, written) = one_message((n % 251) as u8);
            writer.messages(write, 1).expect("queued");
            if n == 0 {
                lingering().await;
            }
            last = Some(written);
        }
        let _ = last.expect("written").await;
        assert_eq!(started.elapsed(), Duration::ZERO);
    }
}
