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

use super::{ChainHash, TenantId};
use quick_cache::sync::Cache;
use serde_json::Value;
use xxhash_rust::xxh3::Xxh3;

/// How many links the memo keeps by default: a 200-message history of
/// each of 300 conversations.
///
/// An entry is a 49-byte key and a 32-byte link; with quick_cache's
/// bookkeeping (slab links, hash table, ghost entries, vectors grown by
/// doubling) a full memo of 65,536 takes 13.9 MB, 212 bytes an entry
/// (counted with a counting allocator, 3 × capacity distinct inserts).
pub const DEFAULT_CAPACITY: usize = 65_536;

/// Remembered chain links, shared by every request of the process.
pub struct ChainMemo {
    links: Cache<Key, ChainHash>,
    /// A hasher holding the per-process secret, cloned for every digest.
    hasher: Xxh3,
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
        let mut secret = [0u8; 192];
        getrandom::fill(&mut secret).expect("the operating system's random source is available");
        Self {
            links: Cache::new(capacity.max(1)),
            hasher: Xxh3::with_secret(secret),
        }
    }

    /// `h_0` of `system` for `tenant`: remembered, or `compute`d and then
    /// remembered. `scheme` names the canonical form `compute` hashes
    /// ([`crate::protocol::Adapter::canonical_scheme`]).
    pub fn root(
        &self,
        scheme: &str,
        tenant: &TenantId,
        system: &Value,
        compute: impl FnOnce() -> ChainHash,
    ) -> ChainHash {
        let key = Key {
            previous: None,
            digest: self.digest(&["root", scheme, tenant.as_str()], system),
        };
        self.remembered(key, compute)
    }

    /// The link after `previous` for `message`: remembered, or `compute`d
    /// and then remembered.
    pub fn next(
        &self,
        scheme: &str,
        previous: ChainHash,
        message: &Value,
        compute: impl FnOnce() -> ChainHash,
    ) -> ChainHash {
        let key = Key {
            previous: Some(previous),
            digest: self.digest(&["next", scheme], message),
        };
        self.remembered(key, compute)
    }

    fn digest(&self, context: &[&str], value: &Value) -> [u8; 16] {
        let mut hasher = self.hasher.clone();
        for part in context {
            feed_str(&mut hasher, part);
        }
        feed(&mut hasher, value);
        hasher.digest128().to_le_bytes()
    }

    fn remembered(&self, key: Key, compute: impl FnOnce() -> ChainHash) -> ChainHash {
        if let Some(link) = self.links.get(&key) {
            return link;
        }
        let link = compute();
        self.links.insert(key, link);
        link
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

    fn link(text: &[u8]) -> ChainHash {
        let tenant = TenantId::from_credential(b"", Some(b"k"));
        ChainHash::root(&tenant, text)
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
            .map(|value| memo.digest(&["next", "s"], value))
            .collect();
        assert_eq!(digests.len(), values.len());
        assert_ne!(
            memo.digest(&["next", "s"], &json!(1)),
            memo.digest(&["next", "t"], &json!(1))
        );
        assert_eq!(
            memo.digest(&["next", "s"], &json!({"a": [1, "x"]})),
            memo.digest(&["next", "s"], &json!({"a": [1, "x"]}))
        );
    }

    #[test]
    fn each_process_has_its_own_secret() {
        let value = json!({"role": "user", "content": "hi"});
        assert_ne!(
            ChainMemo::new(1).digest(&["next", "s"], &value),
            ChainMemo::new(1).digest(&["next", "s"], &value)
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
}
