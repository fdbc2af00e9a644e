//! Step 7, compact: a trim as stored.
//!
//! A tool result cut down to fit the window: what the client sent (by chain
//! hash) and what goes upstream in its place. Stored with its compaction.

use super::ChainHash;
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrimRecord {
    /// Chain hash of the message as the client sent it.
    pub message_hash: ChainHash,
    /// What goes upstream in its place.
    pub replacement: Value,
    pub original_bytes: usize,
    pub kept_bytes: usize,
}
