//! Anthropic's own context management (issue 40): served for a
//! third-party Messages service, forwarded untouched to Anthropic.

use crate::helpers::app::{spawn_app_with, Options, TestApp, ANTHROPIC_KEY};
use condenser::protocol::SUMMARY_MARKER;
use fake_upstream::MessagesMode;
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

const MODEL: &str = "claude-sonnet-4-5";
const CLEARED: &str = "[tool result cleared by context management]";

fn third_party() -> Options {
    let mut options = Options::default();
    options.fake.messages_mode = MessagesMode::ThirdParty;
    options
}

async fn post(app: &TestApp, beta: &str, body: &Value) -> reqwest::Response {
    app.client
        .post(app.url("/v1/messages"))
        .header("x-api-key", ANTHROPIC_KEY)
        .header("anthropic-version", "2023-06-01")
        .header("anthropic-beta", beta)
        .json(body)
        .send()
        .await
        .expect("proxy answers")
}

fn tool_loop(rounds: usize) -> Vec<Value> {
    let mut messages = vec![json!({"role": "user", "content": "read the files"})];
    for round in 0..rounds {
        let id = format!("toolu_{round:02}");
        messages.push(json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": id, "name": "read", "input": {"path": format!("f{round}")}}]}));
        messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id, "content": format!("{round}").repeat(3000)}]}));
    }
    messages
}

#[tokio::test]
async fn a_claude_code_request_is_accepted_by_a_third_party_service() {
    let app = spawn_app_with(third_party()).await;
    let body = json!({
        "model": MODEL, "max_tokens": 4096, "stream": true,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "messages": [{"role": "user", "content": "hello"}],
    });
    let beta = "interleaved-thinking-2025-05-14,context-management-2025-06-27";
    let response = post(&app, beta, &body).await;
    assert_eq!(response.status(), 200);
    let events = response.text().await.expect("stream");
    let delta = events
        .lines()
        .find(|line| line.contains("\"message_delta\""))
        .expect("a message_delta event");
    let delta: Value =
        serde_json::from_str(delta.trim_start_matches("data:").trim()).expect("json");
    assert_eq!(delta["context_management"], json!({"applied_edits": []}));
    let sent = app.upstream.last_accepted().expect("accepted");
    assert_eq!(
        sent.header("anthropic-beta"),
        Some("interleaved-thinking-2025-05-14")
    );
    let sent = sent.json.expect("json");
    assert!(sent.get("context_management").is_none());
    assert_eq!(sent["thinking"], body["thinking"]);
}

#[tokio::test]
async fn cleared_tool_uses_show_in_the_answer_as_documented() {
    let app = spawn_app_with(third_party()).await;
    let edit = json!({"type": "clear_tool_uses_20250919",
        "trigger": {"type": "input_tokens", "value": 2000},
        "keep": {"type": "tool_uses", "value": 2}});
    let body = json!({"model": MODEL, "max_tokens": 512, "messages": tool_loop(5),
        "context_management": {"edits": [edit]}});
    let response = post(&app, "context-management-2025-06-27", &body).await;
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.expect("json");
    let applied = &answer["context_management"]["applied_edits"];
    assert_eq!(applied[0]["type"], "clear_tool_uses_20250919");
    assert_eq!(applied[0]["cleared_tool_uses"], 3);
    assert!(applied[0]["cleared_input_tokens"].as_u64().expect("tokens") > 0);
    let sent = app.upstream.last_accepted().expect("accepted");
    assert!(sent.header("anthropic-beta").is_none());
    let sent = sent.json.expect("json");
    let results: Vec<&Value> = (1..=5)
        .map(|round| &sent["messages"][2 * round]["content"][0]["content"])
        .collect();
    assert_eq!(results[..3], [CLEARED, CLEARED, CLEARED]);
    assert_eq!(*results[3], json!("3".repeat(3000)));
    assert_eq!(sent["messages"][1], tool_loop(5)[1], "calls stay");
}

