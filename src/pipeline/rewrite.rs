//! Step 4, rewrite: system part, then the summary as its own message, then
//! the messages after the compacted prefix. Deterministic, so the same
//! history always produces the same bytes and provider caches keep hitting.

use crate::compaction::apply_trims;
use crate::conversation::ChainHash;
use crate::domain::Compaction;
use crate::protocol::{Adapter, ChatRequest};
use serde_json::Value;

/// The request as it goes upstream when `compaction` applies.
pub fn upstream_body(
    adapter: &dyn Adapter,
    request: &ChatRequest,
    chain: &[ChainHash],
    compaction: &Compaction,
    summary_role: &str,
) -> Vec<u8> {
    let summary = (!compaction.summary.is_empty())
        .then(|| adapter.summary_message(summary_role, &compaction.summary));
    let messages = upstream_messages(request, chain, compaction, summary.as_ref());
    adapter.build(request, &messages)
}

/// The messages to send upstream in place of the client's, borrowed.
fn upstream_messages<'a>(
    request: &'a ChatRequest,
    chain: &[ChainHash],
    compaction: &'a Compaction,
    summary: Option<&'a Value>,
) -> Vec<&'a Value> {
    let from = (compaction.prefix_len.max(0) as usize).min(request.messages().len());
    let mut messages = Vec::with_capacity(request.messages().len() - from + 1);
    messages.extend(summary);
    messages.extend(apply_trims(
        request.messages(),
        chain,
        from,
        &compaction.trims,
    ));
    messages
}

/// The client's messages `compaction` leaves after its summary, with its
/// trims applied: what the upstream gets after the summary message.
pub fn kept_messages<'a>(
    request: &'a ChatRequest,
    chain: &[ChainHash],
    compaction: &'a Compaction,
) -> Vec<&'a Value> {
    upstream_messages(request, chain, compaction, None)
}
