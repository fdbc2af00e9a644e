//! Compaction through the real proxy against the strict fake upstream, on
//! both storage backends. The fake rejects, as the real APIs do, any request
//! with broken tool pairs, and rejects a misplaced or duplicated summary.

use crate::helpers::agent::{filler, text, Agent, Dialect};
use crate::helpers::app::{spawn_app_with, Options, TestApp};
use crate::helpers::db::{both_backends, TestBackend};
use crate::helpers::wait::{wait_for_some, PATIENCE};
use condenser::protocol::SUMMARY_MARKER;
use fake_upstream::{RequestKind, Scripted};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

const MODEL: &str = "gpt-4o-mini";

fn small_window(backend: TestBackend) -> Options {
    Options::on(backend)
        .window(MODEL, 4_000)
        .settings(json!({"compaction": {"summary_max_tokens": 300}}))
}

/// The messages of the last request the upstream accepted.
fn last_accepted(app: &TestApp) -> Vec<Value> {
    let accepted = app
        .upstream
        .chat_requests()
        .into_iter()
        .rev()
        .find(|r| r.status == 200)
        .expect("an accepted request");
    let json = accepted.json.expect("json");
    // Gemini's history is `contents`.
    let history = json.get("messages").or_else(|| json.get("contents"));
    history.and_then(Value::as_array).expect("messages").clone()
}

both_backends!(
    a_long_tool_using_agent_never_sees_an_overflow,
    the_summary_is_one_separate_message_after_the_unchanged_system_prompt,
    a_tool_result_larger_than_the_window_is_trimmed_without_looping,
    summaries_stay_flat_and_bounded_over_many_compactions,
    every_compacted_message_reaches_a_summary_call,
    a_restarted_proxy_reuses_the_stored_compaction,
    errors_that_are_not_overflows_pass_through_untouched,
    a_failed_summary_returns_the_original_overflow_error,
    a_rewind_to_a_compacted_prefix_sends_its_newest_message_as_itself,
    a_stored_compaction_records_when_it_was_made,
);

async fn a_long_tool_using_agent_never_sees_an_overflow(backend: TestBackend) {
    let app = spawn_app_with(small_window(backend)).await;
    let mut agent = Agent::new(Dialect::OpenAi, MODEL, 1_500, 3);
    let compactions = agent.run_turns(&app, 30).await;
    assert!(
        compactions >= 5,
        "the history outgrew the window many times, yet only {compactions} compactions"
    );
    let total: usize = agent.messages.iter().map(|m| m.to_string().len()).sum();
    assert!(
        total > 4 * 4_000 * 5,
        "the conversation grew to many windows ({total} bytes)"
    );
}

async fn the_summary_is_one_separate_message_after_the_unchanged_system_prompt(
    backend: TestBackend,
) {
    let app = spawn_app_with(small_window(backend)).await;
    let mut agent = Agent::new(Dialect::OpenAi, MODEL, 1_500, 3);
    agent.run_until_summaries(&app, 1, 19).await;
    let messages = last_accepted(&app);
    assert_eq!(
        messages[0],
        json!({"role": "system", "content": agent.system})
    );
    assert_eq!(messages[1]["role"], "user");
    assert!(text(&messages[1]).starts_with(SUMMARY_MARKER));
    let marked = messages
        .iter()
        .filter(|m| text(m).contains(SUMMARY_MARKER))
        .count();
    assert_eq!(marked, 1);
}

async fn a_tool_result_larger_than_the_window_is_trimmed_without_looping(backend: TestBackend) {
    huge_tool_result_is_trimmed_without_looping(backend, Dialect::OpenAi, MODEL).await;
}

/// A 60 KB tool result in a 4,000-token window: trimmed, with an explicit
/// elision marker, in at most `max_compactions + 1` attempts.
pub async fn huge_tool_result_is_trimmed_without_looping(
    backend: TestBackend,
    dialect: Dialect,
    model: &str,
) {
    let options = Options::on(backend)
        .window(model, 4_000)
        .settings(json!({"compaction": {"summary_max_tokens": 300}}));
    let app = spawn_app_with(options).await;
    let mut agent = Agent::new(dialect, model, 100, 1);
    agent.say("Read the log. [tools]");
    assert_eq!(agent.send(&app).await.status, 200);
    agent.answer_tools(&filler(60_000, 7));
    app.upstream.clear_requests();
    let step = agent.send(&app).await;
    let attempts = app.upstream.chat_requests().len();
    assert!(
        attempts <= 3,
        "max_compactions + 1 attempts at most, saw {attempts}"
    );
    assert_eq!(step.status, 200, "trimmed, the request fits: {}", step.body);
    let sent = Value::Array(last_accepted(&app)).to_string();
    assert!(
        sent.contains("condenser trimmed"),
        "an explicit elision marker"
    );
    assert!(
        sent.len() < 16_000,
        "the 60 KB result was cut to fit a 4,000-token window ({} bytes sent)",
        sent.len()
    );
}

