//! The summary call is the one request Condenser writes itself. Built from
//! the client's own accepted request, it must be one the real model
//! accepts: the strict fake refuses what each family refuses
//! (`fake-upstream/src/models.rs`, `clouds.rs`), so a summary call the
//! provider would refuse fails here.

use crate::helpers::agent::{Agent, Dialect};
use crate::helpers::app::{spawn_app_with, Options, TestApp, OPENAI_KEY};
use crate::helpers::db::{both_backends, TestBackend};
use fake_upstream::{RecordedRequest, Scripted};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

fn options(backend: TestBackend, model: &str) -> Options {
    Options::on(backend)
        .window(model, 10_000)
        .settings(json!({"compaction": {"summary_max_tokens": 300}}))
}

/// A reasoning model's agent: `max_completion_tokens`, never `max_tokens`.
fn reasoning_agent(model: &str, extra: Value) -> Agent {
    let mut agent = Agent::new(Dialect::OpenAi, model, 1_500, 3);
    agent.extra = json!({"max_tokens": null, "max_completion_tokens": 2048});
    crate::helpers::app::merge(&mut agent.extra, extra);
    agent
}

/// Every summary call was answered, none refused for its shape.
fn summary_calls(app: &TestApp) -> Vec<Value> {
    let calls = app.upstream.summary_requests();
    for call in &calls {
        assert_eq!(
            call.status,
            200,
            "refused: {}",
            String::from_utf8_lossy(&call.body)
        );
    }
    calls.into_iter().filter_map(|call| call.json).collect()
}

both_backends!(
    a_gpt_5_agent_compacts_with_summary_calls_the_model_accepts,
    an_o4_agent_with_reasoning_effort_compacts_with_summary_calls_the_model_accepts,
    a_summary_that_spent_its_budget_reasoning_is_asked_again_with_more_room,
);

async fn a_gpt_5_agent_compacts_with_summary_calls_the_model_accepts(backend: TestBackend) {
    let app = spawn_app_with(options(backend, "gpt-5-mini")).await;
    let mut agent = reasoning_agent("gpt-5-mini", json!({}));
    agent.run_turns(&app, 12).await;
    let calls = summary_calls(&app);
    assert!(calls.len() >= 2, "{} summary calls", calls.len());
    for call in calls {
        assert!(call.get("max_tokens").is_none(), "{call}");
        assert!(call["max_completion_tokens"].as_u64().is_some(), "{call}");
        assert!(call.get("temperature").is_none(), "{call}");
        assert_eq!(call["reasoning_effort"], "minimal", "gpt-5's lowest effort");
    }
}

async fn an_o4_agent_with_reasoning_effort_compacts_with_summary_calls_the_model_accepts(
    backend: TestBackend,
) {
    let app = spawn_app_with(options(backend, "o4-mini")).await;
    let mut agent = reasoning_agent("o4-mini", json!({"reasoning_effort": "medium"}));
    agent.run_turns(&app, 12).await;
    let calls = summary_calls(&app);
    assert!(calls.len() >= 2, "{} summary calls", calls.len());
    for call in calls {
        assert!(call.get("max_tokens").is_none(), "{call}");
        assert_eq!(
            call["reasoning_effort"], "low",
            "the o-series' lowest effort"
        );
        let limit = call["max_completion_tokens"].as_u64().expect("a limit");
        assert!(limit > 1_024, "room for reasoning and the summary: {limit}");
    }
}

/// The fake's reasoning spends 1,500 tokens whatever the effort: more
/// than the first allowance, so each summary first comes back incomplete
/// with no text, and is asked again with more room.
async fn a_summary_that_spent_its_budget_reasoning_is_asked_again_with_more_room(
    backend: TestBackend,
) {
    let mut options = options(backend, "gpt-5-mini");
    options.fake.reasoning_tokens = Some(1_500);
    let app = spawn_app_with(options).await;
    let mut agent = Agent::new(Dialect::Responses, "gpt-5-mini", 1_500, 3);
    agent.run_turns(&app, 12).await;
    let calls = summary_calls(&app);
    let limits: Vec<u64> = calls
        .iter()
        .map(|call| call["max_output_tokens"].as_u64().expect("a limit"))
        .collect();
    let compactions = app.db.count("select count(*) from compactions").await;
    assert!(compactions >= 2, "{compactions} compactions");
    let retried = limits.windows(2).filter(|pair| pair[1] > pair[0]).count();
    assert!(
        retried >= 1,
        "no summary asked again with more room: {limits:?}"
    );
    for call in &calls {
        assert_eq!(call["reasoning"], json!({"effort": "minimal"}));
    }
}

