//! A provider added from outside the crate, with a wire format of its own,
//! by one module (`helpers/minimal_dialect.rs`) and one registration line,
//! gets what a built-in one gets: routing under its prefix, errors in its
//! own shape, usage read from its own answers, telemetry under its name,
//! and compaction.

use crate::helpers::agent::filler;
use crate::helpers::app::{spawn_app_with, Options, TestApp, OPENAI_KEY};
use crate::helpers::db::{both_backends, TestBackend};
use crate::helpers::minimal_dialect::{Minimal, ParleyServer};
use condenser::protocol::SUMMARY_MARKER;
use serde_json::{json, Value};

const MODEL: &str = "parley-small";

/// The proxy with the `minimal` dialect's upstream at `/mini`, in front of
/// `base_url` (a parley server), its overflow wording added as operators
/// add one.
async fn app_with_minimal(backend: TestBackend, base_url: &str) -> TestApp {
    condenser::protocol::register(&Minimal);
    let options = Options::on(backend)
        .settings(json!({"compaction": {"summary_max_tokens": 300}, "max_body_bytes": 65_536}));
    let mut app = spawn_app_with(options).await;
    let upstream = json!({"protocol": "minimal", "base_url": base_url, "path_prefix": "/mini"});
    let signature = json!({"name": "parley", "pattern": "conversation too long"});
    app.reconfigure(json!({"upstreams": {"mini": upstream}, "overflow_signatures": [signature]}))
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
    let server = ParleyServer::start(4_000).await;
    let app = app_with_minimal(backend, &server.base_url).await;
    let mut turns = Vec::new();
    let mut compactions = 0;
    for turn in 0..16 {
        let ask = format!("Note these facts, then say ok. {}", filler(1_500, turn));
        turns.push(json!({"speaker": "user", "says": ask}));
        let request = json!({"model": MODEL, "preamble": "You answer briefly.", "limit": 100, "turns": turns});
        let response = post_mini(&app, &request).await;
        assert_eq!(response.status(), 200, "turn {turn}");
        let header = response.headers().get("x-condenser-compactions");
        compactions += header
            .and_then(|v| v.to_str().ok()?.parse::<u32>().ok())
            .unwrap_or(0);
        let body: Value = response.json().await.expect("json");
        assert_eq!(body["reply"], "ok", "turn {turn}: {body}");
        turns.push(json!({"speaker": "assistant", "says": body["reply"]}));
    }
    assert!(
        compactions >= 1,
        "16 turns of 1.5 KB outgrew a 4,000-token window"
    );
    let heard = server.heard();
    let marker = format!("{SUMMARY_MARKER} REQUEST");
    let (summaries, chats): (Vec<_>, Vec<_>) = heard
        .iter()
        .partition(|h| h.body.to_string().contains(&marker));
    assert!(!summaries.is_empty(), "the summary calls went upstream");
    assert!(summaries
        .iter()
        .all(|h| h.body["turns"][0]["speaker"] == "user"));
    let last = chats.last().expect("an accepted request");
    assert_eq!(last.status, 200);
    assert_eq!(
        last.body["preamble"], "You answer briefly.",
        "the preamble kept"
    );
    assert!(last.body["turns"][0]["says"]
        .as_str()
        .is_some_and(|text| text.starts_with(SUMMARY_MARKER)));
    let metrics = app.metrics().await;
    assert!(
        metrics.contains(r#"protocol="minimal""#),
        "its calls are counted under its own name"
    );
}

#[tokio::test]
async fn a_registered_dialects_errors_are_in_its_own_shape() {
    let server = ParleyServer::start(4_000).await;
    let app = app_with_minimal(TestBackend::Sqlite, &server.base_url).await;
    let oversized = json!({"model": MODEL, "turns": [
        {"speaker": "user", "says": filler(70_000, 1)}]});
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
    let down = app_with_minimal(TestBackend::Sqlite, &format!("http://{closed}")).await;
    let request = json!({"model": MODEL, "turns": [{"speaker": "user", "says": "hi"}]});
    let response = post_mini(&down, &request).await;
    assert_eq!(response.status(), 502);
    let body: Value = response.json().await.expect("json");
    let message = body["detail"]["msg"].as_str().expect("a message");
    assert!(
        message.starts_with("upstream mini is unreachable"),
        "{message}"
    );
}
