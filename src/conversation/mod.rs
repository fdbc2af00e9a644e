//! Step 2, identify: who is calling (a tenant derived from
//! the credential) and which conversation this is (a content-addressed chain).

pub mod chain;
pub mod identify;
pub mod memo;
pub mod session;
pub mod tenant;

pub use chain::ChainHash;
pub use memo::ChainMemo;
pub use session::ConversationId;
pub use tenant::TenantId;

/// A request's place in the stored history.
#[derive(Debug, Clone)]
pub struct Conversation {
    pub tenant: TenantId,
    /// The session this request belongs to (see [`session`]): what is
    /// listed, kept and deleted as one.
    pub id: ConversationId,
    /// `h_0` (the system part) then one hash per message: `chain[i]` ends
    /// with message `i` (1-based), so `chain.len() == messages + 1`.
    pub chain: Vec<ChainHash>,
    /// `x-conversation-id` or a client's session header, for people: the
    /// session it names is `id`, the chain stays content-addressed.
    pub label: Option<String>,
    /// Whether the request carries text alone (no image, file, audio or
    /// server tool the upstream counts in tokens Condenser cannot see):
    /// only then may its usage calibrate the estimates.
    pub text_only: bool,
}

impl Conversation {
    /// The prefixes a stored summary may stand in for: every one but the
    /// whole request. A rewind or a regenerate can end exactly where an
    /// earlier compaction did; its newest message must still go upstream as
    /// itself, not only inside the summary.
    pub fn summarizable_chain(&self) -> &[ChainHash] {
        &self.chain[..self.chain.len().saturating_sub(1)]
    }
}
