//! The compaction guarantees on Anthropic Messages: tools, thinking blocks,
//! streaming, through the adapter seam alone.

use crate::helpers::agent::{text, Agent, Dialect};
use crate::helpers::app::{spawn_app_with, Options, TestApp};
use crate::helpers::db::{both_backends, TestBackend};
use condenser::protocol::SUMMARY_MARKER;
use fake_upstream::{RequestKind, Scripted};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

const MODEL: &str = "claude-sonnet-4-5";

fn small_window(backend: TestBackend) -> Options {
    Options::on(backend)
        .window(MODEL, 4_000)
        .settings(json!({"compaction": {"summary_max_tokens": 300}}))
}

fn last_accepted(app: &TestApp) -> Value {
    let accepted = app
        .upstream
        .chat_requests()
        .into_iter()
        .rev()
        .find(|r| r.status == 200)
        .expect("an accepted request");
    accepted.json.expect("json")
}

both_backends!(
    a_thirty_turn_claude_agent_never_sees_an_overflow,
    the_summary_is_the_first_message_and_the_system_prompt_is_untouched,
    thinking_blocks_in_the_kept_tail_reach_the_upstream_byte_identical,
    a_huge_tool_result_is_bounded,
    summaries_stay_flat_and_bounded_over_thirty_compactions,
    a_restarted_proxy_reuses_the_stored_compaction,
    a_summary_call_answered_overloaded_is_retried_and_the_client_gets_its_answer,
);

async fn summaries_stay_flat_and_bounded_over_thirty_compactions(backend: TestBackend) {
    crate::compaction::summaries_stay_flat_and_bounded(backend, Dialect::Anthropic, MODEL).await;
}

async fn a_restarted_proxy_reuses_the_stored_compaction(backend: TestBackend) {
    crate::compaction::restarted_proxy_reuses_the_stored_compaction(
        backend,
        Dialect::Anthropic,
        MODEL,
    )
    .await;
}

async fn a_thirty_turn_claude_agent_never_sees_an_overflow(backend: TestBackend) {
    let app = spawn_app_with(small_window(backend)).await;
    let mut agent = Agent::new(Dialect::Anthropic, MODEL, 1_500, 3);
    let compactions = agent.run_turns(&app, 30).await;
    assert!(compactions >= 5, "only {compactions} compactions");
}

async fn the_summary_is_the_first_message_and_the_system_prompt_is_untouched(backend: TestBackend) {
    let app = spawn_app_with(small_window(backend)).await;
    let mut agent = Agent::new(Dialect::Anthropic, MODEL, 1_500, 3);
    agent.run_until_summaries(&app, 1, 19).await;
    let sent = last_accepted(&app);
    assert_eq!(sent["system"], json!(agent.system));
    let messages = sent["messages"].as_array().expect("messages");
    assert_eq!(messages[0]["role"], "user");
    assert!(messages[0]["content"][0]["text"]
        .as_str()
        .expect("a text block")
        .starts_with(SUMMARY_MARKER));
    assert_eq!(
        messages
            .iter()
            .filter(|m| text(m).contains(SUMMARY_MARKER))
            .count(),
        1
    );
}

async fn thinking_blocks_in_the_kept_tail_reach_the_upstream_byte_identical(backend: TestBackend) {
    let app = spawn_app_with(small_window(backend)).await;
    let mut agent = Agent::new(Dialect::Anthropic, MODEL, 1_500, 2);
    // Anthropic requires max_tokens above the thinking budget.
    agent.extra =
        json!({"thinking": {"type": "enabled", "budget_tokens": 1024}, "max_tokens": 2048});
    agent.run_until_summaries(&app, 1, 19).await;
    // The fake checks every thinking signature; also compare bytes directly.
    let sent = last_accepted(&app);
    let sent_thinking: Vec<String> = sent["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|block| block["type"] == "thinking")
        .map(|block| block.to_string())
        .collect();
    assert!(
        !sent_thinking.is_empty(),
        "the kept tail holds thinking blocks"
    );
    let client_thinking: Vec<String> = agent
        .messages
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|block| block["type"] == "thinking")
        .map(|block| block.to_string())
        .collect();
    for block in &sent_thinking {
        assert!(
            client_thinking.contains(block),
            "a thinking block changed on its way upstream: {block}"
        );
    }
}

async fn a_huge_tool_result_is_bounded(backend: TestBackend) {
    crate::compaction::huge_tool_result_is_trimmed_without_looping(
        backend,
        Dialect::Anthropic,
        MODEL,
    )
    .await;
}

async fn a_summary_call_answered_overloaded_is_retried_and_the_client_gets_its_answer(
    backend: TestBackend,
) {
    let app = spawn_app_with(small_window(backend)).await;
    app.upstream.push_script(Scripted::Respond {
        kind: RequestKind::Summary,
        status: 529,
        headers: vec![],
        body: r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
            .into(),
    });
    let mut agent = Agent::new(Dialect::Anthropic, MODEL, 1_500, 3);
    agent.run_until_summaries(&app, 2, 19).await;
    let summaries = app.upstream.summary_requests();
    assert_eq!(summaries[0].status, 529);
    assert_eq!(summaries[1].status, 200, "the same summary, retried");
    assert_eq!(
        summaries[0].body, summaries[1].body,
        "the retry is the same call"
    );
}
