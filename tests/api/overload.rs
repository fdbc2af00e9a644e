//! More than the proxy should take at once: chat bodies past the memory
//! budget, readiness probes in a burst. Each is refused or answered cheaply,
//! at once, and in the protocol's shape; what fits is still served.

use crate::helpers::app::{
    spawn_app_with, start_proxy, Options, TestApp, ANTHROPIC_KEY, OPENAI_KEY,
};
use crate::helpers::db::{TestBackend, TestDb};
use crate::helpers::process::ProxyProcess;
use crate::helpers::raw_client;
use crate::helpers::wait::{wait_until, PATIENCE};
use fake_upstream::{FakeConfig, FakeUpstream, RequestKind, Scripted};
use serde_json::json;
use std::time::{Duration, Instant};

const MIB: usize = 1024 * 1024;

/// A Chat Completions body of about `size` bytes of one long string: a
/// light body (a string costs about its bytes once parsed).
fn chat_body(size: usize) -> String {
    let text = "x".repeat(size.saturating_sub(120));
    json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": text}]}).to_string()
}

/// Short messages of about `size` bytes in all, each a parsed object, a
/// chain link and a row: the heaviest kind of body per byte.
fn short_messages(size: usize) -> String {
    let mut messages = String::with_capacity(size + 64);
    let mut n = 0;
    while messages.len() < size {
        let role = if n % 2 == 0 { "user" } else { "assistant" };
        let comma = if n == 0 { "" } else { "," };
        messages.push_str(&format!(
            r#"{comma}{{"role":"{role}","content":"m{n} ok"}}"#
        ));
        n += 1;
    }
    messages
}

/// A Chat Completions body of about `size` bytes of short messages.
fn heavy_chat_body(size: usize) -> String {
    let messages = short_messages(size);
    format!(r#"{{"model":"gpt-4o-mini","messages":[{messages}]}}"#)
}

/// A Messages body of about `size` bytes of short messages.
fn heavy_messages_body(size: usize) -> String {
    let messages = short_messages(size);
    format!(r#"{{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{messages}]}}"#)
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

/// A Chat Completions request whose `body` is sent chunked, 64 KiB at a
/// time, with no `Content-Length`.
async fn post_chunked(app: &TestApp, body: String) -> reqwest::Response {
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> = body
        .into_bytes()
        .chunks(64 * 1024)
        .map(|c| Ok(c.to_vec()))
        .collect();
    app.client
        .post(app.url("/v1/chat/completions"))
        .bearer_auth(OPENAI_KEY)
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
            chunks,
        )))
        .send()
        .await
        .expect("an answer")
}

/// A chat body of short messages, nearly 1 MiB, sent whole and held at
/// the upstream for ten minutes: it holds its whole weight of the budget
/// (it weighs more than its size) until its client hangs up.
async fn body_in_flight(app: &TestApp) -> tokio::net::TcpStream {
    app.upstream.push_script(Scripted::Delay {
        kind: RequestKind::Chat,
        delay: Duration::from_secs(600),
    });
    let body = heavy_chat_body(MIB * 15 / 16);
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {OPENAI_KEY}\r\ncontent-type: application/json\r\ncontent-length: {}",
        body.len()
    );
    let held = raw_client::start_request(&app.address, &head, body.as_bytes()).await;
    wait_until(
        PATIENCE,
        "the held body waiting at the upstream",
        || async { app.upstream.scripts_pending() == 0 },
    )
    .await;
    held
}

/// Limits where a 1 MiB body fits alone whatever its shape (the floor is
/// about 1.8 MiB of weight, and large bodies may use that much), and the
/// held body (about 1.1 MiB of weight) plus an 800 KB body of short
/// messages (about 0.9) pass it, while one of a long string (0.2) does not.
fn tight_budget() -> serde_json::Value {
    json!({"max_body_bytes": MIB, "server": {"max_inflight_body_bytes": 2 * MIB}})
}