/// Azure's deployment route: `api-version` in the query, the key in
/// `api-key`. Both reach the upstream on the summary call too.
#[tokio::test]
async fn an_azure_deployment_route_compacts_and_its_summary_call_carries_version_and_key() {
    let mut options = Options::default().window("gpt-4o-mini", 4_000);
    options.settings = json!({"compaction": {"summary_max_tokens": 300}});
    let app = spawn_app_with(options).await;
    let app = with_upstream(app, "azure", "").await;
    let mut agent = Agent::new(Dialect::OpenAi, "gpt-4o-mini", 1_500, 3);
    let path = "/azure/openai/deployments/gpt-4o-mini/chat/completions?api-version=2024-10-21";
    for turn in 1..=8 {
        agent.say(&format!(
            "Turn {turn}: {}",
            crate::helpers::agent::filler(2_000, turn)
        ));
        let response = app
            .client
            .post(app.url(path))
            .header("api-key", OPENAI_KEY)
            .json(&agent.request())
            .send()
            .await
            .expect("answers");
        assert_eq!(response.status(), 200, "turn {turn}");
        let body: Value = response.json().await.expect("json");
        agent.messages.push(body["choices"][0]["message"].clone());
    }
    let calls = app.upstream.summary_requests();
    assert!(!calls.is_empty(), "compacted");
    for call in calls {
        assert_eq!(call.status, 200);
        assert_eq!(call.query.as_deref(), Some("api-version=2024-10-21"));
        assert_eq!(call.header("api-key"), Some(OPENAI_KEY));
        assert_eq!(
            call.path,
            "/openai/deployments/gpt-4o-mini/chat/completions"
        );
    }
}

/// Gemini's OpenAI-compatible endpoint answers an overflow in Gemini's own
/// words, in a JSON array: recognized, compacted, answered.
#[tokio::test]
async fn an_overflow_from_geminis_openai_compatible_endpoint_is_compacted() {
    let mut options = Options::default().window("gemini-2.5-flash", 4_000);
    options.settings = json!({"compaction": {"summary_max_tokens": 300}});
    let app = spawn_app_with(options).await;
    let app = with_upstream(app, "gemini-openai", "/v1beta/openai").await;
    let mut agent = Agent::new(Dialect::OpenAi, "gemini-2.5-flash", 1_500, 3);
    for turn in 1..=8 {
        agent.say(&format!(
            "Turn {turn}: {}",
            crate::helpers::agent::filler(2_000, turn)
        ));
        let response = app
            .client
            .post(app.url("/gemini-openai/chat/completions"))
            .bearer_auth(OPENAI_KEY)
            .json(&agent.request())
            .send()
            .await
            .expect("answers");
        assert_eq!(response.status(), 200, "turn {turn}");
        let body: Value = response.json().await.expect("json");
        agent.messages.push(body["choices"][0]["message"].clone());
    }
    let overflows = app
        .upstream
        .chat_requests()
        .iter()
        .filter(|r| r.status == 400)
        .count();
    assert!(overflows >= 1, "the window was outgrown");
    assert!(!app.upstream.summary_requests().is_empty(), "compacted");
}

/// A server that refuses the output field the summary call used: asked
/// once more with the other, which is remembered for the next compaction.
#[tokio::test]
async fn a_refused_output_field_is_swapped_once_and_remembered() {
    let options = options(TestBackend::Sqlite, "gpt-4o-mini");
    let app = spawn_app_with(options).await;
    let refusal = json!({"error": {"message": "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.", "type": "invalid_request_error", "param": "max_tokens", "code": "unsupported_parameter"}});
    app.upstream.push_script(Scripted::Respond {
        kind: fake_upstream::RequestKind::Summary,
        status: 400,
        headers: vec![],
        body: refusal.to_string(),
    });
    let mut agent = Agent::new(Dialect::OpenAi, "gpt-4o-mini", 1_500, 3);
    agent.run_until_summaries(&app, 3, 20).await;
    let fields: Vec<&str> = app
        .upstream
        .summary_requests()
        .iter()
        .map(output_field)
        .collect();
    assert_eq!(
        fields[..3],
        [
            "max_tokens",
            "max_completion_tokens",
            "max_completion_tokens"
        ]
    );
}