async fn summaries_stay_flat_and_bounded_over_many_compactions(backend: TestBackend) {
    summaries_stay_flat_and_bounded(backend, Dialect::OpenAi, MODEL).await;
}

/// 30 compactions with a 100-token summary cap: every summary call asks for
/// at most 100 tokens, no request carries a summary inside a summary, and
/// the summary the upstream last saw is still small.
pub async fn summaries_stay_flat_and_bounded(backend: TestBackend, dialect: Dialect, model: &str) {
    let options = Options::on(backend)
        .window(model, 4_000)
        .settings(json!({"compaction": {"summary_max_tokens": 100}}));
    let app = spawn_app_with(options).await;
    let mut agent = Agent::new(dialect, model, 1_500, 2);
    agent.run_until_summaries(&app, 30, 199).await;
    for summary_call in app.upstream.summary_requests() {
        let json = summary_call.json.expect("json");
        let limit = json
            .get("max_tokens")
            .or_else(|| json.pointer("/generationConfig/maxOutputTokens"));
        assert_eq!(limit, Some(&json!(100)));
    }
    for request in app.upstream.chat_requests() {
        let body = String::from_utf8_lossy(&request.body).to_string();
        assert!(
            body.matches(SUMMARY_MARKER).count() <= 1,
            "a summary nested inside another"
        );
    }
    let summary = last_accepted(&app)
        .iter()
        .map(text)
        .find(|t| t.contains(SUMMARY_MARKER))
        .expect("the last request carries the summary");
    assert!(
        summary.len() < 100 * 4 + 400,
        "summary grew to {} bytes",
        summary.len()
    );
}

async fn every_compacted_message_reaches_a_summary_call(backend: TestBackend) {
    let app = spawn_app_with(small_window(backend)).await;
    let mut agent = Agent::new(Dialect::OpenAi, MODEL, 1_500, 3);
    for turn in 1..=12 {
        agent.turn(&app, turn).await;
    }
    let summarized: String = app
        .upstream
        .summary_requests()
        .iter()
        .map(|r| String::from_utf8_lossy(&r.body).to_string())
        .collect();
    let kept = serde_json::to_string(&last_accepted(&app)).expect("json");
    for message in agent.messages.iter().filter(|m| m["role"] == "tool") {
        let seed = text(message)
            .split_whitespace()
            .nth(7)
            .unwrap_or_default()
            .to_string();
        assert!(
            seed.starts_with("fact-"),
            "filler seed in {}",
            text(message)
        );
        assert!(
            kept.contains(&seed) || summarized.contains(&seed),
            "{seed} was dropped without being summarized"
        );
    }
}

async fn a_restarted_proxy_reuses_the_stored_compaction(backend: TestBackend) {
    restarted_proxy_reuses_the_stored_compaction(backend, Dialect::OpenAi, MODEL).await;
}

/// A restart between two turns: the next turn is sent with the stored
/// summary in place and no new summary call.
pub async fn restarted_proxy_reuses_the_stored_compaction(
    backend: TestBackend,
    dialect: Dialect,
    model: &str,
) {
    let options = Options::on(backend)
        .window(model, 4_000)
        .settings(json!({"compaction": {"summary_max_tokens": 300}}));
    let mut app = spawn_app_with(options).await;
    let mut agent = Agent::new(dialect, model, 1_500, 3);
    agent.run_until_summaries(&app, 1, 19).await;
    let summaries = app.upstream.summary_requests().len();
    app.restart().await;
    agent.say("One more question, no tools.");
    let step = agent.send(&app).await;
    assert_eq!(step.status, 200, "{}", step.body);
    assert!(
        step.compacted_messages.unwrap_or(0) > 0,
        "the stored summary applied"
    );
    assert_eq!(step.compactions, 0);
    assert_eq!(
        app.upstream.summary_requests().len(),
        summaries,
        "no new summary call after the restart"
    );
}

