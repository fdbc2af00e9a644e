//! The real Kilo Code CLI (`@kilocode/cli`, pinned and installed by
//! `scripts/test`, which sets `CONDENSER_TEST_KILO`) through the proxy
//! against the fake, offline as tests/README.md describes: `kilo serve`
//! driven over its HTTP API as Kilo Code's editor extension drives it, one
//! session prompted turn after turn, a tool round in some turns, its
//! history outgrowing the window again and again while its own compaction
//! (near the 128k window it is told) never fires, every turn answered.

use crate::helpers::agent::filler;
use crate::helpers::app::{spawn_app_with, Options, TestApp, OPENAI_KEY};
use serde_json::{json, Value};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader};

const MODEL: &str = "fake-model";
/// Kilo's prompt and tools take about 14k of the fake's tokens, its output
/// limit 1k more.
const WINDOW: u64 = 22_000;
const TURNS: usize = 7;
/// A fact the user gives in the first turn; summaries carry it on.
const FACT: &str = "FACT-kilo_code_port_8443";

fn kilo() -> String {
    std::env::var("CONDENSER_TEST_KILO").expect(
        "CONDENSER_TEST_KILO is not set: run the suite with scripts/test, which installs Kilo Code CLI",
    )
}

/// A provider at the proxy, the only one enabled (the built-in Kilo
/// gateway would fetch its model list), told the model's nominal window
/// (its own compaction counts against it) and a 1k output limit (its
/// `max_tokens`); no sharing, no update, no snapshots of the working
/// directory.
fn write_config(home: &Path, app: &TestApp) {
    let config = json!({
        "$schema": "https://app.kilo.ai/config.json",
        "provider": {"condenser": {
            "npm": "@ai-sdk/openai-compatible",
            "name": "Condenser (local)",
            "options": {"baseURL": format!("{}/v1", app.address), "apiKey": OPENAI_KEY},
            "models": {MODEL: {"name": "Fake", "limit": {"context": 128_000, "output": 1_024}}},
        }},
        "enabled_providers": ["condenser"],
        "model": format!("condenser/{MODEL}"),
        "autoupdate": false,
        "share": "disabled",
        "snapshot": false,
    });
    std::fs::write(home.join("kilo.json"), config.to_string()).expect("writing the Kilo config");
}

/// `kilo serve`, stopped as its wrapper expects (SIGTERM, which it passes
/// on to the server it started) when the test ends.
struct KiloServer {
    child: tokio::process::Child,
    url: String,
}

impl KiloServer {
    /// Starts it under `home`, in `workdir`, and waits for the address it
    /// prints. Its model list fetch, telemetry, update check and LSP
    /// downloads are off, so the proxy is the only host it calls.
    async fn start(home: &Path, workdir: &Path) -> KiloServer {
        let mut child = tokio::process::Command::new(kilo())
            .args(["serve", "--port", "0"])
            .current_dir(workdir)
            .env("HOME", home)
            .env("KILO_CONFIG", home.join("kilo.json"))
            .env("KILO_DISABLE_MODELS_FETCH", "1")
            .env("KILO_DISABLE_AUTOUPDATE", "1")
            .env("KILO_DISABLE_LSP_DOWNLOAD", "1")
            .env("KILO_TELEMETRY_LEVEL", "off")
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("XDG_DATA_HOME")
            .env_remove("XDG_CACHE_HOME")
            .env_remove("XDG_STATE_HOME")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("kilo serve starts");
        let stdout = child.stdout.take().expect("kilo's output");
        let mut lines = BufReader::new(stdout).lines();
        let listening = async {
            while let Some(line) = lines.next_line().await.expect("kilo's output") {
                if let Some((_, url)) = line.split_once("listening on ") {
                    return url.trim().to_string();
                }
            }
            panic!("kilo serve ended without listening");
        };
        let url = tokio::time::timeout(Duration::from_secs(60), listening)
            .await
            .expect("kilo serve listens within a minute");
        KiloServer { child, url }
    }
}

impl Drop for KiloServer {
    fn drop(&mut self) {
        let Some(pid) = self.child.id() else {
            return;
        };
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// One turn: the user's prompt posted to the session; the assistant's
/// last message, once it is done.
async fn run_turn(
    client: &reqwest::Client,
    server: &KiloServer,
    session: &str,
    number: usize,
) -> Value {
    // A user pasting a log: each turn grows the history by ~3k tokens;
    // every other turn asks for a tool first.
    let tools = if number % 2 == 0 { " [tools]" } else { "" };
    let fact = if number == 1 { FACT } else { "" };
    let prompt = format!(
        "Turn {number}: read this log.{tools} {fact}\n{}",
        filler(12_000, number)
    );
    let response = client
        .post(format!("{}/session/{session}/message", server.url))
        .json(&json!({"parts": [{"type": "text", "text": prompt}]}))
        .send()
        .await
        .expect("kilo answers");
    assert!(
        response.status().is_success(),
        "turn {number}: {response:?}"
    );
    response.json().await.expect("kilo's message")
}

#[tokio::test]
async fn kilo_code_runs_seven_turns_through_compactions() {
    let settings = json!({"compaction": {"summary_max_tokens": 300}});
    let options = Options::default().window(MODEL, WINDOW).settings(settings);
    let app = spawn_app_with(options).await;
    let home = tempfile::tempdir().expect("a home");
    let workdir = tempfile::tempdir().expect("a working directory");
    write_config(home.path(), &app);
    let server = KiloServer::start(home.path(), workdir.path()).await;
    let client = reqwest::Client::new();
    let session: Value = client
        .post(format!("{}/session", server.url))
        .json(&json!({}))
        .send()
        .await
        .expect("kilo answers")
        .json()
        .await
        .expect("a session");
    let session = session["id"].as_str().expect("the session's id");
    for number in 1..=TURNS {
        let message = run_turn(&client, &server, session, number).await;
        let answer: String = message["parts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["type"] == "text")
            .filter_map(|p| p["text"].as_str())
            .collect();
        assert!(
            message["info"]["error"].is_null()
                && message["info"]["finish"] == "stop"
                && answer.starts_with("I have read all"),
            "turn {number}: {message}"
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
    let tool_rounds = chats
        .iter()
        .filter(|r| r.body.windows(13).any(|w| w == b"\"role\":\"tool\""))
        .count();
    assert!(tool_rounds >= TURNS / 2, "{tool_rounds} tool rounds");
    let summaries = app.upstream.summary_requests().len();
    assert!(summaries >= 2, "{summaries} summaries over {TURNS} turns");
    app.upstream.assert_facts_survive();
}
