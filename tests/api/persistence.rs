//! Every conversation is stored as a content-addressed chain, once, on both
//! backends; the credential never is; a dead database degrades, not fails.

use crate::helpers::app::{spawn_app_with, Options, TestApp, ANTHROPIC_KEY, OPENAI_KEY};
use crate::helpers::db::{both_backends, TestBackend};
use crate::helpers::tcp_relay::TcpRelay;
use crate::helpers::wait::{wait_until, PATIENCE};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use sqlx::AnyPool;

async fn pool(app: &TestApp) -> AnyPool {
    app.db.pool().await
}

async fn count(pool: &AnyPool, sql: &str) -> i64 {
    sqlx::query_scalar::<_, i64>(sql)
        .fetch_one(pool)
        .await
        .expect("count query")
}

/// Persistence runs beside the upstream call: wait until it has landed.
async fn wait_for_rows(pool: &AnyPool, expected: i64) -> i64 {
    let what = format!("{expected} stored messages");
    wait_until(PATIENCE, &what, || async {
        count(pool, "select count(*) from messages").await >= expected
    })
    .await;
    count(pool, "select count(*) from messages").await
}

fn chat(messages: &[Value]) -> Value {
    let mut all = vec![json!({"role": "system", "content": "You are terse."})];
    all.extend(messages.iter().cloned());
    json!({"model": "gpt-4o", "messages": all})
}

both_backends!(
    a_500_message_conversation_stores_each_message_once,
    identical_conversations_of_two_credentials_are_separate,
    an_edit_branches_from_the_shared_prefix,
    no_credential_is_ever_stored,
    one_failing_statement_degrades_no_other_request,
);

async fn a_500_message_conversation_stores_each_message_once(backend: TestBackend) {
    let app = spawn_app_with(Options::on(backend).window("gpt-4o", 1_000_000)).await;
    let pool = pool(&app).await;
    let mut messages = Vec::new();
    let mut previous_rows = 0;
    for turn in 0..250 {
        messages.push(json!({"role": "user", "content": format!("question {turn}")}));
        let response = app.post_chat(&chat(&messages)).await;
        assert_eq!(response.status(), 200);
        let body: Value = response.json().await.expect("json");
        let expected = 1 + messages.len() as i64;
        let rows = wait_for_rows(&pool, expected).await;
        assert_eq!(rows, expected, "turn {turn}: each message stored once");
        assert!(
            rows - previous_rows <= 2,
            "turn {turn}: wrote {} rows for one new message",
            rows - previous_rows
        );
        previous_rows = rows;
        messages.push(body["choices"][0]["message"].clone());
    }
    assert_eq!(messages.len(), 500);
    let distinct = count(&pool, "select count(distinct hash) from messages").await;
    assert_eq!(
        distinct, 500,
        "system root + 499 sent messages, all distinct"
    );
}

async fn identical_conversations_of_two_credentials_are_separate(backend: TestBackend) {
    let app = spawn_app_with(Options::on(backend)).await;
    let body = chat(&[json!({"role": "user", "content": "same words"})]);
    for key in ["sk-first-key-000000", "sk-second-key-00000"] {
        let response = app
            .client
            .post(app.url("/v1/chat/completions"))
            .bearer_auth(key)
            .json(&body)
            .send()
            .await
            .expect("answers");
        assert_eq!(response.status(), 200);
    }
    let pool = pool(&app).await;
    assert_eq!(wait_for_rows(&pool, 4).await, 4);
    assert_eq!(
        count(&pool, "select count(distinct tenant) from messages").await,
        2
    );
    assert_eq!(
        count(&pool, "select count(distinct hash) from messages").await,
        4,
        "no chain shared across tenants"
    );
}

async fn an_edit_branches_from_the_shared_prefix(backend: TestBackend) {
    let app = spawn_app_with(Options::on(backend)).await;
    let original: Vec<Value> = (1..=10)
        .map(|i| json!({"role": if i % 2 == 1 { "user" } else { "assistant" }, "content": format!("message {i}")}))
        .collect();
    let mut edited = original.clone();
    edited[2] = json!({"role": "user", "content": "message 3, edited"});
    let pool = pool(&app).await;
    assert_eq!(app.post_chat(&chat(&original)).await.status(), 200);
    assert_eq!(wait_for_rows(&pool, 11).await, 11);
    assert_eq!(app.post_chat(&chat(&edited)).await.status(), 200);
    assert_eq!(
        wait_for_rows(&pool, 19).await,
        19,
        "messages 3..10 of the branch are new, 1..2 shared"
    );
    assert_eq!(
        count(&pool, "select count(*) from messages where position = 2").await,
        1,
        "message 2 is shared"
    );
    assert_eq!(
        count(&pool, "select count(*) from messages where position = 3").await,
        2,
        "message 3 branches"
    );
}

