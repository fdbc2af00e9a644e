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

/// What a sealed item holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Opened {
    pub summary: String,
    /// The items kept after the summary, for an item that stands for
    /// everything before it (OpenAI's server-side compaction, whose
    /// clients may drop what came before the item); `None` for one that
    /// stands beside the items the client keeps (Codex's).
    pub carried: Option<Vec<Value>>,
}

/// One of Condenser's items, as the request is to carry it instead.
#[derive(Debug, Clone, PartialEq)]
pub struct Expanded {
    /// The summary, in Condenser's summary message form.
    pub message: Value,
    /// As in [`Opened::carried`].
    pub carried: Option<Vec<Value>>,
}

impl Sealed {
    /// `summary` for `tenant`: prefix, hex payload, hex MAC.
    pub fn seal(key: &ItemKey, tenant: &str, summary: &str) -> String {
        Self::seal_payload(key, tenant, json!({"summary": summary}))
    }

    /// `summary` and the items kept after it, for `tenant`: an item that
    /// stands for everything before it.
    pub fn seal_carrying(key: &ItemKey, tenant: &str, summary: &str, carried: &[Value]) -> String {
        Self::seal_payload(key, tenant, json!({"summary": summary, "carried": carried}))
    }

    fn seal_payload(key: &ItemKey, tenant: &str, payload: Value) -> String {
        let payload = hex::encode(payload.to_string());
        let tag = hex::encode(key.mac(tenant, &payload).finalize().into_bytes());
        format!("{SEALED_PREFIX}{payload}.{tag}")
    }

    /// What `content` holds; `Ok(None)` for content Condenser did not
    /// make (the provider's own), which is forwarded untouched.
    pub fn open(key: &ItemKey, tenant: &str, content: &str) -> Result<Option<Opened>, Forged> {
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
        let summary = summary.ok_or(Forged::Malformed)?.to_string();
        let carried = match value.get("carried") {
            None => None,
            Some(Value::Array(items)) => Some(items.clone()),
            Some(_) => return Err(Forged::Malformed),
        };
        Ok(Some(Opened { summary, carried }))
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
    /// compaction is removed (OpenAI's `context_management`); past
    /// `threshold` input tokens, Condenser compacts and the answer is led
    /// by the compaction item ([`NativeForms::lead`]).
    Rewritten {
        body: bytes::Bytes,
        threshold: Option<u64>,
    },
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
        expand: &mut dyn FnMut(&str) -> Result<Option<Expanded>, Forged>,
    ) -> Result<Option<Vec<u8>>, Forged>;

    /// The API's items of `messages` (as the adapter parsed them), as a
    /// sealed item carries them.
    fn items(&self, messages: &[&Value]) -> Vec<Value>;

    /// Puts a compaction item holding `sealed` before the reply of an
    /// answer, as the API does where a request passed its threshold.
    fn lead(&self, sealed: &str) -> Box<dyn Lead>;

    /// Whether an error answer to a request forwarded to `path` refuses a
    /// form as unknown: a 404 or 405 at a compaction endpoint, a 400
    /// naming the form's field or item type.
    fn refuses(&self, path: &str, status: u16, body: &[u8]) -> bool;

    /// Whether a successful answer (JSON, or a whole stream) holds the
    /// compaction item a compaction request asks for.
    fn holds_compaction(&self, answer: &[u8]) -> bool;

    /// The answer to a compaction request: one item holding `sealed`.
    fn answer(
        &self,
        request: &Value,
        shape: Shape,
        sealed: &str,
        usage: (u64, u64),
    ) -> (bool, Vec<u8>);
}

/// An answer being led by a compaction item.
pub trait Lead: Send + Sync {
    /// A whole JSON answer, with the item first in its output.
    fn json(&mut self, answer: &mut Value);

    /// One event of a streamed answer (its text, blank line included):
    /// what to send instead, `None` to send it as it came.
    fn event(&mut self, event: &str) -> Option<String>;
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
        let opened = opened.map(|o| o.map(|o| o.summary));
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
    fn an_item_carrying_its_kept_items_opens_with_them() {
        let key = ItemKey::new([7; 32]);
        let kept = [json!({"role": "user", "content": "kept"})];
        let sealed = Sealed::seal_carrying(&key, tenant("a"), "gist", &kept);
        let opened = Sealed::open(&key, tenant("a"), &sealed).expect("opens");
        let opened = opened.expect("condenser's");
        assert_eq!(opened.summary, "gist");
        assert_eq!(opened.carried, Some(kept.to_vec()));
        let plain = Sealed::seal(&key, tenant("a"), "gist");
        let plain = Sealed::open(&key, tenant("a"), &plain).expect("opens");
        assert_eq!(plain.expect("condenser's").carried, None);
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