#[tokio::test]
async fn a_chat_body_past_the_budget_is_a_503_with_retry_after_and_a_small_one_is_served() {
    let app = spawn_app(tight_budget()).await;
    let held = body_in_flight(&app).await;
    let reached_before = app.upstream.chat_requests().len();

    let started = Instant::now();
    let openai = raw_post(
        &app,
        "/v1/chat/completions",
        &format!("authorization: Bearer {OPENAI_KEY}"),
        &heavy_chat_body(800 * 1024),
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
        &heavy_messages_body(800 * 1024),
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

    // The same size in one long string costs a fifth of the memory: it
    // fits beside the held body.
    let light = raw_post(
        &app,
        "/v1/chat/completions",
        &format!("authorization: Bearer {OPENAI_KEY}"),
        &chat_body(800 * 1024),
    )
    .await;
    assert_eq!(light.status(), 200, "{}", light.0);

    let small = json!({"model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": "still served"}]});
    let small = app.post_chat(&small).await;
    assert_eq!(small.status(), 200, "a small request fits beside it");
    let reached = app.upstream.chat_requests().len() - reached_before;
    assert_eq!(
        reached, 2,
        "only the light and the small request reached the upstream"
    );

    drop(held);
    // The proxy notices the dropped connection on its own time; until then
    // the body is refused as before, and nothing reaches the upstream.
    let what = "the budget released: the same body served";
    wait_until(PATIENCE, what, || async {
        let after = raw_post(
            &app,
            "/v1/chat/completions",
            &format!("authorization: Bearer {OPENAI_KEY}"),
            &heavy_chat_body(800 * 1024),
        )
        .await;
        assert!([200, 503].contains(&after.status()), "{}", after.0);
        after.status() == 200
    })
    .await;
}

