//! The real Gemini CLI (`@google/gemini-cli`, pinned and installed by
//! `scripts/test`, which sets `CONDENSER_TEST_GEMINI_CLI`) through the
//! proxy against the fake, offline as tests/README.md describes: one
//! session resumed turn after turn, its history outgrowing the window
//! again and again while the CLI's own compression (half of a 1M-token
//! limit) never fires, every turn answered, summaries slow enough that it
//! reads keep-alives first.

use crate::gemini::{gemini_app, GEMINI_KEY};
use crate::helpers::agent::filler;
use crate::helpers::app::TestApp;
use crate::helpers::db::TestBackend;
use fake_upstream::RequestKind;
use serde_json::Value;
use std::path::Path;

const MODEL: &str = "gemini-3-flash-preview";
/// The CLI's own prompt and eight read-only tools take about 9.6k of the
/// fake's tokens.
const WINDOW: u64 = 14_000;
const TURNS: usize = 12;
const SESSION: &str = "5e55104d-2222-4333-8444-555555555555";

fn gemini_cli() -> String {
    std::env::var("CONDENSER_TEST_GEMINI_CLI").expect(
        "CONDENSER_TEST_GEMINI_CLI is not set: run the suite with scripts/test, which installs Gemini CLI",
    )
}

/// Settings that keep the CLI offline and quiet: API-key auth (a base URL
/// alone selects `gateway`, which `-p` refuses), no folder-trust prompt,
/// no usage statistics, telemetry, update checks or IDE connection.
fn write_settings(home: &Path) {
    let dir = home.join(".gemini");
    std::fs::create_dir_all(&dir).expect("settings directory");
    let settings = r#"{"security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": false}},
 "privacy": {"usageStatisticsEnabled": false},
 "telemetry": {"enabled": false},
 "general": {"enableAutoUpdate": false, "enableAutoUpdateNotification": false},
 "ide": {"enabled": false}}"#;
    std::fs::write(dir.join("settings.json"), settings).expect("writing settings.json");
}

/// One `gemini -p` turn, the session created on the first and resumed
/// after: the CLI's JSON output.
async fn run_turn(app: &TestApp, home: &Path, workdir: &Path, number: usize) -> Value {
    // A user pasting a log: each turn grows the history by ~900 tokens.
    let prompt = format!("Turn {number}: read this log.\n{}", filler(3_600, number));
    let session = if number == 1 {
        "--session-id"
    } else {
        "--resume"
    };
    let output = tokio::process::Command::new(gemini_cli())
        .args(["-m", MODEL, session, SESSION, "-o", "json", "-p", &prompt])
        .current_dir(workdir)
        .env("GEMINI_CLI_HOME", home)
        .env("GEMINI_API_KEY", GEMINI_KEY)
        .env("GOOGLE_GEMINI_BASE_URL", &app.address)
        .env_remove("GOOGLE_API_KEY")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .expect("gemini runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "turn {number}: gemini failed\n{stdout}\n{stderr}"
    );
    serde_json::from_str(&stdout).unwrap_or_else(|_| panic!("turn {number}: not JSON: {stdout}"))
}

#[tokio::test]
async fn gemini_cli_runs_twelve_turns_through_compactions() {
    let app = gemini_app(TestBackend::Sqlite, WINDOW, true).await;
    let home = tempfile::tempdir().expect("a GEMINI_CLI_HOME");
    let workdir = tempfile::tempdir().expect("a working directory");
    write_settings(home.path());
    for number in 1..=TURNS {
        let output = run_turn(&app, home.path(), workdir.path(), number).await;
        let answer = output["response"].as_str().unwrap_or_default();
        assert!(
            answer.starts_with("I have read all"),
            "turn {number}: {output}"
        );
        assert!(output.get("error").is_none(), "turn {number}: {output}");
    }
    let requests = app.upstream.requests();
    for request in &requests {
        let size = request.status == 400 && request.input_tokens.is_some_and(|t| t > WINDOW);
        let body = String::from_utf8_lossy(&request.body);
        assert!(
            request.status == 200 || size,
            "refused with {}: {}",
            request.status,
            &body[..body.len().min(400)]
        );
    }
    let chats = requests.iter().filter(|r| r.kind == RequestKind::Chat);
    assert!(chats
        .clone()
        .all(|r| r.path.starts_with("/v1beta/models/") && r.query.as_deref() == Some("alt=sse")));
    let compactions = app.db.count("select count(*) from compactions").await;
    assert!(
        compactions >= 2,
        "{compactions} compactions over {TURNS} turns"
    );
    app.upstream.assert_facts_survive();
}
