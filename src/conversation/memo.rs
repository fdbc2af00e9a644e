//! Step 2, identify: remembered links.
//!
//! A bounded memo of chain links, so that a re-sent history costs a cheap
//! digest per message instead of a canonicalization and a SHA-256.
//!
//! Agents send their whole history on every turn. The link a message
//! extends the chain with depends only on the link before it and on the
//! message's parsed value, so `(h_{i-1}, digest(message)) → h_i` can be
//! remembered: a message seen before under the same previous link gets its
//! link back from here. The links themselves are computed exactly as
//! without the memo ([`ChainHash`]); the memo only skips recomputing them.
//!
//! The digest is a 128-bit XXH3 under a secret drawn at start-up, fed by
//! an unambiguous walk of the value (type tags, lengths, keys in order), so
//! no two different values feed it the same bytes. 128 bits make an
//! accidental collision out of reach; the secret keeps a client from
//! crafting one, which could at worst make its own messages take another
//! of its own messages' links (the previous link, and so the tenant, is
//! part of the key).
//!
//! Probing the memo once per message costs a cache miss each: for a
//! 200-message history, more than the digests. So whole chains are kept
//! too, under a running digest of the root's and the messages' digests: a
//! history re-sent, or grown by a turn, finds all it shares with an
//! earlier request in one probe, and only its new messages are linked one
//! by one.
//!
//! A large body's reader already names its bytes through each message
//! (`protocol::resent`, which hashes them once to find the earlier body
//! they begin with). A chain is kept under that name too, with the root's
//! digest: a re-sent history is then found without digesting its messages
//! again, and only those after the shared bytes are digested and linked.

use super::{ChainHash, TenantId};
use crate::protocol::Piece;
use quick_cache::sync::Cache;
use quick_cache::Weighter;
use serde_json::Value;
use std::sync::Arc;
use xxhash_rust::xxh3::Xxh3;

/// How many links the memo keeps by default: a 200-message history of
/// each of 300 conversations.
///
/// An entry is a 49-byte key and a 32-byte link; with quick_cache's
/// bookkeeping (slab links, hash table, ghost entries, vectors grown by
/// doubling) a full memo of 65,536 takes 13.9 MB, 212 bytes an entry
/// (counted with a counting allocator, 3 × capacity distinct inserts).
pub const DEFAULT_CAPACITY: usize = 65_536;

/// Bytes of whole chains kept by default (32 a link): the last request of
/// about 2,500 conversations of 200 messages.
pub const DEFAULT_CHAIN_BYTES: u64 = 16 * 1024 * 1024;

/// How many messages short of its end a history is looked for among the
/// chains kept: an agent's turn adds a reply and a user message, a round
/// of tool calls a few more.
const CHAIN_PROBES: usize = 8;

/// Remembered chain links, shared by every request of the process.
pub struct ChainMemo {
    links: Cache<Key, ChainHash>,
    /// Whole chains, by the running digest of what they link.
    chains: Cache<[u8; 16], Kept, ChainBytes>,
    /// A hasher holding the per-process secret, cloned for every digest.
    hasher: Xxh3,
}

/// A whole chain as kept: its links, and whether every part it links
/// carries text alone.
#[derive(Clone)]
struct Kept {
    links: Arc<[ChainHash]>,
    text_only: bool,
}

/// What a request's messages were found by: the longest kept chain they
/// begin with, the names of their bytes (`(n, name)`, longest first), and
/// their digests (`ends` as [`ChainMemo::chain_digests`] gives them) when
/// the names found nothing.
struct Found {
    kept: Option<Kept>,
    /// Whether `kept` is the whole chain, found by its bytes' name.
    whole_by_bytes: bool,
    by_bytes: Vec<(usize, [u8; 16])>,
    digests: Vec<[u8; 16]>,
    ends: Vec<(usize, [u8; 16])>,
}

/// A request's chain, and whether its system part and messages carry text
/// alone (what calibrating from its usage needs to know).
#[derive(Debug, PartialEq, Eq)]
pub struct Linked {
    pub chain: Vec<ChainHash>,
    pub text_only: bool,
}

#[derive(Clone)]
struct ChainBytes;

