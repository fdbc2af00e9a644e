//! What comes back is whole and traceable: the client's request id on every
//! answer, the upstream's beside it, and error bodies of any size intact.

use crate::helpers::app::{spawn_app_with, Options, TestApp, ANTHROPIC_KEY, OPENAI_KEY};
use crate::helpers::fixtures::{load, with_stream};
use crate::helpers::raw_client;
use crate::helpers::raw_upstream::{self, Behaviour, RawUpstream};
use pretty_assertions::assert_eq;
use serde_json::json;

async fn proxy_before(upstream: &RawUpstream) -> TestApp {
    let settings = json!({
        "openai_base_url": format!("{}/v1", upstream.base_url()),
        "anthropic_base_url": upstream.base_url(),
    });
    spawn_app_with(Options::default().settings(settings)).await
}

#[tokio::test]
async fn the_clients_request_id_is_echoed_on_every_path_and_the_upstreams_moves_aside() {
    let answer = raw_upstream::response(
        "200 OK",
        "application/json",
        "x-request-id: req_upstream_42\r\n",
        br#"{"id":"chatcmpl-1","object":"chat.completion","choices":[]}"#,
    );
    let upstream = RawUpstream::start(Behaviour::Answer(answer)).await;
    let app = proxy_before(&upstream).await;
    let chat = load("openai/chat_request.json");
    let requests = [
        (
            "chat",
            app.client
                .post(app.url("/v1/chat/completions"))
                .bearer_auth(OPENAI_KEY)
                .json(&chat),
        ),
        (
            "streamed chat",
            app.client
                .post(app.url("/v1/chat/completions"))
                .bearer_auth(OPENAI_KEY)
                .json(&with_stream(chat.clone())),
        ),
        (
            "unparsed chat",
            app.client
                .post(app.url("/v1/chat/completions"))
                .bearer_auth(OPENAI_KEY)
                .body("{"),
        ),
        (
            "messages",
            app.client
                .post(app.url("/v1/messages"))
                .header("x-api-key", ANTHROPIC_KEY)
                .header("anthropic-version", "2023-06-01")
                .json(&load("anthropic/messages_request.json")),
        ),
        (
            "passthrough",
            app.client
                .get(app.url("/v1/models"))
                .bearer_auth(OPENAI_KEY),
        ),
    ];
    for (name, request) in requests {
        let response = request
            .header("x-request-id", "client-7")
            .send()
            .await
            .expect("answers");
        assert_eq!(response.status(), 200, "{name}");
        assert_eq!(response.headers()["x-request-id"], "client-7", "{name}");
        assert_eq!(
            response.headers()["x-upstream-request-id"],
            "req_upstream_42",
            "{name}"
        );
    }
    let own = [
        ("health", app.client.get(app.url("/healthz"))),
        ("metrics", app.client.get(app.url("/metrics"))),
        (
            "413",
            app.client
                .post(app.url("/v1/chat/completions"))
                .body(vec![b'x'; 40 * 1024 * 1024]),
        ),
    ];
    for (name, request) in own {
        let response = request
            .header("x-request-id", "client-8")
            .send()
            .await
            .expect("answers");
        assert_eq!(response.headers()["x-request-id"], "client-8", "{name}");
        assert!(!response.headers().contains_key("x-upstream-request-id"));
    }
    let refused = raw_client::send(
        &app.address,
        "CONNECT x:443 HTTP/1.1\r\nhost: x:443\r\nx-request-id: client-9",
    )
    .await;
    assert!(
        refused.0.contains("x-request-id: client-9"),
        "{}",
        refused.0
    );
}

#[tokio::test]
async fn a_two_mib_error_body_is_relayed_byte_identical() {
    let body: Vec<u8> = format!(
        r#"{{"error":{{"message":"{}","type":"invalid_request_error"}}}}"#,
        "0123456789abcdef".repeat(2 * 1024 * 1024 / 16)
    )
    .into_bytes();
    let answer = raw_upstream::response("400 Bad Request", "application/json", "", &body);
    let upstream = RawUpstream::start(Behaviour::Answer(answer)).await;
    let app = proxy_before(&upstream).await;
    for stream in [false, true] {
        let mut request = load("openai/chat_request.json");
        request["stream"] = json!(stream);
        let response = app.post_chat(&request).await;
        assert_eq!(response.status(), 400);
        let relayed = response.bytes().await.expect("the whole body");
        assert_eq!(relayed.len(), body.len(), "stream: {stream}");
        assert!(
            relayed == body,
            "the body changed on its way (stream: {stream})"
        );
    }
}
