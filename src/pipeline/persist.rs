//! Step 3, persist: queueing what is new.
//!
//! Writing what is new (ARCHITECTURE.md step 3), off the latency path: the
//! request hands its messages to the writer's queue and goes upstream; only
//! a compaction waits for them to be stored.

use crate::conversation::Conversation;
use crate::protocol::{Adapter, ChatRequest};
use crate::store::{MessageWrite, NewMessage, QueueFull, RowsFrom, Storage, Writer};
use std::sync::Arc;
use tokio::sync::oneshot;

/// Resolves to whether the request's messages are stored; `Err` when the
/// queue was full and they were not queued (the next request of the
/// conversation re-sends and stores them).
pub type Persisted = Result<oneshot::Receiver<bool>, QueueFull>;

/// Queues the messages of `request` not known to be stored. What this
/// instance remembers decides where the new part starts; a chain it knows
/// nothing of is looked up by the writer, not here.
pub fn queue(
    writer: &Writer,
    storage: &Storage,
    adapter: &'static dyn Adapter,
    conversation: &Conversation,
    request: &Arc<ChatRequest>,
    body_bytes: usize,
) -> Persisted {
    let known_stored = storage.memory().stored_prefix_len(&conversation.chain);
    let (done, stored) = oneshot::channel();
    if storage.store().is_none() || known_stored == conversation.chain.len() {
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
        label: conversation.label.clone(),
        chain: conversation.chain.clone(),
        known_stored,
        rows_from,
        done,
    };
    writer.messages(write, weight)?;
    // Remembered as stored once queued: the writer takes writes in order,
    // so this conversation's next request, even if it comes before the
    // commit, need only queue what it adds. A failed write makes the
    // writer forget, and the next request stores the whole chain again.
    if let Some(head) = conversation.chain.last() {
        storage.memory().remember_stored(*head);
    }
    Ok(stored)
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
