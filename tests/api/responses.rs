//! The OpenAI Responses API through the real proxy against the strict fake,
//! on both storage backends: compaction keeps call/output pairs and
//! reasoning items whole and byte-identical, a streamed overflow never
//! reaches the client, and stateful requests pass through untouched.

use crate::helpers::agent::{filler, Agent, Dialect};
use crate::helpers::app::{spawn_app_with, Options, TestApp, OPENAI_KEY};
use crate::helpers::db::{both_backends, TestBackend};
use crate::helpers::responses::{assistant_item, developer_item};
use crate::helpers::wait::{wait_for_some, PATIENCE};
use condenser::protocol::SUMMARY_MARKER;
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

const MODEL: &str = "gpt-5-codex";

fn small_window(backend: TestBackend) -> Options {
    Options::on(backend)
        .window(MODEL, 4_000)
        .settings(json!({"compaction": {"summary_max_tokens": 300}}))
}

/// Every request the fake refused was refused for its size (it counts a
/// request's tokens only once its shape passed): none for pairing, shape or
/// summary placement.
fn assert_only_overflows_refused(app: &TestApp) {
    for request in app.upstream.requests() {
        if request.status != 200 {
            let body = String::from_utf8_lossy(&request.body);
            assert!(
                request.input_tokens.is_some(),
                "refused for its shape: {body}"
            );
        }
    }
}

/// The last request the upstream answered, raw and parsed.
fn last_accepted(app: &TestApp) -> (Vec<u8>, Value) {
    let accepted = app.upstream.last_accepted().expect("an accepted request");
    (accepted.body.to_vec(), accepted.json.expect("json"))
}

both_backends!(
    a_long_responses_agent_never_sees_an_overflow,
    reasoning_items_in_the_kept_tail_reach_the_upstream_byte_identical,
    a_streamed_overflow_is_compacted_before_the_client_sees_it,
    a_function_call_output_larger_than_the_window_is_trimmed,
);

async fn a_long_responses_agent_never_sees_an_overflow(backend: TestBackend) {
    // A reasoning model's output limit covers its reasoning too, so the
    // summary call asks for more than the summary: a model that writes
    // that much is cut back to the summary's budget.
    let mut options = small_window(backend);
    options.fake.summary_reply_tokens = 1_000;
    let app = spawn_app_with(options).await;
    let mut agent = Agent::new(Dialect::Responses, MODEL, 1_500, 3);
    let compactions = agent.run_turns(&app, 30).await;
    assert!(compactions >= 2, "only {compactions} compactions");
    assert!(app.upstream.summary_requests().len() >= 2);
    assert_only_overflows_refused(&app);
    // Flat and bounded: each summary within its 300 tokens (the fake's 4
    // bytes a token), never a summary in a summary.
    let longest = app
        .db
        .count("select max(length(summary)) from compactions")
        .await;
    assert!(
        (1..=1_200).contains(&longest),
        "a summary of {longest} bytes"
    );
    for request in app.upstream.chat_requests() {
        let body = String::from_utf8_lossy(&request.body);
        assert!(
            body.matches(SUMMARY_MARKER).count() <= 1,
            "a nested summary"
        );
    }
    // Units are stored under the role of their last item, for people.
    for role in ["user", "assistant", "tool"] {
        let sql = format!("select count(*) from messages where role = '{role}'");
        assert!(app.db.count(&sql).await > 0, "no {role} rows stored");
    }
}

async fn reasoning_items_in_the_kept_tail_reach_the_upstream_byte_identical(backend: TestBackend) {
    let app = spawn_app_with(small_window(backend)).await;
    let mut agent = Agent::new(Dialect::Responses, MODEL, 1_500, 3);
    let mut turn = 0;
    while app.upstream.summary_requests().is_empty() {
        turn += 1;
        assert!(turn <= 20, "no compaction after 20 turns");
        for step in agent.turn(&app, turn).await {
            assert_eq!(step.status, 200, "turn {turn}: {}", step.body);
        }
    }
    let (bytes, body) = last_accepted(&app);
    let sent = String::from_utf8(bytes).expect("utf-8");
    let input = body["input"].as_array().expect("input");
    assert_eq!(input[0], developer_item(), "the developer item stays first");
    assert!(input[1]["content"][0]["text"]
        .as_str()
        .expect("summary text")
        .starts_with(SUMMARY_MARKER));
    let reasoning: Vec<(usize, &Value)> = input
        .iter()
        .enumerate()
        .filter(|(_, item)| item["type"] == "reasoning")
        .collect();
    assert!(!reasoning.is_empty(), "the kept tail holds reasoning items");
    for (index, item) in reasoning {
        // As the client serialized it, followed by the item it led into.
        let pair = format!("{},{}", item, input[index + 1]);
        let original = agent
            .messages
            .iter()
            .position(|i| i == item)
            .expect("a reasoning item the client sent");
        assert_eq!(agent.messages[original + 1], input[index + 1]);
        assert!(sent.contains(&pair), "reasoning pair altered: {pair}");
    }
    assert_only_overflows_refused(&app);
}

