//! Step 3, persist: what is stored, known in memory.
//!
//! What this instance remembers of the store, so that a request that needs
//! no compaction goes upstream without a database round trip: the stored
//! compactions, and which chain links are stored for which conversation
//! (a link stored for one conversation is stored, but the next
//! conversation to reach it must still record it among its heads).
//!
//! Both are caches, and a cache can be stale or short. The rule that keeps
//! that safe: everything remembered is content-addressed and was read from
//! or written to the store, so applying it is never wrong; what is missing
//! costs at most one extra round trip (the upstream's overflow, after which
//! the compaction step reads the store), never a wrong rewrite. Other
//! instances' compactions and deletions arrive by Postgres notifications
//! (`store::notify`); on SQLite there is one instance per file.

use crate::conversation::{ChainHash, ConversationId, TenantId};
use crate::domain::Compaction;
use quick_cache::sync::Cache;
use quick_cache::Weighter;
use std::sync::Arc;

/// Bytes of compactions kept: summaries are a few KB, so tens of thousands
/// of conversations.
pub const COMPACTION_BYTES: u64 = 64 * 1024 * 1024;

/// Chain links remembered as stored, about 110 bytes each with their
/// conversation and the cache's own bookkeeping: 55 MB.
pub const STORED_LINKS: usize = 500_000;

/// A remembered compaction and whose it is (for forgetting a tenant).
#[derive(Debug)]
struct Remembered {
    tenant: TenantId,
    compaction: Compaction,
}

#[derive(Clone)]
struct BySize;

impl Weighter<ChainHash, Arc<Remembered>> for BySize {
    fn weight(&self, _key: &ChainHash, value: &Arc<Remembered>) -> u64 {
        let compaction = &value.compaction;
        let trims = compaction.trims.len() * std::mem::size_of::<crate::domain::TrimRecord>();
        (std::mem::size_of::<Remembered>()
            + compaction.summary.len()
            + compaction.model.len()
            + compaction.trigger.as_str().len()
            + trims) as u64
    }
}

/// Cheap to clone: clones share the caches.
#[derive(Clone)]
pub struct StoreMemory {
    compactions: Arc<Cache<ChainHash, Arc<Remembered>, BySize>>,
    stored: Arc<Cache<(ConversationId, ChainHash), ()>>,
}

impl Default for StoreMemory {
    fn default() -> Self {
        Self::with_capacity(COMPACTION_BYTES, STORED_LINKS)
    }
}

impl StoreMemory {
    pub fn with_capacity(compaction_bytes: u64, stored_links: usize) -> Self {
        // Estimated items only size the table up front; weight bounds it.
        let estimated = (compaction_bytes / 4096).max(16) as usize;
        Self {
            compactions: Arc::new(Cache::with_weighter(estimated, compaction_bytes, BySize)),
            stored: Arc::new(Cache::new(stored_links.max(16))),
        }
    }

    /// The remembered compaction covering the most of `chain`: the one
    /// whose prefix is the latest link of `chain` remembered. Walks from the
    /// end, so a request costs one lookup per message at most.
    pub fn deepest_compaction(&self, chain: &[ChainHash]) -> Option<Compaction> {
        let found = chain
            .iter()
            .rev()
            .find_map(|link| self.compactions.get(link));
        found.map(|remembered| remembered.compaction.clone())
    }

    pub fn remember_compaction(&self, tenant: &TenantId, compaction: &Compaction) {
        let remembered = Remembered {
            tenant: tenant.clone(),
            compaction: compaction.clone(),
        };
        self.compactions
            .insert(compaction.prefix_hash, Arc::new(remembered));
    }

    /// How many leading links of `chain` are known to be stored for
    /// `conversation`. A stored link implies its whole prefix is: messages
    /// are written in chain order, each batch after the prefix it extends,
    /// and a write that relied on a link a failed write was to store fails
    /// too (`store::write::writer`).
    pub fn stored_prefix_len(&self, conversation: &ConversationId, chain: &[ChainHash]) -> usize {
        chain
            .iter()
            .rposition(|link| self.is_stored(conversation, link))
            .map_or(0, |last| last + 1)
    }

    /// Whether `link` is remembered as stored for `conversation`.
    pub fn is_stored(&self, conversation: &ConversationId, link: &ChainHash) -> bool {
        self.stored.get(&(*conversation, *link)).is_some()
    }

    /// Records that `link` and everything before it is stored, and that
    /// `conversation` reaches it.
    pub fn remember_stored(&self, conversation: &ConversationId, link: ChainHash) {
        self.stored.insert((*conversation, link), ());
    }

    /// After a write of `links` failed: what this conversation's later
    /// writes counted on is looked up again. Other conversations, and
    /// other chains, keep what they knew.
    pub fn forget_links(&self, conversation: &ConversationId, links: &[ChainHash]) {
        for link in links {
            self.stored.remove(&(*conversation, *link));
        }
    }

    /// After messages were deleted (retention, pruning, an operator): what
    /// was stored may be no more, so the next request of each conversation
    /// asks the store again.
    pub fn forget_stored(&self) {
        self.stored.clear();
    }

