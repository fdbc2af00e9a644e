//! The fake must refuse what the real APIs refuse, with their messages: a
//! proxy bug has to surface as a 400 here, not pass silently.

use fake_upstream::{FakeConfig, FakeUpstream};
use serde_json::{json, Value};

async fn openai(fake: &FakeUpstream, body: Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{}/chat/completions", fake.openai_base_url()))
        .bearer_auth("sk-test")
        .json(&body)
        .send()
        .await
        .expect("answers");
    (
        response.status().as_u16(),
        response.json().await.expect("json"),
    )
}

async fn anthropic(fake: &FakeUpstream, body: Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{}/v1/messages", fake.base_url()))
        .header("x-api-key", "sk-test")
        .header("anthropic-version", "2023-06-01")
        .json(&body)
        .send()
        .await
        .expect("answers");
    (
        response.status().as_u16(),
        response.json().await.expect("json"),
    )
}

fn tool_call(id: &str) -> Value {
    json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": id, "type": "function", "function": {"name": "read_file", "arguments": "{}"}}]})
}

#[tokio::test]
async fn openai_rejects_a_tool_result_without_its_call() {
    let fake = FakeUpstream::start(FakeConfig::default()).await;
    let body = json!({"model": "gpt-4o-mini", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "tool", "tool_call_id": "call_1", "content": "orphan"}]});

    let (status, error) = openai(&fake, body).await;

    assert_eq!(status, 400);
    assert_eq!(error["error"]["type"], "invalid_request_error");
    let message = error["error"]["message"].as_str().expect("message");
    assert!(
        message.starts_with("Invalid parameter: messages with role 'tool' must be a response"),
        "{message}"
    );
}

#[tokio::test]
async fn openai_rejects_a_tool_call_left_unanswered() {
    let fake = FakeUpstream::start(FakeConfig::default()).await;
    let body = json!({"model": "gpt-4o-mini", "messages": [
        {"role": "user", "content": "hi"}, tool_call("call_9"),
        {"role": "user", "content": "and?"}]});

    let (status, error) = openai(&fake, body).await;

    assert_eq!(status, 400);
    let message = error["error"]["message"].as_str().expect("message");
    assert!(
        message.contains("did not have response messages: call_9"),
        "{message}"
    );
}

#[tokio::test]
async fn openai_accepts_a_well_paired_history() {
    let fake = FakeUpstream::start(FakeConfig::default()).await;
    let body = json!({"model": "gpt-4o-mini", "messages": [
        {"role": "user", "content": "hi"}, tool_call("call_1"),
        {"role": "tool", "tool_call_id": "call_1", "content": "ok"}]});

    let (status, reply) = openai(&fake, body).await;

    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["object"], "chat.completion");
}

#[tokio::test]
async fn anthropic_rejects_a_tool_result_without_its_tool_use() {
    let fake = FakeUpstream::start(FakeConfig::default()).await;
    let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "x"}]}]});

    let (status, error) = anthropic(&fake, body).await;

    assert_eq!(status, 400);
    assert_eq!(error["type"], "error");
    assert_eq!(error["error"]["type"], "invalid_request_error");
    let message = error["error"]["message"].as_str().expect("message");
    assert!(
        message.contains("unexpected `tool_use_id` found in `tool_result` blocks: toolu_1"),
        "{message}"
    );
}

#[tokio::test]
async fn an_oversized_request_gets_the_real_overflow_bodies() {
    let mut config = FakeConfig::default();
    config.context_windows.insert("gpt-4o-mini".into(), 100);
    config
        .context_windows
        .insert("claude-sonnet-4-5".into(), 100);
    let fake = FakeUpstream::start(config).await;
    let long = "word ".repeat(400);

    let (status, error) = openai(
        &fake,
        json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": long}]}),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(error["error"]["code"], "context_length_exceeded");
    let message = error["error"]["message"].as_str().expect("message");
    assert!(
        message.starts_with("This model's maximum context length is 100 tokens."),
        "{message}"
    );

    let (status, error) = anthropic(
        &fake,
        json!({"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": [{"role": "user", "content": long}]}),
    )
    .await;
    assert_eq!(status, 400);
    let message = error["error"]["message"].as_str().expect("message");
    assert!(message.starts_with("prompt is too long: "), "{message}");
    assert!(message.ends_with(" > 100 maximum"), "{message}");
}

#[tokio::test]
async fn openai_streams_end_with_usage_and_done() {
    let fake = FakeUpstream::start(FakeConfig::default()).await;
    let text = reqwest::Client::new()
        .post(format!("{}/chat/completions", fake.openai_base_url()))
        .bearer_auth("sk-test")
        .json(&json!({"model": "gpt-4o-mini", "stream": true,
            "stream_options": {"include_usage": true},
            "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .expect("answers")
        .text()
        .await
        .expect("body");

    let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
    assert!(events.iter().all(|e| e.starts_with("data: ")), "{text}");
    assert_eq!(events.last(), Some(&"data: [DONE]"));
    let usage: Value =
        serde_json::from_str(&events[events.len() - 2]["data: ".len()..]).expect("json chunk");
    assert!(usage["usage"]["prompt_tokens"].as_u64().expect("usage") > 0);
    assert_eq!(usage["choices"], json!([]));
}

#[tokio::test]
async fn a_missing_key_is_the_real_401() {
    let fake = FakeUpstream::start(FakeConfig::default()).await;
    let response = reqwest::Client::new()
        .post(format!("{}/chat/completions", fake.openai_base_url()))
        .json(&json!({"model": "gpt-4o-mini", "messages": []}))
        .send()
        .await
        .expect("answers");

    assert_eq!(response.status(), 401);
    let error: Value = response.json().await.expect("json");
    assert!(error["error"]["message"]
        .as_str()
        .expect("message")
        .starts_with("You didn't provide an API key."));
}

/// `/_fake/stats` lists the facts a summary carried that never reached a
/// later request, for client tests that drive the fake from outside.
#[tokio::test]
async fn stats_name_the_facts_a_summary_lost() {
    let config = FakeConfig {
        summary_marker: Some("[marker]".into()),
        ..FakeConfig::default()
    };
    let fake = FakeUpstream::start(config).await;
    let stats = || async {
        let url = format!("{}/_fake/stats", fake.base_url());
        let stats: Value = reqwest::get(url)
            .await
            .expect("answers")
            .json()
            .await
            .expect("json");
        stats
    };
    let ask = json!({"model": "gpt-4o-mini", "messages": [
        {"role": "system", "content": "[marker] REQUEST: summarize."},
        {"role": "user", "content": "The deploy key is FACT-given01."}]});
    let (status, summary) = openai(&fake, ask).await;
    assert_eq!(status, 200, "{summary}");
    let lost = stats().await["facts_lost"].clone();
    assert_eq!(
        lost.as_array().map(Vec::len),
        Some(1),
        "no request carried it yet: {lost}"
    );
    let text = summary["choices"][0]["message"]["content"]
        .as_str()
        .expect("text");
    let carried = json!({"model": "gpt-4o-mini", "messages": [
        {"role": "user", "content": format!("[marker] {text}")},
        {"role": "user", "content": "Go on."}]});
    let (status, answer) = openai(&fake, carried).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(stats().await["facts_lost"], json!([]));
}
