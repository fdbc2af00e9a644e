//! The real Claude Code (`@anthropic-ai/claude-code`, pinned and installed
//! by `scripts/test`, which sets `CONDENSER_TEST_CLAUDE_CODE`) through the
//! proxy against the fake, offline as tests/README.md describes: one
//! `claude -p` session resumed turn after turn, a tool round in some turns,
//! its history outgrowing the window again and again while its own
//! auto-compaction (near its 200k-token window) never fires, every turn
//! answered.

use crate::helpers::agent::filler;
use crate::helpers::app::{spawn_app_with, Options, TestApp, ANTHROPIC_KEY};
use serde_json::{json, Value};
use std::path::Path;

const MODEL: &str = "claude-sonnet-4-5";
/// Claude Code's system prompt and two dozen tools take about 29k of the
/// fake's tokens, its output limit 4k more.
const WINDOW: u64 = 38_000;
const TURNS: usize = 7;
const SESSION: &str = "c1a0dec0-1111-4222-8333-444444444444";
/// A fact the user gives in the first turn; summaries carry it on.
const FACT: &str = "FACT-claude_code_port_8443";

fn claude() -> String {
    std::env::var("CONDENSER_TEST_CLAUDE_CODE").expect(
        "CONDENSER_TEST_CLAUDE_CODE is not set: run the suite with scripts/test, which installs Claude Code",
    )
}

/// One `claude -p` turn, the session created on the first and resumed
/// after: its JSON result. The home and config directory are the test's
/// own; nonessential traffic (telemetry, error reports, the update check)
/// is off, so the proxy is the only host it calls. Its output limit is
/// lowered as a user of a small window lowers it: its default 32,000
/// would not fit.
async fn run_turn(app: &TestApp, home: &Path, workdir: &Path, number: usize) -> Value {
    // A user pasting a log: each turn grows the history by ~3k tokens;
    // every other turn asks for a tool first.
    let tools = if number % 2 == 0 { " [tools]" } else { "" };
    let fact = if number == 1 { FACT } else { "" };
    let prompt = format!(
        "Turn {number}: read this log.{tools} {fact}\n{}",
        filler(12_000, number)
    );
    let session = if number == 1 {
        "--session-id"
    } else {
        "--resume"
    };
    let output = tokio::process::Command::new(claude())
        .args(["-p", "--model", MODEL, "--output-format", "json"])
        .args([session, SESSION, &prompt])
        .current_dir(workdir)
        .env("HOME", home)
        .env("CLAUDE_CONFIG_DIR", home.join(".claude"))
        .env("ANTHROPIC_BASE_URL", &app.address)
        .env("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("CLAUDE_CODE_MAX_OUTPUT_TOKENS", "4096")
        .env_remove("ANTHROPIC_AUTH_TOKEN")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .expect("claude runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "turn {number}: claude failed\n{stdout}\n{stderr}"
    );
    serde_json::from_str(&stdout).unwrap_or_else(|_| panic!("turn {number}: not JSON: {stdout}"))
}

#[tokio::test]
async fn claude_code_runs_seven_turns_through_compactions() {
    let settings = json!({"compaction": {"summary_max_tokens": 300}});
    let options = Options::default().window(MODEL, WINDOW).settings(settings);
    let app = spawn_app_with(options).await;
    let home = tempfile::tempdir().expect("a home");
    let workdir = tempfile::tempdir().expect("a working directory");
    for number in 1..=TURNS {
        let output = run_turn(&app, home.path(), workdir.path(), number).await;
        let answer = output["result"].as_str().unwrap_or_default();
        assert!(
            output["subtype"] == "success"
                && output["is_error"] == false
                && answer.starts_with("I have read all"),
            "turn {number}: {output}"
        );
    }
    for request in app.upstream.requests() {
        let body = String::from_utf8_lossy(&request.body);
        assert!(
            request.status == 200 || request.input_tokens.is_some(),
            "refused for its shape: {}",
            &body[..body.len().min(400)]
        );
    }
    let chats = app.upstream.chat_requests();
    assert!(chats
        .iter()
        .all(|r| r.path == "/v1/messages" && r.query.as_deref() == Some("beta=true")));
    let tool_rounds = chats
        .iter()
        .filter(|r| r.body.windows(12).any(|w| w == b"\"tool_result"))
        .count();
    assert!(tool_rounds >= TURNS / 2, "{tool_rounds} tool rounds");
    let summaries = app.upstream.summary_requests().len();
    assert!(summaries >= 2, "{summaries} summaries over {TURNS} turns");
    app.upstream.assert_facts_survive();
}