    /// After a compaction row was deleted.
    pub fn forget_compaction(&self, prefix: &ChainHash) {
        self.compactions.remove(prefix);
    }

    /// Before reloading the compactions from the store.
    pub fn forget_compactions(&self) {
        self.compactions.clear();
    }

    /// After a tenant's data was deleted: nothing of it may be served again.
    pub fn forget_tenant(&self, tenant: &TenantId) {
        self.compactions
            .retain(|_, remembered| &remembered.tenant != tenant);
        self.forget_stored();
    }

    pub fn remembered_compactions(&self) -> usize {
        self.compactions.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(key: &[u8], len: usize) -> (TenantId, Vec<ChainHash>) {
        let tenant = TenantId::from_credential(b"", Some(key));
        let mut link = ChainHash::root(&tenant, b"system");
        let mut chain = vec![link];
        for index in 0..len {
            link = link.next(format!("message {index}").as_bytes());
            chain.push(link);
        }
        (tenant, chain)
    }

    fn compaction(chain: &[ChainHash], prefix_len: usize) -> Compaction {
        Compaction {
            prefix_hash: chain[prefix_len],
            base_hash: chain[0],
            prefix_len: prefix_len as i64,
            summary: format!("summary of {prefix_len}"),
            summary_tokens: 5,
            messages_compacted: prefix_len as i64,
            tokens_before: 100,
            tokens_after: 10,
            model: "m".into(),
            trigger: crate::domain::Trigger::Overflow,
            trims: Vec::new(),
            duration_ms: 1,
            created_at_ms: 1,
        }
    }

    #[test]
    fn the_deepest_remembered_compaction_of_the_chain_applies() {
        let memory = StoreMemory::default();
        let (tenant, links) = chain(b"k", 30);
        assert_eq!(memory.deepest_compaction(&links), None);
        memory.remember_compaction(&tenant, &compaction(&links, 10));
        memory.remember_compaction(&tenant, &compaction(&links, 20));
        let found = memory.deepest_compaction(&links[..25]).expect("found");
        assert_eq!(found.prefix_len, 20);
        let found = memory.deepest_compaction(&links[..15]).expect("found");
        assert_eq!(found.prefix_len, 10);
        let (_, other) = chain(b"another key", 30);
        assert_eq!(memory.deepest_compaction(&other), None);
    }

    #[test]
    fn a_stored_link_stands_for_its_prefix_until_forgotten() {
        let memory = StoreMemory::default();
        let (_, links) = chain(b"k", 10);
        let id = ConversationId::first_turn(&links);
        assert_eq!(memory.stored_prefix_len(&id, &links), 0);
        memory.remember_stored(&id, links[6]);
        assert_eq!(memory.stored_prefix_len(&id, &links), 7);
        assert_eq!(memory.stored_prefix_len(&id, &links[..4]), 0);
        memory.forget_stored();
        assert_eq!(memory.stored_prefix_len(&id, &links), 0);
    }

    /// A link is stored once, but each conversation reaching it records
    /// its head: another conversation starts from what the store says.
    /// A failed write forgets its own chain's links, no other's.
    #[test]
    fn stored_links_are_known_per_conversation_and_forgotten_per_chain() {
        let memory = StoreMemory::default();
        let (tenant, links) = chain(b"k", 10);
        let (_, others) = chain(b"other", 10);
        let (mine, sibling) = (
            ConversationId::first_turn(&links),
            ConversationId::session(&tenant, b"s"),
        );
        let other = ConversationId::first_turn(&others);
        memory.remember_stored(&mine, links[10]);
        memory.remember_stored(&other, others[10]);
        assert_eq!(memory.stored_prefix_len(&sibling, &links), 0);
        memory.forget_links(&mine, &links[5..]);
        assert_eq!(memory.stored_prefix_len(&mine, &links), 0);
        assert_eq!(memory.stored_prefix_len(&other, &others), 11);
    }

    #[test]
    fn forgetting_a_tenant_keeps_the_others() {
        let memory = StoreMemory::default();
        let (gone, gone_links) = chain(b"gone", 5);
        let (kept, kept_links) = chain(b"kept", 5);
        memory.remember_compaction(&gone, &compaction(&gone_links, 3));
        memory.remember_compaction(&kept, &compaction(&kept_links, 3));
        memory.forget_tenant(&gone);
        assert_eq!(memory.deepest_compaction(&gone_links), None);
        assert!(memory.deepest_compaction(&kept_links).is_some());
    }

    #[test]
    fn memory_stays_within_its_byte_budget() {
        let memory = StoreMemory::with_capacity(64 * 1024, 1_000);
        let (tenant, links) = chain(b"k", 2_000);
        for prefix_len in 1..2_000 {
            let mut big = compaction(&links, prefix_len);
            big.summary = "x".repeat(1_000);
            memory.remember_compaction(&tenant, &big);
        }
        assert!(memory.compactions.weight() <= 64 * 1024);
        assert!(memory.remembered_compactions() < 100);
    }
}
