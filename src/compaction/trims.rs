//! Step 7, compact: trimmed tool results.
//!
//! Trimmed tool results, stored with a compaction so every later request
//! gets the same bytes (provider prompt caches keep hitting).

use super::plan::Plan;
use super::sizing::Layout;
use super::Job;
use crate::conversation::ChainHash;
use crate::domain::TrimRecord;

use serde_json::Value;
use std::collections::HashMap;

/// The trims of the new compaction: the current one's that are still in
/// the kept tail, plus the planner's new ones.
pub fn trims_for(job: &Job<'_>, plan: &Plan, layout: &Layout) -> Vec<TrimRecord> {
    let chain = &job.conversation.chain;
    let kept = &chain[plan.cut + 1..];
    let mut records: Vec<TrimRecord> = job
        .current
        .map(|c| c.trims.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|record| kept.contains(&record.message_hash))
        .collect();
    for &(index, keep_tokens) in &plan.trims {
        let keep_bytes = layout.calibration.bytes(keep_tokens);
        let Some(trimmed) = job
            .adapter
            .trim_tool_result(&job.request.messages()[index], keep_bytes)
        else {
            continue;
        };
        let hash = chain[index + 1];
        records.retain(|record| record.message_hash != hash);
        records.push(TrimRecord {
            message_hash: hash,
            replacement: trimmed.message,
            original_bytes: trimmed.original_bytes,
            kept_bytes: trimmed.kept_bytes,
        });
    }
    records
}

/// `messages[from..]` with trimmed ones replaced, borrowed: nothing is
/// copied until the request is serialized. `chain[i + 1]` is the hash of
/// `messages[i]`.
pub fn apply_trims<'a>(
    messages: &'a [Value],
    chain: &[ChainHash],
    from: usize,
    trims: &'a [TrimRecord],
) -> Vec<&'a Value> {
    let tail = messages[from..].iter();
    if trims.is_empty() {
        return tail.collect();
    }
    let by_hash: HashMap<ChainHash, &Value> = trims
        .iter()
        .map(|r| (r.message_hash, &r.replacement))
        .collect();
    tail.zip(&chain[from + 1..])
        .map(|(message, hash)| by_hash.get(hash).copied().unwrap_or(message))
        .collect()
}