async fn no_credential_is_ever_stored(backend: TestBackend) {
    let app = spawn_app_with(Options::on(backend)).await;
    assert_eq!(
        app.post_chat(&chat(&[json!({"role": "user", "content": "hello"})]))
            .await
            .status(),
        200
    );
    let anthropic = json!({"model": "claude-sonnet-4-5", "max_tokens": 100, "system": "Be brief.", "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(app.post_messages(&anthropic).await.status(), 200);
    wait_for_rows(&pool(&app).await, 4).await;
    let dump = app.db.dump().await;
    assert!(
        dump.len() > 100 && dump.contains("hello"),
        "the dump holds the stored conversation"
    );
    for secret in [OPENAI_KEY, ANTHROPIC_KEY] {
        assert!(!dump.contains(secret), "{secret} found in the database");
    }
}

#[tokio::test]
async fn a_dead_database_degrades_forwarding_and_recovers_without_restart() {
    let probe = crate::helpers::db::TestDb::new(TestBackend::Postgres).await;
    let mut url = url::Url::parse(&probe.url).expect("postgres url");
    let target = format!(
        "{}:{}",
        url.host_str().expect("host"),
        url.port().unwrap_or(5432)
    );
    let relay = TcpRelay::start(
        tokio::net::lookup_host(target)
            .await
            .expect("resolves")
            .next()
            .expect("an address"),
    )
    .await;
    url.set_port(Some(relay.addr.port())).expect("port");
    let options = Options::on(TestBackend::Postgres).settings(json!({
        "database_url": url.to_string(),
        "storage": {"degraded_retry": "200ms", "acquire_timeout": "500ms"},
    }));
    let app = spawn_app_with(options).await;
    let pool = {
        sqlx::any::install_default_drivers();
        AnyPool::connect(&probe.url).await.expect("direct pool")
    };
    let mut messages = vec![json!({"role": "user", "content": "before the outage"})];
    let ok = app.post_chat(&chat(&messages)).await;
    assert_eq!(ok.status(), 200);
    assert!(ok.headers().get("x-condenser-degraded").is_none());
    assert_eq!(wait_for_rows(&pool, 2).await, 2);

    relay.cut();
    messages.push(json!({"role": "assistant", "content": "ok"}));
    messages.push(json!({"role": "user", "content": "during the outage"}));
    // Writes happen after the answer, so the proxy notices the outage at
    // the first write; from then on the responses say so.
    let what = "a response that says history was not stored";
    wait_until(PATIENCE, what, || async {
        let response = app.post_chat(&chat(&messages)).await;
        assert_eq!(
            response.status(),
            200,
            "requests keep succeeding without the database"
        );
        response
            .headers()
            .get("x-condenser-degraded")
            .is_some_and(|v| v == "storage-unavailable")
    })
    .await;
    let metrics = app
        .client
        .get(app.url("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    let degraded_requests: f64 = metrics
        .lines()
        .find(|line| line.starts_with("condenser_degraded_requests_total "))
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
        .expect("a degraded-requests counter on /metrics");
    assert!(
        degraded_requests >= 1.0,
        "/metrics counts degraded requests"
    );

    relay.restore().await;
    messages.push(json!({"role": "assistant", "content": "ok"}));
    messages.push(json!({"role": "user", "content": "after the outage"}));
    // Each try is a request of its own: the proxy finds the database back
    // at a write, as it found it gone.
    let what = "new messages stored again once the database is back";
    wait_until(PATIENCE, what, || async {
        let response = app.post_chat(&chat(&messages)).await;
        assert_eq!(response.status(), 200);
        count(&pool, "select count(*) from messages").await >= 6
    })
    .await;
    drop(probe);
}

#[test]
fn the_cli_shows_what_is_stored() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let app = runtime.block_on(spawn_app_with(Options::default()));
    let body = chat(&[json!({"role": "user", "content": "show me"})]);
    let response = runtime
        .block_on(
            app.client
                .post(app.url("/v1/chat/completions"))
                .bearer_auth(OPENAI_KEY)
                .json(&body)
                .send(),
        )
        .expect("answers");
    assert_eq!(response.status(), 200);
    runtime.block_on(async { wait_for_rows(&pool(&app).await, 2).await });
    let run = |args: &[&str]| {
        let output = crate::helpers::process::binary()
            .args(args)
            .args(["--database-url", &app.db.url])
            .output()
            .expect("runs");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).to_string()
    };
    let list = run(&["conversations", "list"]);
    let root = list
        .split_whitespace()
        .find(|word| word.len() >= 8 && word.chars().all(|c| c.is_ascii_hexdigit()))
        .expect("a conversation id in the list")
        .to_string();
    let shown = run(&["conversations", "show", &root]);
    assert!(shown.contains("user"), "{shown}");
}

/// The circuit opens when the database is down, not when one statement
/// fails: a row the database refuses (here, by a trigger) leaves the next
/// conversations stored and their responses without the degraded header.
async fn one_failing_statement_degrades_no_other_request(backend: TestBackend) {
    let app = spawn_app_with(Options::on(backend)).await;
    let pool = pool(&app).await;
    let poison = match backend {
        TestBackend::Postgres => vec![
            "create function refuse_poison() returns trigger language plpgsql as $$ \
             begin if new.role = 'poison' then raise exception 'refused'; end if; return new; end $$",
            "create trigger refuse_poison before insert on messages \
             for each row execute function refuse_poison()",
        ],
        TestBackend::Sqlite => vec![
            "create trigger refuse_poison before insert on messages \
             when new.role = 'poison' begin select raise(abort, 'refused'); end",
        ],
    };
    for statement in poison {
        sqlx::query(statement)
            .execute(&pool)
            .await
            .expect("trigger");
    }
    let errors_before = storage_errors(&app).await;
    let refused = chat(&[json!({"role": "poison", "content": "never stored"})]);
    app.post_chat(&refused).await;
    wait_until(PATIENCE, "the refused insert counted", || async {
        storage_errors(&app).await > errors_before
    })
    .await;

    let fine = chat(&[json!({"role": "user", "content": "an ordinary question"})]);
    let response = app.post_chat(&fine).await;
    assert_eq!(response.status(), 200);
    assert!(
        response.headers().get("x-condenser-degraded").is_none(),
        "one failed statement put the next request in degraded mode"
    );
    assert_eq!(
        wait_for_rows(&pool, 2).await,
        2,
        "the next conversation is stored"
    );
}

/// `condenser_storage_errors_total`, all operations (the recorder is the
/// process's, shared by the tests running beside this one).
async fn storage_errors(app: &TestApp) -> f64 {
    let metrics = app
        .client
        .get(app.url("/metrics"))
        .send()
        .await
        .expect("metrics");
    let text = metrics.text().await.expect("text");
    text.lines()
        .filter(|line| line.starts_with("condenser_storage_errors_total"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Writes wait behind a lock until the write queue is full: every request
/// is still answered, those that could not be queued say so, and their
/// conversations' next turns store every message.
#[tokio::test]
async fn a_full_write_queue_degrades_answers_and_loses_no_message() {
    let options = Options::on(TestBackend::Postgres)
        .settings(json!({"storage": {"write_queue_bytes": 60_000}}));
    let app = spawn_app_with(options).await;
    let pool = pool(&app).await;
    let question =
        |n: usize| json!({"role": "user", "content": format!("{n}: {}", "words ".repeat(3_000))});
    let mut lock = pool.begin().await.expect("transaction");
    sqlx::query("lock table messages in exclusive mode")
        .execute(&mut *lock)
        .await
        .expect("lock");
    let mut degraded = Vec::new();
    for n in 0..6 {
        let response = app.post_chat(&chat(&[question(n)])).await;
        assert_eq!(response.status(), 200, "answered whatever the queue");
        let header = response.headers().get("x-condenser-degraded");
        degraded.push(header.map(|v| v.to_str().expect("ascii").to_owned()));
    }
    assert_eq!(degraded[0], None, "the first request was queued");
    assert!(
        degraded.contains(&Some("write-queue-full".to_owned())),
        "a request that found the queue full says so: {degraded:?}"
    );
    lock.rollback().await.expect("unlocked");
    // One shared root, and the first turns that were queued.
    let mut stored = 1 + degraded.iter().filter(|d| d.is_none()).count() as i64;
    assert_eq!(wait_for_rows(&pool, stored).await, stored);

    // Each conversation's next turn, once the queue has room again.
    for (n, refused) in degraded.iter().enumerate() {
        let next = [
            question(n),
            json!({"role": "assistant", "content": "noted"}),
            json!({"role": "user", "content": format!("{n}: next")}),
        ];
        let response = app.post_chat(&chat(&next)).await;
        assert_eq!(response.status(), 200);
        assert!(response.headers().get("x-condenser-degraded").is_none());
        // A refused first turn is stored now, with the two new messages.
        stored += if refused.is_none() { 2 } else { 3 };
        assert_eq!(wait_for_rows(&pool, stored).await, stored);
    }
}