fn output_field(call: &RecordedRequest) -> &'static str {
    let json = call.json.as_ref().expect("json");
    if json.get("max_completion_tokens").is_some() {
        "max_completion_tokens"
    } else {
        "max_tokens"
    }
}

/// `app` restarted with one more upstream under `/{name}`: the fake at
/// `path`, speaking OpenAI's protocol.
async fn with_upstream(mut app: TestApp, name: &str, path: &str) -> TestApp {
    let base_url = format!("{}{path}", app.upstream.base_url());
    let upstream = json!([{"name": name, "base_url": base_url, "protocol": "openai", "path_prefix": format!("/{name}")}]);
    app.reconfigure(json!({"upstreams": upstream})).await;
    app
}

/// Summaries in prose that the fake writes until their output limit stops
/// them: a short first sentence, then none (`FakeConfig::summary_prose`,
/// issue 52's summary from Kilo Code's summarizer).
fn prose(model: &str) -> Options {
    let mut options = options(TestBackend::Sqlite, model);
    options.fake.summary_prose = true;
    options
}

/// A summary call's output limit, in whichever field its protocol takes.
fn output_limit(call: &Value) -> Option<u64> {
    [
        "/max_completion_tokens",
        "/max_tokens",
        "/max_output_tokens",
        "/generationConfig/maxOutputTokens",
        "/options/num_predict",
    ]
    .iter()
    .find_map(|field| call.pointer(field)?.as_u64())
}

async fn stored_summaries(app: &TestApp) -> Vec<String> {
    let pool = app.db.pool().await;
    let summaries = sqlx::query_scalar("select summary from compactions")
        .fetch_all(&pool)
        .await
        .expect("the stored summaries");
    pool.close().await;
    summaries
}

/// Every summary the fake wrote took exactly its call's output limit (4
/// bytes a token, more than the conversation's JSON takes), and was stored
/// whole, sent whole in a later request, every fact with it.
async fn assert_summaries_whole(app: &TestApp) {
    let written: Vec<(u64, String)> = app
        .upstream
        .summary_requests()
        .into_iter()
        .filter_map(|call| Some((output_limit(call.json.as_ref()?)?, call.written?)))
        .collect();
    assert!(!written.is_empty(), "no summary was written");
    let stored = stored_summaries(app).await;
    let sent: Vec<String> = app
        .upstream
        .chat_requests()
        .iter()
        .map(|request| String::from_utf8_lossy(&request.body).into_owned())
        .collect();
    for (limit, text) in &written {
        assert_eq!(text.len() as u64, 4 * limit, "the prose ran to its limit");
        let kept = stored.iter().map(String::len).collect::<Vec<_>>();
        assert!(
            stored.contains(text),
            "{} bytes written, stored: {kept:?}",
            text.len()
        );
        assert!(
            sent.iter().any(|body| body.contains(text.as_str())),
            "a {} byte summary was never sent whole",
            text.len()
        );
    }
    app.upstream.assert_facts_survive();
}

#[tokio::test]
async fn a_chat_completions_summary_at_exactly_its_max_tokens_is_stored_and_sent_whole() {
    let app = spawn_app_with(prose("gpt-4o-mini")).await;
    let mut agent = Agent::new(Dialect::OpenAi, "gpt-4o-mini", 1_500, 3);
    agent.run_until_summaries(&app, 2, 20).await;
    assert_summaries_whole(&app).await;
}