impl Weighter<[u8; 16], Kept> for ChainBytes {
    fn weight(&self, _key: &[u8; 16], kept: &Kept) -> u64 {
        (std::mem::size_of_val::<[ChainHash]>(&kept.links) + 64) as u64
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    /// `None` for the root, whose digest covers the tenant.
    previous: Option<ChainHash>,
    digest: [u8; 16],
}

impl ChainMemo {
    /// A memo of at most `capacity` links.
    pub fn new(capacity: usize) -> Self {
        Self::with_capacities(capacity, DEFAULT_CHAIN_BYTES)
    }

    /// A memo of at most `links` links and `chain_bytes` of whole chains.
    pub fn with_capacities(links: usize, chain_bytes: u64) -> Self {
        let mut secret = [0u8; 192];
        getrandom::fill(&mut secret).expect("the operating system's random source is available");
        // Estimated items only size the table up front; weight bounds it.
        let chains = (chain_bytes / 4096).max(16) as usize;
        Self {
            links: Cache::new(links.max(1)),
            chains: Cache::with_weighter(chains, chain_bytes.max(1), ChainBytes),
            hasher: Xxh3::with_secret(secret),
        }
    }

    /// The chain of `system` and `messages` for `tenant`, the same as
    /// linking them one by one: its root from `root`, the link after
    /// `previous` for message `i` from `link(previous, i)`, each taken from
    /// the memo when it is there. What an earlier chain shares with it is
    /// found in one probe, if it ends at most [`CHAIN_PROBES`] messages
    /// short of it: first by `through(i)`, a digest naming the body's bytes
    /// through message `i` where the body's reader keeps one (no message
    /// is hashed again then), else by the digests of its messages. `None`
    /// when `root` or `link` is: a part that does not parse has no link,
    /// and the chain is not kept.
    ///
    /// Whether the parts carry text alone is asked of `text_only` for the
    /// parts linked here, and remembered with the chain for the rest: a
    /// re-sent history is not searched again.
    #[allow(clippy::too_many_arguments)]
    pub fn chain(
        &self,
        scheme: &str,
        tenant: &TenantId,
        system: &[Piece<'_>],
        messages: &[Piece<'_>],
        through: impl Fn(usize) -> Option<u128>,
        root: impl FnOnce() -> Option<ChainHash>,
        mut link: impl FnMut(ChainHash, usize) -> Option<ChainHash>,
        text_only: impl Fn(&Piece<'_>) -> bool,
    ) -> Option<Linked> {
        let root_digest = self.digest(&["root", scheme, tenant.as_str()], system);
        let found = self.find(scheme, &root_digest, messages, through);
        let mut chain = Vec::with_capacity(messages.len() + 1);
        let mut text = match &found.kept {
            Some(kept) => {
                chain.extend_from_slice(&kept.links);
                kept.text_only
            }
            None => {
                let key = Key {
                    previous: None,
                    digest: root_digest,
                };
                chain.push(self.remembered(key, root)?);
                system.iter().all(&text_only)
            }
        };
        let kept = chain.len();
        for (index, message) in messages.iter().enumerate().skip(kept - 1) {
            let previous = chain[chain.len() - 1];
            let digest = match found.digests.get(index) {
                Some(digest) => *digest,
                None => self.message_digest(scheme, message),
            };
            let key = Key {
                previous: Some(previous),
                digest,
            };
            chain.push(self.remembered(key, || link(previous, index))?);
            text = text && text_only(message);
        }
        let whole = Kept {
            links: Arc::from(chain.as_slice()),
            text_only: text,
        };
        self.keep(&found, whole, kept);
        Some(Linked {
            chain,
            text_only: text,
        })
    }

    /// The longest kept chain `messages` begin with: first by the names of
    /// their bytes, then by their digests (taken only then).
    fn find(
        &self,
        scheme: &str,
        root: &[u8; 16],
        messages: &[Piece<'_>],
        through: impl Fn(usize) -> Option<u128>,
    ) -> Found {
        let by_bytes = self.byte_digests(root, messages.len(), through);
        if let Some(kept) = self.longest_kept(&by_bytes) {
            return Found {
                whole_by_bytes: kept.links.len() == messages.len() + 1,
                kept: Some(kept),
                by_bytes,
                digests: Vec::new(),
                ends: Vec::new(),
            };
        }
        let digests: Vec<[u8; 16]> = messages
            .iter()
            .map(|message| self.message_digest(scheme, message))
            .collect();
        let ends = self.chain_digests(root, &digests);
        Found {
            kept: self.longest_kept(&ends),
            whole_by_bytes: false,
            by_bytes,
            digests,
            ends,
        }
    }

    /// Keeps `whole`, the chain of which `found` had the first `kept`
    /// links, under what the next request will find it by: its bytes'
    /// name, and its messages' digests when they were taken.
    fn keep(&self, found: &Found, whole: Kept, kept: usize) {
        let linked = whole.links.len();
        let named = found.by_bytes.first().filter(|(n, _)| *n + 1 == linked);
        if let Some((_, name)) = named.filter(|_| !found.whole_by_bytes) {
            self.chains.insert(*name, whole.clone());
        }
        if let Some((_, digest)) = found.ends.first().filter(|_| kept < linked) {
            self.chains.insert(*digest, whole);
        }
    }

    /// `(n, digest)` naming the chain of the root and the first `n`
    /// messages by the bytes through message `n - 1` (`through`), for the
    /// last [`CHAIN_PROBES`] + 1 values of `n` it names, longest first.
    fn byte_digests(
        &self,
        root: &[u8; 16],
        messages: usize,
        through: impl Fn(usize) -> Option<u128>,
    ) -> Vec<(usize, [u8; 16])> {
        let shortest = messages.saturating_sub(CHAIN_PROBES).max(1);
        (shortest..=messages)
            .rev()
            .filter_map(|n| {
                let bytes = through(n - 1)?;
                let mut hasher = self.hasher.clone();
                feed_str(&mut hasher, "bytes");
                hasher.update(root);
                feed_len(&mut hasher, b'n', n);
                hasher.update(&bytes.to_le_bytes());
                Some((n, hasher.digest128().to_le_bytes()))
            })
            .collect()
    }

    fn message_digest(&self, scheme: &str, message: &Piece<'_>) -> [u8; 16] {
        self.digest(&["next", scheme], std::slice::from_ref(message))
    }

    /// `(n, digest)` naming the chain of the root and the first `n`
    /// messages, for the last [`CHAIN_PROBES`] + 1 values of `n`, longest
    /// first. Each digest covers the root's and every message's digest
    /// before it, fixed-size, in order.
    fn chain_digests(&self, root: &[u8; 16], messages: &[[u8; 16]]) -> Vec<(usize, [u8; 16])> {
        let mut hasher = self.hasher.clone();
        feed_str(&mut hasher, "chain");
        hasher.update(root);
        let shortest = messages.len().saturating_sub(CHAIN_PROBES);
        let mut ends = Vec::with_capacity(CHAIN_PROBES + 1);
        for (n, digest) in std::iter::once(&[0u8; 16]).chain(messages).enumerate() {
            if n > 0 {
                hasher.update(digest);
            }
            if n >= shortest {
                ends.push((n, hasher.digest128().to_le_bytes()));
            }
        }
        ends.reverse();
        ends
    }

    /// The longest kept chain among `ends`.
    fn longest_kept(&self, ends: &[(usize, [u8; 16])]) -> Option<Kept> {
        ends.iter().find_map(|(n, digest)| {
            self.chains
                .get(digest)
                .filter(|kept| kept.links.len() == n + 1)
        })
    }

    /// The digest of `pieces` under `context`. A piece of the client's
    /// text and a parsed value are tagged apart: the same message may
    /// digest both ways, to different keys, never one for another's.
    fn digest(&self, context: &[&str], pieces: &[Piece<'_>]) -> [u8; 16] {
        let mut hasher = self.hasher.clone();
        for part in context {
            feed_str(&mut hasher, part);
        }
        feed_len(&mut hasher, b'c', pieces.len());
        for piece in pieces {
            match piece {
                Piece::Text(text) => {
                    feed_len(&mut hasher, b'T', text.len());
                    hasher.update(text);
                }
                Piece::Parsed(value) => {
                    hasher.update(b"V");
                    feed(&mut hasher, value);
                }
            }
        }
        hasher.digest128().to_le_bytes()
    }

    fn remembered(
        &self,
        key: Key,
        compute: impl FnOnce() -> Option<ChainHash>,
    ) -> Option<ChainHash> {
        if let Some(link) = self.links.get(&key) {
            return Some(link);
        }
        let link = compute()?;
        self.links.insert(key, link);
        Some(link)
    }

    /// How many links are remembered.
    pub fn len(&self) -> usize {
        self.links.len()
    }

    pub fn is_empty(&self) -> bool {
        self.links.is_empty()
    }
}

impl Default for ChainMemo {
    fn default() -> Self {
        Self::new(DEFAULT_CAPACITY)
    }
}

/// Feeds `value` so that the byte stream determines the value: every node
/// starts with a type tag, and strings, arrays and objects with their
/// length. Object keys go in the map's order: a reordered message misses
/// the memo and is hashed in full, to the same link.
fn feed(hasher: &mut Xxh3, value: &Value) {
    match value {
        Value::Null => hasher.update(b"n"),
        Value::Bool(false) => hasher.update(b"f"),
        Value::Bool(true) => hasher.update(b"t"),
        Value::Number(number) => {
            // serde_json holds a u64, a negative i64 or an f64, and writes
            // each differently (`1` vs `1.0`): the tag keeps them apart.
            let (tag, bits) = if let Some(n) = number.as_u64() {
                (b'u', n)
            } else if let Some(n) = number.as_i64() {
                (b'i', n as u64)
            } else {
                (b'd', number.as_f64().map_or(0, f64::to_bits))
            };
            let mut bytes = [0u8; 9];
            bytes[0] = tag;
            bytes[1..].copy_from_slice(&bits.to_le_bytes());
            hasher.update(&bytes);
        }
        Value::String(text) => {
            hasher.update(b"s");
            feed_str(hasher, text);
        }
        Value::Array(items) => {
            feed_len(hasher, b'a', items.len());
            for item in items {
                feed(hasher, item);
            }
        }
        Value::Object(map) => {
            feed_len(hasher, b'o', map.len());
            for (key, item) in map {
                feed_str(hasher, key);
                feed(hasher, item);
            }
        }
    }
}

fn feed_str(hasher: &mut Xxh3, text: &str) {
    feed_len(hasher, b'l', text.len());
    hasher.update(text.as_bytes());
}

fn feed_len(hasher: &mut Xxh3, tag: u8, len: usize) {
    let mut bytes = [0u8; 9];
    bytes[0] = tag;
    bytes[1..].copy_from_slice(&(len as u64).to_le_bytes());
    hasher.update(&bytes);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn link(text: &[u8]) -> ChainHash {
        let tenant = TenantId::from_credential(b"", Some(b"k"));
        ChainHash::root(&tenant, text)
    }

    /// One link or root at a time, as `chain` takes them.
    impl ChainMemo {
        fn next(
            &self,
            scheme: &str,
            previous: ChainHash,
            message: &Value,
            compute: impl FnOnce() -> ChainHash,
        ) -> ChainHash {
            let key = Key {
                previous: Some(previous),
                digest: self.digest_of(&["next", scheme], message),
            };
            self.remembered(key, || Some(compute())).expect("computed")
        }

        fn root(
            &self,
            scheme: &str,
            tenant: &TenantId,
            system: &Value,
            compute: impl FnOnce() -> ChainHash,
        ) -> ChainHash {
            let key = Key {
                previous: None,
                digest: self.digest_of(&["root", scheme, tenant.as_str()], system),
            };
            self.remembered(key, || Some(compute())).expect("computed")
        }

        fn digest_of(&self, context: &[&str], value: &Value) -> [u8; 16] {
            self.digest(context, &[Piece::Parsed(value)])
        }
    }

    #[test]
    fn a_remembered_link_is_not_computed_again() {
        let memo = ChainMemo::new(100);
        let previous = link(b"system");
        let message = json!({"role": "user", "content": "hi"});
        let first = memo.next("s", previous, &message, || previous.next(b"hi"));
        let again = memo.next("s", previous, &message, || unreachable!("remembered"));
        assert_eq!(first, again);
        assert_eq!(memo.len(), 1);
    }

    #[test]
    fn another_message_previous_link_or_scheme_is_computed() {
        let memo = ChainMemo::new(100);
        let previous = link(b"system");
        let message = json!({"role": "user", "content": "hi"});
        memo.next("s", previous, &message, || previous.next(b"hi"));
        let computed = |expected: ChainHash| move || expected;
        for (scheme, after, value) in [
            ("s", previous, json!({"role": "user", "content": "hi!"})),
            ("s", link(b"other"), message.clone()),
            ("t", previous, message.clone()),
        ] {
            let fresh = after.next(b"fresh");
            assert_eq!(memo.next(scheme, after, &value, computed(fresh)), fresh);
        }
        assert_eq!(memo.len(), 4);
    }

    #[test]
    fn roots_are_per_tenant_and_apart_from_links() {
        let memo = ChainMemo::new(100);
        let system = json!("be brief");
        let a = TenantId::from_credential(b"", Some(b"a"));
        let b = TenantId::from_credential(b"", Some(b"b"));
        let root_a = ChainHash::root(&a, b"x");
        let root_b = ChainHash::root(&b, b"x");
        assert_eq!(memo.root("s", &a, &system, || root_a), root_a);
        assert_eq!(memo.root("s", &b, &system, || root_b), root_b);
        assert_eq!(memo.root("s", &a, &system, || unreachable!()), root_a);
        assert_eq!(memo.len(), 2);
    }

    /// Values that print alike, or whose parts could run together, feed
    /// different bytes.
    #[test]
    fn different_values_have_different_digests() {
        let memo = ChainMemo::new(1);
        let values = [
            json!(null),
            json!(false),
            json!(true),
            json!(0),
            json!(1),
            json!(1.0),
            json!(-1),
            json!(-1.0),
            json!(0.0),
            json!(-0.0),
            json!(u64::MAX),
            json!(i64::MIN),
            json!(""),
            json!("1"),
            json!("null"),
            json!("ü"),
            json!("u\u{308}"),
            json!([]),
            json!({}),
            json!([[]]),
            json!([null]),
            json!(["a", "b"]),
            json!(["ab"]),
            json!(["a", ["b"]]),
            json!({"a": "b"}),
            json!({"ab": ""}),
            json!({"a": {"b": null}}),
            json!({"a": null, "b": null}),
            json!({"b": null, "a": null}),
            json!([{"a": null}, {"b": null}]),
            json!({"role": "user", "content": "hi", "cache_control": {"type": "ephemeral"}}),
            json!({"role": "user", "content": "hi"}),
        ];
        let digests: std::collections::HashSet<[u8; 16]> = values
            .iter()
            .map(|value| memo.digest_of(&["next", "s"], value))
            .collect();
        assert_eq!(digests.len(), values.len());
        assert_ne!(
            memo.digest_of(&["next", "s"], &json!(1)),
            memo.digest_of(&["next", "t"], &json!(1))
        );
        assert_eq!(
            memo.digest_of(&["next", "s"], &json!({"a": [1, "x"]})),
            memo.digest_of(&["next", "s"], &json!({"a": [1, "x"]}))
        );
    }

    /// Text is digested as bytes, apart from any value, and the pieces of
    /// a system part cannot run together.
    #[test]
    fn text_pieces_have_their_own_digests() {
        let memo = ChainMemo::new(1);
        let digest = |pieces: &[Piece<'_>]| memo.digest(&["root", "s"], pieces);
        let one = json!("1");
        let digests: std::collections::HashSet<[u8; 16]> = [
            digest(&[Piece::Text(b"\"1\"")]),
            digest(&[Piece::Parsed(&one)]),
            digest(&[Piece::Text(b"ab")]),
            digest(&[Piece::Text(b"a"), Piece::Text(b"b")]),
            digest(&[Piece::Text(b"ab"), Piece::Text(b"")]),
            digest(&[]),
            digest(&[Piece::Text(b"")]),
        ]
        .into_iter()
        .collect();
        assert_eq!(digests.len(), 7);
        assert_eq!(digest(&[Piece::Text(b"ab")]), digest(&[Piece::Text(b"ab")]));
    }

    #[test]
    fn each_process_has_its_own_secret() {
        let value = json!({"role": "user", "content": "hi"});
        assert_ne!(
            ChainMemo::new(1).digest_of(&["next", "s"], &value),
            ChainMemo::new(1).digest_of(&["next", "s"], &value)
        );
    }

    #[test]
    fn the_memo_stays_within_its_capacity() {
        let memo = ChainMemo::new(1000);
        let previous = link(b"system");
        for i in 0..10_000 {
            memo.next("s", previous, &json!(i), || previous);
        }
        assert!(memo.len() <= 1000, "{} links kept", memo.len());
    }

    fn history(messages: usize) -> Vec<Value> {
        (0..messages)
            .map(|i| {
                let role = ["user", "assistant"][i % 2];
                json!({"role": role, "content": format!("turn {i}")})
            })
            .collect()
    }

    /// `memo.chain` of `messages`, counting the links it computes.
    fn chain_counting(
        memo: &ChainMemo,
        messages: &[Value],
        computed: &AtomicUsize,
    ) -> Vec<ChainHash> {
        chain_named(memo, messages, |_| None, computed)
    }

    /// As [`chain_counting`], with the bytes through message `i` named by
    /// `through(i)`.
    fn chain_named(
        memo: &ChainMemo,
        messages: &[Value],
        through: impl Fn(usize) -> Option<u128>,
        computed: &AtomicUsize,
    ) -> Vec<ChainHash> {
        let tenant = TenantId::from_credential(b"", Some(b"k"));
        let pieces: Vec<Piece<'_>> = messages.iter().map(Piece::Parsed).collect();
        memo.chain(
            "s",
            &tenant,
            &[Piece::Parsed(&json!("be brief"))],
            &pieces,
            through,
            || {
                computed.fetch_add(1, Ordering::SeqCst);
                Some(ChainHash::root(&tenant, b"be brief"))
            },
            |previous, index| {
                computed.fetch_add(1, Ordering::SeqCst);
                Some(previous.next(messages[index].to_string().as_bytes()))
            },
            |_| true,
        )
        .expect("every link computed")
        .chain
    }

    #[test]
    fn a_history_grown_by_a_turn_links_only_its_new_messages() {
        // One link remembered: only the kept chains can spare computing.
        let memo = ChainMemo::with_capacities(1, DEFAULT_CHAIN_BYTES);
        let computed = AtomicUsize::new(0);
        let first = chain_counting(&memo, &history(6), &computed);
        assert_eq!(computed.swap(0, Ordering::SeqCst), 7);
        let grown = chain_counting(&memo, &history(8), &computed);
        assert_eq!(
            computed.swap(0, Ordering::SeqCst),
            2,
            "the two new messages"
        );
        assert_eq!(grown[..7], first[..]);
        let again = chain_counting(&memo, &history(8), &computed);
        assert_eq!(computed.load(Ordering::SeqCst), 0);
        assert_eq!(again, grown);
        let unmemoized = ChainMemo::with_capacities(1, 1);
        let computed = AtomicUsize::new(0);
        assert_eq!(chain_counting(&unmemoized, &history(8), &computed), grown);
        assert_eq!(computed.load(Ordering::SeqCst), 9, "nothing kept");
    }

    /// A body's reader names the bytes through each message (the re-sent
    /// memo's digests, `protocol::resent`), here by the history's length.
    fn bytes_of(conversation: u128) -> impl Fn(usize) -> Option<u128> {
        move |index| Some(conversation << 32 | index as u128)
    }

    #[test]
    fn a_history_whose_bytes_are_named_is_found_by_them() {
        let memo = ChainMemo::with_capacities(1, DEFAULT_CHAIN_BYTES);
        let computed = AtomicUsize::new(0);
        let plain = chain_counting(&ChainMemo::default(), &history(8), &computed);
        computed.store(0, Ordering::SeqCst);
        let first = chain_named(&memo, &history(6), bytes_of(1), &computed);
        assert_eq!(computed.swap(0, Ordering::SeqCst), 7);
        let grown = chain_named(&memo, &history(8), bytes_of(1), &computed);
        assert_eq!(computed.swap(0, Ordering::SeqCst), 2, "the new messages");
        assert_eq!(grown, plain, "the same chain as linked one by one");
        assert_eq!(grown[..7], first[..]);
        // Found by the bytes alone: messages whose values differ would be
        // linked anew by their digests, so none was looked at.
        let other = history(9)[1..].to_vec();
        let named = chain_named(&memo, &other, bytes_of(1), &computed);
        assert_eq!(computed.swap(0, Ordering::SeqCst), 0);
        assert_eq!(named, grown);
    }

    #[test]
    fn a_history_named_otherwise_is_found_by_its_messages() {
        let memo = ChainMemo::with_capacities(1, DEFAULT_CHAIN_BYTES);
        let computed = AtomicUsize::new(0);
        let first = chain_named(&memo, &history(6), bytes_of(1), &computed);
        computed.store(0, Ordering::SeqCst);
        // The same messages with other bytes around them (another model
        // field, say) are named otherwise: their digests still find them.
        let again = chain_named(&memo, &history(6), bytes_of(2), &computed);
        assert_eq!(computed.swap(0, Ordering::SeqCst), 0);
        assert_eq!(again, first);
        let grown = chain_named(&memo, &history(8), bytes_of(3), &computed);
        assert_eq!(computed.swap(0, Ordering::SeqCst), 2, "the new messages");
        assert_eq!(grown[..7], first[..]);
    }

    #[test]
    fn a_history_that_branches_off_a_kept_one_is_linked_from_the_branch() {
        let memo = ChainMemo::with_capacities(1, DEFAULT_CHAIN_BYTES);
        let computed = AtomicUsize::new(0);
        let kept = chain_counting(&memo, &history(6), &computed);
        let mut branch = history(8);
        branch[6] = json!({"role": "user", "content": "another question"});
        let branched = chain_counting(&memo, &branch, &computed);
        assert_eq!(branched[..7], kept[..]);
        assert_ne!(branched, chain_counting(&memo, &history(8), &computed));
        // A message edited before the kept chain's end shares only the root.
        let mut edited = history(8);
        edited[2] = json!({"role": "user", "content": "edited"});
        let edited = chain_counting(&memo, &edited, &computed);
        assert_eq!(edited[..3], kept[..3]);
        assert_ne!(edited[3], kept[3]);
    }

    /// A message that cannot be linked (its text does not parse) fails
    /// the chain, and a later request with it is linked anew, not taken
    /// from a chain kept half-way.
    #[test]
    fn a_chain_with_a_message_that_cannot_be_linked_is_none_and_not_kept() {
        let memo = ChainMemo::default();
        let tenant = TenantId::from_credential(b"", Some(b"k"));
        let texts: [&[u8]; 3] = [b"{\"a\":1}", b"{\"a\":\"\\ud800\"}", b"{\"a\":2}"];
        let pieces: Vec<Piece<'_>> = texts.iter().map(|text| Piece::Text(text)).collect();
        let linked = AtomicUsize::new(0);
        let chain = || {
            memo.chain(
                "s",
                &tenant,
                &[],
                &pieces,
                |_| None,
                || Some(ChainHash::root(&tenant, b"")),
                |previous, index| {
                    linked.fetch_add(1, Ordering::SeqCst);
                    let value: Value = serde_json::from_slice(texts[index]).ok()?;
                    Some(previous.next(value.to_string().as_bytes()))
                },
                |_| true,
            )
        };
        assert_eq!(chain(), None);
        assert_eq!(linked.swap(0, Ordering::SeqCst), 2);
        assert_eq!(chain(), None);
        assert_eq!(
            linked.load(Ordering::SeqCst),
            1,
            "the first link is remembered, the failing one is tried again"
        );
    }

    /// Whether a history carries text alone is searched once per message:
    /// a re-sent history takes it from the kept chain, and a grown one
    /// searches only its new messages.
    #[test]
    fn whether_a_history_is_text_alone_is_kept_with_its_chain() {
        let memo = ChainMemo::default();
        let tenant = TenantId::from_credential(b"", Some(b"k"));
        let searched = AtomicUsize::new(0);
        let link = |messages: &[Value]| {
            let pieces: Vec<Piece<'_>> = messages.iter().map(Piece::Parsed).collect();
            memo.chain(
                "s",
                &tenant,
                &[],
                &pieces,
                |_| None,
                || Some(ChainHash::root(&tenant, b"")),
                |previous, index| Some(previous.next(messages[index].to_string().as_bytes())),
                |piece| {
                    searched.fetch_add(1, Ordering::SeqCst);
                    !matches!(piece, Piece::Parsed(value) if value.get("image").is_some())
                },
            )
            .expect("links")
            .text_only
        };
        let mut messages = history(4);
        assert!(link(&messages));
        assert_eq!(searched.swap(0, Ordering::SeqCst), 4);
        assert!(link(&messages), "re-sent");
        assert_eq!(
            searched.swap(0, Ordering::SeqCst),
            0,
            "nothing searched again"
        );
        messages.push(json!({"role": "user", "image": "…"}));
        assert!(!link(&messages), "grown by an image");
        assert_eq!(
            searched.swap(0, Ordering::SeqCst),
            1,
            "only the new message"
        );
        messages.push(json!({"role": "user", "content": "and now?"}));
        assert!(
            !link(&messages),
            "an image earlier in the kept chain still counts"
        );
        assert_eq!(
            searched.swap(0, Ordering::SeqCst),
            0,
            "past the image, nothing to ask"
        );
    }
}
