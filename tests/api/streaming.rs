//! Invariant 6: a streaming client waiting on a summary gets keep-alives,
//! then a complete, valid stream. The summary takes 15 seconds and the
//! keep-alive interval is the default, as a user would run it.

use crate::helpers::agent::{Agent, Dialect};
use crate::helpers::app::{spawn_app_with, Options, TestApp};
use condenser::pipeline::KEEPALIVE_COMMENT;
use fake_upstream::{FakeConfig, RequestKind, Scripted};
use serde_json::{json, Value};
use std::time::Duration;

const SUMMARY_TAKES: Duration = Duration::from_secs(15);
/// What the issue promises a waiting client: bytes within 5 seconds.
const FIRST_BYTES_WITHIN: Duration = Duration::from_secs(5);

async fn slow_summaries(model: &str) -> TestApp {
    let fake = FakeConfig {
        summary_delay: SUMMARY_TAKES,
        summary_marker: Some(condenser::protocol::SUMMARY_MARKER.into()),
        ..FakeConfig::default()
    };
    let options = Options {
        fake,
        ..Options::default()
    }
    .window(model, 12_000)
    .settings(json!({"compaction": {"summary_max_tokens": 300, "keep_share": 0.7}}));
    spawn_app_with(options).await
}

/// A history that overflows a 12,000-token window by a little, so its
/// compacted part takes one (slow) summary call.
pub fn overflowing(dialect: Dialect, model: &str) -> Agent {
    let mut agent = Agent::new(dialect, model, 0, 0);
    for i in 0..24 {
        agent.say(&format!("note {i}: {}", "lorem ipsum dolor ".repeat(120)));
        agent.messages.push(match dialect {
            Dialect::OpenAi => json!({"role": "assistant", "content": format!("noted {i}")}),
            Dialect::Anthropic => json!({"role": "assistant", "content": [{"type": "text", "text": format!("noted {i}")}]}),
            Dialect::Responses => crate::helpers::responses::assistant_item(&format!("noted {i}")),
            Dialect::Gemini => json!({"role": "model", "parts": [{"text": format!("noted {i}")}]}),
        });
    }
    agent.say("And now?");
    agent
}

async fn stream_through(
    app: &TestApp,
    dialect: Dialect,
    model: &str,
) -> (Vec<bytes::Bytes>, String) {
    let mut request = overflowing(dialect, model).request();
    // Gemini streams by its URL, not a field.
    if dialect != Dialect::Gemini {
        request["stream"] = json!(true);
    }
    let builder = match dialect {
        Dialect::OpenAi => app
            .client
            .post(app.url("/v1/chat/completions"))
            .bearer_auth(crate::helpers::app::OPENAI_KEY),
        Dialect::Anthropic => app
            .client
            .post(app.url("/v1/messages"))
            .header("x-api-key", crate::helpers::app::ANTHROPIC_KEY)
            .header("anthropic-version", "2023-06-01"),
        Dialect::Responses => app
            .client
            .post(app.url("/v1/responses"))
            .bearer_auth(crate::helpers::app::OPENAI_KEY),
        Dialect::Gemini => app
            .client
            .post(app.url(&format!(
                "/v1beta/models/{model}:streamGenerateContent?alt=sse"
            )))
            .header("x-goog-api-key", crate::helpers::app::GEMINI_KEY),
    };
    let sent = std::time::Instant::now();
    let mut response = builder.json(&request).send().await.expect("answers");
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let first = response
        .chunk()
        .await
        .expect("reads")
        .expect("a first chunk");
    let waited = sent.elapsed();
    assert!(
        waited < FIRST_BYTES_WITHIN,
        "first bytes after {waited:?} while a summary was being written"
    );
    let summaries_answered_at_first_byte = app
        .upstream
        .summary_requests()
        .iter()
        .filter(|r| r.status == 200)
        .count();
    assert_eq!(
        summaries_answered_at_first_byte, 0,
        "the first bytes came while the summary was still being written"
    );
    let mut chunks = vec![first];
    while let Some(chunk) = response.chunk().await.expect("reads") {
        chunks.push(chunk);
    }
    let all: String = chunks
        .iter()
        .map(|c| String::from_utf8_lossy(c).to_string())
        .collect();
    (chunks, all)
}

#[tokio::test]
async fn a_streaming_openai_client_gets_keepalives_then_a_complete_stream() {
    let app = slow_summaries("gpt-4o-mini").await;
    let (chunks, all) = stream_through(&app, Dialect::OpenAi, "gpt-4o-mini").await;
    assert_eq!(&chunks[0][..], KEEPALIVE_COMMENT);
    assert!(
        all.matches(std::str::from_utf8(KEEPALIVE_COMMENT).expect("utf8"))
            .count()
            >= 3
    );
    assert!(all.contains("\"finish_reason\":\"stop\""), "{all}");
    assert!(
        all.trim_end().ends_with("data: [DONE]") || all.contains("data: [DONE]\n\n"),
        "{all}"
    );
}