#[tokio::test]
async fn a_responses_summary_at_exactly_its_max_output_tokens_is_stored_and_sent_whole() {
    let app = spawn_app_with(prose("gpt-4.1-mini")).await;
    let mut agent = Agent::new(Dialect::Responses, "gpt-4.1-mini", 1_500, 3);
    // A model that does not reason: no reasoning asked, none included.
    agent.extra = json!({"reasoning": null, "include": null});
    agent.run_until_summaries(&app, 2, 20).await;
    assert_summaries_whole(&app).await;
}

#[tokio::test]
async fn a_messages_summary_at_exactly_its_max_tokens_is_stored_and_sent_whole() {
    let app = spawn_app_with(prose("claude-sonnet-4-5")).await;
    let mut agent = Agent::new(Dialect::Anthropic, "claude-sonnet-4-5", 1_500, 3);
    agent.run_until_summaries(&app, 2, 20).await;
    assert_summaries_whole(&app).await;
}

/// Gemini 2.0 does not think: its summary's limit is the summary's own.
#[tokio::test]
async fn a_gemini_summary_at_exactly_its_max_output_tokens_is_stored_and_sent_whole() {
    let app = spawn_app_with(prose("gemini-2.0-flash")).await;
    let mut agent = Agent::new(Dialect::Gemini, "gemini-2.0-flash", 1_500, 3);
    agent.run_until_summaries(&app, 2, 20).await;
    assert_summaries_whole(&app).await;
}

/// Ollama's native API, its window the request's `num_ctx`: compacted
/// before sending, each summary asked for with `num_predict`.
#[tokio::test]
async fn an_ollama_summary_at_exactly_its_num_predict_is_stored_and_sent_whole() {
    let mut app = spawn_app_with(prose("smollm2:135m")).await;
    let base_url = app.upstream.base_url();
    app.reconfigure(json!({"ollama": {"base_url": base_url}}))
        .await;
    let mut messages = vec![json!({"role": "system", "content": "You are a helpful assistant."})];
    for turn in 1..=20 {
        let text = crate::helpers::agent::filler(1_500, turn);
        messages.push(json!({"role": "user", "content": format!("Turn {turn}: {text}")}));
        let body = json!({"model": "smollm2:135m", "messages": messages, "stream": false,
            "options": {"num_ctx": 4_096}});
        let response = app
            .client
            .post(app.url("/api/chat"))
            .json(&body)
            .send()
            .await
            .expect("answers");
        assert_eq!(response.status(), 200, "turn {turn}");
        let answer: Value = response.json().await.expect("json");
        messages.push(answer["message"].clone());
        if app.upstream.summary_requests().len() >= 2 {
            break;
        }
    }
    assert!(
        app.upstream.summary_requests().len() >= 2,
        "compacted twice"
    );
    assert_summaries_whole(&app).await;
}

/// A reasoning model's output limit covers its reasoning and its text, so
/// it may write past the summary's own budget. The upstream's count of the
/// text says by how much: about the budget's share of the text is kept, cut
/// at a word, never only its first sentence.
#[tokio::test]
async fn a_reasoning_models_summary_over_its_budget_is_cut_by_words_to_the_budget() {
    let app = spawn_app_with(prose("gpt-5-mini")).await;
    let mut agent = reasoning_agent("gpt-5-mini", json!({}));
    agent.run_until_summaries(&app, 2, 20).await;
    let stored = stored_summaries(&app).await;
    let calls = app.upstream.summary_requests();
    assert!(calls.len() >= 2, "{} summary calls", calls.len());
    for call in calls {
        let (Some(json), Some(written)) = (&call.json, &call.written) else {
            continue;
        };
        let limit = json["max_completion_tokens"].as_u64().expect("a limit");
        let budget = limit - condenser::compaction::REASONING_TOKENS;
        let bytes = 4 * budget as usize;
        assert!(written.len() > bytes, "the model wrote past its budget");
        let kept = stored
            .iter()
            .find(|summary| written.starts_with(summary.as_str()))
            .expect("a stored start of what was written");
        assert!(
            kept.len() <= bytes && kept.len() + 32 >= bytes,
            "{} bytes kept of a {bytes} byte budget",
            kept.len()
        );
        assert!(
            written[kept.len()..].starts_with(' '),
            "cut at a word: {:?}",
            &written[kept.len()..kept.len() + 20]
        );
    }
}
