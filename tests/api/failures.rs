//! Bad input and broken upstreams get clear errors in the protocol's shape.

use crate::helpers::app::{spawn_app, spawn_app_with, Options, OPENAI_KEY};
use crate::helpers::fixtures::load;
use fake_upstream::FakeConfig;
use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use std::time::Duration;

#[tokio::test]
async fn upstream_down_is_a_502_in_the_openai_shape_naming_the_upstream() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr");
    let options = Options {
        settings: json!({"openai_base_url": format!("http://{closed}/v1")}),
        ..Options::default()
    };
    let app = spawn_app_with(options).await;
    let response = app.post_chat(&load("openai/chat_request.json")).await;
    assert_eq!(response.status(), 502);
    let body: Value = response.json().await.expect("json");
    let message = body["error"]["message"].as_str().expect("a message");
    assert!(
        message.starts_with("upstream openai is unreachable"),
        "{message}"
    );
    assert_eq!(body["error"]["type"], "api_error");
    assert!(!message.contains(OPENAI_KEY));
}

#[tokio::test]
async fn upstream_down_is_a_502_in_the_anthropic_shape() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr");
    let options = Options {
        settings: json!({"anthropic_base_url": format!("http://{closed}")}),
        ..Options::default()
    };
    let app = spawn_app_with(options).await;
    let response = app
        .post_messages(&load("anthropic/messages_request.json"))
        .await;
    assert_eq!(response.status(), 502);
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "api_error");
}

#[tokio::test]
async fn a_slow_upstream_is_a_504() {
    let options = Options {
        fake: FakeConfig {
            first_byte_delay: Duration::from_secs(3),
            ..FakeConfig::default()
        },
        settings: json!({"timeouts": {"first_byte": "300ms"}}),
        ..Options::default()
    };
    let app = spawn_app_with(options).await;
    let response = app.post_chat(&load("openai/chat_request.json")).await;
    assert_eq!(response.status(), 504);
    let body: Value = response.json().await.expect("json");
    assert_eq!(
        body["error"]["message"],
        "upstream openai did not answer within 0.3s"
    );
}

#[tokio::test]
async fn an_oversized_body_is_a_413_on_chat_and_passthrough_routes() {
    let options = Options {
        settings: json!({"max_body_bytes": 4096}),
        ..Options::default()
    };
    let app = spawn_app_with(options).await;
    let mut request = load("anthropic/messages_request.json");
    request["messages"][0]["content"] = Value::String("x".repeat(10_000));
    let response = app.post_messages(&request).await;
    assert_eq!(response.status(), 413);
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["error"]["type"], "request_too_large");
    let echo = app
        .client
        .post(app.url("/v1/echo"))
        .bearer_auth(OPENAI_KEY)
        .body(vec![b'x'; 10_000])
        .send()
        .await
        .expect("answers");
    assert_eq!(echo.status(), 413);
    assert!(
        app.upstream.requests().is_empty(),
        "nothing oversized reached the upstream"
    );
}

/// A client sends its whole body before it reads the answer (most do,
/// and HTTP/1.1 lets them). Refused early, the body's rest must still be
/// read and dropped before the connection closes: a socket closed with
/// unread bytes is reset, and the reset destroys the 413 on its way.
#[tokio::test]
async fn a_413_reaches_a_client_still_sending_a_body_many_times_the_limit() {
    let options = Options {
        settings: json!({"max_body_bytes": 4096}),
        ..Options::default()
    };
    let app = spawn_app_with(options).await;
    let huge = vec![b'x'; 16 * 1024 * 1024];
    let chunks = || {
        let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
            huge.chunks(64 * 1024).map(|c| Ok(c.to_vec())).collect();
        reqwest::Body::wrap_stream(futures_util::stream::iter(chunks))
    };
    let sends = [
        (
            "chat, declared",
            "/v1/chat/completions",
            huge.clone().into(),
        ),
        ("chat, chunked", "/v1/chat/completions", chunks()),
        ("passthrough, declared", "/v1/echo", huge.clone().into()),
    ];
    for (name, path, body) in sends {
        let response = app
            .client
            .post(app.url(path))
            .bearer_auth(OPENAI_KEY)
            .body(body)
            .send()
            .await
            .unwrap_or_else(|error| panic!("{name}: the 413 is lost: {error:?}"));
        assert_eq!(response.status(), 413, "{name}");
        let connection = response.headers().get("connection");
        assert_eq!(
            connection.and_then(|value| value.to_str().ok()),
            Some("close"),
            "{name}: the connection closes after the refusal"
        );
    }
    assert!(app.upstream.requests().is_empty());
}

#[tokio::test]
async fn malformed_json_is_forwarded_unchanged_and_the_upstream_answer_comes_back() {
    let app = spawn_app().await;
    let broken = "{\"model\": \"gpt-4o\", \"messages\": [";
    let response = app
        .client
        .post(app.url("/v1/chat/completions"))
        .bearer_auth(OPENAI_KEY)
        .header("content-type", "application/json")
        .body(broken)
        .send()
        .await
        .expect("answers");
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.expect("json");
    assert!(body["error"]["message"]
        .as_str()
        .expect("message")
        .starts_with("We could not parse the JSON body"));
    assert_eq!(app.upstream.requests()[0].body.as_ref(), broken.as_bytes());
}

#[tokio::test]
async fn upstream_errors_pass_through_unchanged() {
    let app = spawn_app().await;
    let response = app
        .client
        .post(app.url("/v1/chat/completions"))
        .bearer_auth("sk-invalid")
        .json(&load("openai/chat_request.json"))
        .send()
        .await
        .expect("answers");
    assert_eq!(response.status(), 401);
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["error"]["code"], "invalid_api_key");
}

/// Condenser serves WebSockets on the Responses endpoint only
/// (`websocket.rs`); elsewhere a handshake is refused with a 426, on which
/// clients that offer both fall back to HTTPS at once.
#[tokio::test]
async fn a_websocket_upgrade_where_none_is_served_is_a_426_in_the_protocol_shape_and_reaches_no_upstream(
) {
    let app = spawn_app().await;
    let response = app
        .client
        .get(app.url("/v1/realtime"))
        .bearer_auth(OPENAI_KEY)
        .header("connection", "Upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-version", "13")
        .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
        .header("openai-beta", "responses_websockets=2026-02-06")
        .send()
        .await
        .expect("answers");
    assert_eq!(response.status(), 426);
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["error"]["code"], "websocket_not_served", "{body}");
    assert!(app.upstream.requests().is_empty(), "nothing was relayed");
}
