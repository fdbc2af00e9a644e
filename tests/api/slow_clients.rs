//! Clients that connect and then dawdle (slowloris): half a request line,
//! nothing at all, a body that stops. They may hold a connection for the
//! configured timeouts and no longer, and never keep a valid request out.

use crate::helpers::app::{spawn_app_with, Options, OPENAI_KEY};
use crate::helpers::process::ProxyProcess;
use crate::helpers::raw_client;
use crate::helpers::wait::{wait_until, PATIENCE};
use fake_upstream::{FakeConfig, FakeUpstream};
use serde_json::json;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Opens `count` connections to `proxy`, each sending `bytes` and no more.
async fn dawdlers(proxy: &ProxyProcess, count: usize, bytes: &[u8]) -> Vec<TcpStream> {
    let host = proxy.address.trim_start_matches("http://").to_string();
    let mut streams = Vec::with_capacity(count);
    for _ in 0..count {
        let mut stream = TcpStream::connect(&host).await.expect("connects");
        stream.write_all(bytes).await.expect("writes");
        streams.push(stream);
    }
    streams
}

async fn list_models(proxy: &ProxyProcess, timeout: Duration) -> reqwest::Result<u16> {
    let client = reqwest::Client::builder()
        .timeout(timeout)
        .build()
        .expect("a client");
    let response = client
        .get(proxy.url("/v1/models"))
        .bearer_auth(OPENAI_KEY)
        .send()
        .await?;
    Ok(response.status().as_u16())
}

#[tokio::test]
async fn a_thousand_half_open_connections_do_not_keep_a_valid_request_out() {
    // This test's own side of the connections needs descriptors too.
    rlimit::increase_nofile_limit(8_192).expect("raising this test's open-file limit");
    let fake = FakeUpstream::start(FakeConfig::default()).await;
    // A soft limit of 1,000, as a default of 1,024 minus what a process holds.
    let proxy = ProxyProcess::start_with_soft_fd_limit(
        &[("CONDENSER_OPENAI_BASE_URL", &fake.openai_base_url())],
        1_000,
    );
    let _held = dawdlers(&proxy, 1_000, b"GET /v1/models HTTP/1.1\r\nho").await;
    wait_until(PATIENCE, "the proxy at its 1,000 descriptors", || async {
        proxy.open_fds() >= 1_000
    })
    .await;
    let answered = list_models(&proxy, Duration::from_secs(1)).await;
    assert_eq!(
        answered.ok(),
        Some(200),
        "a valid request waited past a second behind 1,000 half-open connections"
    );
}

#[tokio::test]
async fn past_the_connection_cap_clients_wait_and_silent_ones_are_cut_off() {
    let fake = FakeUpstream::start(FakeConfig::default()).await;
    let proxy = ProxyProcess::start(&[
        ("CONDENSER_OPENAI_BASE_URL", &fake.openai_base_url()),
        ("CONDENSER__SERVER__MAX_CONNECTIONS", "20"),
        ("CONDENSER__SERVER__HEADER_READ_TIMEOUT", "1s"),
    ]);
    let mut silent = dawdlers(&proxy, 10, b"").await;
    let mut half_open = dawdlers(&proxy, 20, b"POST /v1/chat/completions HTTP/1.1\r\n").await;
    silent.append(&mut half_open);
    for mut stream in silent {
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut byte)).await;
        assert!(
            matches!(read, Ok(Ok(0) | Err(_))),
            "a dawdling connection stayed open: {read:?}"
        );
    }
    assert_eq!(
        list_models(&proxy, Duration::from_secs(5)).await.ok(),
        Some(200)
    );
    let logs = proxy.log_text();
    assert!(
        logs.contains("connection limit reached (server.max_connections)"),
        "{logs}"
    );
}

#[tokio::test]
async fn a_request_body_that_stops_arriving_is_a_408_in_the_protocol_shape() {
    let options = Options::default().settings(json!({"server": {"body_read_timeout": "1s"}}));
    let app = spawn_app_with(options).await;
    for path in ["/v1/chat/completions", "/v1/echo"] {
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {OPENAI_KEY}\r\ncontent-type: application/json\r\ncontent-length: 1000"
        );
        let response = raw_client::send_with_body(&app.address, &head, br#"{"model":"#).await;
        assert_eq!(response.status(), 408, "{path}: {}", response.0);
        assert_eq!(response.json()["error"]["code"], "body_timeout", "{path}");
    }
}

