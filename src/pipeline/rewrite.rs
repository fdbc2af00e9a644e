//! Step 4, "rewrite": system part, then the summary as its own message, then
//! the messages after the compacted prefix. Deterministic, so the same
//! history always produces the same bytes and provider caches keep hitting.

use crate::compaction::apply_trims;
use crate::protocol::{Adapter, ChatRequest};
use crate::store::Compaction;
use serde_json::Value;

/// The messages to send upstream in place of the client's.
pub fn upstream_messages(
    adapter: &dyn Adapter,
    request: &ChatRequest,
    chain: &[crate::conversation::ChainHash],
    compaction: &Compaction,
    summary_role: &str,
) -> Vec<Value> {
    let from = (compaction.prefix_len.max(0) as usize).min(request.messages.len());
    let mut messages = Vec::with_capacity(request.messages.len() - from + 1);
    if !compaction.summary.is_empty() {
        messages.push(adapter.summary_message(summary_role, &compaction.summary));
    }
    messages.extend(apply_trims(
        &request.messages,
        chain,
        from,
        &compaction.trims,
    ));
    messages
}
