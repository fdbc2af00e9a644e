//! Step 7, compact: a compaction, as made and as stored.
//!
//! Which prefix of a chain a summary stands for, with what it cost and
//! why it ran. Written by compaction, stored and read back by the store,
//! applied by the rewrite, shown by the operator's views.

use super::{ChainHash, Trigger, TrimRecord};

/// A stored summary of messages `1..=prefix_len` of the chain ending at
/// `prefix_hash`. Used both to insert a compaction and to read one back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compaction {
    /// h_c: hash of the last compacted message.
    pub prefix_hash: ChainHash,
    /// The compaction this one replaces, or the root h_0.
    pub base_hash: ChainHash,
    /// c: messages 1..=c are summarized.
    pub prefix_len: i64,
    /// The raw summary text, without the marker wrapper.
    pub summary: String,
    pub summary_tokens: i64,
    pub messages_compacted: i64,
    pub tokens_before: i64,
    pub tokens_after: i64,
    /// The model that wrote the summary.
    pub model: String,
    /// Why it ran.
    pub trigger: Trigger,
    /// Tool results cut down in the kept tail (a JSON column).
    pub trims: Vec<TrimRecord>,
    pub duration_ms: i64,
    pub created_at_ms: i64,
}
