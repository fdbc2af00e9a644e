//! Writing what is new (DESIGN.md step 3), off the latency path: it runs
//! beside the upstream call, and only a compaction waits for it.

use crate::conversation::Conversation;
use crate::protocol::{Adapter, ChatRequest};
use crate::store::{NewMessage, Storage};
use std::sync::Arc;
use tokio::task::JoinHandle;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

/// Starts storing the messages of `request` not stored yet. The handle
/// resolves to false when the database could not be reached.
pub fn spawn(
    background: &TaskTracker,
    storage: &Storage,
    adapter: &'static dyn Adapter,
    conversation: &Conversation,
    request: &Arc<ChatRequest>,
) -> JoinHandle<bool> {
    let storage = storage.clone();
    let conversation = conversation.clone();
    let request = request.clone();
    background.spawn(
        async move {
            let tenant = &conversation.tenant;
            let chain = &conversation.chain;
            let Some(stored) = storage
                .run("stored_prefix", |s| async move {
                    s.stored_prefix_len(tenant, chain).await
                })
                .await
            else {
                return false;
            };
            if stored >= conversation.chain.len() {
                return true;
            }
            let new = &rows_from(adapter, &conversation, &request, stored);
            let label = conversation.label.as_deref();
            let written = storage
                .run("insert_messages", |s| async move {
                    s.insert_messages(tenant, label, new).await
                })
                .await;
            if let Some(count) = written {
                metrics::counter!("condenser_messages_stored_total").increment(count);
            }
            written.is_some()
        }
        .in_current_span(),
    )
}

/// One row per chain link from `first` on: the system part is position 0,
/// message `i` position `i`. Only what is new is serialized.
fn rows_from(
    adapter: &dyn Adapter,
    conversation: &Conversation,
    request: &ChatRequest,
    first: usize,
) -> Vec<NewMessage> {
    let system = std::iter::once(("system", &request.system));
    let messages = request.messages.iter().map(|m| (adapter.role(m), m));
    system
        .chain(messages)
        .enumerate()
        .skip(first)
        .map(|(position, (role, body))| {
            let body = body.to_string();
            NewMessage {
                hash: conversation.chain[position],
                parent: position.checked_sub(1).map(|p| conversation.chain[p]),
                position: position as i64,
                role: role.to_string(),
                token_estimate: crate::tokens::estimate_bytes(body.len()) as i64,
                body,
            }
        })
        .collect()
}
