//! The real opencode (`opencode-ai`, pinned and installed by
//! `scripts/test`, which sets `CONDENSER_TEST_OPENCODE`) through the proxy
//! against the fake, offline as tests/README.md describes: an
//! OpenAI-compatible provider at the proxy, one session continued turn
//! after turn with `opencode run`, a tool round in some turns, its history
//! outgrowing the window again and again while its own compaction (near
//! the 128k window it is told) never fires, every turn answered.

use crate::helpers::agent::filler;
use crate::helpers::app::{spawn_app_with, Options, TestApp, OPENAI_KEY};
use serde_json::{json, Value};
use std::path::Path;

const MODEL: &str = "fake-model";
/// opencode's prompt and tools take about 7.7k of the fake's tokens, its
/// output limit 1k more.
const WINDOW: u64 = 14_000;
const TURNS: usize = 7;
/// A fact the user gives in the first turn; summaries carry it on.
const FACT: &str = "FACT-opencode_port_8443";

fn opencode() -> String {
    std::env::var("CONDENSER_TEST_OPENCODE").expect(
        "CONDENSER_TEST_OPENCODE is not set: run the suite with scripts/test, which installs opencode",
    )
}

/// A provider at the proxy, told the model's nominal window (its own
/// compaction counts against it) and a 1k output limit (its `max_tokens`);
/// no sharing, no update, no snapshots of the working directory (a git
/// tree of it each step, about a second a turn).
fn write_config(home: &Path, app: &TestApp) -> std::path::PathBuf {
    let config = json!({
        "$schema": "https://opencode.ai/config.json",
        "provider": {"condenser": {
            "npm": "@ai-sdk/openai-compatible",
            "name": "Condenser (local)",
            "options": {"baseURL": format!("{}/v1", app.address), "apiKey": OPENAI_KEY},
            "models": {MODEL: {"name": "Fake", "limit": {"context": 128_000, "output": 1_024}}},
        }},
        "model": format!("condenser/{MODEL}"),
        "autoupdate": false,
        "share": "disabled",
        "snapshot": false,
    });
    let path = home.join("opencode.json");
    std::fs::write(&path, config.to_string()).expect("writing the opencode config");
    path
}

/// One `opencode run` turn, continuing `session` after the first: its
/// JSON events. Its home is the test's own (sessions live in its data
/// directory); the model list fetch, update check and LSP downloads are
/// off, so the proxy is the only host it calls.
async fn run_turn(home: &Path, workdir: &Path, session: Option<&str>, number: usize) -> Vec<Value> {
    // A user pasting a log: each turn grows the history by ~2k tokens;
    // every other turn asks for a tool first.
    let tools = if number % 2 == 0 { " [tools]" } else { "" };
    let fact = if number == 1 { FACT } else { "" };
    let prompt = format!(
        "Turn {number}: read this log.{tools} {fact}\n{}",
        filler(8_000, number)
    );
    let mut command = tokio::process::Command::new(opencode());
    command.args(["run", "--format", "json"]);
    if let Some(session) = session {
        command.args(["--session", session]);
    }
    let output = command
        .arg(&prompt)
        .current_dir(workdir)
        .env("HOME", home)
        .env("OPENCODE_CONFIG", home.join("opencode.json"))
        .env("OPENCODE_DISABLE_MODELS_FETCH", "1")
        .env("OPENCODE_DISABLE_AUTOUPDATE", "1")
        .env("OPENCODE_DISABLE_LSP_DOWNLOAD", "1")
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("XDG_DATA_HOME")
        .env_remove("XDG_CACHE_HOME")
        .env_remove("XDG_STATE_HOME")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .expect("opencode runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "turn {number}: opencode failed\n{stdout}\n{stderr}"
    );
    stdout
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

#[tokio::test]
async fn opencode_runs_seven_turns_through_compactions() {
    let settings = json!({"compaction": {"summary_max_tokens": 300}});
    let options = Options::default().window(MODEL, WINDOW).settings(settings);
    let app = spawn_app_with(options).await;
    let home = tempfile::tempdir().expect("a home");
    let workdir = tempfile::tempdir().expect("a working directory");
    write_config(home.path(), &app);
    let mut session = None;
    for number in 1..=TURNS {
        let events = run_turn(home.path(), workdir.path(), session.as_deref(), number).await;
        assert!(
            events.iter().all(|e| e["type"] != "error"),
            "turn {number}: {events:?}"
        );
        let answer: String = events
            .iter()
            .filter(|e| e["type"] == "text")
            .filter_map(|e| e["part"]["text"].as_str())
            .collect();
        assert!(
            answer.starts_with("I have read all"),
            "turn {number}: {events:?}"
        );
        session = events[0]["sessionID"].as_str().map(String::from);
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
    let tool_rounds = chats
        .iter()
        .filter(|r| r.body.windows(13).any(|w| w == b"\"role\":\"tool\""))
        .count();
    assert!(tool_rounds >= TURNS / 2, "{tool_rounds} tool rounds");
    let summaries = app.upstream.summary_requests().len();
    assert!(summaries >= 2, "{summaries} summaries over {TURNS} turns");
    app.upstream.assert_facts_survive();
}
