//! Sizing from what the upstream reports (ARCHITECTURE.md "Knowing sizes"),
//! checked on the strict fake's own request log: how many summary calls a
//! compaction costs, that a compaction which cannot fit costs none, that the
//! recorded sizes match what the upstream counted, and that once a window
//! is known requests are compacted before they are sent.

use crate::helpers::agent::{filler, Agent, Dialect};
use crate::helpers::app::{spawn_app_with, Options, TestApp};
use crate::helpers::db::{both_backends, TestBackend};
use crate::helpers::wait::{wait_for_some, PATIENCE};
use fake_upstream::RecordedRequest;
use serde_json::{json, Value};
use sqlx::Row;

const MODEL: &str = "gpt-4o-mini";
const WINDOW: u64 = 4_000;

fn agent_options(backend: TestBackend) -> Options {
    Options::on(backend)
        .window(MODEL, WINDOW)
        .settings(json!({"compaction": {"summary_max_tokens": 300}}))
}

both_backends!(
    each_compaction_makes_one_summary_call_when_its_part_fits_half_the_window,
    after_the_first_overflow_later_compactions_happen_before_sending,
    a_compaction_that_cannot_fit_makes_no_summary_call_and_answers_at_once,
    tokens_after_is_within_ten_percent_of_what_the_upstream_counted,
    a_summary_call_that_overflows_is_retried_smaller,
    usage_calibrates_the_estimate_and_is_stored,
    a_large_history_is_summarized_in_at_most_the_capped_calls,
    a_100000_message_body_costs_no_summary_call_past_the_cap,
    with_room_for_two_turns_a_compaction_is_at_most_every_other_turn,
);

fn overflows(requests: &[RecordedRequest]) -> usize {
    requests.iter().filter(|r| r.status == 400).count()
}

/// The agent adds about 1,300 tokens a turn to a 4,000-token window, so
/// the part each compaction summarizes (what lies before the kept half)
/// stays well under half the window.
async fn each_compaction_makes_one_summary_call_when_its_part_fits_half_the_window(
    backend: TestBackend,
) {
    let app = spawn_app_with(agent_options(backend)).await;
    let mut agent = Agent::new(Dialect::OpenAi, MODEL, 1_500, 3);
    agent.run_turns(&app, 20).await;
    let summarized = app
        .db
        .count("select count(*) from compactions where messages_compacted > 0")
        .await;
    assert!(summarized >= 4, "only {summarized} compactions");
    let calls = app.upstream.summary_requests();
    assert_eq!(calls.len() as i64, summarized, "one call per compaction");
    let largest = app
        .db
        .count("select max(tokens_before - tokens_after) from compactions")
        .await;
    assert!(largest <= WINDOW as i64 / 2 + 300, "{largest} tokens went");
}

async fn after_the_first_overflow_later_compactions_happen_before_sending(backend: TestBackend) {
    let app = spawn_app_with(agent_options(backend)).await;
    let mut agent = Agent::new(Dialect::OpenAi, MODEL, 1_500, 3);
    let compactions = agent.run_turns(&app, 30).await;
    assert!(compactions >= 6, "only {compactions} compactions");
    assert_eq!(
        overflows(&app.upstream.chat_requests()),
        1,
        "only the first overflow reached the upstream"
    );
    let proactive = app
        .db
        .count("select count(*) from compactions where trigger = 'proactive'")
        .await;
    assert!(proactive >= 5, "{proactive} compactions before sending");
}

async fn a_compaction_that_cannot_fit_makes_no_summary_call_and_answers_at_once(
    backend: TestBackend,
) {
    let app = spawn_app_with(agent_options(backend)).await;
    let mut agent = Agent::new(Dialect::OpenAi, MODEL, 200, 1);
    agent.run_turns(&app, 2).await;
    app.upstream.clear_requests();
    // One user message larger than the window: no cut or trim can help.
    agent.say(&filler(24_000, 1));
    let response = app.post_chat(&agent.request()).await;
    assert_eq!(response.status(), 400);
    assert_eq!(
        response.headers()["x-condenser-compaction-error"],
        "cannot_fit"
    );
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["error"]["code"], "context_length_exceeded");
    assert_eq!(app.upstream.requests().len(), 1, "one round trip");
    assert_eq!(app.upstream.summary_requests().len(), 0);
    assert_eq!(app.db.count("select count(*) from compactions").await, 0);
}

