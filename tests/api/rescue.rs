//! The seeds' central case (ARCHITECTURE.md "Knowing sizes"): a short history,
//! then one new user turn so large that only summarizing everything before
//! it saves the request, as when a user pastes a file or a log. It must be
//! rescued whenever it can be, with one summary call however many copies
//! of the request arrive at once, and refused at once, with none, when even
//! the smallest summary cannot make it fit.

use crate::helpers::agent::{filler, Agent, Dialect};
use crate::helpers::app::{spawn_app_with, Options, TestApp, OPENAI_KEY};
use crate::helpers::db::{both_backends, TestBackend};
use crate::helpers::fleet::Fleet;
use fake_upstream::{FakeConfig, FakeUpstream};
use pretty_assertions::assert_eq;
use serde_json::Value;

const MODEL: &str = "gpt-4o-mini";

/// The fake's window for each dialect, as in the issue that found the
/// regression: 4,096 tokens on Chat Completions, 8,192 on Messages.
fn window(dialect: Dialect) -> u64 {
    match dialect {
        Dialect::Anthropic => 8_192,
        _ => 4_096,
    }
}

/// Four short turns (under 20 % of the window), then a new user message
/// that alone takes `share` of it, with a 60-token output budget.
fn pasted_log(dialect: Dialect, share: f64) -> Value {
    let window = window(dialect);
    let mut agent = Agent::new(dialect, MODEL, 0, 0);
    let turn_bytes = (window as usize * 4 / 5) / 8;
    for turn in 0..4 {
        agent.say(&filler(turn_bytes, turn));
        agent.messages.push(serde_json::json!({
            "role": "assistant", "content": filler(turn_bytes, 100 + turn)
        }));
    }
    // The fake counts a quarter of the JSON bytes as tokens.
    agent.say(&filler((window as f64 * share) as usize * 4, 999));
    let mut request = agent.request();
    request["max_tokens"] = 60.into();
    request.as_object_mut().expect("object").remove("tools");
    request
}

fn options(backend: TestBackend, dialect: Dialect) -> Options {
    Options::on(backend).window(MODEL, window(dialect))
}

async fn post(app: &TestApp, dialect: Dialect, body: &Value) -> reqwest::Response {
    match dialect {
        Dialect::Anthropic => app.post_messages(body).await,
        _ => app.post_chat(body).await,
    }
}

both_backends!(
    a_short_history_before_a_huge_turn_is_compacted_and_answered,
    four_identical_huge_turns_at_once_make_one_summary_call,
    a_turn_larger_than_the_window_minus_its_output_is_refused_with_no_summary_call,
);

async fn a_short_history_before_a_huge_turn_is_compacted_and_answered(backend: TestBackend) {
    for dialect in [Dialect::OpenAi, Dialect::Anthropic] {
        let app = spawn_app_with(options(backend, dialect)).await;
        let response = post(&app, dialect, &pasted_log(dialect, 0.87)).await;
        let headers = response.headers().clone();
        assert_eq!(response.status(), 200, "{dialect:?}: {headers:?}");
        assert_eq!(headers["x-condenser-compactions"], "1", "{dialect:?}");
        assert_eq!(app.upstream.summary_requests().len(), 1, "{dialect:?}");
        let retried = app.upstream.chat_requests();
        let answered = retried.last().expect("the retried request");
        assert_eq!(answered.status, 200, "{dialect:?}");
    }
}

async fn four_identical_huge_turns_at_once_make_one_summary_call(backend: TestBackend) {
    for dialect in [Dialect::OpenAi, Dialect::Anthropic] {
        let app = spawn_app_with(options(backend, dialect)).await;
        let body = pasted_log(dialect, 0.87);
        let responses =
            futures_util::future::join_all((0..4).map(|_| post(&app, dialect, &body))).await;
        for response in responses {
            assert_eq!(
                response.status(),
                200,
                "{dialect:?}: {:?}",
                response.headers()
            );
        }
        assert_eq!(app.upstream.summary_requests().len(), 1, "{dialect:?}");
    }
}

async fn a_turn_larger_than_the_window_minus_its_output_is_refused_with_no_summary_call(
    backend: TestBackend,
) {
    for dialect in [Dialect::OpenAi, Dialect::Anthropic] {
        let app = spawn_app_with(options(backend, dialect)).await;
        let response = post(&app, dialect, &pasted_log(dialect, 0.995)).await;
        assert_eq!(response.status(), 400, "{dialect:?}");
        assert_eq!(
            response.headers()["x-condenser-compaction-error"],
            "cannot_fit",
            "{dialect:?}"
        );
        assert_eq!(app.upstream.summary_requests().len(), 0, "{dialect:?}");
        assert_eq!(
            app.upstream.requests().len(),
            1,
            "{dialect:?}: one round trip"
        );
    }
}

/// Two instances on one Postgres behind nginx, four copies of the request
/// at once: one summary call between them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_make_one_summary_call_for_four_identical_huge_turns() {
    let mut config = FakeConfig {
        summary_marker: Some(condenser::protocol::SUMMARY_MARKER.into()),
        summary_delay: std::time::Duration::from_millis(500),
        ..FakeConfig::default()
    };
    config
        .context_windows
        .insert(MODEL.into(), window(Dialect::OpenAi));
    let upstream = FakeUpstream::start(config).await;
    let base_url = upstream.openai_base_url();
    let fleet = Fleet::start(2, &[("CONDENSER_OPENAI_BASE_URL", base_url.as_str())]).await;
    let client = reqwest::Client::new();
    let body = pasted_log(Dialect::OpenAi, 0.87);
    let requests = (0..4).map(|_| {
        client
            .post(fleet.url("/v1/chat/completions"))
            .bearer_auth(OPENAI_KEY)
            .json(&body)
            .send()
    });
    for response in futures_util::future::join_all(requests).await {
        let response = response.expect("answers");
        assert_eq!(response.status(), 200, "{:?}", response.headers());
    }
    assert_eq!(upstream.summary_requests().len(), 1);
}
