//! Step 2, identify: tenant and chain of one request.
//!
//! Who is calling and which conversation this is (ARCHITECTURE.md step 2).

use crate::conversation::memo::Linked;
use crate::conversation::{ChainHash, ChainMemo, Conversation, ConversationId, TenantId};
use crate::protocol::{text_only, Adapter, ChatRequest, Outline, Piece};
use http::{HeaderMap, HeaderName};

/// Headers that name a session, first found wins: the explicit one, then
/// the session ids clients already send (Claude Code, opencode, Codex; see
/// reference/clients.md). The session is the conversation; its value, cut
/// short, is its label for people.
/// Header names made once, not parsed from text on every look-up.
const LABEL_HEADERS: [HeaderName; 4] = [
    HeaderName::from_static("x-conversation-id"),
    HeaderName::from_static("x-claude-code-session-id"),
    HeaderName::from_static("x-session-id"),
    HeaderName::from_static("session-id"),
];

/// Step 2 of the data flow: the tenant from the credential (the one its
/// provider reads, [`crate::protocol::Provider::credential`]), the chain from
/// the canonical messages. With a `memo`, a message whose bytes were seen
/// before under the same previous link costs a digest of those bytes: it
/// is not even parsed. The chain is the same either way.
///
/// Returns the request, every part of it now known to parse, with its
/// conversation; `None` when a part does not parse, and the body is then
/// not one Condenser can work with.
pub fn conversation(
    adapter: &dyn Adapter,
    salt: &[u8],
    headers: &HeaderMap,
    credential: Option<&[u8]>,
    outline: Outline,
    memo: Option<&ChainMemo>,
) -> Option<(ChatRequest, Conversation)> {
    let tenant = TenantId::from_credential(salt, credential);
    let (request, chain, text_only) = match memo {
        Some(memo) => {
            let linked = memoized_chain(adapter, &tenant, &outline, memo)?;
            let text_only = match outline.around_spans() {
                Some(around) => linked.text_only && text_alone(adapter, around),
                // Messages parsed whole: no spans to search around.
                None => text_only(adapter, outline.text()),
            };
            (outline.verified(), linked.chain, text_only)
        }
        None => {
            let outline_text = outline.text().to_vec();
            let request = outline.parse_all()?;
            let chain = chain(adapter, &tenant, &request);
            let text_only = text_only(adapter, &outline_text);
            (request, chain, text_only)
        }
    };
    // An empty header names no session: a later header may.
    let session = LABEL_HEADERS.iter().find_map(|name| {
        let value = headers.get(name)?.to_str().ok()?;
        (!value.trim().is_empty()).then_some(value)
    });
    let id = match session {
        Some(session) => ConversationId::session(&tenant, session.as_bytes()),
        None => ConversationId::first_turn(&chain),
    };
    let label = session.map(|value| value.chars().take(200).collect());
    let conversation = Conversation {
        tenant,
        id,
        chain,
        label,
        text_only,
    };
    Some((request, conversation))
}

/// `h_0 = H(tenant, canonical(system))`, `h_i = H(h_{i-1}, canonical(m_i))`.
fn chain(adapter: &dyn Adapter, tenant: &TenantId, request: &ChatRequest) -> Vec<ChainHash> {
    let mut chain = Vec::with_capacity(request.message_count() + 1);
    let mut link = ChainHash::root(tenant, &adapter.canonical(request.system()));
    chain.push(link);
    for message in request.messages() {
        link = link.next(&adapter.canonical(message));
        chain.push(link);
    }
    chain
}

