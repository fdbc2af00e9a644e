//! Step 2, identify: the chain.
//!
//! The conversation chain: `h_0 = H(tenant, canonical(system))`,
//! `h_i = H(h_{i-1}, canonical(message_i))`.
//!
//! Identity needs no client cooperation: two requests share a prefix exactly
//! when their canonical messages agree up to that point, so an edit or a
//! regeneration starts a new branch and a replay finds everything stored.

pub use crate::domain::ChainHash;
use sha2::{Digest, Sha256};

/// Computing a link; the hash itself, its forms and its encodings, is
/// domain vocabulary (`domain::hash`).
impl ChainHash {
    pub fn root(tenant: &super::TenantId, canonical_system: &[u8]) -> Self {
        Self::digest(&[b"root", tenant.as_str().as_bytes(), canonical_system])
    }

    pub fn next(&self, canonical_message: &[u8]) -> Self {
        Self::digest(&[b"next", self.as_bytes(), canonical_message])
    }

    fn digest(parts: &[&[u8]]) -> Self {
        let mut hasher = Sha256::new();
        for part in parts {
            // Length-prefix every part so no two part lists hash alike.
            hasher.update((part.len() as u64).to_be_bytes());
            hasher.update(part);
        }
        Self::from_bytes(hasher.finalize().into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::TenantId;

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
