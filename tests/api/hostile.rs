//! What a hostile client sends: invented methods, tunnels, paths that
//! climb out of the base path. None of it may reach the upstream or grow
//! the proxy's state.

use crate::helpers::app::{spawn_app, spawn_app_with, Options, OPENAI_KEY};
use crate::helpers::raw_client;
use crate::helpers::raw_upstream::{self, Behaviour, RawUpstream};
use serde_json::json;

/// A proxy whose every upstream is a raw recorder answering 200.
async fn proxy_before_recorder() -> (crate::helpers::app::TestApp, RawUpstream) {
    let ok = raw_upstream::response("200 OK", "application/json", "", b"{}");
    let recorder = RawUpstream::start(Behaviour::Answer(ok)).await;
    let settings = json!({
        "openai_base_url": format!("{}/v1", recorder.base_url()),
        "anthropic_base_url": recorder.base_url(),
        "upstreams": [{"name": "groq", "base_url": format!("{}/openai/v1", recorder.base_url()),
                       "protocol": "openai", "path_prefix": "/groq"}],
    });
    let app = spawn_app_with(Options::default().settings(settings)).await;
    (app, recorder)
}

#[tokio::test]
async fn metrics_stay_small_after_a_thousand_hostile_methods() {
    let app = spawn_app().await;
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..1_000 {
        let name: String = (0..8_000)
            .map(|_| {
                seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                char::from(b'A' + ((seed >> 33) % 26) as u8)
            })
            .collect();
        let method = reqwest::Method::from_bytes(name.as_bytes()).expect("a method token");
        let response = app
            .client
            .request(method, app.url("/v1/models"))
            .bearer_auth(OPENAI_KEY)
            .send()
            .await
            .expect("answers");
        assert!(response.status().as_u16() < 500);
    }
    let metrics = app
        .client
        .get(app.url("/metrics"))
        .send()
        .await
        .expect("answers")
        .text()
        .await
        .expect("text");
    assert!(
        metrics.len() < 100 * 1024,
        "/metrics grew to {} bytes",
        metrics.len()
    );
    assert!(metrics.contains(r#"method="other""#), "{metrics}");
}

#[tokio::test]
async fn connect_is_refused_in_the_protocol_shape_and_never_reaches_the_upstream() {
    let (app, recorder) = proxy_before_recorder().await;
    let head = format!(
        "CONNECT api.openai.com:443 HTTP/1.1\r\nhost: api.openai.com:443\r\nauthorization: Bearer {OPENAI_KEY}"
    );
    let response = raw_client::send(&app.address, &head).await;
    assert_eq!(response.status(), 405, "{}", response.0);
    assert_eq!(
        response.json()["error"]["type"],
        "invalid_request_error",
        "OpenAI's error shape"
    );
    let anthropic = raw_client::send(
        &app.address,
        "CONNECT api.anthropic.com:443 HTTP/1.1\r\nhost: x\r\nanthropic-version: 2023-06-01",
    )
    .await;
    assert_eq!(anthropic.status(), 405);
    assert_eq!(anthropic.json()["type"], "error", "Anthropic's error shape");
    assert_eq!(recorder.heads(), Vec::<String>::new());
}

#[tokio::test]
async fn asterisk_form_options_is_a_400_not_a_502() {
    let (app, recorder) = proxy_before_recorder().await;
    let response = raw_client::send(&app.address, "OPTIONS * HTTP/1.1\r\nhost: x").await;
    assert_eq!(response.status(), 400, "{}", response.0);
    assert_eq!(response.json()["error"]["code"], "bad_request_target");
    assert_eq!(recorder.heads(), Vec::<String>::new());
}

#[tokio::test]
async fn dot_segments_never_leave_the_configured_base_path() {
    let (app, recorder) = proxy_before_recorder().await;
    for path in [
        "/v1/../../../x",
        "/v1/%2e%2e/%2E%2E/%2e%2e/x",
        "/v1/..%2f..%2fx",
        "/groq/../../x",
        "/v1/messages/../../x",
    ] {
        let head = format!("GET {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {OPENAI_KEY}");
        let response = raw_client::send(&app.address, &head).await;
        assert_eq!(response.status(), 400, "{path}: {}", response.0);
        assert_eq!(response.json()["error"]["type"], "invalid_request_error");
    }
    assert_eq!(recorder.heads(), Vec::<String>::new());
    // The same recorder does see an ordinary request, under its base path.
    let head = format!("GET /v1/models HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {OPENAI_KEY}");
    assert_eq!(raw_client::send(&app.address, &head).await.status(), 200);
    let heads = recorder.heads();
    assert!(heads[0].starts_with("GET /v1/models HTTP/1.1"), "{heads:?}");
}

/// hyper reads a connection 64 KiB at a time at most (`http/serve.rs`), and
/// a request's head must fit in one such buffer.
const HEAD_LIMIT: usize = 64 * 1024;

#[tokio::test]
async fn a_head_of_64_kib_is_refused_with_431_and_one_of_48_kib_goes_through() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (app, recorder) = proxy_before_recorder().await;
    let start = format!(
        "GET /v1/models HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {OPENAI_KEY}\r\nx-context: "
    );
    let large = format!("{start}{}", "x".repeat(48 * 1024));
    assert_eq!(raw_client::send(&app.address, &large).await.status(), 200);

    // A head that fills the buffer unfinished, not a byte more: nothing is
    // left unread when the proxy closes, so the client reads the refusal
    // (unread bytes would make the close a reset).
    let unfinished = format!("{start}{}", "x".repeat(HEAD_LIMIT - start.len()));
    let mut stream = tokio::net::TcpStream::connect(app.address.trim_start_matches("http://"))
        .await
        .expect("connects");
    stream
        .write_all(unfinished.as_bytes())
        .await
        .expect("writes");
    let mut answer = Vec::new();
    let read = stream.read_to_end(&mut answer);
    tokio::time::timeout(std::time::Duration::from_secs(10), read)
        .await
        .expect("the proxy answers and closes within 10 s")
        .expect("reads");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 431 "), "{answer}");
    let heads = recorder.heads();
    assert_eq!(heads.len(), 1, "only the 48 KiB head went upstream");
    assert!(
        heads[0].contains(&"x".repeat(48 * 1024)),
        "its header whole"
    );
}
