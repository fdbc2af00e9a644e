//! The store's behaviour, run against SQLite and Postgres alike. Shared
//! fixtures live here; the tests are grouped by what they exercise.

mod admin;
mod compactions;
mod connection;
mod coordination;
mod messages;
mod migration;
mod prune;
mod requests;

use condenser::conversation::{ChainHash, ConversationId, TenantId};
use condenser::domain::{Compaction, Trigger};
use condenser::store::{MessageBatch, NewMessage, Store};

/// A conversation as the pipeline would hash it: a root then one message per
/// body, each hash chained on the previous one.
pub(super) struct Chain {
    pub(super) tenant: TenantId,
    pub(super) messages: Vec<NewMessage>,
    hashes: Vec<ChainHash>,
}

impl Chain {
    pub(super) fn new(credential: &str, bodies: &[String]) -> Chain {
        let tenant = TenantId::from_credential(b"", Some(credential.as_bytes()));
        let root = ChainHash::root(&tenant, b"You are terse.");
        let mut messages = vec![message(
            root,
            None,
            0,
            r#"{"role":"system","content":"You are terse."}"#,
        )];
        for (index, body) in bodies.iter().enumerate() {
            let parent = messages[index].hash;
            let position = i64::try_from(index + 1).expect("small index");
            messages.push(message(
                parent.next(body.as_bytes()),
                Some(parent),
                position,
                body,
            ));
        }
        let hashes = messages.iter().map(|m| m.hash).collect();
        Chain {
            tenant,
            messages,
            hashes,
        }
    }

    pub(super) fn hashes(&self) -> Vec<ChainHash> {
        self.hashes.clone()
    }

    /// The conversation a request of this chain opens, without a session.
    pub(super) fn conversation(&self) -> ConversationId {
        ConversationId::first_turn(&self.hashes)
    }

    /// A write of links `from..len` of a request of `len` links, for
    /// `conversation`, as the writer hands it to the store.
    pub(super) fn batch<'a>(
        &'a self,
        conversation: &'a ConversationId,
        label: Option<&'a str>,
        from: usize,
        len: usize,
    ) -> MessageBatch<'a> {
        MessageBatch {
            tenant: &self.tenant,
            conversation,
            label,
            chain: &self.hashes[..len],
            messages: &self.messages[from..len],
            at_ms: 1_000 + len as i64,
        }
    }
}

fn message(hash: ChainHash, parent: Option<ChainHash>, position: i64, body: &str) -> NewMessage {
    let role = if position == 0 {
        "system"
    } else if position % 2 == 1 {
        "user"
    } else {
        "assistant"
    };
    let token_estimate = i64::try_from(body.len() / 4).expect("small body");
    NewMessage {
        hash,
        parent,
        position,
        role: role.to_owned(),
        body: body.to_owned(),
        token_estimate,
    }
}

pub(super) fn bodies(count: usize, edited: Option<usize>) -> Vec<String> {
    (1..=count)
        .map(|n| match edited == Some(n) {
            true => format!(r#"{{"role":"user","content":"message {n}, edited"}}"#),
            false => format!(r#"{{"role":"user","content":"message {n}"}}"#),
        })
        .collect()
}

const TRIMS: &str = r#"[{"message_hash":"abababababababababababababababababababababababababababababababab","replacement":{"role":"tool","content":"…"},
"original_bytes":9000,"kept_bytes":800}]"#;

pub(super) fn compaction(
    chain: &Chain,
    prefix_len: usize,
    base: usize,
    trigger: Trigger,
) -> Compaction {
    let len = i64::try_from(prefix_len).expect("small prefix");
    Compaction {
        prefix_hash: chain.messages[prefix_len].hash,
        base_hash: chain.messages[base].hash,
        prefix_len: len,
        summary: "x".repeat(1946),
        summary_tokens: 480,
        messages_compacted: len - i64::try_from(base).expect("small base"),
        tokens_before: 120_000,
        tokens_after: 9_000,
        model: "gpt-4o".to_owned(),
        trigger,
        trims: serde_json::from_str(TRIMS).expect("trims"),
        duration_ms: 8_250,
        created_at_ms: 1_795_343_467_000,
    }
}

pub(super) async fn persist(store: &Store, chain: &Chain, len: usize) -> u64 {
    let hashes = &chain.hashes()[..len];
    let stored = store
        .stored_prefix_len(&chain.tenant, hashes)
        .await
        .expect("prefix");
    let conversation = chain.conversation();
    store
        .insert_messages(chain.batch(&conversation, Some("chat-1"), stored, len))
        .await
        .expect("insert")
}
