//! Trimmed tool results, stored with a compaction so every later request
//! gets the same bytes (provider prompt caches keep hitting).

use super::plan::Plan;
use super::sizing::Layout;
use super::Job;
use crate::conversation::{ChainHash, TrimRecord};

use serde_json::Value;
use std::collections::HashMap;

/// The trims of the new compaction: the current one's that are still in
/// the kept tail, plus the planner's new ones.
pub fn trims_for(job: &Job<'_>, plan: &Plan, layout: &Layout) -> Vec<TrimRecord> {
    let chain = &job.conversation.chain;
    let kept: Vec<String> = chain[plan.cut + 1..]
        .iter()
        .map(ChainHash::to_hex)
        .collect();
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
            .trim_tool_result(&job.request.messages[index], keep_bytes)
        else {
            continue;
        };
        let hash = chain[index + 1].to_hex();
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

/// `messages[from..]` with trimmed ones replaced. `chain[i + 1]` is the hash
/// of `messages[i]`.
pub fn apply_trims(
    messages: &[Value],
    chain: &[ChainHash],
    from: usize,
    trims: &[TrimRecord],
) -> Vec<Value> {
    let by_hash: HashMap<&str, &Value> = trims
        .iter()
        .map(|r| (r.message_hash.as_str(), &r.replacement))
        .collect();
    messages[from..]
        .iter()
        .zip(&chain[from + 1..])
        .map(|(message, hash)| {
            by_hash
                .get(hash.to_hex().as_str())
                .map_or_else(|| message.clone(), |r| (*r).clone())
        })
        .collect()
}
