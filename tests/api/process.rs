//! The binary as users run it: environment, flags, signals, logs.

use crate::helpers::app::{ANTHROPIC_KEY, OPENAI_KEY};
use crate::helpers::fixtures::load;
use crate::helpers::process::{binary, ProxyProcess};
use fake_upstream::{FakeConfig, FakeUpstream};
use std::time::Duration;

#[test]
fn a_bad_setting_fails_at_start_with_one_line_naming_the_key() {
    let output = binary()
        .arg("check-config")
        .env("CONDENSER_MAX_COMPACTIONS", "lots")
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("compaction.max_compactions"), "{stderr}");

    let output = binary()
        .arg("check-config")
        .env("CONDENSER_OPENAI_BASE_URL", "ftp://x")
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("openai_base_url: must be an http or https URL"),
        "{stderr}"
    );

    let output = binary()
        .arg("check-config")
        .env("CONDENSER__STORAGE__WRITE_LINGER", "1h")
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("storage.write_linger: must be at most 10s"),
        "{stderr}"
    );
}

#[test]
fn flags_override_the_environment() {
    let output = binary()
        .args(["check-config", "--listen", "127.0.0.1:9999"])
        .env("CONDENSER_LISTEN", "127.0.0.1:7777")
        .output()
        .expect("runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("127.0.0.1:9999"), "{stderr}");
}

#[tokio::test]
async fn the_documented_environment_names_configure_the_upstreams() {
    let fake = FakeUpstream::start(FakeConfig::default()).await;
    let proxy = ProxyProcess::start(&[
        ("CONDENSER_OPENAI_BASE_URL", &fake.openai_base_url()),
        ("CONDENSER_ANTHROPIC_BASE_URL", &fake.base_url()),
    ]);
    let client = reqwest::Client::new();
    let chat = client
        .post(proxy.url("/v1/chat/completions"))
        .bearer_auth(OPENAI_KEY)
        .json(&load("openai/chat_request.json"))
        .send()
        .await
        .expect("answers");
    assert_eq!(chat.status(), 200);
    let messages = client
        .post(proxy.url("/v1/messages"))
        .header("x-api-key", ANTHROPIC_KEY)
        .header("anthropic-version", "2023-06-01")
        .json(&load("anthropic/messages_request.json"))
        .send()
        .await
        .expect("answers");
    assert_eq!(messages.status(), 200);
    let logs = proxy.log_text();
    assert!(
        !logs.contains(OPENAI_KEY) && !logs.contains(ANTHROPIC_KEY),
        "a credential reached the logs"
    );
    assert!(
        logs.contains("request_id"),
        "log lines carry the request id"
    );
}

/// A log file or `docker logs` is not a terminal: the human format writes
/// no color escape codes there.
#[test]
fn human_logs_to_a_pipe_carry_no_color_codes() {
    use std::io::{BufRead, BufReader};
    let workdir = tempfile::tempdir().expect("temp dir");
    let mut child = binary()
        .arg("serve")
        .current_dir(workdir.path())
        .env("CONDENSER_LISTEN", "127.0.0.1:0")
        .env("CONDENSER_LOG_FORMAT", "human")
        // An inherited filter that hid the line would leave this waiting.
        .env("RUST_LOG", "info")
        .env_remove("NO_COLOR")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("condenser starts");
    let stderr = child.stderr.take().expect("piped stderr");
    let listening = BufReader::new(stderr)
        .lines()
        .map_while(Result::ok)
        .find(|line| line.contains("listening"));
    let _ = child.kill();
    let _ = child.wait();
    let line = listening.expect("a listening line");
    assert!(line.contains("INFO") && line.contains("address="), "{line}");
    assert!(!line.contains('\u{1b}'), "escape codes in {line:?}");
}

#[tokio::test]
async fn sigterm_lets_an_in_flight_stream_finish() {
    let fake = FakeUpstream::start(FakeConfig::default()).await;
    let mut proxy = ProxyProcess::start(&[("CONDENSER_OPENAI_BASE_URL", &fake.openai_base_url())]);
    let client = reqwest::Client::new();
    let mut stream = client
        .get(proxy.url("/v1/slow-stream?chunks=3&delay_ms=700"))
        .bearer_auth(OPENAI_KEY)
        .send()
        .await
        .expect("answers");
    let first = stream.chunk().await.expect("reads").expect("first chunk");
    assert_eq!(&first[..], b"data: chunk 0\n\n");
    proxy.signal("TERM");
    let rest = stream
        .bytes()
        .await
        .expect("the stream completes after SIGTERM");
    assert_eq!(&rest[..], b"data: chunk 1\n\ndata: chunk 2\n\n");
    let status = proxy
        .wait_exit(Duration::from_secs(10))
        .expect("exits after draining");
    assert!(status.success());
}

/// A streaming client that waited on a summary through keep-alives and
/// hung up: SIGTERM still waits for the summary, so the next process
/// reuses it rather than paying for another.
// Two workers: the fake upstream answers the summary while this test
// blocks on the process's exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_waits_for_a_compaction_whose_streaming_client_left() {
    let fake = FakeUpstream::start(FakeConfig {
        summary_delay: Duration::from_secs(2),
        summary_marker: Some(condenser::protocol::SUMMARY_MARKER.into()),
        default_context_window: 2_000,
        ..FakeConfig::default()
    })
    .await;
    let store = tempfile::tempdir().expect("temp dir");
    let database_url = format!("sqlite://{}/condenser.db", store.path().display());
    let upstream = fake.openai_base_url();
    let env = [
        ("CONDENSER_OPENAI_BASE_URL", upstream.as_str()),
        ("DATABASE_URL", database_url.as_str()),
        ("CONDENSER__COMPACTION__KEEPALIVE_INTERVAL", "200ms"),
    ];
    let mut request = long_conversation("Be brief. (left)");
    request["stream"] = true.into();
    let mut proxy = ProxyProcess::start(&env);
    let mut response = post_chat(&proxy, &request).await;
    assert_eq!(response.headers()["x-condenser-compacting"], "streamed");
    let first = response
        .chunk()
        .await
        .expect("reads")
        .expect("a keep-alive");
    assert!(first.starts_with(b": condenser is compacting"), "{first:?}");
    drop(response);
    proxy.signal("TERM");
    let status = proxy
        .wait_exit(Duration::from_secs(20))
        .expect("exits after the summary");
    assert!(status.success());
    let summaries = fake.summary_requests().len();
    assert!(summaries >= 1, "the compaction asked for a summary");

    let proxy = ProxyProcess::start(&env);
    request["stream"] = false.into();
    let retry = post_chat(&proxy, &request).await;
    assert_eq!(retry.status(), 200);
    assert_eq!(
        retry.headers()["x-condenser-compactions"],
        "0",
        "the summary written during shutdown is reused"
    );
    assert_eq!(
        fake.summary_requests().len(),
        summaries,
        "no new summary call"
    );
}

