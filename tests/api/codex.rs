//! The real Codex CLI (`@openai/codex`, pinned and installed by
//! `scripts/test`, which sets `CONDENSER_TEST_CODEX`) through the proxy
//! against the fake upstream, offline as tests/README.md
//! describes: one `codex exec` session resumed turn after turn, its
//! history outgrowing the window several times, every turn succeeding
//! (summaries slow enough that Codex reads keep-alives before its answer).

use crate::helpers::agent::filler;
use crate::helpers::app::{spawn_app_with, Options, TestApp, OPENAI_KEY};
use crate::helpers::db::{both_backends, TestBackend};
use crate::helpers::wait::{wait_until, PATIENCE};
use condenser::protocol::SUMMARY_MARKER;
use fake_upstream::RecordedRequest;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub(crate) const MODEL: &str = "fake-model";
/// Codex's own prompt and tools take about 10k of the fake's tokens.
const WINDOW: u64 = 14_000;
const TURNS: usize = 12;

pub(crate) fn codex() -> String {
    std::env::var("CONDENSER_TEST_CODEX")
        .expect("CONDENSER_TEST_CODEX is not set: run the suite with scripts/test, which installs Codex CLI")
}

fn write_config(home: &Path, app: &TestApp, extra: &str) {
    let config = format!(
        r#"model = "{MODEL}"
model_provider = "condenser"
{extra}
[model_providers.condenser]
name = "Condenser (local)"
base_url = "{}/v1"
env_key = "CONDENSER_API_KEY"
wire_api = "responses"

[analytics]
enabled = false

[features]
plugins = false
"#,
        app.address
    );
    std::fs::write(home.join("config.toml"), config).expect("writing the Codex config");
}

/// One `codex exec` turn (resuming the last session after the first): its
/// `--json` events.
async fn run_turn(home: &Path, workdir: &Path, number: usize) -> Vec<Value> {
    // A user pasting a log: each turn grows the history by ~600 tokens.
    run_turn_pasting(home, workdir, number, 2_400).await
}

/// `codex exec` of turn `number` with `prompt`, resuming the last session
/// after the first turn, under `home`, in `workdir`.
pub(crate) fn exec(
    home: &Path,
    workdir: &Path,
    number: usize,
    prompt: &str,
) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(codex());
    command.args([
        "exec",
        "--skip-git-repo-check",
        "--json",
        "--dangerously-bypass-approvals-and-sandbox",
    ]);
    if number > 1 {
        command.args(["resume", "--last"]);
    }
    command
        .arg(prompt)
        .current_dir(workdir)
        .env("CODEX_HOME", home)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    command
}

