//! Beside the flow, retention: dead-end branches.
//!
//! Which messages of a conversation (the messages its heads reach) are a
//! dead end: pure, so the rule that protects history is tested on its own.
//!
//! A message is kept when it is on the path from the root to any of:
//! a stored compaction's prefix (a summary stands for it), a message
//! another conversation reaches (its history, not this one's to prune), the
//! newest head of each root the conversation has ([`newest_heads`]), the
//! head of its newest request, or its newest message (the live branches),
//! or any message newer than the grace cutoff (a branch still in use); the
//! caller passes all but the last two in `keep`. Everything else is a whole subtree no one reaches any
//! more, so deleting it leaves no orphan.
//!
//! A session has several roots: an agent's main thread, its sub-agents and
//! its side calls each send a system prompt of their own. Each root's
//! newest head is a live branch, however long ago the session last used
//! that root.

use crate::conversation::ChainHash;
use std::collections::{HashMap, HashSet};

/// A message's place in its tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    pub hash: ChainHash,
    pub parent: Option<ChainHash>,
    pub created_at_ms: i64,
}

/// The messages of `nodes` that may be deleted: on no kept path, and (so)
/// with every message of their subtree older than `before_ms`.
pub fn dead_ends(nodes: &[Link], keep: &[ChainHash], before_ms: i64) -> Vec<ChainHash> {
    let parents: HashMap<ChainHash, Option<ChainHash>> =
        nodes.iter().map(|n| (n.hash, n.parent)).collect();
    let newest = nodes
        .iter()
        .max_by_key(|n| (n.created_at_ms, n.hash.to_hex()));
    let recent = nodes.iter().filter(|n| n.created_at_ms >= before_ms);
    let tips = keep
        .iter()
        .copied()
        .chain(newest.map(|n| n.hash))
        .chain(recent.map(|n| n.hash));
    let mut kept: HashSet<ChainHash> = HashSet::new();
    for tip in tips {
        let mut at = Some(tip);
        // Stops at the first message already kept: its path is kept too.
        while let Some(hash) = at {
            if !parents.contains_key(&hash) || !kept.insert(hash) {
                break;
            }
            at = parents.get(&hash).copied().flatten();
        }
    }
    nodes
        .iter()
        .map(|n| n.hash)
        .filter(|hash| !kept.contains(hash))
        .collect()
}

/// The newest of `heads` (hash, when recorded) under each root of
/// `nodes`: the live branch of each thread of the conversation. A head's
/// root is its topmost ancestor in `nodes`.
pub fn newest_heads(nodes: &[Link], heads: &[(ChainHash, i64)]) -> Vec<ChainHash> {
    let parents: HashMap<ChainHash, Option<ChainHash>> =
        nodes.iter().map(|n| (n.hash, n.parent)).collect();
    let root_of = |mut at: ChainHash| {
        while let Some(Some(parent)) = parents.get(&at) {
            if !parents.contains_key(parent) {
                break;
            }
            at = *parent;
        }
        at
    };
    let mut newest: HashMap<ChainHash, (i64, ChainHash)> = HashMap::new();
    for &(head, at) in heads {
        let entry = newest.entry(root_of(head)).or_insert((at, head));
        if (at, head.to_hex()) > (entry.0, entry.1.to_hex()) {
            *entry = (at, head);
        }
    }
    newest.into_values().map(|(_, head)| head).collect()
}

/// Leaves of the tree once `removed` are gone: its branch count.
pub fn leaves(nodes: &[Link], removed: &[ChainHash]) -> usize {
    let removed: HashSet<&ChainHash> = removed.iter().collect();
    let remaining: Vec<&Link> = nodes
        .iter()
        .filter(|n| !removed.contains(&n.hash))
        .collect();
    let parents: HashSet<ChainHash> = remaining.iter().filter_map(|n| n.parent).collect();
    remaining
        .iter()
        .filter(|n| !parents.contains(&n.hash))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(n: u8) -> ChainHash {
        ChainHash::from_hex(&format!("{n:02x}").repeat(32)).expect("hex")
    }

    fn link(n: u8, parent: Option<u8>, at: i64) -> Link {
        Link {
            hash: hash(n),
            parent: parent.map(hash),
            created_at_ms: at,
        }
    }

    /// root 0 → 1 → 2 → 3 → 4 (main line, newest), dead ends 10 (off 1),
    /// 20 → 21 (off 2), 30 (off 3, but recent), 40 (off 1, a compaction's prefix).
    fn tree() -> Vec<Link> {
        vec![
            link(0, None, 0),
            link(1, Some(0), 1),
            link(2, Some(1), 2),
            link(3, Some(2), 3),
            link(4, Some(3), 500),
            link(10, Some(1), 2),
            link(20, Some(2), 3),
            link(21, Some(20), 4),
            link(30, Some(3), 200),
            link(40, Some(1), 5),
        ]
    }

    #[test]
    fn old_dead_ends_go_whole_and_the_newest_branch_stays() {
        let mut doomed = dead_ends(&tree(), &[hash(40)], 100);
        doomed.sort_by_key(ChainHash::to_hex);
        assert_eq!(doomed, vec![hash(10), hash(20), hash(21)]);
    }

    #[test]
    fn a_compaction_prefix_and_a_recent_branch_are_never_pruned() {
        let doomed = dead_ends(&tree(), &[hash(40)], 100);
        for kept in [0, 1, 2, 3, 4, 30, 40] {
            assert!(!doomed.contains(&hash(kept)), "message {kept} was pruned");
        }
    }

    #[test]
    fn nothing_is_pruned_before_the_grace_period_is_over() {
        assert!(dead_ends(&tree(), &[], 0).is_empty());
    }

    /// A session's side call under another system prompt (root 50), idle
    /// as long as its main thread's dead ends, is a live branch of its own.
    #[test]
    fn each_roots_newest_head_is_kept() {
        let mut nodes = tree();
        nodes.extend([
            link(50, None, 1),
            link(51, Some(50), 2),
            link(52, Some(50), 3),
        ]);
        let heads = [(hash(4), 500), (hash(10), 2), (hash(51), 2), (hash(52), 3)];
        let mut kept = newest_heads(&nodes, &heads);
        kept.sort_by_key(ChainHash::to_hex);
        assert_eq!(kept, vec![hash(4), hash(52)]);
        let doomed = dead_ends(&nodes, &kept, 100);
        for kept in [50, 52] {
            assert!(!doomed.contains(&hash(kept)), "message {kept} was pruned");
        }
        assert!(doomed.contains(&hash(51)), "the side call's own dead end");
    }

    #[test]
    fn the_branch_count_is_the_leaves_left() {
        let nodes = tree();
        assert_eq!(leaves(&nodes, &[]), 5);
        assert_eq!(leaves(&nodes, &[hash(10), hash(20), hash(21)]), 3);
    }
}