/// A body no chat client writes: a number every two bytes, each a node of
/// the parsed tree. At 800 KB it weighs about three times what one body
/// may hold in the tight budget, so it is refused for good, not for now.
fn dense_chat_body(size: usize) -> String {
    let numbers = vec!["1"; size / 2].join(",");
    format!(r#"{{"model":"gpt-4o-mini","messages":[{{"role":"user","content":[{numbers}]}}]}}"#)
}

#[tokio::test]
async fn a_body_too_dense_to_fit_even_alone_is_a_413_without_retry_after() {
    let app = spawn_app(tight_budget()).await;
    let auth = format!("authorization: Bearer {OPENAI_KEY}");
    let dense = raw_post(
        &app,
        "/v1/chat/completions",
        &auth,
        &dense_chat_body(800 * 1024),
    )
    .await;
    assert_eq!(dense.status(), 413, "{}", dense.0);
    assert!(
        dense.header("retry-after").is_none(),
        "a retry would be refused the same way"
    );
    assert_eq!(
        dense.json()["error"]["code"],
        "body_too_heavy",
        "{}",
        dense.0
    );

    let chunked = post_chunked(&app, dense_chat_body(800 * 1024)).await;
    assert_eq!(chunked.status(), 413, "chunked, the same verdict");
    assert!(app.upstream.chat_requests().is_empty(), "nothing forwarded");

    // The budget is idle, not full: a body of the same size that fits is served.
    let light = raw_post(&app, "/v1/chat/completions", &auth, &chat_body(800 * 1024)).await;
    assert_eq!(light.status(), 200, "{}", light.0);
}

#[tokio::test]
async fn a_chunked_chat_body_is_counted_as_it_arrives() {
    let app = spawn_app(tight_budget()).await;
    let held = body_in_flight(&app).await;
    let response = post_chunked(&app, heavy_chat_body(800 * 1024)).await;
    assert_eq!(response.status(), 503);
    assert!(response.headers().contains_key("retry-after"));
    // The rest of the body was never read: the connection is not reused.
    assert_eq!(response.headers()["connection"], "close");
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
    // The answer is fresh again after the interval. Time passing is the
    // behaviour under test: a sleep is a lower bound on it, so a busy
    // machine cannot make this fail.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let status = client
        .get(proxy.url("/readyz"))
        .send()
        .await
        .expect("an answer");
    assert_eq!(status.status(), 200);
    assert!(proxy.metric(pings).await - before > round_trips);
}

/// Requests of 1 MiB and more are identified on the blocking pool; their
/// upstream calls wait on the async workers. Four of them, each held for
/// ten minutes by a silent upstream, on a proxy whose runtime has two
/// blocking threads, leave it answering small requests all the while.
#[test]
fn large_bodies_waiting_on_a_slow_upstream_leave_small_requests_served() {
    // The proxy on a runtime of its own, as small as the assertion needs;
    // the client and the fake upstream on another, so the test still
    // observes (and fails, not hangs) if the proxy's runtime stalls.
    let proxy_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(2)
        .enable_all()
        .build()
        .expect("the proxy's runtime");
    let test_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("the test's runtime");
    // Dropped without waiting for its threads, even when the test fails: a
    // stalled proxy's threads never finish.
    let proxy_runtime = Background(Some(proxy_runtime));
    let handle = proxy_runtime
        .0
        .as_ref()
        .expect("the runtime")
        .handle()
        .clone();
    test_runtime.block_on(large_bodies_beside_small_ones(&handle));
    test_runtime.shutdown_background();
}

/// A runtime shut down in the background when dropped.
struct Background(Option<tokio::runtime::Runtime>);

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

async fn large_bodies_beside_small_ones(proxy_runtime: &tokio::runtime::Handle) {
    const LARGE: usize = 4;
    let mut fake = FakeConfig {
        summary_marker: Some(condenser::protocol::SUMMARY_MARKER.to_string()),
        ..FakeConfig::default()
    };
    fake.context_windows
        .insert("gpt-4o-mini".to_string(), 100_000_000);
    let upstream = FakeUpstream::start(fake).await;
    let db = TestDb::new(TestBackend::Sqlite).await;
    let settings = json!({
        "listen": "127.0.0.1:0",
        "openai_base_url": upstream.openai_base_url(),
        "database_url": db.url,
        "server": {"max_inflight_body_bytes": 64 * MIB},
    });
    let started = proxy_runtime.spawn(async move { start_proxy(&settings).await });
    let address = started.await.expect("the proxy starts");
    for _ in 0..LARGE {
        upstream.push_script(Scripted::Delay {
            kind: RequestKind::Chat,
            delay: Duration::from_secs(600),
        });
    }
    let client = reqwest::Client::new();
    let post = |body: String| {
        client
            .post(format!("{address}/v1/chat/completions"))
            .bearer_auth(OPENAI_KEY)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let large: Vec<_> = (0..LARGE)
        .map(|n| tokio::spawn(post(chat_body_of(n, MIB + 4096))))
        .collect();
    // Each takes its delay as it reaches the upstream.
    wait_until(PATIENCE, "every large request waiting upstream", || async {
        upstream.scripts_pending() == 0
    })
    .await;

    for n in 0..3 {
        let small = tokio::time::timeout(PATIENCE, post(chat_body_of(100 + n, 1024)))
            .await
            .expect("a small request answered beside the large ones")
            .expect("an answer");
        assert_eq!(small.status(), 200, "small request {n}");
    }
    for (n, request) in large.iter().enumerate() {
        assert!(
            !request.is_finished(),
            "large request {n} still waits on its upstream"
        );
    }
    for request in large {
        request.abort();
    }
}

/// A Chat Completions body of about `size` bytes, its own conversation.
fn chat_body_of(n: usize, size: usize) -> String {
    let text = format!("{n}: {}", "x".repeat(size.saturating_sub(130)));
    json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": text}]}).to_string()
}
