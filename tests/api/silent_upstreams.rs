//! Upstreams that send a head and then nothing: before the first event of
//! a 200 stream, or inside an error body. The client gets a 504 in its
//! protocol's shape within the idle timeout, and nothing stays open: not
//! when the timeout fires, not when the client gives up first.

use crate::helpers::app::{ANTHROPIC_KEY, OPENAI_KEY};
use crate::helpers::fixtures::{load, with_stream};
use crate::helpers::process::ProxyProcess;
use crate::helpers::raw_upstream::{Behaviour, RawUpstream};
use serde_json::Value;
use std::time::{Duration, Instant};

const STREAM_HEAD: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n";
const HALF_AN_ERROR: &[u8] = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{\"type\":\"error\",";

struct Silent {
    proxy: ProxyProcess,
    /// OpenAI's upstream: a 200 event stream, then silence.
    stream: RawUpstream,
    /// Anthropic's upstream: the start of a 400 body, then silence.
    error: RawUpstream,
}

async fn silent_upstreams(idle: &str) -> Silent {
    let stream = RawUpstream::start(Behaviour::StallAfter(STREAM_HEAD.to_vec())).await;
    let error = RawUpstream::start(Behaviour::StallAfter(HALF_AN_ERROR.to_vec())).await;
    let proxy = ProxyProcess::start(&[
        (
            "CONDENSER_OPENAI_BASE_URL",
            &format!("{}/v1", stream.base_url()),
        ),
        ("CONDENSER_ANTHROPIC_BASE_URL", &error.base_url()),
        ("CONDENSER__TIMEOUTS__IDLE", idle),
    ]);
    Silent {
        proxy,
        stream,
        error,
    }
}

/// A client that keeps no connection open after its request.
fn client(timeout: Duration) -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(timeout)
        .build()
        .expect("a client")
}

async fn streamed_chat(
    proxy: &ProxyProcess,
    timeout: Duration,
) -> reqwest::Result<reqwest::Response> {
    client(timeout)
        .post(proxy.url("/v1/chat/completions"))
        .bearer_auth(OPENAI_KEY)
        .json(&with_stream(load("openai/chat_request.json")))
        .send()
        .await
}

async fn messages(proxy: &ProxyProcess, timeout: Duration) -> reqwest::Result<reqwest::Response> {
    client(timeout)
        .post(proxy.url("/v1/messages"))
        .header("x-api-key", ANTHROPIC_KEY)
        .header("anthropic-version", "2023-06-01")
        .json(&load("anthropic/messages_request.json"))
        .send()
        .await
}

/// Waits until the proxy holds at most `baseline` descriptors and the
/// upstreams see no connection of it, at most `limit`; false if it never does.
async fn released(silent: &Silent, baseline: usize, limit: Duration) -> bool {
    let started = Instant::now();
    while started.elapsed() < limit {
        let open = silent.stream.open_connections() + silent.error.open_connections();
        if open == 0 && silent.proxy.open_fds() <= baseline {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// `count` streamed OpenAI chats and `count` Anthropic messages at once,
/// each client waiting at most `patience`.
async fn round(
    proxy: &ProxyProcess,
    count: usize,
    patience: Duration,
) -> Vec<reqwest::Result<reqwest::Response>> {
    let streams = (0..count).map(|_| streamed_chat(proxy, patience));
    let errors = (0..count).map(|_| messages(proxy, patience));
    let (streams, errors) = futures_util::future::join(
        futures_util::future::join_all(streams),
        futures_util::future::join_all(errors),
    )
    .await;
    streams.into_iter().chain(errors).collect()
}

#[tokio::test]
async fn silent_upstreams_give_a_504_in_the_protocol_shape_and_leave_nothing_open() {
    let silent = silent_upstreams("1s").await;
    // Warm up what the proxy opens once (database connections, pools).
    round(&silent.proxy, 10, Duration::from_secs(10)).await;
    assert!(released(&silent, usize::MAX, Duration::from_secs(5)).await);
    let baseline = silent.proxy.open_fds();
    let started = Instant::now();
    let answers = round(&silent.proxy, 10, Duration::from_secs(10)).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "answered after {:?} with a 1 s idle timeout",
        started.elapsed()
    );
    for (index, answer) in answers.into_iter().enumerate() {
        let response = answer.expect("an answer, not a hang");
        assert_eq!(response.status(), 504);
        let body: Value = response.json().await.expect("a JSON error");
        if index < 10 {
            assert_eq!(body["error"]["code"], "upstream_idle", "OpenAI's shape");
        } else {
            assert_eq!(body["type"], "error", "Anthropic's shape");
            assert_eq!(body["error"]["type"], "timeout_error");
        }
    }
    assert!(
        released(&silent, baseline, Duration::from_secs(5)).await,
        "descriptors grew: {} after, {baseline} before; upstream connections open: {}",
        silent.proxy.open_fds(),
        silent.stream.open_connections() + silent.error.open_connections()
    );
}

#[tokio::test]
async fn clients_that_give_up_on_a_silent_upstream_release_its_sockets_at_once() {
    // Far longer than the test: only the clients leaving can free anything.
    let silent = silent_upstreams("10m").await;
    let patience = Duration::from_millis(300);
    round(&silent.proxy, 15, patience).await;
    assert!(
        released(&silent, usize::MAX, Duration::from_secs(5)).await,
        "upstream connections still open after their clients left: {}",
        silent.stream.open_connections() + silent.error.open_connections()
    );
    let baseline = silent.proxy.open_fds();
    for gave_up in round(&silent.proxy, 15, patience).await {
        assert!(gave_up.expect_err("the client gives up").is_timeout());
    }
    assert!(
        released(&silent, baseline, Duration::from_secs(5)).await,
        "30 clients left; the proxy still holds {} descriptors ({baseline} before) and {} upstream connections",
        silent.proxy.open_fds(),
        silent.stream.open_connections() + silent.error.open_connections()
    );
}
