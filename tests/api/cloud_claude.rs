//! Claude on Amazon Bedrock and Google Vertex AI through the proxy, against
//! the fake's Bedrock (InvokeModel, AWS's binary event stream, SigV4
//! verified) and Vertex (rawPredict): the Anthropic SDK's own cloud
//! clients through compactions, Condenser signing for a client that sends
//! no credential, and a client's own signature never broken.

use crate::helpers::app::{spawn_app_with, Options, TestApp};
use crate::helpers::db::{TestBackend, TestDb};
use crate::helpers::process::ProxyProcess;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use fake_upstream::claude_clouds::{GATEWAY_ACCESS_KEY, GATEWAY_SECRET_KEY};
use fake_upstream::{FakeConfig, FakeUpstream, RequestKind};
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, SystemTime};

const BEDROCK_MODEL: &str = "us.anthropic.claude-sonnet-4-5-20250929-v1:0";
const VERTEX_MODEL: &str = "claude-sonnet-4-5@20250929";
const BEDROCK_KEY: &str = "ABSKQmVkcm9ja0FQSUtleS1jb25kZW5zZXI=";
const VERTEX_TOKEN: &str = "ya29.condenser-test-token";

fn python() -> String {
    std::env::var("CONDENSER_TEST_PYTHON")
        .expect("CONDENSER_TEST_PYTHON is not set: run the suite with scripts/test, which prepares the SDK virtualenv")
}

/// A window the SDK script's first request (about 8,300 tokens) overflows
/// and its summary call (about 5,000) does not: these clouds' overflow
/// errors state no numbers to learn a smaller one from. Summaries are
/// slower than the keep-alive interval, so the streamed request that
/// compacts reads keep-alive frames first.
fn options(backend: TestBackend, model: &str) -> Options {
    let mut options = Options::on(backend).window(model, 6_000).settings(
        json!({"compaction": {"summary_max_tokens": 300, "keepalive_interval": "300ms"}}),
    );
    options.fake.summary_delay = Duration::from_millis(900);
    options
}

