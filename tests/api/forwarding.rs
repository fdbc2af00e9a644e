//! The foundation: Condenser is a transparent streaming reverse proxy.

use crate::helpers::app::{spawn_app, ANTHROPIC_KEY, OPENAI_KEY};
use crate::helpers::fixtures::{load, with_stream};
use pretty_assertions::assert_eq;
use reqwest::Method;
use std::time::Duration;

/// Sends the same request to the fake directly and through the proxy.
async fn direct_and_proxied(
    openai: bool,
    body: serde_json::Value,
) -> [(u16, String, bytes::Bytes); 2] {
    let app = spawn_app().await;
    let (direct_url, proxied_url) = if openai {
        (
            format!("{}/chat/completions", app.upstream.openai_base_url()),
            app.url("/v1/chat/completions"),
        )
    } else {
        (
            format!("{}/v1/messages", app.upstream.base_url()),
            app.url("/v1/messages"),
        )
    };
    let mut answers = Vec::new();
    for url in [direct_url, proxied_url] {
        let request = app.client.post(url).json(&body);
        let request = if openai {
            request.bearer_auth(OPENAI_KEY)
        } else {
            request
                .header("x-api-key", ANTHROPIC_KEY)
                .header("anthropic-version", "2023-06-01")
        };
        let response = request.send().await.expect("answers");
        let content_type = response.headers()["content-type"]
            .to_str()
            .expect("ascii")
            .to_string();
        answers.push((
            response.status().as_u16(),
            content_type,
            response.bytes().await.expect("body"),
        ));
    }
    answers.try_into().expect("two answers")
}

#[tokio::test]
async fn openai_chat_arrives_byte_identical_to_a_direct_call() {
    let [direct, proxied] = direct_and_proxied(true, load("openai/chat_request.json")).await;
    assert_eq!(direct.0, 200);
    assert_eq!(proxied, direct);
}

#[tokio::test]
async fn openai_streamed_chat_with_tools_arrives_byte_identical() {
    let [direct, proxied] =
        direct_and_proxied(true, with_stream(load("openai/chat_tools_request.json"))).await;
    assert!(direct.1.starts_with("text/event-stream"));
    assert!(String::from_utf8_lossy(&direct.2).contains("\"tool_calls\""));
    assert_eq!(proxied, direct);
}

#[tokio::test]
async fn anthropic_messages_arrive_byte_identical() {
    let [direct, proxied] =
        direct_and_proxied(false, load("anthropic/messages_request.json")).await;
    assert_eq!(direct.0, 200);
    assert_eq!(proxied, direct);
}

#[tokio::test]
async fn anthropic_streamed_messages_with_tools_arrive_byte_identical() {
    let [direct, proxied] = direct_and_proxied(
        false,
        with_stream(load("anthropic/messages_tools_request.json")),
    )
    .await;
    assert!(String::from_utf8_lossy(&direct.2).contains("event: message_stop"));
    assert_eq!(proxied, direct);
}

#[tokio::test]
async fn a_streamed_response_reaches_the_client_before_the_upstream_finishes() {
    let app = spawn_app().await;
    let mut response = app
        .client
        .get(app.url("/v1/slow-stream?chunks=3&delay_ms=1500"))
        .bearer_auth(OPENAI_KEY)
        .send()
        .await
        .expect("answers");
    let first = response
        .chunk()
        .await
        .expect("reads")
        .expect("a first chunk");
    assert_eq!(String::from_utf8_lossy(&first), "data: chunk 0\n\n");
    // The fake is still sleeping before chunk 1: nothing more can have arrived.
    let next = tokio::time::timeout(Duration::from_millis(300), response.chunk()).await;
    assert!(
        next.is_err(),
        "the proxy waited for more of the upstream body before relaying"
    );
    let rest = response.bytes().await.expect("the rest");
    assert_eq!(
        String::from_utf8_lossy(&rest),
        "data: chunk 1\n\ndata: chunk 2\n\n"
    );
}

#[tokio::test]
async fn other_paths_are_forwarded_untouched_in_both_directions() {
    let app = spawn_app().await;
    let payload: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let response = app
        .client
        .post(app.url("/v1/echo?x=1"))
        .bearer_auth(OPENAI_KEY)
        .header("content-type", "application/octet-stream")
        .body(payload.clone())
        .send()
        .await
        .expect("answers");
    assert_eq!(response.status(), 200);
    assert_eq!(response.bytes().await.expect("body").to_vec(), payload);
    let models = app
        .client
        .get(app.url("/v1/models"))
        .bearer_auth(OPENAI_KEY)
        .send()
        .await
        .expect("answers");
    assert_eq!(models.status(), 200);
    let recorded = app.upstream.requests();
    assert_eq!(recorded[0].path, "/v1/echo");
    assert_eq!(recorded[0].query.as_deref(), Some("x=1"));
    assert_eq!(recorded[1].path, "/v1/models");
}

#[tokio::test]
async fn api_headers_and_the_credential_pass_hop_by_hop_headers_do_not() {
    let app = spawn_app().await;
    let response = app
        .client
        .post(app.url("/v1/messages?beta=true"))
        .header("x-api-key", ANTHROPIC_KEY)
        .header("anthropic-version", "2023-06-01")
        .header("anthropic-beta", "interleaved-thinking-2025-05-14")
        .header("openai-organization", "org-123")
        .header("x-conversation-id", "my-label")
        .header("proxy-authorization", "Basic abc")
        .json(&load("anthropic/messages_request.json"))
        .send()
        .await
        .expect("answers");
    assert_eq!(response.status(), 200);
    let seen = &app.upstream.requests()[0];
    assert_eq!(seen.query.as_deref(), Some("beta=true"));
    assert_eq!(seen.header("x-api-key"), Some(ANTHROPIC_KEY));
    assert_eq!(seen.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(
        seen.header("anthropic-beta"),
        Some("interleaved-thinking-2025-05-14")
    );
    assert_eq!(seen.header("openai-organization"), Some("org-123"));
    assert_eq!(seen.header("proxy-authorization"), None);
    assert_eq!(seen.header("x-conversation-id"), None);
}

#[tokio::test]
async fn a_request_id_is_echoed_or_generated() {
    let app = spawn_app().await;
    let given = app
        .client
        .get(app.url("/healthz"))
        .header("x-request-id", "abc-123")
        .send()
        .await
        .expect("answers");
    assert_eq!(given.headers()["x-request-id"], "abc-123");
    let generated = app
        .client
        .get(app.url("/healthz"))
        .send()
        .await
        .expect("answers");
    let id = generated.headers()["x-request-id"].to_str().expect("ascii");
    assert_eq!(id.len(), 36, "a UUID, got {id}");
}

#[tokio::test]
async fn health_and_readiness_answer() {
    let app = spawn_app().await;
    let probes = [
        (Method::GET, "/healthz"),
        (Method::GET, "/readyz"),
        (Method::HEAD, "/"),
    ];
    for (method, path) in probes {
        let response = app
            .client
            .request(method.clone(), app.url(path))
            .send()
            .await
            .expect("answers");
        assert_eq!(response.status(), 200, "{method} {path}");
    }
}
