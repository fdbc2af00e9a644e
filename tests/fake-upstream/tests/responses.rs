//! The fake's Responses API refuses what the real one refuses, with its
//! messages, and frames its streams as the real one does.

use fake_upstream::{FakeConfig, FakeUpstream};
use serde_json::{json, Value};

async fn post(fake: &FakeUpstream, body: Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}/responses", fake.openai_base_url()))
        .bearer_auth("sk-test")
        .json(&body)
        .send()
        .await
        .expect("answers")
}

async fn json_reply(fake: &FakeUpstream, body: Value) -> (u16, Value) {
    let response = post(fake, body).await;
    let status = response.status().as_u16();
    (status, response.json().await.expect("json"))
}

/// `(event name, data)` of each SSE event.
fn events(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|event| {
            let (name, data) = event.split_once('\n').expect("event and data lines");
            let name = name
                .strip_prefix("event: ")
                .expect("event line")
                .to_string();
            let data = data.strip_prefix("data: ").expect("data line");
            (name, serde_json::from_str(data).expect("json data"))
        })
        .collect()
}

#[tokio::test]
async fn an_output_without_its_call_and_a_call_without_its_output_are_refused() {
    let fake = FakeUpstream::start(FakeConfig::default()).await;
    let orphan = json!({"model": "gpt-5", "input": [
        {"role": "user", "content": "hi"},
        {"type": "function_call_output", "call_id": "call_1", "output": "x"}]});
    let (status, error) = json_reply(&fake, orphan).await;
    assert_eq!(status, 400);
    assert_eq!(
        error,
        json!({"error": {"message": "No tool call found for function call output with call_id call_1.",
            "type": "invalid_request_error", "param": "input", "code": null}})
    );

    let unanswered = json!({"model": "gpt-5", "input": [
        {"role": "user", "content": "hi"},
        {"type": "function_call", "call_id": "call_2", "name": "f", "arguments": "{}"}]});
    let (status, error) = json_reply(&fake, unanswered).await;
    assert_eq!(status, 400);
    assert_eq!(
        error["error"]["message"],
        "No tool output found for function call call_2."
    );
}

#[tokio::test]
async fn an_oversized_input_gets_the_real_overflow_streamed_or_not() {
    let mut config = FakeConfig::default();
    config.context_windows.insert("gpt-5".into(), 100);
    let fake = FakeUpstream::start(config).await;
    let long = "word ".repeat(400);

    let (status, error) = json_reply(&fake, json!({"model": "gpt-5", "input": long})).await;
    assert_eq!(status, 400);
    assert_eq!(error["error"]["code"], "context_length_exceeded");
    assert_eq!(error["error"]["param"], "input");

    let response = post(
        &fake,
        json!({"model": "gpt-5", "input": long, "stream": true}),
    )
    .await;
    assert_eq!(response.status(), 200);
    let events = events(&response.text().await.expect("body"));
    let names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        [
            "response.created",
            "response.in_progress",
            "response.failed"
        ]
    );
    assert_eq!(
        events[2].1["response"]["error"]["code"],
        "context_length_exceeded"
    );
}

#[tokio::test]
async fn a_stream_adds_fills_and_completes_each_item_with_usage() {
    let fake = FakeUpstream::start(FakeConfig::default()).await;
    let body = json!({"model": "gpt-5", "stream": true, "reasoning": {"effort": "low"},
        "tools": [{"type": "function", "name": "read_file", "parameters": {}}],
        "input": [{"role": "user", "content": "look [tools]"}]});
    let text = post(&fake, body).await.text().await.expect("body");
    let events = events(&text);
    let names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.output_item.done",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed"
        ]
    );
    for (index, (name, data)) in events.iter().enumerate() {
        assert_eq!(data["type"], name.as_str());
        assert_eq!(data["sequence_number"], index);
    }
    let completed = &events.last().expect("events").1["response"];
    assert!(completed["usage"]["input_tokens"].as_u64().expect("usage") > 0);
    assert_eq!(completed["output"][0]["type"], "reasoning");
    assert_eq!(completed["output"][1]["type"], "function_call");

    // The reply, resent as history with its call answered, is accepted;
    // the call without its reasoning item is not.
    let mut input = vec![json!({"role": "user", "content": "look [tools]"})];
    input.extend(
        completed["output"]
            .as_array()
            .expect("output")
            .iter()
            .cloned(),
    );
    input.push(json!({"type": "function_call_output", "call_id": completed["output"][1]["call_id"], "output": "ok"}));
    let (status, reply) =
        json_reply(&fake, json!({"model": "gpt-5", "input": input.clone()})).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["output"][0]["content"][0]["type"], "output_text");
    input.remove(1);
    let (status, error) = json_reply(&fake, json!({"model": "gpt-5", "input": input})).await;
    assert_eq!(status, 400);
    let message = error["error"]["message"].as_str().expect("message");
    assert!(
        message.contains("without its required 'reasoning' item"),
        "{message}"
    );
}