async fn run_sdk(app: &TestApp, cloud: &str, key: &str, model: &str) {
    let path = format!("{}/tests/sdk/cloud_claude.py", env!("CARGO_MANIFEST_DIR"));
    let output = tokio::process::Command::new(python())
        .arg(&path)
        .env("CLOUD", cloud)
        .env("CONDENSER_URL", &app.address)
        .env("API_KEY", key)
        .env("MODEL", model)
        .env_remove("AWS_BEARER_TOKEN_BEDROCK")
        .output()
        .await
        .expect("python runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let seen: Vec<_> = app
        .upstream
        .requests()
        .iter()
        .map(|r| (r.path.clone(), r.kind, r.status, r.input_tokens))
        .collect();
    assert!(
        output.status.success(),
        "{cloud}: the SDK failed:\n{stderr}\nthe upstream saw {seen:?}"
    );
    let summaries = app.upstream.summary_requests();
    assert!(
        !summaries.is_empty(),
        "{cloud}: the upstream wrote a summary"
    );
    app.upstream.assert_facts_survive();
}

#[tokio::test]
async fn the_bedrock_sdk_is_rescued_from_an_overflow_over_the_event_stream() {
    let app = spawn_app_with(options(TestBackend::Sqlite, BEDROCK_MODEL)).await;
    run_sdk(&app, "bedrock", BEDROCK_KEY, BEDROCK_MODEL).await;
    // Summary calls went the client's way: its model's invoke, its key.
    for summary in app.upstream.summary_requests() {
        let path = format!("/model/{BEDROCK_MODEL}/invoke");
        assert_eq!(summary.path, path);
        let authorization = summary.header("authorization");
        assert_eq!(
            authorization,
            Some(format!("Bearer {BEDROCK_KEY}").as_str())
        );
        let body: Value = serde_json::from_slice(&summary.body).expect("json");
        assert_eq!(body["anthropic_version"], "bedrock-2023-05-31");
    }
}

#[tokio::test]
async fn the_vertex_sdk_is_rescued_from_an_overflow() {
    let app = spawn_app_with(options(TestBackend::Postgres, VERTEX_MODEL)).await;
    run_sdk(&app, "vertex", VERTEX_TOKEN, VERTEX_MODEL).await;
    for summary in app.upstream.summary_requests() {
        assert!(summary
            .path
            .ends_with(&format!("/models/{VERTEX_MODEL}:rawPredict")));
    }
}

#[tokio::test]
async fn vertex_events_reach_the_client_as_vertex_sent_them() {
    let app = spawn_app_with(Options::default()).await;
    let path = format!("/v1/projects/p/locations/us-east5/publishers/anthropic/models/{VERTEX_MODEL}:streamRawPredict");
    let body = json!({"anthropic_version": "vertex-2023-10-16", "max_tokens": 50, "stream": true,
        "messages": [{"role": "user", "content": "hi"}]});
    let answer = app
        .client
        .post(app.url(&path))
        .bearer_auth(VERTEX_TOKEN)
        .json(&body)
        .send()
        .await
        .expect("sent");
    assert_eq!(answer.status(), 200);
    let text = answer.text().await.expect("body");
    let vertex = text.find("event: vertex_event\ndata: {\"type\":\"vertex_event\"");
    let stop = text.find("event: message_stop");
    assert!(vertex.is_some() && vertex < stop, "{text}");
}

/// A Messages body as Bedrock takes it, of about `notes` × 200 tokens.
fn bedrock_body(notes: usize) -> Vec<u8> {
    let mut messages = Vec::new();
    for i in 0..notes {
        messages.push(json!({"role": "user", "content": format!("note {i}: {}", "lorem ipsum dolor ".repeat(40))}));
        messages.push(json!({"role": "assistant", "content": format!("noted {i}")}));
    }
    messages.push(json!({"role": "user", "content": "What did I note?"}));
    let body =
        json!({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 200, "messages": messages});
    serde_json::to_vec(&body).expect("json")
}

#[tokio::test]
async fn condenser_signs_what_a_client_without_credentials_sends_and_compacts_it() {
    let upstream = FakeUpstream::start(FakeConfig {
        summary_marker: Some(condenser::protocol::SUMMARY_MARKER.to_string()),
        ..FakeConfig::default()
    })
    .await;
    upstream.set_context_window(BEDROCK_MODEL, 3_000);
    let db = TestDb::new(TestBackend::Sqlite).await;
    let env = [
        (
            "CONDENSER__UPSTREAMS__BEDROCK__BASE_URL",
            upstream.base_url(),
        ),
        ("DATABASE_URL", db.url.clone()),
        ("AWS_ACCESS_KEY_ID", GATEWAY_ACCESS_KEY.to_owned()),
        ("AWS_SECRET_ACCESS_KEY", GATEWAY_SECRET_KEY.to_owned()),
        ("AWS_REGION", "us-west-2".to_owned()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let proxy = ProxyProcess::start(&env);
    let url = proxy.url(&format!("/model/{BEDROCK_MODEL}/invoke"));
    let client = reqwest::Client::new();
    let answer = client
        .post(&url)
        .body(bedrock_body(40))
        .send()
        .await
        .expect("sent");
    let status = answer.status();
    let compactions = answer.headers().get("x-condenser-compactions").cloned();
    let text = answer.text().await.expect("body");
    assert_eq!(status, 200, "{text}");
    let compactions = compactions.and_then(|v| v.to_str().ok()?.parse::<u32>().ok());
    assert!(compactions.is_some_and(|n| n >= 1), "{compactions:?}");
    let requests = upstream.requests();
    assert!(requests
        .iter()
        .any(|r| r.kind == RequestKind::Summary && r.status == 200));
    for request in &requests {
        let authorization = request.header("authorization").unwrap_or_default();
        assert!(
            authorization.starts_with(&format!(
                "AWS4-HMAC-SHA256 Credential={GATEWAY_ACCESS_KEY}/"
            )) && authorization.contains("/us-west-2/bedrock/aws4_request"),
            "{authorization}"
        );
        // The fake verified each signature: a bad one is its 403 (the
        // first request's 400 is its overflow).
        assert_ne!(request.status, 403, "{}", request.path);
    }
}

/// The headers of a SigV4 signature over `body` for `url`, as a client
/// signs for the host it believes it talks to.
fn client_signature(url: &str, body: &[u8]) -> Vec<(String, String)> {
    let credentials = aws_credential_types::Credentials::new(
        GATEWAY_ACCESS_KEY,
        GATEWAY_SECRET_KEY,
        None,
        None,
        "test",
    );
    let identity = credentials.into();
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region("us-east-1")
        .name("bedrock")
        .time(SystemTime::now())
        .settings(SigningSettings::default())
        .build()
        .expect("params")
        .into();
    let headers = [("content-type", "application/json")];
    let signable =
        SignableRequest::new("POST", url, headers.into_iter(), SignableBody::Bytes(body))
            .expect("signable");
    let (instructions, _) = sign(signable, &params).expect("signed").into_parts();
    let mut signed: Vec<(String, String)> = instructions
        .headers()
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect();
    signed.push(("content-type".into(), "application/json".into()));
    signed
}

async fn send_signed(app: &TestApp, body: Vec<u8>) -> reqwest::Response {
    let path = format!("/model/{BEDROCK_MODEL}/invoke");
    // Signed for the upstream's host, as a transparent gateway sees it.
    let signature = client_signature(&format!("{}{path}", app.upstream.base_url()), &body);
    let mut request = app.client.post(app.url(&path)).body(body);
    for (name, value) in signature {
        request = request.header(name, value);
    }
    request.send().await.expect("sent")
}

#[tokio::test]
async fn a_client_signed_request_goes_byte_for_byte_or_is_refused_with_the_reason() {
    let app = spawn_app_with(Options::default().window(BEDROCK_MODEL, 3_000)).await;
    let small = bedrock_body(2);
    let answer = send_signed(&app, small.clone()).await;
    assert_eq!(
        answer.status(),
        200,
        "{}",
        answer.text().await.unwrap_or_default()
    );
    let forwarded = app.upstream.requests();
    assert_eq!(forwarded.len(), 1);
    assert_eq!(forwarded[0].body, small, "the signed body went as it came");
    // Over the window: a compaction would change the signed body.
    let answer = send_signed(&app, bedrock_body(40)).await;
    assert_eq!(answer.status(), 400);
    let error: Value = answer.json().await.expect("json");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("signed by the client") && message.contains("API key"),
        "{error}"
    );
    assert!(
        app.upstream.summary_requests().is_empty(),
        "no summary call was paid for"
    );
}

/// The real Claude Code (`CONDENSER_TEST_CLAUDE_CODE`, installed by
/// `scripts/test`) on a cloud, through the proxy.
mod claude_code {
    use super::*;
    use crate::helpers::agent::filler;

    const TURNS: usize = 14;
    /// Claude Code's prompt and tools take about 29k of the fake's tokens,
    /// its output limit 4k more; each turn adds about 2k.
    const WINDOW: u64 = 40_000;

    fn claude() -> String {
        std::env::var("CONDENSER_TEST_CLAUDE_CODE").expect(
            "CONDENSER_TEST_CLAUDE_CODE is not set: run the suite with scripts/test, which installs Claude Code",
        )
    }

    /// One `claude -p` turn with a tool round, the session resumed after
    /// the first: whether it answered, and what it printed.
    async fn turn(cloud: &[(&str, String)], home: &Path, model: &str, number: usize) -> Value {
        let prompt = format!(
            "Turn {number}: read this log. [tools]\n{}",
            filler(8_000, number)
        );
        let session = if number == 1 {
            "--session-id"
        } else {
            "--resume"
        };
        let mut command = tokio::process::Command::new(claude());
        command
            .args(["-p", "--model", model, "--output-format", "json"])
            .args([session, "c1a0dec0-5555-4222-8333-444444444444", &prompt])
            .current_dir(home)
            .env("HOME", home)
            .env("CLAUDE_CONFIG_DIR", home.join(".claude"))
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env("CLAUDE_CODE_MAX_OUTPUT_TOKENS", "4096")
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("ANTHROPIC_BASE_URL")
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        for (name, value) in cloud {
            command.env(name, value);
        }
        let output = command.output().await.expect("claude runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "turn {number}: claude failed\n{stdout}\n{stderr}"
        );
        serde_json::from_str(&stdout)
            .unwrap_or_else(|_| panic!("turn {number}: not JSON: {stdout}"))
    }

    async fn fourteen_turns(upstream: &FakeUpstream, cloud: &[(&str, String)], model: &str) {
        let home = tempfile::tempdir().expect("a home");
        for number in 1..=TURNS {
            let output = turn(cloud, home.path(), model, number).await;
            let answer = output["result"].as_str().unwrap_or_default();
            assert!(
                output["is_error"] == false && answer.starts_with("I have read all"),
                "turn {number}: {output}"
            );
        }
        let chats = upstream.chat_requests();
        let tool_rounds = chats
            .iter()
            .filter(|r| r.body.windows(12).any(|w| w == b"\"tool_result"))
            .count();
        assert!(tool_rounds >= TURNS, "{tool_rounds} tool rounds");
        let summaries = upstream.summary_requests().len();
        assert!(summaries >= 2, "{summaries} summaries over {TURNS} turns");
        upstream.assert_facts_survive();
    }

    fn small_window(backend: TestBackend, model: &str) -> Options {
        Options::on(backend)
            .window(model, WINDOW)
            .settings(json!({"compaction": {"summary_max_tokens": 300}}))
    }

    async fn on_bedrock_with_a_key(backend: TestBackend) {
        let app = spawn_app_with(small_window(backend, BEDROCK_MODEL)).await;
        let cloud = [
            ("CLAUDE_CODE_USE_BEDROCK", "1".to_owned()),
            ("ANTHROPIC_BEDROCK_BASE_URL", app.address.clone()),
            ("AWS_BEARER_TOKEN_BEDROCK", BEDROCK_KEY.to_owned()),
            ("AWS_REGION", "us-east-1".to_owned()),
        ];
        fourteen_turns(&app.upstream, &cloud, BEDROCK_MODEL).await;
    }

    crate::helpers::db::both_backends!(
        on_bedrock_with_a_key,
        on_bedrock_signed_by_condenser,
        on_vertex
    );

    async fn on_bedrock_signed_by_condenser(backend: TestBackend) {
        let upstream = FakeUpstream::start(FakeConfig {
            summary_marker: Some(condenser::protocol::SUMMARY_MARKER.to_string()),
            ..FakeConfig::default()
        })
        .await;
        upstream.set_context_window(BEDROCK_MODEL, WINDOW);
        let db = TestDb::new(backend).await;
        let env = [
            (
                "CONDENSER__UPSTREAMS__BEDROCK__BASE_URL",
                upstream.base_url(),
            ),
            ("DATABASE_URL", db.url.clone()),
            (
                "CONDENSER__COMPACTION__SUMMARY_MAX_TOKENS",
                "300".to_owned(),
            ),
            ("AWS_ACCESS_KEY_ID", GATEWAY_ACCESS_KEY.to_owned()),
            ("AWS_SECRET_ACCESS_KEY", GATEWAY_SECRET_KEY.to_owned()),
        ];
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let proxy = ProxyProcess::start(&env);
        let cloud = [
            ("CLAUDE_CODE_USE_BEDROCK", "1".to_owned()),
            ("CLAUDE_CODE_SKIP_BEDROCK_AUTH", "1".to_owned()),
            ("ANTHROPIC_BEDROCK_BASE_URL", proxy.url("")),
            ("AWS_REGION", "us-east-1".to_owned()),
        ];
        fourteen_turns(&upstream, &cloud, BEDROCK_MODEL).await;
        assert!(upstream.requests().iter().all(|r| r.status != 403));
    }

    async fn on_vertex(backend: TestBackend) {
        let app = spawn_app_with(small_window(backend, VERTEX_MODEL)).await;
        let cloud = [
            ("CLAUDE_CODE_USE_VERTEX", "1".to_owned()),
            ("CLAUDE_CODE_SKIP_VERTEX_AUTH", "1".to_owned()),
            ("ANTHROPIC_VERTEX_BASE_URL", format!("{}/v1", app.address)),
            ("ANTHROPIC_VERTEX_PROJECT_ID", "condenser-test".to_owned()),
            ("CLOUD_ML_REGION", "us-east5".to_owned()),
            // What a gateway in front of Vertex is given instead of Google's own auth.
            (
                "ANTHROPIC_CUSTOM_HEADERS",
                format!("Authorization: Bearer {VERTEX_TOKEN}"),
            ),
        ];
        fourteen_turns(&app.upstream, &cloud, VERTEX_MODEL).await;
    }
}
