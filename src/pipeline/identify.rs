//! Who is calling and which conversation this is (DESIGN.md step 2).

use crate::conversation::{ChainHash, Conversation, TenantId};
use crate::protocol::{Adapter, ChatRequest};
use http::HeaderMap;

/// Headers that name a conversation for people, first found wins: the
/// explicit one, then the session ids clients already send (Claude Code,
/// opencode, Codex; see reference/clients.md).
const LABEL_HEADERS: [&str; 4] = [
    "x-conversation-id",
    "x-claude-code-session-id",
    "x-session-id",
    "session-id",
];

/// Step 2 of the data flow: the tenant from the credential, the chain from
/// the canonical messages.
pub fn conversation(
    adapter: &dyn Adapter,
    salt: &[u8],
    headers: &HeaderMap,
    request: &ChatRequest,
) -> Conversation {
    let tenant = TenantId::from_credential(salt, credential(headers));
    let mut chain = Vec::with_capacity(request.messages.len() + 1);
    let mut link = ChainHash::root(&tenant, &adapter.canonical(&request.system));
    chain.push(link);
    for message in &request.messages {
        link = link.next(&adapter.canonical(message));
        chain.push(link);
    }
    let label = LABEL_HEADERS
        .iter()
        .find_map(|name| headers.get(*name)?.to_str().ok())
        .map(|value| value.chars().take(200).collect());
    Conversation {
        tenant,
        chain,
        label,
    }
}

/// The caller's credential as sent; hashed at once, never kept.
fn credential(headers: &HeaderMap) -> Option<&[u8]> {
    ["authorization", "x-api-key", "api-key"]
        .iter()
        .find_map(|name| headers.get(*name))
        .map(|value| value.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Protocol;

    fn conversation(key: &str, body: &str) -> Conversation {
        let adapter = Protocol::Openai.adapter();
        let request = adapter.parse(body.as_bytes()).expect("parses");
        let mut headers = HeaderMap::new();
        headers.insert(
            "authorization",
            format!("Bearer {key}").parse().expect("header"),
        );
        super::conversation(adapter, b"", &headers, &request)
    }

    #[test]
    fn a_longer_history_extends_the_same_chain() {
        let short = conversation(
            "k",
            r#"{"model":"m","messages":[{"role":"user","content":"a"}]}"#,
        );
        let long = conversation(
            "k",
            r#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"}]},{"role":"assistant","content":"b"}]}"#,
        );
        assert_eq!(long.chain[..2], short.chain[..]);
        assert_eq!(long.chain.len(), 3);
    }

    #[test]
    fn another_credential_is_another_chain() {
        let body = r#"{"model":"m","messages":[{"role":"user","content":"a"}]}"#;
        assert_ne!(
            conversation("k1", body).chain,
            conversation("k2", body).chain
        );
    }
}
