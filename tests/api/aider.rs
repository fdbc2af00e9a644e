//! The real aider (`aider-chat`, pinned and installed in its own
//! virtualenv by `scripts/test`, which sets `CONDENSER_TEST_AIDER`)
//! through the proxy against the fake, offline as tests/README.md
//! describes: one aider session typed into turn after turn, each answer
//! an edit of a file, its history outgrowing the window again and again,
//! every turn answered. aider asks for summaries of its own history too
//! (past a sixteenth of the 128k window it is told): each holds the
//! history in one message, which the upstream refuses once it outgrows
//! the window, and which Condenser has no cut in.

use crate::helpers::agent::filler;
use crate::helpers::app::{spawn_app_with, Options, OPENAI_KEY};
use serde_json::json;
use std::path::Path;
use tokio::io::AsyncWriteExt;

const MODEL: &str = "fake-model";
/// aider's prompt and its example exchange take under 1k of the fake's
/// tokens; it sends no output limit.
const WINDOW: u64 = 6_000;
const TURNS: usize = 10;
/// A fact the user gives in the first turn; summaries carry it on.
const FACT: &str = "FACT-aider_port_8443";
/// Every answer edits a file, in aider's whole-file format: aider moves a
/// turn into the history it summarizes only once it has applied an edit.
const REPLY: &str = "I have read the log and noted it in notes.txt.\n\nnotes.txt\n```\n# Notes\n\nThe log was read.\n```\n";
/// What aider's own summary requests start with (its `aider/prompts.py`).
const AIDER_SUMMARY: &str = "*Briefly* summarize this partial conversation";

fn aider() -> String {
    std::env::var("CONDENSER_TEST_AIDER").expect(
        "CONDENSER_TEST_AIDER is not set: run the suite with scripts/test, which installs aider",
    )
}

/// The model as a user of a model aider does not know describes it: its
/// documented window, which aider's own summarizing counts against, not
/// the smaller one the server runs it with.
fn write_metadata(home: &Path) -> std::path::PathBuf {
    let metadata = json!({format!("openai/{MODEL}"): {
        "max_input_tokens": 131_072, "max_output_tokens": 4_096,
        "input_cost_per_token": 0, "output_cost_per_token": 0,
        "litellm_provider": "openai", "mode": "chat",
    }});
    let path = home.join("model-metadata.json");
    std::fs::write(&path, metadata.to_string()).expect("writing the model metadata");
    path
}

/// One aider session: `prompts` typed one a line, then end of input. Its
/// home and working directory are the test's own; no git, analytics,
/// update or release-notes check, and litellm reads its bundled model
/// list instead of fetching it, so the proxy is the only host it calls.
async fn run_session(address: &str, home: &Path, workdir: &Path, prompts: &[String]) -> String {
    let metadata = write_metadata(home);
    let mut child = tokio::process::Command::new(aider())
        .args(["--model", &format!("openai/{MODEL}")])
        .arg("--model-metadata-file")
        .arg(&metadata)
        .args(["--openai-api-base", &format!("{address}/v1")])
        .args(["--openai-api-key", OPENAI_KEY])
        .args(["--no-git", "--analytics-disable", "--no-check-update"])
        .args(["--no-show-release-notes", "--yes-always"])
        .args(["--no-pretty", "--no-fancy-input"])
        .current_dir(workdir)
        .env("HOME", home)
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("aider runs");
    let mut stdin = child.stdin.take().expect("aider's input");
    stdin
        .write_all(prompts.join("\n").as_bytes())
        .await
        .expect("typing into aider");
    drop(stdin);
    let output = child.wait_with_output().await.expect("aider ends");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "aider failed\n{stdout}\n{stderr}");
    stdout
}

#[tokio::test]
async fn aider_runs_ten_turns_through_compactions_and_its_own_summaries() {
    let settings = json!({"compaction": {"summary_max_tokens": 300}});
    let mut options = Options::default().window(MODEL, WINDOW).settings(settings);
    options.fake.reply_text = Some(REPLY.into());
    let app = spawn_app_with(options).await;
    let home = tempfile::tempdir().expect("a home");
    let workdir = tempfile::tempdir().expect("a working directory");
    // A user pasting a log line: each turn grows the history by ~1.3k
    // tokens.
    let prompts: Vec<String> = (1..=TURNS)
        .map(|number| {
            let fact = if number == 1 { FACT } else { "" };
            format!(
                "Turn {number}: read this log. {fact} {}",
                filler(5_000, number)
            )
        })
        .collect();
    let output = run_session(&app.address, home.path(), workdir.path(), &prompts).await;
    let answers = output
        .lines()
        .filter(|line| line.starts_with("I have read the log"))
        .count();
    assert_eq!(answers, TURNS, "every turn answered:\n{output}");
    let notes = std::fs::read_to_string(workdir.path().join("notes.txt"));
    assert!(notes.is_ok_and(|n| n.contains("The log was read.")));
    for request in app.upstream.requests() {
        let body = String::from_utf8_lossy(&request.body);
        assert!(
            request.status == 200 || request.input_tokens.is_some(),
            "refused for its shape: {}",
            &body[..body.len().min(400)]
        );
    }
    let own = app
        .upstream
        .chat_requests()
        .iter()
        .filter(|r| String::from_utf8_lossy(&r.body).contains(AIDER_SUMMARY))
        .count();
    assert!(own >= 1, "aider asked for {own} summaries of its own");
    let summaries = app.upstream.summary_requests().len();
    assert!(summaries >= 2, "{summaries} summaries over {TURNS} turns");
    app.upstream.assert_facts_survive();
}