#[tokio::test]
async fn what_precedes_a_compaction_block_is_replaced_by_its_summary() {
    let app = spawn_app_with(third_party()).await;
    let body = json!({"model": MODEL, "max_tokens": 512, "messages": [
        {"role": "user", "content": "an old question"},
        {"role": "assistant", "content": "an old answer"},
        {"role": "user", "content": "go on"},
        {"role": "assistant", "content": [{"type": "compaction", "content": "We talked about X."}]},
        {"role": "user", "content": "and now?"}]});
    let response = post(&app, "compact-2026-01-12", &body).await;
    assert_eq!(response.status(), 200);
    let sent = app
        .upstream
        .last_accepted()
        .expect("accepted")
        .json
        .expect("json");
    let messages = sent["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 2);
    let summary = messages[0]["content"][0]["text"].as_str().expect("text");
    assert!(summary.starts_with(SUMMARY_MARKER), "{summary}");
    assert!(summary.contains("We talked about X."));
    assert_eq!(messages[1], json!({"role": "user", "content": "and now?"}));
}

#[tokio::test]
async fn forwarded_to_a_third_party_service_its_refusal_comes_back() {
    let mut options = third_party();
    options.settings = json!({"upstreams": {"anthropic": {"native_compaction": "forward"}}});
    let app = spawn_app_with(options).await;
    let body = json!({"model": MODEL, "max_tokens": 64,
        "messages": [{"role": "user", "content": "hi"}],
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}});
    let response = post(&app, "interleaved-thinking-2025-05-14", &body).await;
    assert_eq!(response.status(), 400);
    let error = response.text().await.expect("body");
    assert!(error.contains("context_management: Extra inputs are not permitted"));
}

#[tokio::test]
async fn forwarded_to_anthropic_requests_and_answers_are_byte_identical() {
    let mut options = Options::default();
    options.fake.messages_mode = MessagesMode::Anthropic;
    options.settings = json!({"upstreams": {"anthropic": {"native_compaction": "forward"}}});
    let app = spawn_app_with(options).await;
    let raw = format!(
        "{{\"model\":\"{MODEL}\", \"max_tokens\":64,\"messages\":[{{\"role\":\"user\",\"content\":\"hi\"}}],\n \"context_management\":{{\"edits\":[{{\"type\":\"clear_thinking_20251015\",\"keep\":\"all\"}}]}}}}"
    );
    let beta = "context-management-2025-06-27,compact-2026-01-12";
    let send = |url: String| {
        app.client
            .post(url)
            .header("x-api-key", ANTHROPIC_KEY)
            .header("anthropic-version", "2023-06-01")
            .header("anthropic-beta", beta)
            .header("content-type", "application/json")
            .body(raw.clone())
            .send()
    };
    let through = send(app.url("/v1/messages")).await.expect("proxy answers");
    assert_eq!(through.status(), 200);
    let through = through.bytes().await.expect("body");
    let sent = app.upstream.last_accepted().expect("accepted");
    assert_eq!(sent.body, raw.as_bytes());
    assert_eq!(sent.header("anthropic-beta"), Some(beta));
    let direct = send(format!("{}/v1/messages", app.upstream.base_url()))
        .await
        .expect("fake answers");
    assert_eq!(through, direct.bytes().await.expect("body"));
    let answer: Value = serde_json::from_slice(&through).expect("json");
    assert_eq!(answer["context_management"], json!({"applied_edits": []}));
}

#[tokio::test]
async fn a_summary_asked_on_demand_is_written_by_condenser() {
    let app = spawn_app_with(third_party()).await;
    let mut messages = vec![
        json!({"role": "user", "content": "Name the entities of a recipe app."}),
        json!({"role": "assistant", "content": "Recipe, Ingredient, Step."}),
        json!({"role": "user", "content": "Now the fields of Recipe."}),
    ];
    let body = json!({"model": MODEL, "max_tokens": 2048, "messages": messages,
        "compaction": {"type": "summarize"}});
    let response = post(&app, "compact-2026-09-04", &body).await;
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.expect("json");
    assert_eq!(answer["stop_reason"], "compaction");
    let block = &answer["content"][0];
    assert_eq!(block["type"], "compaction");
    assert!(!block["content"].as_str().expect("summary").is_empty());
    assert_eq!(answer["usage"]["iterations"][0]["type"], "compaction");
    assert!(
        app.upstream.chat_requests().is_empty(),
        "no reply was asked"
    );
    let summary = app.upstream.summary_requests();
    assert_eq!(summary.len(), 1);
    assert!(summary[0].header("anthropic-beta").is_none());
    // Streamed, the block arrives whole in its content_block_start.
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let events = post(&app, "compact-2026-09-04", &streamed).await;
    assert_eq!(events.status(), 200);
    let events = events.text().await.expect("stream");
    let start = events
        .lines()
        .find(|line| line.contains("\"content_block_start\""))
        .expect("a content_block_start");
    assert!(start.contains("\"type\":\"compaction\""), "{start}");
    assert!(events.contains("\"stop_reason\":\"compaction\""));
    // The block sent back first stands for what it summarized.
    messages = vec![
        json!({"role": "assistant", "content": [block]}),
        json!({"role": "user", "content": "And Ingredient?"}),
    ];
    let body = json!({"model": MODEL, "max_tokens": 256, "messages": messages});
    let response = post(&app, "compact-2026-09-04", &body).await;
    assert_eq!(response.status(), 200);
    let sent = app
        .upstream
        .last_accepted()
        .expect("accepted")
        .json
        .expect("json");
    let text = sent["messages"][0]["content"][0]["text"]
        .as_str()
        .expect("text");
    assert!(text.starts_with(SUMMARY_MARKER));
    assert_eq!(sent["messages"][1], messages[1]);
}