#[tokio::test]
async fn at_the_connection_cap_silent_connections_make_room_for_a_valid_request() {
    rlimit::increase_nofile_limit(8_192).expect("raising this test's open-file limit");
    let fake = FakeUpstream::start(FakeConfig::default()).await;
    // Both limits at 1,024: a cap of (1,024 − 64) / 2 = 480 connections.
    let proxy = ProxyProcess::start_with_fd_limit(
        &[("CONDENSER_OPENAI_BASE_URL", &fake.openai_base_url())],
        1_024,
    );
    let _held = dawdlers(&proxy, 1_034, b"").await;
    // Proof the cap was reached. A count of the proxy's descriptors is not:
    // at the cap, silent connections close after half a second, so on a
    // slow machine the proxy may have drained them before a count is read.
    // Without that cut the 480 would hold their places for 30 s, and the
    // request below would time out whatever the moment it is sent.
    wait_until(
        PATIENCE,
        "the proxy at its cap of 480 connections",
        || async {
            proxy
                .log_text()
                .contains("connection limit reached (server.max_connections)")
        },
    )
    .await;
    let answered = list_models(&proxy, Duration::from_secs(2)).await;
    assert_eq!(
        answered.ok(),
        Some(200),
        "a valid request waited past 2 s behind 1,034 silent connections at the cap"
    );
}

#[tokio::test]
async fn an_idle_http2_connection_is_closed_after_the_idle_timeout_and_a_busy_one_is_not() {
    use http_body_util::{BodyExt, Full};
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let mut options = Options::default().settings(json!({"server": {"idle_timeout": "1s"}}));
    options.fake.first_byte_delay = Duration::from_millis(2_500);
    let app = spawn_app_with(options).await;
    let host = app.address.trim_start_matches("http://").to_string();
    let stream = TcpStream::connect(&host).await.expect("connects");
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .expect("an HTTP/2 connection");
    let open = tokio::spawn(connection);
    // A request in flight longer than the idle timeout is not cut off.
    let body = json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]});
    let request = http::Request::post(app.url("/v1/chat/completions"))
        .header("authorization", format!("Bearer {OPENAI_KEY}"))
        .header("content-type", "application/json")
        .body(Full::new(bytes::Bytes::from(body.to_string())))
        .expect("a request");
    let response = sender.send_request(request).await.expect("an answer");
    assert_eq!(response.status(), 200);
    response
        .into_body()
        .collect()
        .await
        .expect("the whole body");
    let idle_from = Instant::now();
    let closed = tokio::time::timeout(Duration::from_secs(5), open).await;
    assert!(
        closed.is_ok(),
        "an idle HTTP/2 connection was still open 5 s after its last request"
    );
    assert!(idle_from.elapsed() >= Duration::from_millis(800));
}

#[tokio::test]
async fn a_request_body_that_trickles_past_its_deadline_is_a_408_in_the_protocol_shape() {
    let settings = json!({"server": {"body_read_timeout": "2s", "body_total_timeout": "3s"}});
    let app = spawn_app_with(Options::default().settings(settings)).await;
    let trickle = |path: &'static str| {
        let address = app.address.clone();
        async move {
            let head = format!(
                "POST {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {OPENAI_KEY}\r\ncontent-type: application/json\r\ncontent-length: 100000"
            );
            let every = Duration::from_millis(500);
            (
                path,
                raw_client::send_trickling(&address, &head, every).await,
            )
        }
    };
    let answers = tokio::join!(trickle("/v1/chat/completions"), trickle("/v1/echo"));
    for (path, (response, elapsed)) in [answers.0, answers.1] {
        assert_eq!(response.status(), 408, "{path}: {}", response.0);
        assert_eq!(response.json()["error"]["code"], "body_timeout", "{path}");
        assert!(elapsed < Duration::from_secs(6), "{path}: {elapsed:?}");
    }
}