async fn tokens_after_is_within_ten_percent_of_what_the_upstream_counted(backend: TestBackend) {
    for dialect in [Dialect::OpenAi, Dialect::Anthropic] {
        let app = spawn_app_with(agent_options(backend)).await;
        let mut agent = Agent::new(dialect, MODEL, 1_500, 3);
        agent.run_until_summaries(&app, 3, 20).await;
        let pool = app.db.pool().await;
        let rows = sqlx::query("select prefix_hash, tokens_after from compactions")
            .fetch_all(&pool)
            .await
            .expect("compactions");
        assert!(rows.len() >= 3);
        let requests = app.upstream.requests();
        for summary in requests.iter().filter(|r| is_summary(r)) {
            let retried = first_chat_after(&requests, summary);
            let counted = retried.input_tokens.expect("the fake counted it") as f64;
            let recorded = rows
                .iter()
                .map(|row| row.get::<i64, _>("tokens_after") as f64)
                .min_by(|a, b| (a - counted).abs().total_cmp(&(b - counted).abs()))
                .expect("a compaction");
            let error = (recorded - counted).abs() / counted;
            assert!(
                error <= 0.10,
                "{dialect:?}: tokens_after {recorded} vs {counted} counted"
            );
        }
    }
}

fn is_summary(request: &RecordedRequest) -> bool {
    request.kind == fake_upstream::RequestKind::Summary && request.status == 200
}

fn first_chat_after<'a>(
    requests: &'a [RecordedRequest],
    summary: &RecordedRequest,
) -> &'a RecordedRequest {
    let at = requests
        .iter()
        .position(|r| std::ptr::eq(r, summary))
        .expect("in the log");
    requests[at..]
        .iter()
        .find(|r| r.kind == fake_upstream::RequestKind::Chat && r.status == 200)
        .expect("the retried request")
}

/// Summaries written by a model whose window Condenser has never seen:
/// its first call overflows, and the retry is sized from the error.
async fn a_summary_call_that_overflows_is_retried_smaller(backend: TestBackend) {
    let options = agent_options(backend)
        .window("small-summarizer", 1_500)
        .settings(json!({"compaction": {"summary_model": "small-summarizer"}}));
    let app = spawn_app_with(options).await;
    let mut agent = Agent::new(Dialect::OpenAi, MODEL, 1_500, 3);
    agent.run_until_summaries(&app, 3, 10).await;
    let calls = app.upstream.summary_requests();
    assert_eq!(overflows(&calls), 1, "only the first call was too large");
    assert!(calls.iter().skip(1).all(|call| call.status == 200));
    assert!(app.db.count("select count(*) from compactions").await >= 1);
}

async fn usage_calibrates_the_estimate_and_is_stored(backend: TestBackend) {
    let app = spawn_app_with(agent_options(backend)).await;
    let mut agent = Agent::new(Dialect::Anthropic, MODEL, 1_500, 1);
    agent.run_turns(&app, 2).await;
    // Tokens per byte of each answered request, as the upstream counted.
    let rates: Vec<f64> = app
        .upstream
        .chat_requests()
        .iter()
        .filter(|r| r.status == 200)
        .map(|r| r.input_tokens.expect("counted") as f64 / r.body.len() as f64)
        .collect();
    let (low, high) = rates
        .iter()
        .fold((f64::MAX, f64::MIN), |(l, h), &r| (l.min(r), h.max(r)));
    // Whichever usage the background write stored first, and however it
    // was blended, the stored rate is one the upstream reported.
    let stored = stored_rate(&app).await;
    assert!(
        (low * 0.97..=high * 1.03).contains(&stored),
        "stored {stored}, the upstream's rates {rates:?}"
    );
}

/// The rate the store holds, once the background write has landed.
async fn stored_rate(app: &TestApp) -> f64 {
    let sql = "select coalesce(max(tokens_per_mbyte), 0) from model_calibrations";
    let found = wait_for_some(PATIENCE, "a stored calibration", || async {
        Some(app.db.count(sql).await).filter(|found| *found > 0)
    })
    .await;
    found as f64 / 1e6
}