#[tokio::test]
async fn a_streaming_anthropic_client_gets_keepalives_then_a_complete_stream() {
    let app = slow_summaries("claude-sonnet-4-5").await;
    let (chunks, all) = stream_through(&app, Dialect::Anthropic, "claude-sonnet-4-5").await;
    assert_eq!(&chunks[0][..], KEEPALIVE_COMMENT);
    assert!(all.contains("event: message_start"));
    assert!(all.contains("event: message_stop"), "{all}");
}

/// Responses clients (Codex, the SDKs) read SSE comments as nothing, then
/// the retried response's events, never the overflow's `response.failed`.
#[tokio::test]
async fn a_streaming_responses_client_gets_keepalives_then_a_complete_stream() {
    let app = slow_summaries("gpt-5-codex").await;
    let (chunks, all) = stream_through(&app, Dialect::Responses, "gpt-5-codex").await;
    assert_eq!(&chunks[0][..], KEEPALIVE_COMMENT);
    assert!(all.contains("event: response.created"));
    assert!(all.contains("event: response.completed"), "{all}");
    assert!(!all.contains("response.failed"), "{all}");
}

/// Gemini's stream takes blank lines, not comments, while it waits: both
/// of Google's SDKs skip them and choke on a comment (`tests/api/gemini.rs`
/// drives them). Then only the upstream's `data:` events, no error.
#[tokio::test]
async fn a_streaming_gemini_client_gets_blank_lines_then_a_complete_stream() {
    let model = "gemini-3-flash-preview";
    let app = slow_summaries(model).await;
    let (chunks, all) = stream_through(&app, Dialect::Gemini, model).await;
    assert_eq!(&chunks[0][..], b"\r\n");
    let (waiting, events) = all.split_at(all.find("data: ").expect("events"));
    assert!(
        waiting.len() >= 6 && waiting.trim().is_empty(),
        "blank lines first: {waiting:?}"
    );
    let events: Vec<Value> = events
        .split("\r\n\r\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            serde_json::from_str(e.trim().strip_prefix("data: ").expect("only data events"))
                .expect("json")
        })
        .collect();
    assert!(events.iter().all(|e| e.get("error").is_none()), "{all}");
    assert_eq!(
        events.last().expect("events")["candidates"][0]["finishReason"],
        "STOP"
    );
    let overflows = app
        .upstream
        .chat_requests()
        .iter()
        .filter(|r| r.status == 400)
        .count();
    assert_eq!(
        overflows, 1,
        "one overflow, compacted before the client saw it"
    );
}

/// Some servers (SGLang, some vLLM deployments) answer 200 and put the
/// overflow in the first event. The proxy must treat it as the overflow it
/// is: compact, retry, and hand the client a healthy stream instead.
#[tokio::test]
async fn an_overflow_in_the_first_event_of_a_200_stream_is_compacted_and_retried() {
    let model = "gpt-4o-mini";
    let fake = FakeConfig {
        summary_marker: Some(condenser::protocol::SUMMARY_MARKER.into()),
        ..FakeConfig::default()
    };
    // The fake itself never overflows here: the scripted event is the only one.
    let options = Options {
        fake,
        ..Options::default()
    }
    .window(model, 100_000)
    .settings(json!({"compaction": {"summary_max_tokens": 300, "keep_share": 0.7}}));
    let app = spawn_app_with(options).await;
    let in_band = r#"{"error":{"message":"The input (13000 tokens) is longer than the model's context length (12000 tokens).","code":400}}"#;
    app.upstream.push_script(Scripted::StreamError {
        kind: RequestKind::Chat,
        data: in_band.into(),
    });
    let mut request = overflowing(Dialect::OpenAi, model).request();
    request["stream"] = json!(true);

    let response = app.post_chat(&request).await;

    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-condenser-compactions"], "1");
    let all = response.text().await.expect("body");
    assert!(
        !all.contains("context length"),
        "the overflow leaked: {all}"
    );
    assert!(all.contains("\"finish_reason\":\"stop\""), "{all}");
    assert!(all.contains("data: [DONE]"), "{all}");
    assert_eq!(app.upstream.summary_requests().len(), 1);
    let chats = app.upstream.chat_requests();
    assert_eq!(chats.len(), 2, "the overflowing attempt, then the retry");
    let retried = chats[1].json.as_ref().expect("json")["messages"].to_string();
    assert!(retried.contains(condenser::protocol::SUMMARY_MARKER));
}
