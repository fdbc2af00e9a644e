//! The official Python SDKs, pointed at the proxy, through a compaction.
//! `scripts/test` prepares the virtualenv and sets `CONDENSER_TEST_PYTHON`.

use crate::helpers::app::{spawn_app_with, Options, TestApp, ANTHROPIC_KEY, OPENAI_KEY};
use crate::helpers::db::{both_backends, TestBackend};
use fake_upstream::FakeConfig;
use serde_json::json;
use std::time::Duration;

fn python() -> String {
    std::env::var("CONDENSER_TEST_PYTHON")
        .expect("CONDENSER_TEST_PYTHON is not set: run the suite with scripts/test, which prepares the SDK virtualenv")
}

async fn run_script(app: &TestApp, script: &str, key: &str, model: &str) {
    let path = format!("{}/tests/sdk/{script}", env!("CARGO_MANIFEST_DIR"));
    let output = tokio::process::Command::new(python())
        .arg(&path)
        .env("CONDENSER_URL", &app.address)
        .env("API_KEY", key)
        .env("MODEL", model)
        .output()
        .await
        .expect("python runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{script} failed:\n{stderr}");
    assert!(
        !app.upstream.summary_requests().is_empty(),
        "the upstream wrote a summary"
    );
    // Every fact a summary carried reached the request it stands for.
    app.upstream.assert_facts_survive();
}

fn small_window(model: &str) -> Options {
    Options::default()
        .window(model, 3_000)
        .settings(json!({"compaction": {"summary_max_tokens": 300}}))
}

#[tokio::test]
async fn the_openai_sdk_works_through_a_compaction() {
    let app = spawn_app_with(small_window("gpt-4o-mini")).await;
    run_script(&app, "openai_sdk.py", OPENAI_KEY, "gpt-4o-mini").await;
}

#[tokio::test]
async fn the_anthropic_sdk_works_through_a_compaction() {
    let app = spawn_app_with(small_window("claude-sonnet-4-5")).await;
    run_script(&app, "anthropic_sdk.py", ANTHROPIC_KEY, "claude-sonnet-4-5").await;
}

both_backends!(the_openai_sdk_runs_a_responses_agent_through_compactions);

/// Summaries slower than the keep-alive interval, so streamed requests that
/// compact get their headers early and keep-alive comments first.
async fn the_openai_sdk_runs_a_responses_agent_through_compactions(backend: TestBackend) {
    let fake = FakeConfig {
        summary_delay: Duration::from_millis(900),
        summary_marker: Some(condenser::protocol::SUMMARY_MARKER.into()),
        ..FakeConfig::default()
    };
    let options = Options {
        backend,
        fake,
        settings: json!({}),
    }
    .window("gpt-5-codex", 6_000)
    .settings(json!({"compaction": {"summary_max_tokens": 300, "keepalive_interval": "300ms"}}));
    let app = spawn_app_with(options).await;
    run_script(&app, "openai_responses_sdk.py", OPENAI_KEY, "gpt-5-codex").await;
    let summaries = app.upstream.summary_requests().len();
    assert!(summaries >= 2, "{summaries} summaries");
    for request in app.upstream.requests() {
        let body = String::from_utf8_lossy(&request.body);
        assert!(
            request.status == 200 || request.input_tokens.is_some(),
            "refused for its shape: {body}"
        );
    }
}

/// The Agents SDK's `OpenAIResponsesCompactionSession` calls
/// `responses.compact`, which this upstream does not have: Condenser
/// serves it, and the session goes on with Condenser's compaction item
/// (issue 40).
#[tokio::test]
async fn the_agents_sdk_compaction_session_is_served_by_condenser() {
    let options = Options::default().settings(json!({"compaction": {"summary_max_tokens": 300}}));
    let app = spawn_app_with(options).await;
    run_script(
        &app,
        "openai_agents_compaction.py",
        OPENAI_KEY,
        "gpt-5-codex",
    )
    .await;
    assert!(app
        .upstream
        .requests()
        .iter()
        .all(|r| !r.path.ends_with("/compact")));
}
