//! Step 2, identify: the chain.
//!
//! The conversation chain: `h_0 = H(tenant, canonical(system))`,
//! `h_i = H(h_{i-1}, canonical(message_i))`.
//!
//! Identity needs no client cooperation: two requests share a prefix exactly
//! when their canonical messages agree up to that point, so an edit or a
//! regeneration starts a new branch and a replay finds everything stored.

use sha2::{Digest, Sha256};
use std::fmt;

/// Characters of a hash or tenant digest shown to operators.
pub const SHORT_ID_CHARS: usize = 12;

#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChainHash([u8; 32]);

impl ChainHash {
    /// All zeros: no chain's hash, free for keys that name no conversation
    /// (the maintenance turn's lease).
    pub const ZERO: Self = Self([0; 32]);

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

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The first characters of the hex form: enough to pass back to
    /// `conversations show`, short enough to read.
    pub fn short(&self) -> String {
        self.to_hex()[..SHORT_ID_CHARS].to_owned()
    }

    pub fn from_hex(text: &str) -> Option<Self> {
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(text, &mut bytes).ok()?;
        Some(Self(bytes))
    }
}

/// Stored and sent as its hex form.
impl serde::Serialize for ChainHash {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_hex())
    }
}

impl<'de> serde::Deserialize<'de> for ChainHash {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Self::from_hex(&text)
            .ok_or_else(|| serde::de::Error::custom("not a 64-digit hex chain hash"))
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
