//! Several instances behind nginx sharing one Postgres: one summary per
//! prefix, a dead summarizer replaced, rolling restarts losing nothing.

use crate::helpers::agent::{Agent, Dialect};
use crate::helpers::app::OPENAI_KEY;
use crate::helpers::fleet::{metric, start_instance, Fleet};
use crate::helpers::wait::{wait_until, PATIENCE};
use fake_upstream::{FakeConfig, FakeUpstream};
use pretty_assertions::assert_eq;
use serde_json::json;
use std::time::Duration;

const MODEL: &str = "gpt-4o-mini";

// The fleet tests run on a multi-threaded runtime: the fake upstream is
// served by the test's own runtime, and stopping or replacing an instance
// waits for the process with a blocking call. On one thread that wait would
// stall the upstream, and the instance's in-flight requests with it.

async fn fake(summary_delay: Duration) -> FakeUpstream {
    let mut config = FakeConfig {
        summary_marker: Some(condenser::protocol::SUMMARY_MARKER.into()),
        summary_delay,
        ..FakeConfig::default()
    };
    config.context_windows.insert(MODEL.into(), 12_000);
    FakeUpstream::start(config).await
}

/// One conversation that overflows a 12,000-token window by a little, so
/// its compacted part fits one summary call.
fn overflowing_request() -> serde_json::Value {
    overflowing_conversation(0)
}

/// Conversation `n` of one user: same key, same system prompt, its own
/// messages.
fn overflowing_conversation(n: usize) -> serde_json::Value {
    let mut agent = Agent::new(Dialect::OpenAi, MODEL, 0, 0);
    for i in 0..24 {
        agent.say(&format!(
            "conversation {n}, note {i}: {}",
            "lorem ipsum dolor ".repeat(120)
        ));
        agent
            .messages
            .push(json!({"role": "assistant", "content": format!("noted {i}")}));
    }
    agent.say("And now?");
    agent.request()
}

/// `size` instances against `upstream`, with 300-token summaries and the
/// `extra` settings.
async fn summarizing_fleet(size: usize, upstream: &FakeUpstream, extra: &[(&str, &str)]) -> Fleet {
    let base_url = upstream.openai_base_url();
    let mut env = vec![
        ("CONDENSER_OPENAI_BASE_URL", base_url.as_str()),
        ("CONDENSER_SUMMARY_MAX_TOKENS", "300"),
    ];
    env.extend_from_slice(extra);
    Fleet::start(size, &env).await
}

/// Kills `instance` while it holds a summary call: once `upstream` is
/// answering one (its summary delay keeps the call open), and no other
/// instance has a request in flight.
async fn kill_mid_summary(
    instance: &crate::helpers::process::ProxyProcess,
    upstream: &FakeUpstream,
) {
    wait_until(PATIENCE, "a summary call at the upstream", || async {
        upstream.summaries_in_flight() > 0
    })
    .await;
    instance.signal("KILL");
}