/// 100 exchanges of about 2 KB: far more than one summary call carries in
/// an 8,192-token window.
async fn a_large_history_is_summarized_in_at_most_the_capped_calls(backend: TestBackend) {
    let app = spawn_app_with(Options::on(backend)).await;
    let mut messages = vec![json!({"role": "system", "content": "Be brief."})];
    for turn in 0..100 {
        messages.push(json!({"role": "user", "content": filler(1_000, turn)}));
        messages.push(json!({"role": "assistant", "content": filler(1_000, 1_000 + turn)}));
    }
    messages.push(json!({"role": "user", "content": "And now?"}));
    let request = json!({"model": MODEL, "messages": messages, "max_tokens": 100});
    let response = app.post_chat(&request).await;
    assert_eq!(response.status(), 200);
    let calls = app.upstream.summary_requests().len();
    assert!((1..=4).contains(&calls), "{calls} summary calls");
}

async fn a_100000_message_body_costs_no_summary_call_past_the_cap(backend: TestBackend) {
    let app = spawn_app_with(Options::on(backend)).await;
    let messages: Vec<Value> = (0..100_000)
        .map(|i| {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            json!({"role": role, "content": format!("message number {i}")})
        })
        .collect();
    let request = json!({"model": MODEL, "messages": messages, "max_tokens": 100});
    let response = app.post_chat(&request).await;
    assert_eq!(response.status(), 400);
    assert_eq!(
        response.headers()["x-condenser-compaction-error"],
        "summary_input_cap"
    );
    assert_eq!(app.upstream.summary_requests().len(), 0);
    assert_eq!(app.upstream.chat_requests().len(), 1);
}

/// Summary calls per turn over `turns` turns of an agent with a fixed
/// prompt of 8,000 tokens, 8,192 tokens reserved for output and about
/// 4,000 tokens added a turn, in a 32,000-token window: as Kilo Code or
/// opencode run, with room beside the prompt and the reserve for two
/// turns' growth and more.
async fn summary_calls_per_turn(backend: TestBackend, headroom_turns: u32) -> Vec<usize> {
    let options = Options::on(backend).window(MODEL, 32_000).settings(json!({
        "compaction": {"summary_max_tokens": 500, "headroom_turns": headroom_turns}
    }));
    let app = spawn_app_with(options).await;
    let mut agent = Agent::new(Dialect::OpenAi, MODEL, 8_000, 2);
    agent.system = filler(32_000, 7);
    agent.extra = json!({"max_tokens": 8_192});
    let mut calls = Vec::new();
    for turn in 1..=16 {
        let before = app.upstream.summary_requests().len();
        for step in agent.turn(&app, turn).await {
            assert_eq!(step.status, 200, "turn {turn}: {}", step.body);
        }
        calls.push(app.upstream.summary_requests().len() - before);
    }
    calls
}

/// Hysteresis: a compaction leaves room for the conversation's next two
/// turns, so in steady state (after the first compaction) there is at
/// most one every other turn, where with no headroom there is one a turn.
async fn with_room_for_two_turns_a_compaction_is_at_most_every_other_turn(backend: TestBackend) {
    let tight = summary_calls_per_turn(backend, 0).await;
    let roomy = summary_calls_per_turn(backend, 2).await;
    let steady = |calls: &[usize]| {
        let first = calls.iter().position(|&n| n > 0).expect("a compaction");
        let rest = &calls[first + 1..];
        (rest.iter().sum::<usize>(), rest.len())
    };
    let (tight_calls, tight_turns) = steady(&tight);
    let (roomy_calls, roomy_turns) = steady(&roomy);
    eprintln!("summary calls a turn, no headroom: {tight:?}; two turns: {roomy:?}");
    assert!(
        roomy_calls * 2 <= roomy_turns,
        "{roomy_calls} compactions in {roomy_turns} turns: {roomy:?}"
    );
    assert!(
        tight_calls * 2 > tight_turns,
        "without headroom the same agent compacts more often: {tight:?}"
    );
}
