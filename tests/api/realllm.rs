//! Long conversations through Condenser against a real llama.cpp server
//! (SmolLM2-135M, windows of 1,024 and 2,048 tokens) with the official
//! OpenAI and Anthropic SDKs, streamed and not. `scripts/test` starts the
//! servers (tests/realllm/serve.sh) and sets `CONDENSER_TEST_REALLLM_1024`
//! and `_2048`. Every turn must succeed, no summary call may be refused for
//! its size, and a fact from the first message must reach a summary call.

use crate::helpers::app::start_proxy;
use crate::helpers::db::{TestBackend, TestDb};
use crate::helpers::recorder::Recorder;
use serde_json::json;

const TURNS: &str = "20";
const FACT: &str = "PELICAN-4417";

fn server(window: u64) -> String {
    let name = format!("CONDENSER_TEST_REALLLM_{window}");
    std::env::var(&name).unwrap_or_else(|_| {
        panic!("{name} is not set: run the suite with scripts/test, which starts llama.cpp")
    })
}

fn python() -> String {
    std::env::var("CONDENSER_TEST_PYTHON")
        .expect("CONDENSER_TEST_PYTHON is not set: run the suite with scripts/test")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_1k_window_keeps_20_turn_conversations_alive() {
    converse(1024, "openai", true).await;
    converse(1024, "anthropic", false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_2k_window_keeps_20_turn_conversations_alive() {
    converse(2048, "anthropic", true).await;
    converse(2048, "openai", false).await;
}

async fn converse(window: u64, protocol: &str, stream: bool) {
    let recorder = Recorder::start(&server(window)).await;
    let db = TestDb::new(TestBackend::Sqlite).await;
    let settings = json!({
        "listen": "127.0.0.1:0",
        "openai_base_url": format!("{}/v1", recorder.url),
        "anthropic_base_url": recorder.url,
        "database_url": db.url,
        "compaction": {"summary_timeout": "300s", "keepalive_interval": "2s"},
    });
    let address = start_proxy(&settings).await;
    let started = std::time::Instant::now();
    let output = tokio::process::Command::new(python())
        .arg(format!(
            "{}/tests/sdk/realllm_chat.py",
            env!("CARGO_MANIFEST_DIR")
        ))
        .env("CONDENSER_URL", &address)
        .env("PROTOCOL", protocol)
        .env("STREAM", if stream { "1" } else { "0" })
        .env("TURNS", TURNS)
        .output()
        .await
        .expect("python runs");
    let case = format!("{window} tokens, {protocol}, stream={stream}");
    let turns = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{case}: a turn failed:\n{turns}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(turns.lines().count(), 20, "{case}: every turn answered");
    let summaries = recorder.summary_calls();
    assert!(
        !summaries.is_empty(),
        "{case}: the conversation was compacted"
    );
    let refused: Vec<_> = summaries.iter().filter(|s| s.status != 200).collect();
    assert!(
        refused.is_empty(),
        "{case}: summary calls refused: {refused:?}"
    );
    assert!(
        summaries.iter().any(|s| s.body.contains(FACT)),
        "{case}: the first message's fact reached a summary call"
    );
    let overflows = recorder
        .exchanges()
        .iter()
        .filter(|e| e.status == 400)
        .count();
    eprintln!(
        "{case}: {} summary calls, {overflows} overflows answered by llama.cpp, {:.0?}",
        summaries.len(),
        started.elapsed()
    );
}