async fn a_streamed_overflow_is_compacted_before_the_client_sees_it(backend: TestBackend) {
    let app = spawn_app_with(small_window(backend)).await;
    let mut agent = Agent::new(Dialect::Responses, MODEL, 1_500, 3);
    agent.extra = json!({"stream": true});
    let mut compactions = 0;
    for turn in 1..=12 {
        for step in agent.turn(&app, turn).await {
            assert_eq!(step.status, 200);
            assert_eq!(
                step.body["status"], "completed",
                "turn {turn}: {}",
                step.body
            );
            compactions += step.compactions;
        }
    }
    assert!(compactions >= 2, "only {compactions} compactions");
    let failed_streams = app
        .upstream
        .chat_requests()
        .iter()
        .filter(|r| r.input_tokens.is_some_and(|tokens| tokens > 4_000))
        .count();
    assert!(
        failed_streams > 0,
        "the upstream failed some streams with an overflow"
    );
    assert_only_overflows_refused(&app);
}

async fn a_function_call_output_larger_than_the_window_is_trimmed(backend: TestBackend) {
    let app = spawn_app_with(small_window(backend)).await;
    let mut agent = Agent::new(Dialect::Responses, MODEL, 100, 1);
    agent.say("Read the log. [tools]");
    assert_eq!(agent.send(&app).await.status, 200);
    agent.answer_tools(&filler(60_000, 7));
    let call_id = agent.messages.last().expect("the output")["call_id"].clone();
    app.upstream.clear_requests();

    let step = agent.send(&app).await;

    assert_eq!(step.status, 200, "{}", step.body);
    assert!(app.upstream.chat_requests().len() <= 3, "bounded attempts");
    let (_, body) = last_accepted(&app);
    let input = body["input"].as_array().expect("input");
    let output = input
        .iter()
        .find(|item| item["type"] == "function_call_output")
        .expect("the output is kept, trimmed");
    let text = output["output"].as_str().expect("text");
    assert!(
        text.contains("condenser trimmed"),
        "an explicit elision marker"
    );
    assert!(text.len() < 30_000, "{} bytes kept", text.len());
    assert_eq!(output["call_id"], call_id);
    assert_only_overflows_refused(&app);
}

#[tokio::test]
async fn a_previous_response_id_request_passes_through_unchanged() {
    let app = spawn_app_with(Options::default()).await;
    // Answers a call the stored response made: only the provider knows it.
    let body = br#"{"model":"gpt-5","previous_response_id":"resp_abc123","input":[{"type":"function_call_output","call_id":"call_9","output":"42"}],  "store":true}"#;
    let response = app
        .client
        .post(app.url("/v1/responses"))
        .bearer_auth(OPENAI_KEY)
        .header("content-type", "application/json")
        .body(&body[..])
        .send()
        .await
        .expect("proxy answers");
    assert_eq!(response.status(), 200);
    let forwarded = app.upstream.chat_requests();
    assert_eq!(forwarded.len(), 1);
    assert_eq!(&forwarded[0].body[..], &body[..]);
    let stored = app.db.count("select count(*) from messages").await;
    assert_eq!(
        stored, 0,
        "nothing of a provider-held conversation is stored"
    );
}

#[tokio::test]
async fn a_codex_compaction_request_keeps_its_own_prompt() {
    let app = spawn_app_with(small_window(TestBackend::Sqlite)).await;
    let mut agent = Agent::new(Dialect::Responses, MODEL, 1_500, 0);
    for i in 0..12 {
        agent.say(&format!("note {i}: {}", "lorem ipsum dolor ".repeat(60)));
        agent.messages.push(assistant_item(&format!("noted {i}")));
    }
    let prompt = "You are performing a CONTEXT CHECKPOINT COMPACTION. Create a handoff summary for another LLM that will resume the task.";
    agent.say(prompt);
    let response = app
        .client
        .post(app.url("/v1/responses"))
        .bearer_auth(OPENAI_KEY)
        .header(
            "x-codex-turn-metadata",
            r#"{"session_id":"s1","turn_id":"t1","request_kind":"compaction"}"#,
        )
        .json(&agent.request())
        .send()
        .await
        .expect("proxy answers");
    assert_eq!(response.status(), 200);
    let (_, body) = last_accepted(&app);
    let input = body["input"].as_array().expect("input");
    assert_eq!(
        input.last(),
        agent.messages.last(),
        "the compaction prompt is sent whole"
    );
    assert!(!app.upstream.summary_requests().is_empty());
}

/// `response.completed` carries the usage that calibrates the estimate.
#[tokio::test]
async fn usage_in_response_completed_calibrates_the_estimate() {
    let app = spawn_app_with(Options::default()).await;
    let mut agent = Agent::new(Dialect::Responses, MODEL, 0, 0);
    agent.extra = json!({"stream": true});
    agent.say(&format!("Summarize this: {}", "lorem ipsum ".repeat(400)));
    assert_eq!(agent.send(&app).await.status, 200);
    let sent = app.upstream.last_accepted().expect("a request");
    let rate = sent.input_tokens.expect("counted") as f64 / sent.body.len() as f64;
    let sql = "select coalesce(max(tokens_per_mbyte), 0) from model_calibrations";
    let stored = wait_for_some(PATIENCE, "a stored calibration", || async {
        Some(app.db.count(sql).await).filter(|stored| *stored > 0)
    })
    .await;
    let stored = stored as f64 / 1e6;
    assert!(
        (stored - rate).abs() / rate < 0.15,
        "stored {stored}, the upstream's rate {rate}"
    );
}