async fn post(
    client: &reqwest::Client,
    url: String,
    body: &serde_json::Value,
) -> reqwest::Response {
    client
        .post(url)
        .bearer_auth(OPENAI_KEY)
        .json(body)
        .send()
        .await
        .expect("answers")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_overflows_through_nginx_make_one_summary() {
    let upstream = fake(Duration::from_millis(1500)).await;
    let fleet = summarizing_fleet(
        3,
        &upstream,
        &[("CONDENSER__COMPACTION__KEEP_SHARE", "0.7")],
    )
    .await;
    let client = reqwest::Client::new();
    let body = overflowing_request();
    let requests = (0..12).map(|_| post(&client, fleet.url("/v1/chat/completions"), &body));
    let responses = futures_util::future::join_all(requests).await;
    for response in responses {
        assert_eq!(response.status(), 200, "{:?}", response.headers());
    }
    // A long prefix is summarized in several chained calls (one per chunk
    // that fits the window); a second summarizer would start its own chain
    // from "(none)" and repeat the first call byte for byte.
    let summaries = upstream.summary_requests();
    let fresh_starts = summaries
        .iter()
        .filter(|r| String::from_utf8_lossy(&r.body).contains("<previous_summary>\\n(none)"))
        .count();
    assert_eq!(fresh_starts, 1, "exactly one summarizer for the prefix");
    assert_eq!(summaries.len(), 1, "exactly one summary call");
    let distinct: std::collections::HashSet<_> = summaries.iter().map(|r| &r.body).collect();
    assert_eq!(
        distinct.len(),
        summaries.len(),
        "no summary call was repeated"
    );
    let mut stored = 0.0;
    let mut reused = 0.0;
    for instance in &fleet.instances {
        stored += metric(
            &client,
            instance,
            "condenser_compactions_total",
            "outcome=\"stored\"",
        )
        .await;
        reused += metric(
            &client,
            instance,
            "condenser_compactions_total",
            "outcome=\"reused\"",
        )
        .await;
    }
    assert_eq!(stored, 1.0, "/metrics shows the single summary");
    assert!(
        reused >= 1.0,
        "/metrics shows the waiting instances reusing it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_summarizer_killed_holding_the_lease_is_replaced_after_expiry() {
    let upstream = fake(Duration::from_secs(3)).await;
    let fleet =
        summarizing_fleet(2, &upstream, &[("CONDENSER__COMPACTION__LEASE_TTL", "2s")]).await;
    let client = reqwest::Client::new();
    let body = overflowing_request();
    let doomed = client
        .post(fleet.instances[0].url("/v1/chat/completions"))
        .bearer_auth(OPENAI_KEY)
        .json(&body)
        .send();
    let doomed = tokio::spawn(doomed);
    // Instance 0 holds the lease once it reports the overflow; its summary
    // call then sleeps 3 s at the upstream.
    kill_mid_summary(&fleet.instances[0], &upstream).await;
    if let Ok(response) = doomed.await.expect("joins") {
        panic!(
            "the killed instance's client got an answer instead of a dropped connection: {} {:?}",
            response.status(),
            response.text().await
        );
    }
    let response = post(
        &client,
        fleet.instances[1].url("/v1/chat/completions"),
        &body,
    )
    .await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-condenser-compactions"], "1");
    let compactions = fleet.db.count("select count(*) from compactions").await;
    assert_eq!(
        compactions, 1,
        "one complete compaction, no duplicate or partial one"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_loses_no_request_and_no_message() {
    let upstream = fake(Duration::ZERO).await;
    let env = [("CONDENSER_OPENAI_BASE_URL", upstream.openai_base_url())];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut fleet = Fleet::start(2, &env).await;
    let url = fleet.url("/v1/chat/completions");
    let load = tokio::spawn(async move {
        let client = reqwest::Client::new();
        let mut sent = 0;
        for i in 0..120 {
            let body = json!({"model": MODEL, "messages": [{"role": "user", "content": format!("request {i}")}]});
            let response = post(&client, url.clone(), &body).await;
            assert_eq!(
                response.status(),
                200,
                "request {i} failed during the rolling restart"
            );
            sent += 1;
            // Pacing, the behaviour under test: a steady trickle of
            // requests spread over the whole restart.
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        sent
    });
    // Each restart happens under load: a few requests answered first.
    let answered = || upstream.chat_requests().len();
    for index in 0..fleet.instances.len() {
        let before = answered();
        let what = "a few requests answered before the next restart";
        wait_until(PATIENCE, what, || async {
            answered() >= before + 3 || load.is_finished()
        })
        .await;
        fleet.replace(index, "TERM");
    }
    let sent = load.await.expect("load finished");
    let stored = || async {
        fleet
            .db
            .count("select count(*) from messages where position = 1")
            .await
    };
    wait_until(PATIENCE, "every request's message stored", || async {
        stored().await >= sent
    })
    .await;
    let stored = stored().await;
    assert_eq!(stored, sent, "every request's message was stored");
}

/// Every session of one user shares a key and a system prompt; their first
/// compactions must not queue behind one lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_conversations_under_one_key_compact_side_by_side() {
    let upstream = fake(Duration::from_secs(2)).await;
    let fleet = summarizing_fleet(
        3,
        &upstream,
        &[("CONDENSER__COMPACTION__KEEP_SHARE", "0.7")],
    )
    .await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .expect("client");
    let bodies: Vec<_> = (0..20).map(overflowing_conversation).collect();
    let requests = bodies
        .iter()
        .map(|body| post(&client, fleet.url("/v1/chat/completions"), body));
    for response in futures_util::future::join_all(requests).await {
        assert_eq!(response.status(), 200, "{:?}", response.headers());
        assert_eq!(response.headers()["x-condenser-compactions"], "1");
    }
    assert_eq!(
        upstream.summary_requests().len(),
        20,
        "one summary call per conversation"
    );
    let overlapping = upstream.peak_concurrent_summaries();
    assert!(
        overlapping >= 10,
        "the summaries ran side by side, not one after another (at most {overlapping} at once)"
    );
}

/// A summary slower than `lease_ttl`: its summarizer renews the lease, so
/// no other instance starts a second summary of the same prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_summary_slower_than_the_lease_ttl_is_written_once() {
    let upstream = fake(Duration::from_secs(4)).await;
    let settings = [
        ("CONDENSER__COMPACTION__LEASE_TTL", "1s"),
        ("CONDENSER__COMPACTION__KEEP_SHARE", "0.7"),
    ];
    let fleet = summarizing_fleet(3, &upstream, &settings).await;
    let client = reqwest::Client::new();
    let body = overflowing_request();
    let requests = fleet
        .instances
        .iter()
        .flat_map(|instance| [instance, instance])
        .map(|instance| post(&client, instance.url("/v1/chat/completions"), &body));
    for response in futures_util::future::join_all(requests).await {
        assert_eq!(response.status(), 200, "{:?}", response.headers());
    }
    assert_eq!(
        upstream.summary_requests().len(),
        1,
        "one summary of the prefix across instances"
    );
}

/// SIGKILL mid-summary, restart, resend: the conversation does not wait
/// for the dead run's lease, even with a ten-minute TTL (SQLite, whose file
/// has one process).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_after_a_kill_mid_summary_does_not_wait_for_the_dead_lease() {
    let upstream = fake(Duration::from_secs(3)).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let env = vec![
        (
            "CONDENSER_OPENAI_BASE_URL".to_string(),
            upstream.openai_base_url(),
        ),
        ("CONDENSER__COMPACTION__LEASE_TTL".into(), "10m".into()),
        ("CONDENSER_SUMMARY_MAX_TOKENS".into(), "300".into()),
        (
            "DATABASE_URL".into(),
            format!("sqlite://{}/condenser.db", dir.path().display()),
        ),
    ];
    let killed = start_instance(&env, "127.0.0.1:0");
    let body = overflowing_request();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("client");
    let doomed = tokio::spawn(
        client
            .post(killed.url("/v1/chat/completions"))
            .bearer_auth(OPENAI_KEY)
            .json(&body)
            .send(),
    );
    kill_mid_summary(&killed, &upstream).await;
    let _ = doomed.await;
    drop(killed);

    let restarted = start_instance(&env, "127.0.0.1:0");
    let response = client
        .post(restarted.url("/v1/chat/completions"))
        .bearer_auth(OPENAI_KEY)
        .json(&body)
        .send()
        .await
        .expect("answered well before the dead run's ten-minute lease expires");
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-condenser-compactions"], "1");
}

/// The next turn of `request`: the answer it got, and a new question.
fn next_turn(request: &serde_json::Value, question: &str) -> serde_json::Value {
    let mut next = request.clone();
    let messages = next["messages"].as_array_mut().expect("messages");
    messages.push(json!({"role": "assistant", "content": "Here is what I found."}));
    messages.push(json!({"role": "user", "content": question}));
    next
}

/// Instance A compacts; instance B has not heard of it (its notification
/// was lost). B's view is stale: it may cost one extra round trip, never a
/// second summary and never a wrong rewrite, and afterwards B knows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_with_a_stale_view_reuses_another_instances_compaction() {
    let upstream = fake(Duration::ZERO).await;
    let fleet = summarizing_fleet(2, &upstream, &[]).await;
    sqlx::query("alter table compactions disable trigger compactions_notify")
        .execute(&fleet.db.pool().await)
        .await
        .expect("notifications off");
    let (a, b) = (&fleet.instances[0], &fleet.instances[1]);
    let client = reqwest::Client::new();
    let first = overflowing_request();
    let answered = post(&client, a.url("/v1/chat/completions"), &first).await;
    assert_eq!(answered.status(), 200);
    assert_eq!(answered.headers()["x-condenser-compactions"], "1");
    assert_eq!(upstream.summary_requests().len(), 1);

    upstream.clear_requests();
    let second = next_turn(&first, "And the second question?");
    let answered = post(&client, b.url("/v1/chat/completions"), &second).await;
    assert_eq!(answered.status(), 200);
    assert!(
        upstream.summary_requests().is_empty(),
        "B reused A's summary instead of writing its own"
    );
    let calls = upstream.chat_requests();
    assert!(calls.len() <= 2, "at most one extra round trip: {calls:?}");
    let sent = calls.last().expect("a chat call");
    assert_eq!(sent.status, 200);
    assert!(
        String::from_utf8_lossy(&sent.body).contains(condenser::protocol::SUMMARY_MARKER),
        "what B sent carries A's summary"
    );
    assert!(
        String::from_utf8_lossy(&sent.body).contains("And the second question?"),
        "and B's newest message as itself"
    );

    upstream.clear_requests();
    let reused = |instance| {
        metric(
            &client,
            instance,
            "condenser_compactions_total",
            "outcome=\"reused\"",
        )
    };
    let reused_before = reused(b).await;
    let third = next_turn(&second, "And the third?");
    let answered = post(&client, b.url("/v1/chat/completions"), &third).await;
    assert_eq!(answered.status(), 200);
    assert_eq!(answered.headers()["x-condenser-compactions"], "0");
    let calls = upstream.chat_requests();
    assert_eq!(calls.len(), 1, "B now knows the compaction: {calls:?}");
    assert_eq!(calls[0].status, 200);
    assert_eq!(reused(b).await, reused_before, "B applied it from memory");
}

/// With notifications on, instance B hears of A's compaction at once and
/// applies it to the conversation's next turn: no overflow, no lookup.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_applies_another_instances_compaction_it_was_told_of() {
    let upstream = fake(Duration::ZERO).await;
    let fleet = summarizing_fleet(2, &upstream, &[]).await;
    let (a, b) = (&fleet.instances[0], &fleet.instances[1]);
    let client = reqwest::Client::new();
    let first = overflowing_request();
    let answered = post(&client, a.url("/v1/chat/completions"), &first).await;
    assert_eq!(answered.headers()["x-condenser-compactions"], "1");
    // B reads a compaction it is told of by its prefix (its debug log
    // shows the statement); nothing else makes it look one up before its
    // first request.
    wait_until(
        PATIENCE,
        "B to read the compaction it was told of",
        || async { b.log_text().contains("prefix_hash = $2") },
    )
    .await;

    upstream.clear_requests();
    let second = next_turn(&first, "And the second question?");
    let answered = post(&client, b.url("/v1/chat/completions"), &second).await;
    assert_eq!(answered.status(), 200);
    assert_eq!(answered.headers()["x-condenser-compactions"], "0");
    let calls = upstream.chat_requests();
    assert_eq!(calls.len(), 1, "no overflow on B: {calls:?}");
    assert!(String::from_utf8_lossy(&calls[0].body).contains(condenser::protocol::SUMMARY_MARKER));
    assert!(upstream.summary_requests().is_empty());
}
