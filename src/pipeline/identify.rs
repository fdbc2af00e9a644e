//! Who is calling and which conversation this is (DESIGN.md step 2).

use crate::conversation::{ChainHash, ChainMemo, Conversation, TenantId};
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
/// the canonical messages. With a `memo`, a message seen before under the
/// same previous link costs a digest instead of a canonical form and a
/// SHA-256; the chain is the same either way.
pub fn conversation(
    adapter: &dyn Adapter,
    salt: &[u8],
    headers: &HeaderMap,
    request: &ChatRequest,
    memo: Option<&ChainMemo>,
) -> Conversation {
    let tenant = TenantId::from_credential(salt, credential(headers));
    let chain = match memo {
        Some(memo) => memoized_chain(adapter, &tenant, request, memo),
        None => chain(adapter, &tenant, request),
    };
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

/// `h_0 = H(tenant, canonical(system))`, `h_i = H(h_{i-1}, canonical(m_i))`.
fn chain(adapter: &dyn Adapter, tenant: &TenantId, request: &ChatRequest) -> Vec<ChainHash> {
    let mut chain = Vec::with_capacity(request.messages.len() + 1);
    let mut link = ChainHash::root(tenant, &adapter.canonical(&request.system));
    chain.push(link);
    for message in &request.messages {
        link = link.next(&adapter.canonical(message));
        chain.push(link);
    }
    chain
}

/// [`chain`], from `memo` as far as it knows it.
fn memoized_chain(
    adapter: &dyn Adapter,
    tenant: &TenantId,
    request: &ChatRequest,
    memo: &ChainMemo,
) -> Vec<ChainHash> {
    memo.chain(
        adapter.canonical_scheme(),
        tenant,
        &request.system,
        &request.messages,
        || ChainHash::root(tenant, &adapter.canonical(&request.system)),
        |previous, message| previous.next(&adapter.canonical(message)),
    )
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
        super::conversation(adapter, b"", &headers, &request, None)
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

    fn chain_of(
        adapter: &dyn Adapter,
        key: &str,
        body: &serde_json::Value,
        memo: Option<&ChainMemo>,
    ) -> Vec<ChainHash> {
        let body = serde_json::to_vec(body).expect("serializes");
        let request = adapter.parse(&body).expect("parses");
        let mut headers = HeaderMap::new();
        headers.insert("x-api-key", key.parse().expect("header"));
        super::conversation(adapter, b"salt", &headers, &request, memo).chain
    }

    /// Histories as clients send them, then again with keys reordered,
    /// cache markers moved and text parts spelled the other way, then
    /// with one message edited.
    fn histories(protocol: &str) -> Vec<serde_json::Value> {
        use serde_json::json;
        let numbers = json!({"n": [0, -1, 1.0, 1, 2.5e-300, 18446744073709551615u64, -9223372036854775808i64]});
        match protocol {
            "openai" => vec![
                json!({"model": "m", "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": "ünïcödé 😀 \"quoted\" \n\t\u{0001}"},
                    {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": numbers.to_string()}}]},
                    {"role": "tool", "tool_call_id": "c1", "content": "result", "extra": numbers},
                    {"role": "assistant", "content": "ok"},
                    {"role": "user", "content": "ok"},
                ]}),
                json!({"messages": [
                    {"content": "be brief", "role": "system", "cache_control": {"type": "ephemeral"}},
                    {"content": [{"type": "text", "text": "ünïcödé 😀 \"quoted\" \n\t\u{0001}"}], "role": "user"},
                    {"tool_calls": [{"function": {"arguments": numbers.to_string(), "name": "f"}, "type": "function", "id": "c1"}], "content": null, "role": "assistant"},
                    {"extra": numbers, "content": "result", "tool_call_id": "c1", "role": "tool", "cache_control": {"type": "ephemeral"}},
                    {"role": "assistant", "content": "ok"},
                    {"role": "user", "content": "ok"},
                ], "model": "m"}),
                json!({"model": "m", "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": "ünïcödé 😀 \"quoted\" \n\t\u{0001}"},
                    {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": numbers.to_string()}}]},
                    {"role": "tool", "tool_call_id": "c1", "content": "result", "extra": {"n": [0, -1, 1, 1, 2.5e-300]}},
                    {"role": "assistant", "content": "ok"},
                    {"role": "user", "content": "ok"},
                ]}),
            ],
            "anthropic" => vec![
                json!({"model": "m", "system": "be brief", "messages": [
                    {"role": "user", "content": "ünïcödé 😀"},
                    {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": numbers}]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "result"}]},
                    {"role": "assistant", "content": "ok"},
                ]}),
                json!({"system": [{"text": "be brief", "type": "text", "cache_control": {"type": "ephemeral"}}], "messages": [
                    {"content": [{"type": "text", "text": "ünïcödé 😀", "cache_control": {"type": "ephemeral"}}], "role": "user"},
                    {"content": [{"input": numbers, "name": "f", "id": "t1", "type": "tool_use"}], "role": "assistant"},
                    {"role": "user", "content": [{"tool_use_id": "t1", "type": "tool_result", "content": "result"}]},
                    {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
                ], "model": "m"}),
                json!({"model": "m", "system": "be brief", "messages": [
                    {"role": "user", "content": "ünïcödé 😀"},
                    {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {"n": [1.5]}}]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "result"}]},
                    {"role": "assistant", "content": "ok"},
                ]}),
            ],
            _ => vec![
                json!({"model": "m", "instructions": "be brief", "input": [
                    {"role": "developer", "content": "use tools"},
                    {"type": "message", "role": "user", "content": "ünïcödé 😀"},
                    {"type": "reasoning", "id": "r1", "encrypted_content": "xyz", "summary": []},
                    {"type": "function_call", "call_id": "c1", "name": "f", "arguments": numbers.to_string()},
                    {"type": "function_call_output", "call_id": "c1", "output": "result"},
                    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
                ]}),
                json!({"input": [
                    {"content": "use tools", "role": "developer"},
                    {"content": [{"type": "input_text", "text": "ünïcödé 😀", "cache_control": {"type": "ephemeral"}}], "role": "user", "type": "message"},
                    {"type": "reasoning", "id": "r1", "encrypted_content": "xyz", "summary": []},
                    {"arguments": numbers.to_string(), "name": "f", "call_id": "c1", "type": "function_call"},
                    {"output": "result", "call_id": "c1", "type": "function_call_output"},
                    {"role": "assistant", "type": "message", "content": "ok"},
                ], "instructions": "be brief", "model": "m"}),
                json!({"model": "m", "instructions": "be brief", "input": [
                    {"role": "developer", "content": "use tools"},
                    {"type": "message", "role": "user", "content": "ünïcödé 😀"},
                    {"type": "reasoning", "id": "r1", "encrypted_content": "xyz", "summary": []},
                    {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                    {"type": "function_call_output", "call_id": "c1", "output": "result"},
                    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
                ]}),
            ],
        }
    }

    fn adapters() -> [(&'static str, &'static dyn Adapter); 3] {
        [
            ("openai", Protocol::Openai.adapter()),
            ("anthropic", Protocol::Anthropic.adapter()),
            ("responses", &crate::protocol::responses::Responses),
        ]
    }

    #[test]
    fn memoized_chains_are_the_chains() {
        // One memo for every API and tenant, as in the proxy.
        let memo = ChainMemo::new(1000);
        for (name, adapter) in adapters() {
            let [sent, respelled, edited] = <[_; 3]>::try_from(histories(name)).expect("three");
            for key in ["k1", "k2"] {
                let plain = chain_of(adapter, key, &sent, None);
                assert_eq!(chain_of(adapter, key, &sent, Some(&memo)), plain, "{name}");
                let remembered = memo.len();
                assert_eq!(chain_of(adapter, key, &sent, Some(&memo)), plain, "{name}");
                assert_eq!(memo.len(), remembered, "{name}: re-sent, all found");
                // Another spelling misses the memo and hashes to the same
                // chain.
                assert_eq!(chain_of(adapter, key, &respelled, None), plain, "{name}");
                assert_eq!(
                    chain_of(adapter, key, &respelled, Some(&memo)),
                    plain,
                    "{name}"
                );
                let changed = chain_of(adapter, key, &edited, None);
                assert_eq!(
                    chain_of(adapter, key, &edited, Some(&memo)),
                    changed,
                    "{name}"
                );
                let shared = plain
                    .iter()
                    .zip(&changed)
                    .take_while(|(a, b)| a == b)
                    .count();
                assert!(shared >= 2 && shared < plain.len(), "{name}: {shared}");
            }
        }
    }

    #[test]
    fn a_message_repeated_later_gets_another_link() {
        let memo = ChainMemo::new(100);
        let body = serde_json::json!({"model": "m", "messages": [
            {"role": "user", "content": "ok"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "ok"},
            {"role": "user", "content": "ok"},
        ]});
        let adapter = Protocol::Openai.adapter();
        let chain = chain_of(adapter, "k", &body, Some(&memo));
        assert_eq!(chain, chain_of(adapter, "k", &body, None));
        let distinct: std::collections::HashSet<_> = chain.iter().collect();
        assert_eq!(distinct.len(), chain.len());
    }
}