/// The official SDK with `betas=["compact-2026-01-12", …]` and
/// `context_management` edits, through a third-party service.
#[tokio::test]
async fn the_anthropic_sdk_uses_context_management_through_a_third_party_service() {
    let app = spawn_app_with(third_party()).await;
    let python = std::env::var("CONDENSER_TEST_PYTHON")
        .expect("CONDENSER_TEST_PYTHON is not set: run the suite with scripts/test");
    let script = format!(
        "{}/tests/sdk/anthropic_native_sdk.py",
        env!("CARGO_MANIFEST_DIR")
    );
    let output = tokio::process::Command::new(python)
        .arg(&script)
        .env("CONDENSER_URL", &app.address)
        .env("API_KEY", ANTHROPIC_KEY)
        .env("MODEL", MODEL)
        .output()
        .await
        .expect("python runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the script failed:\n{stderr}");
    for request in app.upstream.chat_requests() {
        assert_eq!(request.status, 200, "{:?}", request.json);
    }
}

/// `compact_20260112` with `pause_after_compaction`: past its trigger the
/// answer is the compaction block alone, streamed as an empty block and a
/// `compaction_delta`, `stop_reason: "compaction"`, and `usage.iterations`
/// holding what the summary call used; below it, an ordinary reply.
#[tokio::test]
async fn a_compaction_edit_that_pauses_answers_with_its_block_past_the_trigger() {
    let app = spawn_app_with(third_party()).await;
    let edits = json!({"edits": [{"type": "compact_20260112",
        "trigger": {"type": "input_tokens", "value": 1000}, "pause_after_compaction": true}]});
    let body = json!({"model": MODEL, "max_tokens": 1024, "stream": true,
        "messages": tool_loop(5), "context_management": edits});
    let response = post(&app, "compact-2026-01-12", &body).await;
    assert_eq!(response.status(), 200);
    let stream = response.text().await.expect("stream");
    let events: Vec<Value> = stream
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter_map(|data| serde_json::from_str(data).ok())
        .collect();
    let start = events
        .iter()
        .find(|e| e["type"] == "content_block_start")
        .expect("a block");
    assert_eq!(
        start["content_block"],
        json!({"type": "compaction", "content": ""})
    );
    let delta = events
        .iter()
        .find(|e| e["type"] == "content_block_delta")
        .expect("its content");
    assert_eq!(delta["delta"]["type"], "compaction_delta");
    assert!(!delta["delta"]["content"].as_str().unwrap_or("").is_empty());
    let end = events
        .iter()
        .find(|e| e["type"] == "message_delta")
        .expect("the end");
    assert_eq!(end["delta"]["stop_reason"], "compaction");
    // The summary call's own usage, as the upstream reported it.
    let summaries = app.upstream.summary_requests();
    assert_eq!(summaries.len(), 1);
    let iteration = &end["usage"]["iterations"][0];
    assert_eq!(iteration["type"], "compaction");
    assert_eq!(
        iteration["input_tokens"].as_u64(),
        summaries[0].input_tokens
    );
    assert!(app.upstream.chat_requests().is_empty(), "no reply asked");
    // Below the trigger: an ordinary reply, the edit served by removal.
    let small = json!({"model": MODEL, "max_tokens": 256,
        "messages": [{"role": "user", "content": "hi"}], "context_management": edits});
    let response = post(&app, "compact-2026-01-12", &small).await;
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.expect("json");
    assert_eq!(answer["stop_reason"], "end_turn", "{answer}");
    assert_eq!(app.upstream.summary_requests().len(), 1);
}

