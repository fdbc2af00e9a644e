//! Steps 2 to 7, the protocol seam: providers' own compaction APIs.
//!
//! Some APIs let a client ask the provider to compact (OpenAI's
//! `compaction_trigger` and `/responses/compact`). Where Condenser serves
//! them, the summary travels back to the client inside an opaque item
//! that only Condenser reads: a [`Sealed`] summary, versioned and
//! authenticated with a server key bound to the tenant, self-contained so
//! any instance of a fleet opens it without a lookup.

use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;

/// What every sealed item starts with: Condenser's, version 1.
pub const SEALED_PREFIX: &str = "condenser.v1.";
/// Any version of Condenser's items, so a later version is refused
/// clearly rather than forwarded.
const ANY_VERSION: &str = "condenser.v";

/// The key items are authenticated with: configured, or generated once
/// and shared through the store. Never printed.
#[derive(Clone)]
pub struct ItemKey([u8; 32]);

impl ItemKey {
    pub fn new(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// A key from a configured secret of any length.
    pub fn from_secret(secret: &str) -> Self {
        use sha2::Digest;
        Self(Sha256::digest(secret.as_bytes()).into())
    }

    fn mac(&self, tenant: &str, payload: &str) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("any key length");
        mac.update(b"condenser compaction item v1\0");
        mac.update(tenant.as_bytes());
        mac.update(b"\0");
        mac.update(payload.as_bytes());
        mac
    }
}

impl std::fmt::Debug for ItemKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ItemKey([redacted])")
    }
}

/// A summary, sealed for one tenant.
pub struct Sealed;

/// Why an item that claims to be Condenser's is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Forged {
    #[error("this compaction item was made by a Condenser version this one does not read")]
    Version,
    #[error("this compaction item is malformed")]
    Malformed,
    #[error("this compaction item was altered, or made with another key or credential")]
    Signature,
}

impl Sealed {
    /// `summary` for `tenant`: prefix, hex payload, hex MAC.
    pub fn seal(key: &ItemKey, tenant: &str, summary: &str) -> String {
        let payload = hex::encode(json!({"summary": summary}).to_string());
        let tag = hex::encode(key.mac(tenant, &payload).finalize().into_bytes());
        format!("{SEALED_PREFIX}{payload}.{tag}")
    }

    /// The summary in `content`; `Ok(None)` for content Condenser did not
    /// make (the provider's own), which is forwarded untouched.
    pub fn open(key: &ItemKey, tenant: &str, content: &str) -> Result<Option<String>, Forged> {
        let Some(rest) = content.strip_prefix(SEALED_PREFIX) else {
            return match content.starts_with(ANY_VERSION) {
                true => Err(Forged::Version),
                false => Ok(None),
            };
        };
        let (payload, tag) = rest.split_once('.').ok_or(Forged::Malformed)?;
        let tag = hex::decode(tag).map_err(|_| Forged::Malformed)?;
        key.mac(tenant, payload)
            .verify_slice(&tag)
            .map_err(|_| Forged::Signature)?;
        let bytes = hex::decode(payload).map_err(|_| Forged::Malformed)?;
        let value: Value = serde_json::from_slice(&bytes).map_err(|_| Forged::Malformed)?;
        let summary = value.get("summary").and_then(Value::as_str);
        summary
            .map(|s| Some(s.to_string()))
            .ok_or(Forged::Malformed)
    }
}

/// A request that asks for a compaction, as the pipeline sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Asked {
    /// No native compaction form.
    Nothing,
    /// Compact the conversation, answered with one compaction item. The
    /// body is the request without the form (the trigger removed), an
    /// ordinary chat request of the adapter.
    Compact { body: bytes::Bytes, shape: Shape },
    /// An ordinary chat request once a form Condenser serves by its own
    /// compaction is removed (OpenAI's `context_management`).
    Rewritten { body: bytes::Bytes },
    /// A compaction endpoint not served here: forwarded byte for byte,
    /// outside the chat pipeline.
    Forward,
}

/// How a compaction is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// As the API's ordinary response, with one compaction item.
    Response,
    /// As the API's compaction endpoint answers (OpenAI's
    /// `response.compaction`).
    Compacted,
}

/// One API's native compaction forms.
pub trait NativeForms: Send + Sync {
    /// Whether `host` is the provider that defines these forms (auto mode
    /// forwards to it).
    fn defined_by(&self, host: &str) -> bool;

    /// Whether the request, sent to `path`, asks for a compaction, and the
    /// request without the asking. `serve` says whether Condenser serves
    /// the forms on this upstream.
    fn asked(&self, path: &str, body: &[u8], serve: bool) -> Asked;

    /// The body with each of Condenser's items replaced by `expand` of its
    /// content (`Ok(Some(summary))`), `None` when it holds none; an item
    /// `expand` refuses refuses the request.
    fn expand(
        &self,
        body: &[u8],
        expand: &mut dyn FnMut(&str) -> Result<Option<Value>, Forged>,
    ) -> Result<Option<Vec<u8>>, Forged>;

    /// The answer to a compaction request: one item holding `sealed`.
    fn answer(
        &self,
        request: &Value,
        shape: Shape,
        sealed: &str,
        usage: (u64, u64),
    ) -> (bool, Vec<u8>);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(name: &str) -> &str {
        name
    }

    #[test]
    fn a_sealed_summary_opens_for_its_tenant_and_key_only() {
        let key = ItemKey::new([7; 32]);
        let sealed = Sealed::seal(&key, tenant("a"), "the summary");
        assert!(sealed.starts_with(SEALED_PREFIX));
        let opened = Sealed::open(&key, tenant("a"), &sealed);
        assert_eq!(opened, Ok(Some("the summary".into())));
        let other_key = ItemKey::new([8; 32]);
        assert_eq!(
            Sealed::open(&other_key, tenant("a"), &sealed),
            Err(Forged::Signature)
        );
        assert_eq!(
            Sealed::open(&key, tenant("b"), &sealed),
            Err(Forged::Signature)
        );
    }

    #[test]
    fn one_byte_changed_anywhere_is_refused() {
        let key = ItemKey::new([7; 32]);
        let sealed = Sealed::seal(&key, tenant("a"), "the summary");
        for index in SEALED_PREFIX.len()..sealed.len() {
            let mut bytes = sealed.clone().into_bytes();
            bytes[index] = if bytes[index] == b'0' { b'1' } else { b'0' };
            let altered = String::from_utf8(bytes).expect("ascii");
            if altered == sealed {
                continue;
            }
            assert!(Sealed::open(&key, tenant("a"), &altered).is_err());
        }
    }

    #[test]
    fn items_condenser_did_not_make_are_not_its_business() {
        let key = ItemKey::new([7; 32]);
        assert_eq!(Sealed::open(&key, tenant("a"), "gAAAAABo…"), Ok(None));
        assert_eq!(
            Sealed::open(&key, tenant("a"), "condenser.v9.00.00"),
            Err(Forged::Version)
        );
    }
}
