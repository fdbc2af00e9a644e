//! The conversation chain: `h_0 = H(tenant, canonical(system))`,
//! `h_i = H(h_{i-1}, canonical(message_i))`.
//!
//! Identity needs no client cooperation: two requests share a prefix exactly
//! when their canonical messages agree up to that point, so an edit or a
//! regeneration starts a new branch and a replay finds everything stored.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::fmt;

#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChainHash([u8; 32]);

impl ChainHash {
    pub fn root(tenant: &super::TenantId, canonical_system: &[u8]) -> Self {
        Self::digest(&[b"root", tenant.as_str().as_bytes(), canonical_system])
    }

    pub fn next(&self, canonical_message: &[u8]) -> Self {
        Self::digest(&[b"next", &self.0, canonical_message])
    }

    fn digest(parts: &[&[u8]]) -> Self {
        let mut hasher = Sha256::new();
        for part in parts {
            // Length-prefix every part so no two part lists hash alike.
            hasher.update((part.len() as u64).to_be_bytes());
            hasher.update(part);
        }
        Self(hasher.finalize().into())
    }

    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    pub fn from_hex(text: &str) -> Option<Self> {
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(text, &mut bytes).ok()?;
        Some(Self(bytes))
    }
}

impl fmt::Debug for ChainHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ChainHash({})", &self.to_hex()[..12])
    }
}

impl fmt::Display for ChainHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// Serializes `value` with object keys sorted and every key named in
/// `volatile` removed at any depth, so that key order, whitespace and fields
/// that clients move between calls (`cache_control`) do not change identity.
pub fn canonical_json(value: &Value, volatile: &[&str]) -> Vec<u8> {
    let canonical = canonicalize(value, volatile);
    serde_json::to_vec(&canonical).unwrap_or_default()
}

fn canonicalize(value: &Value, volatile: &[&str]) -> Value {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map
                .keys()
                .filter(|key| !volatile.contains(&key.as_str()))
                .collect();
            keys.sort();
            let mut sorted = Map::with_capacity(keys.len());
            for key in keys {
                sorted.insert(key.clone(), canonicalize(&map[key], volatile));
            }
            Value::Object(sorted)
        }
        Value::Array(items) => {
            Value::Array(items.iter().map(|v| canonicalize(v, volatile)).collect())
        }
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::TenantId;
    use serde_json::json;

    #[test]
    fn key_order_and_volatile_fields_do_not_change_the_canonical_form() {
        let a = json!({"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]});
        let b = json!({"content": [{"text": "hi", "type": "text"}], "role": "user"});
        assert_eq!(
            canonical_json(&a, &["cache_control"]),
            canonical_json(&b, &["cache_control"])
        );
    }

    #[test]
    fn different_content_gives_a_different_link() {
        let tenant = TenantId::from_credential(b"", Some(b"k"));
        let root = ChainHash::root(&tenant, b"system");
        assert_ne!(root.next(b"a"), root.next(b"b"));
        assert_eq!(root.next(b"a"), root.next(b"a"));
    }

    #[test]
    fn hex_round_trips() {
        let tenant = TenantId::from_credential(b"", None);
        let root = ChainHash::root(&tenant, b"");
        assert_eq!(ChainHash::from_hex(&root.to_hex()), Some(root));
        assert_eq!(ChainHash::from_hex("zz"), None);
    }
}
