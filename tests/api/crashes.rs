//! A process killed with writes still queued. Condenser answers before it
//! writes (group commits off the request path), so a SIGKILL can lose the
//! queue; what it guarantees is that nothing is lost for good: the client's
//! next request re-sends the history, and the restarted process stores
//! every message of it, each exactly once.

use crate::helpers::app::OPENAI_KEY;
use crate::helpers::db::wait_for_blocked_writer;
use crate::helpers::db::{block_writes, TestBackend, TestDb};
use crate::helpers::process::ProxyProcess;
use crate::helpers::wait::{wait_until, PATIENCE};
use fake_upstream::{FakeConfig, FakeUpstream};
use serde_json::{json, Value};
use sqlx::{AnyPool, Row};
use std::time::Duration;

const CONVERSATIONS: usize = 8;

fn first_turn(n: usize) -> Vec<Value> {
    vec![
        json!({"role": "system", "content": "You are terse."}),
        json!({"role": "user", "content": format!("conversation {n}: the first question")}),
    ]
}

fn next_turn(n: usize) -> Vec<Value> {
    let mut messages = first_turn(n);
    messages.push(json!({"role": "assistant", "content": format!("answer {n}")}));
    messages.push(json!({"role": "user", "content": format!("conversation {n}: the follow-up")}));
    messages
}

async fn ask(client: &reqwest::Client, proxy: &ProxyProcess, messages: &[Value]) {
    let response = client
        .post(proxy.url("/v1/chat/completions"))
        .bearer_auth(OPENAI_KEY)
        .json(&json!({"model": "gpt-4o-mini", "messages": messages}))
        .send()
        .await
        .expect("answers");
    assert_eq!(response.status(), 200);
}

async fn bodies(pool: &AnyPool) -> Vec<String> {
    sqlx::query("select body from messages order by body")
        .fetch_all(pool)
        .await
        .expect("messages")
        .iter()
        .map(|row| row.get::<String, _>("body"))
        .collect()
}

async fn killed_with_a_full_queue_loses_nothing_for_good(backend: TestBackend) {
    let upstream = FakeUpstream::start(FakeConfig::default()).await;
    let db = TestDb::new(backend).await;
    let env = [
        ("CONDENSER_OPENAI_BASE_URL", upstream.openai_base_url()),
        ("DATABASE_URL", db.url.clone()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let client = reqwest::Client::new();
    let mut proxy = ProxyProcess::start(&env);
    let pool = db.pool().await;

    let lock = block_writes(&pool, backend).await;
    for n in 0..CONVERSATIONS {
        ask(&client, &proxy, &first_turn(n)).await;
    }
    // Every request was answered; its messages wait behind the lock.
    wait_for_blocked_writer(&pool, backend).await;
    proxy.signal("KILL");
    proxy.wait_exit(Duration::from_secs(10)).expect("killed");
    lock.rollback().await.expect("unlocked");
    assert!(
        bodies(&pool).await.is_empty(),
        "the queue held the answered requests' messages when the process died"
    );

    let restarted = ProxyProcess::start(&env);
    for n in 0..CONVERSATIONS {
        ask(&client, &restarted, &next_turn(n)).await;
    }
    // One shared root (same key, same system prompt), three messages each.
    let expected = 1 + CONVERSATIONS * (next_turn(0).len() - 1);
    wait_until(PATIENCE, "every message stored", || async {
        bodies(&pool).await.len() >= expected
    })
    .await;
    let stored = bodies(&pool).await;
    assert_eq!(stored.len(), expected, "every message, each once");
    for n in 0..CONVERSATIONS {
        for message in next_turn(n).iter().skip(1) {
            assert!(stored.contains(&message.to_string()), "{message} was lost");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_killed_with_a_full_write_queue_loses_nothing_for_good() {
    killed_with_a_full_queue_loses_nothing_for_good(TestBackend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_killed_with_a_full_write_queue_loses_nothing_for_good() {
    killed_with_a_full_queue_loses_nothing_for_good(TestBackend::Sqlite).await;
}