async fn post_chat(proxy: &ProxyProcess, request: &serde_json::Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(proxy.url("/v1/chat/completions"))
        .bearer_auth(OPENAI_KEY)
        .json(request)
        .send()
        .await
        .expect("answers")
}

/// Twelve turns of 900 bytes: more than a 2,000-token window.
fn long_conversation(system: &str) -> serde_json::Value {
    let mut messages = vec![serde_json::json!({"role": "system", "content": system})];
    for turn in 0..12 {
        let text = crate::helpers::agent::filler(900, turn);
        messages.push(serde_json::json!({"role": "user", "content": text}));
        messages.push(serde_json::json!({"role": "assistant", "content": "Noted."}));
    }
    messages.push(serde_json::json!({"role": "user", "content": "Sum it up."}));
    serde_json::json!({"model": "gpt-4o-mini", "messages": messages})
}

#[test]
fn healthcheck_succeeds_against_a_running_instance_and_fails_without_one() {
    let proxy = ProxyProcess::start(&[]);
    let port = proxy.address.rsplit(':').next().expect("a port");
    // Containers listen on the wildcard address; the probe goes to loopback.
    let healthy = binary()
        .arg("healthcheck")
        .env("CONDENSER_LISTEN", format!("0.0.0.0:{port}"))
        .output()
        .expect("runs");
    assert!(
        healthy.status.success(),
        "{}",
        String::from_utf8_lossy(&healthy.stderr)
    );

    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("binds");
    let closed_port = closed.local_addr().expect("address").port();
    drop(closed);
    let unhealthy = binary()
        .arg("healthcheck")
        .env("CONDENSER_LISTEN", format!("127.0.0.1:{closed_port}"))
        .output()
        .expect("runs");
    assert!(!unhealthy.status.success());
    let stderr = String::from_utf8_lossy(&unhealthy.stderr);
    assert!(stderr.contains("/healthz"), "{stderr}");
}