async fn errors_that_are_not_overflows_pass_through_untouched(backend: TestBackend) {
    let app = spawn_app_with(small_window(backend)).await;
    let request = Agent::new(Dialect::OpenAi, MODEL, 10, 0).request();
    let rate_limit = r#"{"error":{"message":"Rate limit reached for gpt-4o-mini","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#;
    app.upstream.push_script(Scripted::Respond {
        kind: RequestKind::Chat,
        status: 429,
        headers: vec![("retry-after".into(), "7".into())],
        body: rate_limit.into(),
    });
    let response = app.post_chat(&request).await;
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "7");
    assert_eq!(response.text().await.expect("body"), rate_limit);
    let invalid = r#"{"error":{"message":"Invalid value for 'temperature'","type":"invalid_request_error","param":"temperature","code":"invalid_value"}}"#;
    app.upstream.push_script(Scripted::Respond {
        kind: RequestKind::Chat,
        status: 400,
        headers: vec![],
        body: invalid.into(),
    });
    let response = app.post_chat(&request).await;
    assert_eq!(response.status(), 400);
    assert_eq!(response.text().await.expect("body"), invalid);
    assert!(app.upstream.summary_requests().is_empty());
}

async fn a_failed_summary_returns_the_original_overflow_error(backend: TestBackend) {
    let app = spawn_app_with(small_window(backend)).await;
    let mut agent = Agent::new(Dialect::OpenAi, MODEL, 1_500, 3);
    for _ in 0..3 {
        app.upstream.push_script(Scripted::Respond {
            kind: RequestKind::Summary,
            status: 500,
            headers: vec![],
            body: r#"{"error":{"message":"The server had an error","type":"server_error","param":null,"code":null}}"#.into(),
        });
    }
    let mut turn = 0;
    let failed = loop {
        turn += 1;
        let steps = agent.turn(&app, turn).await;
        if let Some(step) = steps.into_iter().find(|s| s.status != 200) {
            break step;
        }
        assert!(turn < 20, "never overflowed");
    };
    assert_eq!(failed.status, 400);
    assert_eq!(
        failed.body["error"]["code"], "context_length_exceeded",
        "the upstream's own overflow error"
    );
    assert_eq!(
        app.upstream.summary_requests().len(),
        3,
        "a summary call failing in passing is retried twice, not in a loop"
    );
}

/// A regenerate, a rewind or an edited resend can end exactly where a stored
/// compaction ends; that summary must not absorb the newest message.
async fn a_rewind_to_a_compacted_prefix_sends_its_newest_message_as_itself(backend: TestBackend) {
    let app = spawn_app_with(small_window(backend)).await;
    let mut agent = Agent::new(Dialect::OpenAi, MODEL, 1_500, 3);
    agent.run_until_summaries(&app, 1, 19).await;
    agent.say("What next?");
    let step = agent.send(&app).await;
    let covered = step
        .compacted_messages
        .expect("the stored summary applies to the next turn") as usize;

    let mut rewound = agent.request();
    let with_system = rewound["messages"].as_array().expect("messages")[..covered + 1].to_vec();
    rewound["messages"] = Value::Array(with_system);
    let response = app.post_chat(&rewound).await;
    assert_eq!(response.status(), 200);

    let sent = last_accepted(&app);
    assert_eq!(
        sent.last(),
        Some(&agent.messages[covered - 1]),
        "the request's newest message reached the upstream as its own message"
    );
    assert!(sent.len() > 2, "more than the system prompt and a summary");
}

async fn a_stored_compaction_records_when_it_was_made(backend: TestBackend) {
    let app = spawn_app_with(small_window(backend)).await;
    let before = condenser::store::now_ms();
    let mut agent = Agent::new(Dialect::OpenAi, MODEL, 1_500, 3);
    agent.run_until_summaries(&app, 1, 19).await;
    let after = condenser::store::now_ms();
    let sql = "select coalesce(max(created_at), 0) from compactions";
    let created = wait_for_some(PATIENCE, "a stored compaction", || async {
        Some(app.db.count(sql).await).filter(|created| *created > 0)
    })
    .await;
    assert!(
        (before..=after).contains(&created),
        "created_at {created} lies within the run ({before}..={after})"
    );
}