/// [`chain`], from `memo` as far as it knows it; what it does not know is
/// parsed here, and `None` if it does not parse. The messages parsed here
/// are kept when they are the last ones (a history seen for the first
/// time, a growing conversation's newest): storing them needs them.
fn memoized_chain(
    adapter: &dyn Adapter,
    tenant: &TenantId,
    outline: &Outline,
    memo: &ChainMemo,
) -> Option<Linked> {
    let mut first_parsed = None;
    let mut parsed = Vec::new();
    let chain = memo.chain(
        adapter.canonical_scheme(),
        tenant,
        &outline.system_pieces(),
        &outline.message_pieces(),
        |index| outline.prefix_digest(index),
        || {
            let system = outline.try_system()?;
            Some(ChainHash::root(tenant, &adapter.canonical(system)))
        },
        |previous, index| {
            let message = outline.try_message(index)?;
            let link = previous.next(&adapter.canonical(&message));
            let first = *first_parsed.get_or_insert(index);
            if first + parsed.len() == index {
                parsed.push(message.into_owned());
            }
            Some(link)
        },
        |piece| piece_text_only(adapter, piece),
    )?;
    if let Some(first) = first_parsed {
        if first + parsed.len() == outline.message_count() {
            outline.keep_tail(first, parsed);
        }
    }
    Some(chain)
}

/// Whether `piece` carries text alone, as [`text_only`] finds it.
fn piece_text_only(adapter: &dyn Adapter, piece: &Piece<'_>) -> bool {
    match piece {
        Piece::Text(bytes) => text_only(adapter, bytes),
        Piece::Parsed(value) => {
            serde_json::to_vec(value).is_ok_and(|bytes| text_only(adapter, &bytes))
        }
    }
}