/// A turn whose prompt pastes `log_bytes` of log.
pub(crate) async fn run_turn_pasting(
    home: &Path,
    workdir: &Path,
    number: usize,
    log_bytes: usize,
) -> Vec<Value> {
    let prompt = format!(
        "Turn {number}: read this log. [tools]\n{}",
        filler(log_bytes, number)
    );
    let output = exec(home, workdir, number, &prompt)
        .env("CONDENSER_API_KEY", OPENAI_KEY)
        .output()
        .await
        .expect("codex runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "turn {number}: codex failed\n{stdout}\n{stderr}"
    );
    stdout
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

/// Runs `TURNS` turns of one Codex session, asserting each succeeded with
/// an answer, and that the fake refused nothing for its shape. Summaries
/// take `summary_delay`; past 300 ms Codex gets keep-alives first.
async fn run_session(
    extra_config: &str,
    summary_delay: Duration,
    keepalives: Arc<AtomicUsize>,
) -> TestApp {
    let settings =
        json!({"compaction": {"summary_max_tokens": 300, "keepalive_interval": "300ms"}});
    run_session_with(extra_config, settings, summary_delay, keepalives).await
}

async fn run_session_with(
    extra_config: &str,
    settings: Value,
    summary_delay: Duration,
    keepalives: Arc<AtomicUsize>,
) -> TestApp {
    let mut options = Options::default().window(MODEL, WINDOW).settings(settings);
    options.fake.summary_delay = summary_delay;
    let mut app = spawn_app_with(options).await;
    // Codex talks to the proxy through a tap that counts keep-alives.
    let target: SocketAddr = app
        .address
        .trim_start_matches("http://")
        .parse()
        .expect("address");
    app.address = format!("http://{}", keepalive_tap(target, keepalives.clone()).await);
    let home = tempfile::tempdir().expect("a CODEX_HOME");
    let workdir = tempfile::tempdir().expect("a working directory");
    write_config(home.path(), &app, extra_config);
    for number in 1..=TURNS {
        let events = run_turn(home.path(), workdir.path(), number).await;
        let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
        assert!(
            kinds.contains(&"turn.completed")
                && !kinds.contains(&"turn.failed")
                && !kinds.contains(&"error"),
            "turn {number}: {events:?}"
        );
        let answered = events.iter().any(|e| {
            e["item"]["type"] == "agent_message"
                && e["item"]["text"].as_str().is_some_and(|t| !t.is_empty())
        });
        assert!(answered, "turn {number}: no answer in {events:?}");
    }
    for request in app.upstream.requests() {
        let body = String::from_utf8_lossy(&request.body);
        assert!(
            request.status == 200 || request.input_tokens.is_some(),
            "refused for its shape: {body}"
        );
    }
    app.upstream.assert_facts_survive();
    app
}

fn request_kind(request: &RecordedRequest) -> Option<String> {
    let metadata: Value = serde_json::from_str(request.header("x-codex-turn-metadata")?).ok()?;
    metadata["request_kind"].as_str().map(String::from)
}

#[tokio::test]
async fn codex_cli_keeps_working_across_compactions() {
    let keepalives = Arc::new(AtomicUsize::new(0));
    let app = run_session("", Duration::from_millis(1_000), keepalives.clone()).await;
    assert!(
        keepalives.load(Ordering::Relaxed) > 0,
        "Codex read keep-alives while summaries were written"
    );
    let summaries = app.upstream.summary_requests().len();
    assert!(summaries >= 2, "{summaries} summaries over {TURNS} turns");
    let requests = app.upstream.chat_requests();
    assert!(requests
        .iter()
        .all(|r| request_kind(r).as_deref() == Some("turn")));
    let tool_rounds = requests
        .iter()
        .filter(|r| r.body.windows(20).any(|w| w == b"function_call_output"))
        .count();
    assert!(tool_rounds >= TURNS, "every turn ran a tool round");
}

/// The fake answers Responses' overflow without numbers, as the real API
/// does, so Condenser never learns the window from an error: with its
/// default summary budget it must still compact, never declaring a turn
/// hopeless from a window it only guessed.
#[tokio::test]
async fn codex_cli_is_compacted_by_condenser_with_the_default_summary_budget() {
    let settings = json!({"compaction": {"keepalive_interval": "300ms"}});
    let app = run_session_with("", settings, Duration::ZERO, Arc::default()).await;
    let summaries = app.upstream.summary_requests().len();
    assert!(summaries >= 2, "{summaries} summaries over {TURNS} turns");
    let own = app
        .upstream
        .chat_requests()
        .iter()
        .filter(|r| request_kind(r).as_deref() == Some("compaction"))
        .count();
    assert_eq!(own, 0, "Codex never had to compact itself");
    wait_for_request_rows(&app).await;
    let refused = app
        .db
        .count("select count(*) from requests where compaction_error is not null")
        .await;
    assert_eq!(refused, 0, "no turn was declared hopeless");
}

/// The request rows are written in the background after each response.
async fn wait_for_request_rows(app: &TestApp) {
    let answered = app.upstream.chat_requests().len() as i64;
    wait_until(PATIENCE, "a request row for every turn", || async {
        app.db.count("select count(*) from requests").await * 2 >= answered
    })
    .await;
}

/// With a window it knows, Codex compacts its own history too: its
/// compaction requests end with its own prompt, which reaches the upstream
/// whole, and Condenser still rescues the turns that overflow anyway.
#[tokio::test]
async fn codex_cli_compacting_itself_keeps_its_compaction_prompt() {
    let app = run_session(
        &format!("model_context_window = {WINDOW}\nmodel_auto_compact_token_limit = 11000\n"),
        Duration::ZERO,
        Arc::default(),
    )
    .await;
    let own: Vec<Value> = app
        .upstream
        .chat_requests()
        .into_iter()
        .filter(|r| request_kind(r).as_deref() == Some("compaction"))
        .filter_map(|r| r.json)
        .collect();
    assert!(own.len() >= 2, "Codex compacted {} times", own.len());
    for request in &own {
        let last = request["input"]
            .as_array()
            .and_then(|i| i.last())
            .expect("input");
        let prompt = last["content"][0]["text"].as_str().unwrap_or_default();
        assert!(
            prompt.starts_with("You are performing a CONTEXT CHECKPOINT COMPACTION"),
            "{last}"
        );
    }
    assert!(!app.upstream.summary_requests().is_empty());
}

/// A TCP relay to `target` that counts the keep-alive comments flowing
/// back to the client.
async fn keepalive_tap(target: SocketAddr, seen: Arc<AtomicUsize>) -> SocketAddr {
    use crate::helpers::tap::{tap, Watched};
    tap(target, Watched::ToClient, move |chunk| {
        let comment = condenser::pipeline::KEEPALIVE_COMMENT;
        let count = chunk
            .windows(comment.len())
            .filter(|w| *w == comment)
            .count();
        seen.fetch_add(count, Ordering::Relaxed);
    })
    .await
}

/// Codex as OpenAI's own client under `home`: the built-in provider with
/// its base URL at Condenser, told the model's `window` and `limit`, its
/// own compaction threshold, with its credential as `codex login
/// --with-api-key` keeps it.
pub(crate) fn write_builtin_config(home: &Path, app: &TestApp, window: u64, limit: u64) {
    let config = format!(
        r#"model = "{MODEL}"
model_provider = "openai"
openai_base_url = "{}/v1"
model_context_window = {window}
model_auto_compact_token_limit = {limit}

[analytics]
enabled = false

[features]
plugins = false
"#,
        app.address
    );
    std::fs::write(home.join("config.toml"), config).expect("writing the Codex config");
    let auth = json!({"auth_mode": "apikey", "OPENAI_API_KEY": OPENAI_KEY});
    std::fs::write(home.join("auth.json"), auth.to_string()).expect("writing auth.json");
}

/// Codex as OpenAI's own client (`model_provider = "openai"`, the base URL
/// at Condenser) compacts remotely: its `compaction_trigger` requests are
/// answered by Condenser, against an upstream that does not know them, and
/// the compaction items it sends back later are expanded into Condenser's
/// summary message before they go upstream (issue 40).
async fn codex_cli_as_openai_compacts_through_condenser(backend: TestBackend) {
    let settings =
        json!({"compaction": {"summary_max_tokens": 300, "keepalive_interval": "300ms"}});
    let options = Options::on(backend)
        .window(MODEL, WINDOW)
        .settings(settings);
    let app = spawn_app_with(options).await;
    let home = tempfile::tempdir().expect("a CODEX_HOME");
    let workdir = tempfile::tempdir().expect("a working directory");
    write_builtin_config(home.path(), &app, WINDOW, 11_500);
    for number in 1..=TURNS {
        // Codex keeps every user message through its compactions: short
        // prompts, so what compaction removes (tool rounds, answers) is
        // what grows.
        let turn = run_turn_pasting(home.path(), workdir.path(), number, 200);
        let Ok(events) = tokio::time::timeout(Duration::from_secs(120), turn).await else {
            let seen: Vec<String> = app
                .upstream
                .requests()
                .iter()
                .map(|r| {
                    let last = r
                        .json
                        .as_ref()
                        .and_then(|j| j["input"].as_array()?.last().cloned());
                    let kind = last.map(|l| l["type"].to_string()).unwrap_or_default();
                    format!(
                        "{} {} {} {} {kind}",
                        r.method,
                        r.path,
                        r.status,
                        r.body.len()
                    )
                })
                .collect();
            panic!(
                "turn {number} did not end; the upstream saw:\n{}",
                seen.join("\n")
            );
        };
        let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
        assert!(
            kinds.contains(&"turn.completed") && !kinds.contains(&"turn.failed"),
            "turn {number}: {events:?}"
        );
        let answered = events.iter().any(|e| {
            e["item"]["type"] == "agent_message"
                && e["item"]["text"].as_str().is_some_and(|t| !t.is_empty())
        });
        assert!(answered, "turn {number}: no answer in {events:?}");
    }
    let requests = app.upstream.requests();
    for request in &requests {
        let body = String::from_utf8_lossy(&request.body);
        assert!(
            !body.contains("compaction_trigger"),
            "a compaction_trigger reached the upstream"
        );
        assert!(
            !body.contains("\"encrypted_content\":\"condenser."),
            "a compaction item reached the upstream"
        );
        assert!(
            request.status == 200 || request.input_tokens.is_some(),
            "refused for its shape: {body}"
        );
    }
    let summaries = app.upstream.summary_requests().len();
    assert!(
        summaries >= 2,
        "{summaries} compactions served over {TURNS} turns"
    );
    // Each summary served in a compaction item reached the upstream with
    // every fact when Codex sent the item back.
    app.upstream.assert_facts_survive();
    let expanded = app
        .upstream
        .chat_requests()
        .iter()
        .filter(|r| String::from_utf8_lossy(&r.body).contains(SUMMARY_MARKER))
        .count();
    assert!(expanded >= 1, "no compaction item came back expanded");
    // Condenser serves Codex's WebSocket itself: no upgrade reaches the upstream.
    let websocket_attempts = requests.iter().filter(|r| r.method == "GET").count();
    assert_eq!(
        websocket_attempts, 0,
        "WebSocket attempts reached the upstream"
    );
}

both_backends!(codex_cli_as_openai_compacts_through_condenser);
