//! Step 3, persist: queueing what is new, once the upstream accepted it.
//!
//! Writing what is new (ARCHITECTURE.md step 3), off the latency path. A
//! request's messages are queued only once the upstream accepted the
//! request (a 2xx), or once a summary of them was written (which the
//! upstream answered with the same credential): a request the upstream
//! refuses (401, 403, 404, 422, …) stores nothing, so whoever can reach the
//! listener cannot fill the database. Only a compaction waits for the
//! write.

use crate::conversation::Conversation;
use crate::protocol::{Adapter, ChatRequest};
use crate::store::{MessageWrite, NewMessage, QueueFull, RowsFrom, Storage, Writer};
use std::sync::Arc;
use tokio::sync::oneshot;

/// Resolves to whether the request's messages are stored; `Err` when the
/// queue was full and they were not queued (the next request of the
/// conversation re-sends and stores them).
pub type Persisted = Result<oneshot::Receiver<bool>, QueueFull>;

/// One request's messages, waiting for the upstream to accept the request.
pub struct Persist {
    writer: Writer,
    storage: Storage,
    adapter: &'static dyn Adapter,
    body_bytes: usize,
    /// When the request arrived: its conversation's activity.
    at_ms: i64,
    queued: Option<Persisted>,
    /// The write finished: whether it stored the messages.
    done: Option<bool>,
}

impl Persist {
    pub fn new(
        writer: &Writer,
        storage: &Storage,
        adapter: &'static dyn Adapter,
        body_bytes: usize,
        at_ms: i64,
    ) -> Self {
        Self {
            writer: writer.clone(),
            storage: storage.clone(),
            adapter,
            body_bytes,
            at_ms,
            queued: None,
            done: None,
        }
    }

    /// The upstream accepted the request: queue its messages, once.
    pub fn accept(&mut self, conversation: &Conversation, request: &Arc<ChatRequest>) {
        self.queue_once(conversation, request, false);
    }

    /// Queues the messages once; `waited` when a compaction will wait for
    /// the write.
    fn queue_once(
        &mut self,
        conversation: &Conversation,
        request: &Arc<ChatRequest>,
        waited: bool,
    ) {
        if self.queued.is_none() && self.done.is_none() {
            let (writer, storage) = (&self.writer, &self.storage);
            let messages = MessagesToQueue {
                adapter: self.adapter,
                conversation,
                request,
                body_bytes: self.body_bytes,
                at_ms: self.at_ms,
                waited,
            };
            let queued = queue(writer, storage, messages);
            self.queued = Some(queued);
        }
    }

    /// Queues the messages if they are not yet, and waits for the write:
    /// whether they are stored. A compaction covering them is stored only
    /// then.
    pub async fn durable(
        &mut self,
        conversation: &Conversation,
        request: &Arc<ChatRequest>,
    ) -> bool {
        self.queue_once(conversation, request, true);
        if let Some(done) = self.done {
            return done;
        }
        let stored = match self.queued.take() {
            Some(Ok(written)) => written.await.unwrap_or(false),
            _ => false,
        };
        self.done = Some(stored);
        stored
    }

    /// Whether the messages were accepted for storing at all.
    pub fn accepted(&self) -> bool {
        self.queued.is_some() || self.done.is_some()
    }

    /// Whether the queue was full when they were.
    pub fn queue_full(&self) -> bool {
        matches!(self.queued, Some(Err(QueueFull)))
    }
}

/// One request's messages, as [`queue`] takes them.
struct MessagesToQueue<'a> {
    adapter: &'static dyn Adapter,
    conversation: &'a Conversation,
    request: &'a Arc<ChatRequest>,
    body_bytes: usize,
    at_ms: i64,
    /// A compaction waits for the write: a chain memory knows stored goes
    /// through the writer all the same, behind the write that stores it,
    /// and is stored only if that one was.
    waited: bool,
}

/// Queues the messages of `request` not known to be stored for its
/// conversation. What this instance remembers decides where the new part
/// starts; a chain it knows nothing of (or knows only for another
/// conversation, which still has to record its head) is looked up by the
/// writer, not here.
fn queue(writer: &Writer, storage: &Storage, messages: MessagesToQueue<'_>) -> Persisted {
    let MessagesToQueue {
        adapter,
        conversation,
        request,
        body_bytes,
        at_ms,
        waited,
    } = messages;
    let known_stored = storage
        .memory()
        .stored_prefix_len(&conversation.id, &conversation.chain);
    let (done, stored) = oneshot::channel();
    if storage.store().is_none() || (known_stored == conversation.chain.len() && !waited) {
        let _ = done.send(storage.store().is_some());
        return Ok(stored);
    }
    // Only what is new is serialized, here when memory says where it
    // starts; a chain memory knows nothing of waits for the writer's lookup
    // with the whole request, and weighs that much in the queue.
    let (rows_from, weight): (RowsFrom, usize) = if known_stored > 0 {
        let rows = rows_from(adapter, conversation, request, known_stored);
        let weight = rows.iter().map(|row| row.body.len()).sum();
        (Box::new(move |_| rows), weight)
    } else {
        let (conversation, request) = (conversation.clone(), request.clone());
        let rows = move |first| rows_from(adapter, &conversation, &request, first);
        (Box::new(rows), body_bytes)
    };
    let write = MessageWrite {
        tenant: conversation.tenant.clone(),
        conversation: conversation.id,
        label: conversation.label.clone(),
        chain: conversation.chain.clone(),
        known_stored,
        at_ms,
        rows_from,
        done,
        waited,
    };
    // Remembered as stored as it is queued: the writer takes writes in
    // order, so this conversation's next request, even if it comes before
    // the commit, need only queue what it adds. A failed write makes the
    // writer forget this chain's links, and fail the writes that counted
    // on them: the next request stores the whole chain again. Remembered
    // before the write is queued, so that forgetting, which may come as
    // soon as it is, cannot be undone by a remembering that comes after.
    queue_remembered(writer, storage, write, weight)?;
    Ok(stored)
}

/// Queues `write`, its head remembered as stored first (see [`queue`]);
/// forgotten again when the queue was full.
fn queue_remembered(
    writer: &Writer,
    storage: &Storage,
    write: MessageWrite,
    weight: usize,
) -> Result<(), QueueFull> {
    let memory = storage.memory();
    let conversation = write.conversation;
    let head = write.chain.last().copied();
    let claimed = head.filter(|head| !memory.is_stored(&conversation, head));
    if let Some(head) = head {
        memory.remember_stored(&conversation, head);
    }
    writer.messages(write, weight).inspect_err(|_| {
        if let Some(head) = claimed {
            memory.forget_links(&conversation, &[head]);
        }
    })
}

/// One row per chain link from `first` on: the system part is position 0,
/// message `i` position `i`. Only what is new is parsed, if it was not,
/// and serialized.
fn rows_from(
    adapter: &dyn Adapter,
    conversation: &Conversation,
    request: &ChatRequest,
    first: usize,
) -> Vec<NewMessage> {
    (first..=request.message_count())
        .map(|position| {
            let (role, body) = match position.checked_sub(1) {
                None => ("system".to_string(), request.system().to_string()),
                Some(index) => {
                    let message = request.message(index);
                    (adapter.role(&message).to_string(), message.to_string())
                }
            };
            NewMessage {
                hash: conversation.chain[position],
                parent: position.checked_sub(1).map(|p| conversation.chain[p]),
                position: position as i64,
                role,
                token_estimate: crate::tokens::estimate_bytes(body.len()) as i64,
                body,
            }
        })
        .collect()
}