/// Whether the parts of the body around its messages carry text alone:
/// server tools and attachments may sit outside them.
fn text_alone(adapter: &dyn Adapter, parts: [&[u8]; 2]) -> bool {
    parts.iter().all(|part| text_only(adapter, part))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outline(adapter: &dyn Adapter, body: impl Into<bytes::Bytes>) -> Outline {
        adapter.outline(body.into()).expect("outlines")
    }

    fn conversation(key: &str, body: &str) -> Conversation {
        let adapter = crate::protocol::openai::PROTOCOL.adapter();
        let mut headers = HeaderMap::new();
        headers.insert(
            "authorization",
            format!("Bearer {key}").parse().expect("header"),
        );
        let outline = outline(adapter, body.to_string());
        super::conversation(
            adapter,
            b"",
            &headers,
            crate::protocol::bearer_or_key(&headers),
            outline,
            None,
        )
        .expect("parses")
        .1
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

    fn with_headers(pairs: &[(&str, &str)], body: &str) -> Conversation {
        let adapter = crate::protocol::openai::PROTOCOL.adapter();
        let mut headers = HeaderMap::new();
        headers.insert("authorization", "Bearer k".parse().expect("header"));
        for (name, value) in pairs {
            let name = http::HeaderName::from_bytes(name.as_bytes()).expect("name");
            headers.insert(name, value.parse().expect("header"));
        }
        let outline = outline(adapter, body.to_string());
        super::conversation(
            adapter,
            b"",
            &headers,
            crate::protocol::bearer_or_key(&headers),
            outline,
            None,
        )
        .expect("parses")
        .1
    }

    /// Two chats under one system prompt are two conversations; one
    /// session is one conversation whatever its messages, and another
    /// session another, even with identical messages.
    #[test]
    fn a_conversation_is_a_session_or_its_first_turn() {
        let hello = r#"{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"hello"}]}"#;
        let later = r#"{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"hello"},{"role":"assistant","content":"hi"},{"role":"user","content":"more"}]}"#;
        let other = r#"{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"bonjour"}]}"#;
        let (a, a_later, b) = (
            with_headers(&[], hello),
            with_headers(&[], later),
            with_headers(&[], other),
        );
        assert_eq!(a.chain[0], b.chain[0], "one root");
        assert_ne!(a.id, b.id);
        assert_eq!(a.id, a_later.id);
        let session = |id: &str, body| with_headers(&[("x-claude-code-session-id", id)], body);
        assert_eq!(session("one", hello).id, session("one", other).id);
        assert_ne!(session("one", hello).id, session("two", hello).id);
        assert_ne!(session("one", hello).id, a.id);
        let labelled = with_headers(
            &[("x-conversation-id", "chat-7"), ("session-id", "x")],
            hello,
        );
        assert_eq!(labelled.label.as_deref(), Some("chat-7"));
        assert_eq!(
            labelled.id,
            with_headers(&[("x-conversation-id", "chat-7")], other).id
        );
    }

    /// A client that sends an empty `x-conversation-id` beside its own
    /// session header is still that session.
    #[test]
    fn an_empty_session_header_gives_way_to_a_later_one() {
        let body = r#"{"model":"m","messages":[{"role":"user","content":"hello"}]}"#;
        let sent = with_headers(
            &[
                ("x-conversation-id", ""),
                ("x-claude-code-session-id", "s-1"),
            ],
            body,
        );
        let alone = with_headers(&[("x-claude-code-session-id", "s-1")], body);
        assert_eq!(sent.id, alone.id);
        assert_eq!(sent.label.as_deref(), Some("s-1"));
        let blank = with_headers(&[("x-conversation-id", " ")], body);
        assert_eq!(blank.id, ConversationId::first_turn(&blank.chain));
    }

    #[test]
    fn another_credential_is_another_chain() {
        let body = r#"{"model":"m","messages":[{"role":"user","content":"a"}]}"#;
        assert_ne!(
            conversation("k1", body).chain,
            conversation("k2", body).chain
        );
    }

    /// Whether a body carries text alone, with and without the memo, the
    /// first time and re-sent: the same answer as searching it whole.
    #[test]
    fn text_alone_is_what_a_search_of_the_whole_body_finds() {
        use serde_json::json;
        let memo = ChainMemo::new(100);
        let anthropic = crate::protocol::anthropic::PROTOCOL.adapter();
        let openai = crate::protocol::openai::PROTOCOL.adapter();
        let hi = json!({"role": "user", "content": "hi"});
        let image = json!({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:…"}}]});
        let cases: [(&dyn Adapter, serde_json::Value, bool); 4] = [
            (openai, json!({"model": "m", "messages": [hi]}), true),
            (
                openai,
                json!({"model": "m", "messages": [hi, image]}),
                false,
            ),
            (
                anthropic,
                json!({"model": "m", "max_tokens": 9, "system": "be brief", "messages": [hi]}),
                true,
            ),
            // A server tool sits beside the messages, not in them.
            (
                anthropic,
                json!({"model": "m", "max_tokens": 9, "messages": [hi],
                       "tools": [{"type": "web_search_20250305", "name": "web_search"}]}),
                false,
            ),
        ];
        for (adapter, body, expected) in cases {
            let bytes = serde_json::to_vec(&body).expect("serializes");
            assert_eq!(text_only(adapter, &bytes), expected, "{body}");
            for memo in [None, Some(&memo), Some(&memo)] {
                let mut headers = HeaderMap::new();
                headers.insert("x-api-key", "k".parse().expect("header"));
                let outline = outline(adapter, bytes.clone());
                let (_, conversation) = super::conversation(
                    adapter,
                    b"salt",
                    &headers,
                    crate::protocol::bearer_or_key(&headers),
                    outline,
                    memo,
                )
                .expect("parses");
                assert_eq!(conversation.text_only, expected, "{body}");
            }
        }
    }

    fn chain_of(
        adapter: &dyn Adapter,
        key: &str,
        body: &serde_json::Value,
        memo: Option<&ChainMemo>,
    ) -> Vec<ChainHash> {
        let body = serde_json::to_vec(body).expect("serializes");
        let mut headers = HeaderMap::new();
        headers.insert("x-api-key", key.parse().expect("header"));
        let outline = outline(adapter, body);
        super::conversation(
            adapter,
            b"salt",
            &headers,
            crate::protocol::bearer_or_key(&headers),
            outline,
            memo,
        )
        .expect("parses")
        .1
        .chain
    }

    /// Histories as clients send them, then again with keys reordered,
    /// cache markers moved and text parts spelled the other way, then
    /// with one message edited.
    fn histories(protocol: &str) -> Vec<serde_json::Value> {
        let numbers = serde_json::json!({"n": [0, -1, 1.0, 1, 2.5e-300, 18446744073709551615u64, -9223372036854775808i64]});
        match protocol {
            "openai" => openai_histories(&numbers),
            "anthropic" => anthropic_histories(&numbers),
            _ => responses_histories(&numbers),
        }
    }

    fn openai_histories(numbers: &serde_json::Value) -> Vec<serde_json::Value> {
        use serde_json::json;
        vec![
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
        ]
    }

    fn anthropic_histories(numbers: &serde_json::Value) -> Vec<serde_json::Value> {
        use serde_json::json;
        vec![
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
        ]
    }

    fn responses_histories(numbers: &serde_json::Value) -> Vec<serde_json::Value> {
        use serde_json::json;
        vec![
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
        ]
    }

    fn adapters() -> [(&'static str, &'static dyn Adapter); 3] {
        [
            ("openai", crate::protocol::openai::PROTOCOL.adapter()),
            ("anthropic", crate::protocol::anthropic::PROTOCOL.adapter()),
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

    /// `body` with `count` long messages after its own, as large as the
    /// histories the re-sent memo keeps (`protocol::resent`).
    fn grown(name: &str, body: &serde_json::Value, count: usize) -> serde_json::Value {
        let list = if name == "responses" {
            "input"
        } else {
            "messages"
        };
        let mut body = body.clone();
        let messages = body[list].as_array_mut().expect("a list");
        for index in 0..count {
            let role = ["user", "assistant"][index % 2];
            let content = format!("turn {index}: \"{}\"\n", "ok ".repeat(300));
            messages.push(serde_json::json!({"type": "message", "role": role, "content": content}));
        }
        body
    }

    #[test]
    fn large_histories_named_by_their_bytes_are_the_chains() {
        let memo = ChainMemo::new(1000);
        for (name, adapter) in adapters() {
            let sent = &histories(name)[0];
            let mut edited = grown(name, sent, 32);
            let list = if name == "responses" {
                "input"
            } else {
                "messages"
            };
            edited[list][10]["content"] = "edited".into();
            let turns = [
                grown(name, sent, 30),
                grown(name, sent, 32),
                grown(name, sent, 32),
                edited,
            ];
            for key in ["k1", "k2"] {
                for body in &turns {
                    let bytes = serde_json::to_vec(body).expect("serializes");
                    let named = outline(adapter, bytes);
                    let last = named.message_count() - 1;
                    assert!(named.prefix_digest(last).is_some(), "{name}: named");
                    let plain = chain_of(adapter, key, body, None);
                    assert_eq!(chain_of(adapter, key, body, Some(&memo)), plain, "{name}");
                }
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
        let adapter = crate::protocol::openai::PROTOCOL.adapter();
        let chain = chain_of(adapter, "k", &body, Some(&memo));
        assert_eq!(chain, chain_of(adapter, "k", &body, None));
        let distinct: std::collections::HashSet<_> = chain.iter().collect();
        assert_eq!(distinct.len(), chain.len());
    }

    /// serde_json scans, as raw text, what it refuses as a value: such a
    /// message makes the body one Condenser does not work with, whether
    /// or not the memo is used, and however often it is sent.
    #[test]
    fn a_message_that_does_not_parse_is_no_conversation() {
        let memo = ChainMemo::new(100);
        let headers = HeaderMap::new();
        for (adapter, body) in [
            (
                crate::protocol::openai::PROTOCOL.adapter(),
                r#"{"model":"m","messages":[{"role":"user","content":"a"},{"role":"user","content":"\ud800"}]}"#,
            ),
            (
                crate::protocol::openai::PROTOCOL.adapter(),
                r#"{"model":"m","messages":[{"role":"system","content":"\udfff"},{"role":"user","content":"a"}]}"#,
            ),
            (
                crate::protocol::anthropic::PROTOCOL.adapter(),
                r#"{"model":"m","messages":[{"role":"user","content":"a"},{"role":"user","n":1e400}]}"#,
            ),
        ] {
            for memo in [None, Some(&memo), Some(&memo)] {
                let outline = outline(adapter, body);
                assert!(
                    super::conversation(
                        adapter,
                        b"",
                        &headers,
                        crate::protocol::bearer_or_key(&headers),
                        outline,
                        memo
                    )
                    .is_none(),
                    "{body}"
                );
            }
        }
    }

    /// What the memo knows by its bytes is not parsed again: a re-sent
    /// history leaves its messages as text until something needs them,
    /// and then they are the messages sent.
    #[test]
    fn a_resent_history_is_not_parsed_until_needed() {
        let chat = r#"{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"a"},{"role":"assistant","content":"b"}]}"#;
        let responses = r#"{"model":"m","instructions":"s","input":[{"role":"user","content":"a"},{"type":"reasoning","id":"r"},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"b"}]}"#;
        let responses_adapter: &dyn Adapter = &crate::protocol::responses::Responses;
        for (adapter, body) in [
            (crate::protocol::openai::PROTOCOL.adapter(), chat),
            (responses_adapter, responses),
        ] {
            let memo = ChainMemo::new(100);
            let headers = HeaderMap::new();
            let identify = || {
                super::conversation(
                    adapter,
                    b"",
                    &headers,
                    crate::protocol::bearer_or_key(&headers),
                    outline(adapter, body),
                    Some(&memo),
                )
                .expect("parses")
            };
            let (first, conversation) = identify();
            let (again, same) = identify();
            assert_eq!(same.chain, conversation.chain);
            assert!(
                first.has_parsed_messages(),
                "first sight parses each message"
            );
            assert!(!again.has_parsed_messages(), "re-sent: found by its bytes");
            let parsed = adapter.parse(body.as_bytes()).expect("parses");
            assert_eq!(again.messages(), parsed.messages());
            assert_eq!(again.system(), parsed.system());
        }
    }

    /// A growing conversation's newest messages are parsed once, by
    /// identity, and kept for storing; the rest stay text.
    #[test]
    fn the_newest_messages_are_parsed_once_and_kept() {
        let adapter = crate::protocol::openai::PROTOCOL.adapter();
        let memo = ChainMemo::new(100);
        let headers = HeaderMap::new();
        let turn = |messages: &str| {
            let body = format!(r#"{{"model":"m","messages":[{messages}]}}"#);
            let outline = outline(adapter, body.clone());
            let (request, _) = super::conversation(
                adapter,
                b"",
                &headers,
                crate::protocol::bearer_or_key(&headers),
                outline,
                Some(&memo),
            )
            .expect("parses");
            (request, adapter.parse(body.as_bytes()).expect("parses"))
        };
        let history = r#"{"role":"user","content":"a"},{"role":"assistant","content":"b"}"#;
        turn(history);
        let (grown, parsed) = turn(&format!(
            r#"{history},{{"role":"user","content":"c"}},{{"role":"assistant","content":"d"}}"#
        ));
        assert_eq!(grown.parsed_tail(), Some(2));
        assert!(!grown.has_parsed_messages());
        for index in 0..4 {
            assert_eq!(*grown.message(index), parsed.messages()[index]);
        }
        let shorter = grown.truncated(3);
        assert_eq!(shorter.message_count(), 3);
        assert_eq!(*shorter.message(2), parsed.messages()[2]);
        assert_eq!(shorter.messages(), &parsed.messages()[..3]);
    }
}
