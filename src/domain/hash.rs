//! Beside the flow, the content address: a chain hash.
//!
//! A link of a conversation's chain (`h_0 = H(tenant, canonical(system))`,
//! `h_i = H(h_{i-1}, canonical(message_i))`) names a message and every
//! message before it. Identification computes it (`conversation::chain`);
//! storage keys rows by it, compaction and the rewrite name prefixes by it,
//! the operator's views show it. This is the value and its encodings.

use std::fmt;

/// Characters of a hash or tenant digest shown to operators.
pub const SHORT_ID_CHARS: usize = 12;

/// The lowercase hex form of a 32-byte digest, on the stack. Every request
/// writes a few (its tenant, its rows' hashes), and `hex::encode` builds
/// its `String` a `char` at a time: 9 % of a small request's instructions
/// under callgrind (bench/HISTORY.md, issue 43, "Work that was never new").
pub struct Hex32([u8; 64]);

impl Hex32 {
    pub fn of(bytes: &[u8; 32]) -> Self {
        let mut digits = [0; 64];
        hex::encode_to_slice(bytes, &mut digits).expect("two digits a byte");
        Self(digits)
    }

    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).expect("hex digits are ASCII")
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChainHash([u8; 32]);

impl ChainHash {
    /// All zeros: no chain's hash, free for keys that name no conversation
    /// (the maintenance turn's lease).
    pub const ZERO: Self = Self([0; 32]);

    /// The hash whose bytes these are: a digest computed by
    /// `conversation::chain`.
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    pub fn to_hex(&self) -> String {
        self.hex().as_str().to_owned()
    }

    /// The hex form without a `String`: what rows serialize.
    pub fn hex(&self) -> Hex32 {
        Hex32::of(&self.0)
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
        serializer.serialize_str(self.hex().as_str())
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
        f.write_str(self.hex().as_str())
    }
}
