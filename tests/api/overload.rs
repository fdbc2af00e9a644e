//! More than the proxy should take at once: chat bodies past the memory
//! budget, readiness probes in a burst. Each is refused or answered cheaply,
//! at once, and in the protocol's shape; what fits is still served.

use crate::helpers::app::{spawn_app_with, Options, TestApp, ANTHROPIC_KEY, OPENAI_KEY};
use crate::helpers::process::ProxyProcess;
use crate::helpers::raw_client;
use serde_json::json;
use std::time::{Duration, Instant};

const MIB: usize = 1024 * 1024;

/// A Chat Completions body of about `size` bytes.
fn chat_body(size: usize) -> String {
    let text = "x".repeat(size.saturating_sub(120));
    json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": text}]}).to_string()
}

/// A Messages body of about `size` bytes.
fn messages_body(size: usize) -> String {
    let text = "x".repeat(size.saturating_sub(140));
    json!({"model": "claude-sonnet-4-5", "max_tokens": 16,
           "messages": [{"role": "user", "content": text}]})
    .to_string()
}

/// The proxy with `settings`, before a fake whose windows fit any body here.
async fn spawn_app(settings: serde_json::Value) -> TestApp {
    let options = Options::default()
        .window("gpt-4o-mini", 100_000_000)
        .settings(settings);
    spawn_app_with(options).await
}

/// A request of `body`'s bytes sent whole by hand (`connection: close`).
async fn raw_post(app: &TestApp, path: &str, headers: &str, body: &str) -> raw_client::RawResponse {
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n{headers}\r\ncontent-length: {}",
        body.len()
    );
    raw_client::send_with_body(&app.address, &head, body.as_bytes()).await
}

/// A 1 MiB chat body that is still arriving while the test runs: it holds
/// its share of the budget.
async fn body_in_flight(app: &TestApp) -> tokio::net::TcpStream {
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {OPENAI_KEY}\r\ncontent-type: application/json\r\ncontent-length: {MIB}"
    );
    let held = raw_client::start_request(&app.address, &head, br#"{"model":"#).await;
    // Let the proxy start reading it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    held
}

#[tokio::test]
async fn a_chat_body_past_the_budget_is_a_503_with_retry_after_and_a_small_one_is_served() {
    let settings =
        json!({"max_body_bytes": MIB, "server": {"max_inflight_body_bytes": 3 * MIB / 2}});
    let app = spawn_app(settings).await;
    let held = body_in_flight(&app).await;

    let started = Instant::now();
    let openai = raw_post(
        &app,
        "/v1/chat/completions",
        &format!("authorization: Bearer {OPENAI_KEY}"),
        &chat_body(600 * 1024),
    )
    .await;
    assert_eq!(openai.status(), 503, "{}", openai.0);
    assert!(openai.header("retry-after").is_some(), "{}", openai.0);
    let error = &openai.json()["error"];
    assert_eq!(error["code"], "overloaded", "OpenAI's shape: {error}");
    assert!(error["message"].as_str().is_some());

    let anthropic = raw_post(
        &app,
        "/v1/messages",
        &format!("x-api-key: {ANTHROPIC_KEY}\r\nanthropic-version: 2023-06-01"),
        &messages_body(600 * 1024),
    )
    .await;
    assert_eq!(anthropic.status(), 503, "{}", anthropic.0);
    assert!(anthropic.header("retry-after").is_some());
    assert_eq!(anthropic.json()["type"], "error", "Anthropic's shape");
    assert_eq!(anthropic.json()["error"]["type"], "overloaded_error");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "refused at once, not queued"
    );

    let small = json!({"model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": "still served"}]});
    let small = app.post_chat(&small).await;
    assert_eq!(small.status(), 200, "a small request fits beside it");
    assert_eq!(
        app.upstream.chat_requests().len(),
        1,
        "only the small request reached the upstream"
    );

    drop(held);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = raw_post(
        &app,
        "/v1/chat/completions",
        &format!("authorization: Bearer {OPENAI_KEY}"),
        &chat_body(600 * 1024),
    )
    .await;
    assert_eq!(after.status(), 200, "the budget is released: {}", after.0);
}

#[tokio::test]
async fn a_chunked_chat_body_is_counted_as_it_arrives() {
    let settings =
        json!({"max_body_bytes": MIB, "server": {"max_inflight_body_bytes": 3 * MIB / 2}});
    let app = spawn_app(settings).await;
    let held = body_in_flight(&app).await;
    let body = chat_body(600 * 1024).into_bytes();
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        body.chunks(64 * 1024).map(|c| Ok(c.to_vec())).collect();
    let response = app
        .client
        .post(app.url("/v1/chat/completions"))
        .bearer_auth(OPENAI_KEY)
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
            chunks,
        )))
        .send()
        .await
        .expect("an answer");
    assert_eq!(response.status(), 503);
    assert!(response.headers().contains_key("retry-after"));
    drop(held);
    let small = json!({"model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": "served"}]});
    assert_eq!(app.post_chat(&small).await.status(), 200);
}

#[tokio::test]
async fn a_burst_of_readiness_probes_costs_at_most_a_couple_of_database_round_trips() {
    let proxy = ProxyProcess::start(&[]);
    let client = reqwest::Client::new();
    let pings = r#"condenser_storage_seconds_count{operation="ping"}"#;
    let before = proxy.metric(pings).await;
    let probes = (0..100).map(|_| {
        let request = client.get(proxy.url("/readyz")).send();
        async move { request.await.expect("an answer").status().as_u16() }
    });
    let statuses = futures_util::future::join_all(probes).await;
    assert!(statuses.iter().all(|status| *status == 200), "{statuses:?}");
    let round_trips = proxy.metric(pings).await - before;
    assert!(
        round_trips <= 2.0,
        "100 probes cost {round_trips} database round trips"
    );
    // The answer is fresh again after the interval.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let status = client
        .get(proxy.url("/readyz"))
        .send()
        .await
        .expect("an answer");
    assert_eq!(status.status(), 200);
    assert!(proxy.metric(pings).await - before > round_trips);
}