/// `compact_20260112` that does not pause, past its trigger: Condenser
/// summarizes the conversation, the reply is made from the summary, and
/// the answer is led by the compaction block with both steps' usage.
#[tokio::test]
async fn a_compaction_edit_past_its_trigger_leads_the_reply_with_its_block() {
    let app = spawn_app_with(third_party()).await;
    let edits = json!({"edits": [{"type": "compact_20260112",
        "trigger": {"type": "input_tokens", "value": 1000}}]});
    let mut messages = tool_loop(5);
    messages.push(json!({"role": "assistant", "content": "Read them all."}));
    messages.push(json!({"role": "user", "content": "Which file was longest?"}));
    let body = json!({"model": MODEL, "max_tokens": 1024, "messages": messages,
        "context_management": edits});
    let response = post(&app, "compact-2026-01-12", &body).await;
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.expect("json");
    let content = answer["content"].as_array().expect("content");
    assert_eq!(content[0]["type"], "compaction", "{answer}");
    let summary = content[0]["content"].as_str().expect("summary").to_string();
    assert!(!summary.is_empty());
    assert_eq!(content[1]["type"], "text");
    assert_eq!(answer["stop_reason"], "end_turn");
    let summaries = app.upstream.summary_requests();
    assert_eq!(summaries.len(), 1);
    let iterations = &answer["usage"]["iterations"];
    assert_eq!(iterations[0]["type"], "compaction");
    assert_eq!(
        iterations[0]["input_tokens"].as_u64(),
        summaries[0].input_tokens
    );
    assert_eq!(iterations[1]["type"], "message");
    // The reply was asked of the summary alone.
    let sent = app.upstream.last_accepted().expect("accepted").json;
    let sent = sent.expect("json");
    assert!(sent.get("context_management").is_none());
    let sent_messages = sent["messages"].as_array().expect("messages");
    assert_eq!(sent_messages.len(), 1, "{sent}");
    let text = sent_messages[0]["content"][0]["text"]
        .as_str()
        .unwrap_or("");
    assert!(text.starts_with(SUMMARY_MARKER), "{text}");
    // Sent back, the block stands for everything before it.
    messages.push(json!({"role": "assistant", "content": content}));
    messages.push(json!({"role": "user", "content": "And the shortest?"}));
    let next = json!({"model": MODEL, "max_tokens": 256, "messages": messages});
    let response = post(&app, "compact-2026-01-12", &next).await;
    assert_eq!(response.status(), 200);
    let sent = app.upstream.last_accepted().expect("accepted").json;
    let sent = sent.expect("json");
    let sent_messages = sent["messages"].as_array().expect("messages");
    assert_eq!(sent_messages.len(), 3, "{sent}");
    let text = sent_messages[0]["content"][0]["text"]
        .as_str()
        .unwrap_or("");
    assert!(text.contains(&summary), "{text}");
    assert_eq!(sent_messages[1]["content"], json!([content[1]]));
}

#[tokio::test]
async fn streamed_the_compaction_block_comes_before_the_reply() {
    let app = spawn_app_with(third_party()).await;
    let edits = json!({"edits": [{"type": "compact_20260112",
        "trigger": {"type": "input_tokens", "value": 1000}}]});
    let body = json!({"model": MODEL, "max_tokens": 1024, "stream": true,
        "messages": tool_loop(5), "context_management": edits});
    let response = post(&app, "compact-2026-01-12", &body).await;
    assert_eq!(response.status(), 200);
    let stream = response.text().await.expect("stream");
    let events: Vec<Value> = stream
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter_map(|data| serde_json::from_str(data).ok())
        .collect();
    let starts: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "content_block_start")
        .collect();
    assert_eq!(starts[0]["index"], 0);
    assert_eq!(starts[0]["content_block"]["type"], "compaction");
    assert!(starts.len() >= 2, "{stream}");
    assert!(starts[1..].iter().all(|s| s["index"].as_u64() >= Some(1)));
    let delta = events
        .iter()
        .find(|e| e["delta"]["type"] == "compaction_delta")
        .expect("the summary");
    assert_eq!(delta["index"], 0);
    let end = events
        .iter()
        .find(|e| e["type"] == "message_delta")
        .expect("the end");
    assert_eq!(end["usage"]["iterations"][0]["type"], "compaction");
    assert_eq!(end["usage"]["iterations"][1]["type"], "message");
    assert_ne!(end["delta"]["stop_reason"], "compaction");
}