/// The README promises the request id on every log line of a request;
/// persisting, the exchange, the summary and what is learned from `usage`
/// run in spawned tasks and must carry it too.
#[tokio::test]
async fn every_log_line_of_a_compacted_request_carries_its_request_id() {
    let fake = FakeUpstream::start(FakeConfig {
        summary_marker: Some(condenser::protocol::SUMMARY_MARKER.to_string()),
        default_context_window: 2_000,
        ..FakeConfig::default()
    })
    .await;
    let mut proxy = ProxyProcess::start(&[("CONDENSER_OPENAI_BASE_URL", &fake.openai_base_url())]);
    let client = reqwest::Client::new();
    for (id, stream) in [("logs-plain", false), ("logs-stream", true)] {
        // A conversation of its own, so each request compacts.
        let mut request = long_conversation(&format!("Be brief. ({id})"));
        request["stream"] = stream.into();
        let response = client
            .post(proxy.url("/v1/chat/completions"))
            .bearer_auth(OPENAI_KEY)
            .header("x-request-id", id)
            .json(&request)
            .send()
            .await
            .expect("answers");
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["x-condenser-compactions"], "1", "{id}");
        response.bytes().await.expect("whole body");
    }
    // Spawned work (persisting, learning from usage) may finish after the
    // answer; a graceful stop waits for it, and for its last log line.
    let status = proxy.stop();
    assert!(status.success(), "{}", proxy.log_text());
    let logs = proxy.log_text();
    let request_lines: Vec<serde_json::Value> = logs
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .filter(|line: &serde_json::Value| {
            let target = line["target"].as_str().unwrap_or_default();
            [
                "condenser::pipeline",
                "condenser::compaction",
                "condenser::store",
            ]
            .iter()
            .any(|module| target.starts_with(module))
        })
        .collect();
    assert!(
        request_lines
            .iter()
            .any(|line| line["message"] == "conversation compacted"),
        "the compaction was logged: {logs}"
    );
    for line in &request_lines {
        let ids: Vec<&str> = line["spans"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|span| span["request_id"].as_str())
            .collect();
        assert!(
            ids == ["logs-plain"] || ids == ["logs-stream"],
            "a line without its request id: {line}"
        );
    }
}

#[test]
fn check_config_shows_no_secret() {
    let secrets = [
        "pg-secret-pw",
        "salt-secret-value",
        "pg-query-secret",
        "admin-secret-token",
    ];
    let output = binary()
        .arg("check-config")
        .env(
            "DATABASE_URL",
            format!(
                "postgres://condenser:{}@127.0.0.1:5432/condenser?sslpassword={}",
                secrets[0], secrets[2]
            ),
        )
        .env("CONDENSER_TENANT_SALT", secrets[1])
        .env("CONDENSER_ADMIN_TOKEN", secrets[3])
        .output()
        .expect("runs");
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{printed}");
    for secret in secrets {
        assert!(!printed.contains(secret), "{secret} printed:\n{printed}");
    }
    assert!(
        printed.contains(
            "postgres://condenser:REDACTED@127.0.0.1:5432/condenser?sslpassword=REDACTED"
        ),
        "{printed}"
    );
    assert!(printed.contains(r#"tenant_salt: "REDACTED""#), "{printed}");
}

/// A server that cuts what passes its window and answers (Ollama's `/v1`)
/// makes every re-send of a history it cannot hold plan the same
/// compaction, which cannot help: said once at info, then, remembered, at
/// debug, or an agent re-sending its history would log two info lines a
/// request for as long as it runs.
#[tokio::test]
async fn an_unhelpful_compaction_is_told_at_info_once() {
    let fake = FakeUpstream::start(FakeConfig {
        silent_truncation: true,
        default_context_window: 2_000,
        ..FakeConfig::default()
    })
    .await;
    let mut proxy = ProxyProcess::start(&[("CONDENSER_OPENAI_BASE_URL", &fake.openai_base_url())]);
    // One user message larger than the window: nothing to compact.
    let text = crate::helpers::agent::filler(24_000, 1);
    let request = serde_json::json!({
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": text}],
    });
    for _ in 0..4 {
        let response = post_chat(&proxy, &request).await;
        assert_eq!(response.status(), 200);
        response.bytes().await.expect("whole body");
    }
    assert!(proxy.stop().success(), "{}", proxy.log_text());
    let logs = proxy.log_text();
    let told = |level: &str| {
        logs.lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(|line| line["message"] == "no compaction before sending: sending as it is")
            .filter(|line| line["level"] == level)
            .count()
    };
    // The first request learns the window the server keeps; each of the
    // other three plans a compaction before sending, and none can help.
    assert_eq!(told("INFO"), 1, "{logs}");
    assert_eq!(told("DEBUG"), 2, "{logs}");
}
