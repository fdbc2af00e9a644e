//! Step 6, detect overflow: is this upstream answer a context-overflow
//! error, and what do its numbers say must go?
//!
//! Every provider words "prompt too long" differently, wraps it in a
//! different envelope, and some report it inside a 200 stream (see
//! `signatures.rs` for the wordings and their sources). The knowledge lives as data in
//! `signatures.rs`; operators extend it from config with
//! [`CustomSignature`]. Look-alikes that compaction cannot fix (rate limits,
//! throttling, over-long parameter strings) are vetoed before any match.

mod extract;
pub mod inspect;
mod matcher;
mod numbers;
#[cfg(test)]
mod server_tests;
mod signatures;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod veto_tests;

use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;

use extract::ErrorView;
use matcher::{compile, Hit, Signature, STREAM_STATUS};

/// Why the upstream refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OverflowCause {
    /// The input alone is larger than the context window.
    Input,
    /// The input fits, but input plus the requested `max_tokens` does not.
    InputPlusOutput,
    /// The request is too many bytes (HTTP 413), whatever its token count.
    Bytes,
}

/// What recognized an overflow: a signature of the table, or Condenser's
/// own estimate before sending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignatureName {
    /// A built-in signature, named for its provider ("openai", "llama.cpp").
    Builtin(&'static str),
    /// An operator's signature from configuration.
    Custom(Arc<str>),
    /// No upstream said so: the calibrated estimate against a known window.
    Estimate,
}

impl SignatureName {
    pub fn as_str(&self) -> &str {
        match self {
            Self::Builtin(name) => name,
            Self::Custom(name) => name,
            Self::Estimate => "estimate",
        }
    }
}

impl fmt::Display for SignatureName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for SignatureName {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// A recognized context-overflow error.
#[derive(Debug, Clone, PartialEq)]
pub struct OverflowSignal {
    /// The signature that matched.
    pub signature: SignatureName,
    /// Why the upstream refused.
    pub cause: OverflowCause,
    /// The context window in tokens, when the error says it.
    pub limit: Option<u64>,
    /// Input tokens, when the error says it. Where a message gives only a
    /// total (Kimi's "requested", OpenRouter's "about N") this is the total
    /// minus any stated output part.
    pub actual: Option<u64>,
    /// The max_tokens part, when the error states it separately.
    pub requested_output: Option<u64>,
    /// The message text the signature matched (lower-cased), to tell a
    /// provider's own wording from an echo of the client's request.
    pub matched: Option<String>,
}

impl OverflowSignal {
    /// How many input tokens must go for the same request to fit:
    /// `actual + requested_output - limit`. `None` when the numbers are
    /// unknown or do not show an overflow (then we misread them).
    pub fn excess_tokens(&self) -> Option<u64> {
        let needed = self
            .actual?
            .saturating_add(self.requested_output.unwrap_or(0));
        needed.checked_sub(self.limit?).filter(|excess| *excess > 0)
    }
}

/// An operator-supplied signature, from config.
///
/// `pattern` is a case-insensitive regex on the error message; `{N}` in it
/// stands for a token count, and the named groups `limit`, `actual`,
/// `output`, `total` and `extra` fill the signal's numbers. An empty `status`
/// means 400, 413 and in-stream errors; list 200 to match stream events when
/// giving statuses. A 5xx is judged only when listed; 429 never is. A
/// `cause` fixes the cause; without one it is computed from the numbers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CustomSignature {
    /// Reported as [`OverflowSignal::signature`].
    pub name: String,
    /// HTTP statuses this applies to; empty for the defaults.
    #[serde(default)]
    pub status: Vec<u16>,
    /// Regex on the error message.
    pub pattern: String,
    /// Fixed cause, if the operator knows it.
    #[serde(default)]
    pub cause: Option<OverflowCause>,
}

/// The overflow signatures, compiled once at startup and shared.
#[derive(Debug, Clone)]
pub struct SignatureTable {
    signatures: Vec<Signature>,
    vetoes: Vec<regex::Regex>,
}

impl SignatureTable {
    /// The built-in table.
    pub fn builtin() -> Self {
        // The built-in patterns are constants a unit test compiles; dropping
        // one that failed beats refusing to start the proxy.
        let signatures = signatures::BUILTIN
            .iter()
            .filter_map(|spec| keep_compiled(spec.name, Signature::from_spec(spec)))
            .collect();
        let vetoes = signatures::VETOES
            .iter()
            .filter_map(|re| keep_compiled(re, compile(re, false)))
            .collect();
        Self { signatures, vetoes }
    }

    /// The built-in table plus `custom`, which is tried first so an
    /// operator's naming wins. Fails on the first invalid pattern.
    pub fn with_custom(custom: &[CustomSignature]) -> Result<Self, regex::Error> {
        let mut table = Self::builtin();
        let mut signatures = custom
            .iter()
            .map(Signature::from_custom)
            .collect::<Result<Vec<_>, _>>()?;
        signatures.append(&mut table.signatures);
        table.signatures = signatures;
        Ok(table)
    }

    /// Judges an upstream HTTP error response: status and raw body bytes of
    /// any shape (JSON object or array, FastAPI `detail`, plain text).
    pub fn detect(&self, status: u16, body: &[u8]) -> Option<OverflowSignal> {
        if !self.judges(status) {
            return None;
        }
        self.classify(status, &ErrorView::from_body(body))
    }

    /// Whether an error response with `status` may report an overflow, so
    /// is worth reading whole. 429 is a rate limit whatever its text says. A
    /// 5xx is the upstream's own trouble, which a smaller prompt would not
    /// cure, except where a signature lists that status: llama.cpp reports
    /// some overflows as 500 `server_error` (see `signatures.rs`).
    pub fn judges(&self, status: u16) -> bool {
        match status {
            429 => false,
            400..=499 => true,
            500..=599 => self.signatures.iter().any(|sig| sig.lists(status)),
            _ => false,
        }
    }

    /// Judges the `data:` payload of the first SSE event of a 200 streaming
    /// response, where some upstreams report overflow in-band.
    pub fn detect_stream_event(&self, data: &str) -> Option<OverflowSignal> {
        // Runs on every stream: a normal chunk must cost one substring scan.
        // Every in-band error shape has an `error` key or value.
        if !data.contains("error") {
            return None;
        }
        self.classify(STREAM_STATUS, &ErrorView::from_event(data)?)
    }

    /// Vetoes, then message patterns of every signature (they carry
    /// numbers), then JSON field checks.
    fn classify(&self, status: u16, view: &ErrorView) -> Option<OverflowSignal> {
        if view
            .texts()
            .any(|t| self.vetoes.iter().any(|v| v.is_match(t)))
        {
            return None;
        }
        let eligible = || self.signatures.iter().filter(|s| s.accepts(status));
        eligible()
            .find_map(|sig| sig.match_messages(view).map(|hit| sig.signal(hit, view)))
            .or_else(|| {
                let sig = eligible().find(|sig| sig.match_fields(view))?;
                Some(sig.signal(Hit::default(), view))
            })
    }
}

fn keep_compiled<T>(what: &str, compiled: Result<T, regex::Error>) -> Option<T> {
    compiled
        .inspect_err(|err| tracing::error!(%err, what, "built-in overflow pattern skipped"))
        .ok()
}
