//! A provider added from outside the crate, by one module
//! (`helpers/minimal_dialect.rs`) and one registration line, gets what a
//! built-in one gets: routing under its prefix, errors in its own shape,
//! telemetry under its name, and compaction.

use crate::helpers::agent::filler;
use crate::helpers::app::{spawn_app_with, Options, TestApp, OPENAI_KEY};
use crate::helpers::db::{both_backends, TestBackend};
use crate::helpers::minimal_dialect::Minimal;
use condenser::protocol::SUMMARY_MARKER;
use serde_json::{json, Value};

const MODEL: &str = "gpt-4o-mini";

/// The proxy with the `minimal` dialect's upstream at `/mini`, in front of
/// the fake's OpenAI-compatible server.
async fn app_with_minimal(backend: TestBackend, base_url: Option<String>) -> TestApp {
    condenser::protocol::register(&Minimal);
    let options = Options::on(backend)
        .window(MODEL, 4_000)
        .settings(json!({"compaction": {"summary_max_tokens": 300}, "max_body_bytes": 65_536}));
    let mut app = spawn_app_with(options).await;
    let base_url = base_url.unwrap_or_else(|| app.upstream.openai_base_url());
    let upstream = json!({"protocol": "minimal", "base_url": base_url, "path_prefix": "/mini"});
    app.reconfigure(json!({"upstreams": {"mini": upstream}}))
        .await;
    app
}

async fn post_mini(app: &TestApp, body: &Value) -> reqwest::Response {
    app.client
        .post(app.url("/mini/chat"))
        .bearer_auth(OPENAI_KEY)
        .json(body)
        .send()
        .await
        .expect("request sent")
}

both_backends!(a_registered_dialect_is_routed_and_compacted);

async fn a_registered_dialect_is_routed_and_compacted(backend: TestBackend) {
    let app = app_with_minimal(backend, None).await;
    let mut messages = vec![json!({"role": "system", "content": "You answer briefly."})];
    let mut compactions = 0;
    for turn in 0..16 {
        let ask = format!("Note these facts, then say ok. {}", filler(1_500, turn));
        messages.push(json!({"role": "user", "content": ask}));
        let request = json!({"model": MODEL, "max_tokens": 100, "messages": messages});
        let response = post_mini(&app, &request).await;
        assert_eq!(response.status(), 200, "turn {turn}");
        let header = response.headers().get("x-condenser-compactions");
        compactions += header
            .and_then(|v| v.to_str().ok()?.parse::<u32>().ok())
            .unwrap_or(0);
        let body: Value = response.json().await.expect("json");
        messages.push(body["choices"][0]["message"].clone());
    }
    assert!(
        compactions >= 1,
        "16 turns of 1.5 KB outgrew a 4,000-token window"
    );
    let accepted = app.upstream.last_accepted().expect("an accepted request");
    assert_eq!(
        accepted.path, "/v1/chat/completions",
        "the dialect's path upstream"
    );
    let sent = accepted.json.expect("json");
    assert!(sent["messages"][1]["content"]
        .as_str()
        .is_some_and(|text| text.starts_with(SUMMARY_MARKER)));
    let summaries = app.upstream.summary_requests();
    assert!(!summaries.is_empty(), "the summary calls went upstream");
    assert!(summaries.iter().all(|r| r.path == "/v1/chat/completions"));
    let metrics = app.metrics().await;
    assert!(
        metrics.contains(r#"protocol="minimal""#),
        "its calls are counted under its own name"
    );
}

#[tokio::test]
async fn a_registered_dialects_errors_are_in_its_own_shape() {
    let app = app_with_minimal(TestBackend::Sqlite, None).await;
    let oversized = json!({"model": MODEL, "messages": [
        {"role": "user", "content": filler(70_000, 1)}]});
    let response = post_mini(&app, &oversized).await;
    assert_eq!(response.status(), 413);
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["detail"]["type"], "body_too_large", "{body}");
    assert!(body.get("error").is_none(), "not OpenAI's shape: {body}");

    // The listener is dropped at once: nothing answers on its port.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr");
    let down = app_with_minimal(TestBackend::Sqlite, Some(format!("http://{closed}/v1"))).await;
    let request = json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]});
    let response = post_mini(&down, &request).await;
    assert_eq!(response.status(), 502);
    let body: Value = response.json().await.expect("json");
    let message = body["detail"]["msg"].as_str().expect("a message");
    assert!(
        message.starts_with("upstream mini is unreachable"),
        "{message}"
    );
}
