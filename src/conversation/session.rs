//! Step 2, identify: which conversation a request belongs to.
//!
//! A conversation is one session a user had: what operators list, keep and
//! delete. Storage underneath stays content-addressed (two conversations
//! that share a system prompt share its row, and any identical prefix), so
//! the conversation is a name for a set of chain heads, not a tree root.
//!
//! - With a session id (`x-conversation-id`, or the session header Claude
//!   Code, opencode or Codex sends), the conversation is that session:
//!   SHA-256 over ("session", tenant digest, session id).
//! - Without one, it is the first user turn under the (tenant, system
//!   prompt) root: the chain link of the first message, `chain[1]`
//!   (`chain[0]` for a request with no message). Two chats that open
//!   differently are two conversations; rewinds and edits of later turns
//!   are branches within one.

use super::{ChainHash, TenantId};
use crate::domain::Hex32;
use sha2::{Digest, Sha256};
use std::fmt;

/// One conversation of one tenant: 32 bytes, stored as 64 hex characters.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConversationId([u8; 32]);

impl ConversationId {
    /// The conversation a client names with a session id.
    pub fn session(tenant: &TenantId, session: &[u8]) -> Self {
        let mut hasher = Sha256::new();
        for part in [b"session".as_slice(), tenant.as_str().as_bytes(), session] {
            // Length-prefixed, as chain links are: no two part lists alike.
            hasher.update((part.len() as u64).to_be_bytes());
            hasher.update(part);
        }
        Self(hasher.finalize().into())
    }

    /// The conversation a chain opens, without a session id: its first
    /// message's link, or the root when it has none.
    pub fn first_turn(chain: &[ChainHash]) -> Self {
        let link = chain.get(1).or_else(|| chain.first());
        Self(link.map_or([0; 32], |link| *link.as_bytes()))
    }

    pub fn to_hex(&self) -> String {
        Hex32::of(&self.0).as_str().to_owned()
    }

    pub fn from_hex(text: &str) -> Option<Self> {
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(text, &mut bytes).ok()?;
        Some(Self(bytes))
    }

    /// The first characters of the hex form, as lists print it and
    /// `conversations show` takes it back.
    pub fn short(&self) -> String {
        self.to_hex()[..crate::domain::SHORT_ID_CHARS].to_owned()
    }
}

/// Stored and sent as its hex form.
impl serde::Serialize for ConversationId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(Hex32::of(&self.0).as_str())
    }
}

impl fmt::Debug for ConversationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ConversationId({})", &self.to_hex()[..12])
    }
}

impl fmt::Display for ConversationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(Hex32::of(&self.0).as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(key: &[u8]) -> TenantId {
        TenantId::from_credential(b"", Some(key))
    }

    #[test]
    fn a_session_is_one_conversation_per_tenant() {
        let (a, b) = (tenant(b"a"), tenant(b"b"));
        assert_eq!(
            ConversationId::session(&a, b"s1"),
            ConversationId::session(&a, b"s1")
        );
        assert_ne!(
            ConversationId::session(&a, b"s1"),
            ConversationId::session(&a, b"s2")
        );
        assert_ne!(
            ConversationId::session(&a, b"s1"),
            ConversationId::session(&b, b"s1")
        );
    }

    #[test]
    fn without_a_session_the_first_turn_names_it() {
        let root = ChainHash::root(&tenant(b"a"), b"system");
        let (first, other) = (root.next(b"hello"), root.next(b"bonjour"));
        let chat = [root, first, first.next(b"answer")];
        assert_eq!(
            ConversationId::first_turn(&chat),
            ConversationId::first_turn(&chat[..2])
        );
        assert_ne!(
            ConversationId::first_turn(&chat),
            ConversationId::first_turn(&[root, other])
        );
        assert_eq!(ConversationId::first_turn(&[root]).to_hex(), root.to_hex());
        let id = ConversationId::first_turn(&chat);
        assert_eq!(ConversationId::from_hex(&id.to_hex()), Some(id));
        assert_eq!(id.to_hex(), first.to_hex(), "stored data can derive it");
    }
}
