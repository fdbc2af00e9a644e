//! A conversation is one session: two chats of one tenant that share a
//! system prompt, or two agent sessions that send identical messages, are
//! listed, kept and deleted apart, while storage still shares what they
//! have in common. And what is answered is stored whole or not at all: a
//! compaction never without its messages, a chain never past a gap, the
//! write queue flushed at shutdown.

use crate::helpers::admin::{admin_get, conversation_links, spawn_admin_app, wait_for};
use crate::helpers::agent::{Agent, Dialect};
use crate::helpers::app::{spawn_app_with, Options, TestApp, OPENAI_KEY};
use crate::helpers::db::wait_for_blocked_writer;
use crate::helpers::db::{block_writes, both_backends, TestBackend, TestDb};
use crate::helpers::process::ProxyProcess;
use crate::helpers::wait::{wait_until, PATIENCE};
use crate::lifecycle::condenser_cli;
use condenser::conversation::{ConversationId, TenantId};
use fake_upstream::{FakeConfig, FakeUpstream};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use sqlx::{AnyPool, Row};
use std::collections::BTreeSet;
use std::time::Duration;

both_backends!(
    two_chats_with_one_system_prompt_are_two_conversations,
    retention_deletes_an_idle_chat_and_keeps_its_active_sibling,
    agent_sessions_with_one_system_prompt_list_separately,
    a_compaction_whose_messages_fail_to_write_is_not_stored,
    a_failed_write_leaves_no_later_write_stored_past_a_gap,
);

/// The id of the conversation (without a session id) whose first message
/// holds `text`: its chain link is the conversation's id.
async fn conversation_of(app: &TestApp, text: &str) -> String {
    let pool = app.db.pool().await;
    let id = sqlx::query_scalar(
        "select c.conversation from conversations c join messages m \
         on m.tenant = c.tenant and m.hash = c.conversation where m.body like $1",
    )
    .bind(format!("%{text}%"))
    .fetch_one(&pool)
    .await
    .expect("a conversation opened by the text");
    pool.close().await;
    id
}

/// Every stored message with when it was written: a message stored again
/// after a deletion would show a new time.
async fn messages_written(app: &TestApp) -> BTreeSet<(String, i64)> {
    let pool = app.db.pool().await;
    let rows = sqlx::query("select hash, created_at from messages")
        .fetch_all(&pool)
        .await
        .expect("messages");
    pool.close().await;
    rows.iter()
        .map(|row| {
            (
                row.get::<String, _>("hash"),
                row.get::<i64, _>("created_at"),
            )
        })
        .collect()
}

/// What `conversation` reaches, with when each message was written.
async fn reached(app: &TestApp, conversation: &str) -> BTreeSet<(String, i64)> {
    let store = app.db.store().await;
    let tenant = TenantId::from_credential(b"", Some(format!("Bearer {OPENAI_KEY}").as_bytes()));
    let id = ConversationId::from_hex(conversation).expect("hex id");
    let detail = store.conversation_tree(tenant, id).await.expect("tree");
    detail
        .messages
        .iter()
        .map(|m| (m.hash.to_hex(), m.created_at_ms))
        .collect()
}

/// An agent with the agents' shared system prompt whose chat opens with
/// `opening`.
fn chat(opening: &str) -> Agent {
    let mut agent = Agent::new(Dialect::OpenAi, "gpt-4o-mini", 1_500, 3);
    agent.say(opening);
    agent
}

async fn two_chats_with_one_system_prompt_are_two_conversations(backend: TestBackend) {
    let app = spawn_admin_app(backend, json!({})).await;
    let mut kept = chat("Chat B: the parser.");
    kept.run_until_summaries(&app, 1, 19).await;
    let mut doomed = chat("Chat A: the build.");
    for question in ["first", "second"] {
        doomed.say(question);
        assert_eq!(doomed.send(&app).await.status, 200);
    }
    let answered = app
        .upstream
        .chat_requests()
        .iter()
        .filter(|r| r.status == 200)
        .count();
    wait_for(&app, "select count(*) from requests", answered as i64).await;
    let (a, b) = (
        conversation_of(&app, "Chat A").await,
        conversation_of(&app, "Chat B").await,
    );
    assert_ne!(a, b);

    let listed = condenser_cli(&app, &["conversations", "list"], "").await;
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    let rows: Vec<Vec<&str>> = listed
        .lines()
        .skip(1)
        .map(|row| row.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 2, "{listed}");
    for id in [&a, &b] {
        let row = rows.iter().find(|row| id.starts_with(row[0]));
        assert_eq!(
            row.map(|row| row[3]),
            Some("1"),
            "{id}, one branch: {listed}"
        );
    }
    let (_, page) = admin_get(&app, "/admin/").await;
    let links = conversation_links(&page);
    assert_eq!(links.len(), 2);
    assert!(links.iter().any(|l| l.ends_with(&a)) && links.iter().any(|l| l.ends_with(&b)));

    let kept_before = reached(&app, &b).await;
    let remembered = app.stored_head(&b).await;
    let compactions = app.db.count("select count(*) from compactions").await;
    let output = condenser_cli(&app, &["conversations", "delete", &a[..10]], "").await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );

    assert_eq!(
        messages_written(&app).await,
        kept_before,
        "every message of B, unchanged"
    );
    assert_eq!(reached(&app, &b).await, kept_before);
    assert_eq!(
        app.db.count("select count(*) from compactions").await,
        compactions
    );
    // Any deletion makes the server forget all it knew stored, B's too.
    app.wait_until_forgotten(remembered).await;

    let summaries = app.upstream.summary_requests().len();
    let recorded = app.db.count("select count(*) from requests").await;
    kept.say("One more question about the parser.");
    let step = kept.send(&app).await;
    assert_eq!(step.status, 200, "{}", step.body);
    assert!(
        step.compacted_messages.is_some(),
        "its stored summary applied"
    );
    wait_for(&app, "select count(*) from requests", recorded + 1).await;
    wait_for(
        &app,
        "select count(*) from messages",
        kept_before.len() as i64 + 2,
    )
    .await;
    let after = messages_written(&app).await;
    assert_eq!(
        app.upstream.summary_requests().len(),
        summaries,
        "no re-compaction"
    );
    assert!(
        after.is_superset(&kept_before),
        "nothing of B written again"
    );
    assert_eq!(
        after.len(),
        kept_before.len() + 2,
        "the reply and the question only"
    );
}

async fn retention_deletes_an_idle_chat_and_keeps_its_active_sibling(backend: TestBackend) {
    let app = spawn_admin_app(
        backend,
        json!({"storage": {"retention": "1h", "maintenance_interval": "100ms"}}),
    )
    .await;
    for opening in ["Chat A: long ago.", "Chat B: today."] {
        let mut agent = chat(opening);
        for question in ["first", "second"] {
            agent.say(question);
            assert_eq!(agent.send(&app).await.status, 200);
        }
    }
    wait_for(&app, "select count(*) from requests", 4).await;
    let (idle, active) = (
        conversation_of(&app, "Chat A").await,
        conversation_of(&app, "Chat B").await,
    );
    let active_messages = reached(&app, &active).await;
    let pool = app.db.pool().await;
    sqlx::query(
        "update conversations set last_activity = last_activity - 7200000 \
         where conversation = $1",
    )
    .bind(&idle)
    .execute(&pool)
    .await
    .expect("backdating");

    wait_until(PATIENCE, "the idle chat gone", || async {
        app.db.count("select count(*) from conversations").await == 1
    })
    .await;
    let remaining: String = sqlx::query_scalar("select conversation from conversations")
        .fetch_one(&pool)
        .await
        .expect("one row");
    assert_eq!(remaining, active);
    assert_eq!(
        messages_written(&app).await,
        active_messages,
        "the sibling whole, root too"
    );
    assert_eq!(reached(&app, &active).await, active_messages);
}

/// Claude Code sends one system prompt for every session of a key, and an
/// agent's sessions may open alike: the session header tells them apart.
async fn agent_sessions_with_one_system_prompt_list_separately(backend: TestBackend) {
    let app = spawn_admin_app(backend, json!({})).await;
    let opening = json!({"role": "user", "content": "Fix the failing test."});
    let system = json!({"role": "system", "content": "You are Claude Code."});
    let sessions = [
        ("x-claude-code-session-id", "9f1c-session-one"),
        ("x-claude-code-session-id", "4b7e-session-two"),
        ("x-session-id", "opencode-session"),
    ];
    for (header, session) in sessions {
        let body = json!({"model": "gpt-4o-mini", "messages": [system, opening]});
        let response = app
            .client
            .post(app.url("/v1/chat/completions"))
            .bearer_auth(OPENAI_KEY)
            .header(header, session)
            .json(&body)
            .send()
            .await
            .expect("answers");
        assert_eq!(response.status(), 200);
    }
    wait_for(&app, "select count(*) from requests", 3).await;

    let labels: BTreeSet<String> = {
        let pool = app.db.pool().await;
        sqlx::query_scalar("select label from conversations")
            .fetch_all(&pool)
            .await
            .expect("labels")
            .into_iter()
            .collect()
    };
    let expected: BTreeSet<String> = sessions.iter().map(|(_, s)| s.to_string()).collect();
    assert_eq!(labels, expected, "one conversation per session");
    assert_eq!(
        app.db.count("select count(*) from messages").await,
        2,
        "identical messages are stored once"
    );
    let (_, page) = admin_get(&app, "/admin/").await;
    assert_eq!(conversation_links(&page).len(), 3);
    for (_, session) in sessions {
        assert!(page.contains(session), "{session} listed");
    }
    let listed = condenser_cli(&app, &["conversations", "list"], "").await;
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    assert_eq!(listed.lines().count(), 4, "{listed}");
}

/// Makes the database refuse to store any message whose body holds
/// `POISON`, the way a constraint or a full disk refuses a write.
async fn refuse_poison(pool: &AnyPool, backend: TestBackend) {
    let statements = match backend {
        TestBackend::Postgres => vec![
            "create function refuse_poison() returns trigger language plpgsql as $$ \
             begin if new.body like '%POISON%' then raise exception 'refused'; end if; \
             return new; end $$",
            "create trigger refuse_poison before insert on messages \
             for each row execute function refuse_poison()",
        ],
        TestBackend::Sqlite => vec![
            "create trigger refuse_poison before insert on messages \
             when new.body like '%POISON%' begin select raise(abort, 'refused'); end",
        ],
    };
    for statement in statements {
        sqlx::query(statement).execute(pool).await.expect("trigger");
    }
}

async fn allow_poison(pool: &AnyPool, backend: TestBackend) {
    let statement = match backend {
        TestBackend::Postgres => "drop trigger refuse_poison on messages",
        TestBackend::Sqlite => "drop trigger refuse_poison",
    };
    sqlx::query(statement).execute(pool).await.expect("dropped");
}

/// Compactions standing for a prefix the store lacks.
const UNCOVERED: &str = "select count(*) from compactions k where not exists \
     (select 1 from messages m where m.tenant = k.tenant and m.hash = k.prefix_hash)";

/// Stored messages whose parent is not: a gap in a chain.
const GAPS: &str = "select count(*) from messages m where m.parent is not null and not exists \
     (select 1 from messages p where p.tenant = m.tenant and p.hash = m.parent)";

/// A compaction is stored only once the messages it covers are: when
/// their write fails, the request is still answered (with the summary it
/// paid for), and no compaction stands for messages the store lacks.
async fn a_compaction_whose_messages_fail_to_write_is_not_stored(backend: TestBackend) {
    let app = spawn_app_with(Options::on(backend).window("gpt-4o-mini", 4_000)).await;
    let pool = app.db.pool().await;
    refuse_poison(&pool, backend).await;
    let filler = crate::helpers::agent::filler(3_000, 1);
    let mut messages = vec![json!({"role": "system", "content": "You are terse."})];
    for turn in 0..8 {
        let poison = if turn == 0 { "POISON " } else { "" };
        messages
            .push(json!({"role": "user", "content": format!("{poison}question {turn}: {filler}")}));
        messages.push(json!({"role": "assistant", "content": format!("answer {turn}")}));
    }
    messages.push(json!({"role": "user", "content": "and now?"}));

    let response = app
        .post_chat(&json!({"model": "gpt-4o-mini", "messages": messages}))
        .await;

    assert_eq!(response.status(), 200, "the client got its answer");
    let compacted = response.headers().get("x-condenser-compactions").cloned();
    assert_eq!(
        compacted.as_ref().map(|v| v.to_str().expect("ascii")),
        Some("1")
    );
    assert!(!app.upstream.summary_requests().is_empty());
    wait_for(&app, "select count(*) from requests", 1).await;
    assert_eq!(app.db.count("select count(*) from messages").await, 0);
    assert_eq!(
        app.db.count(UNCOVERED).await,
        0,
        "no compaction without its messages"
    );
    assert_eq!(app.db.count("select count(*) from compactions").await, 0);
}

async fn ask(app: &TestApp, messages: &[Value]) -> reqwest::Response {
    app.post_chat(&json!({"model": "gpt-4o-mini", "messages": messages}))
        .await
}

fn history(turns: usize) -> Vec<Value> {
    let mut messages = vec![json!({"role": "system", "content": "You are terse."})];
    for turn in 0..turns {
        let poison = if turn == 0 { " POISON" } else { "" };
        messages.push(json!({"role": "user", "content": format!("question {turn}{poison}")}));
        messages.push(json!({"role": "assistant", "content": format!("answer {turn}")}));
    }
    messages
}

/// Request A (a history of ten messages, none stored) is queued; request
/// B, its next turn, is queued with A's ten counted as stored. A's write
/// fails: B's two new messages must not be stored alone, after a gap of
/// ten; once the database takes them, the next request stores the chain
/// whole.
async fn a_failed_write_leaves_no_later_write_stored_past_a_gap(backend: TestBackend) {
    let app = spawn_app_with(Options::on(backend)).await;
    let pool = app.db.pool().await;
    refuse_poison(&pool, backend).await;
    let mut a = history(5);
    a.pop();
    let lock = block_writes(&pool, backend).await;
    assert_eq!(ask(&app, &a).await.status(), 200);
    let mut b = history(6);
    b.pop();
    assert_eq!(ask(&app, &b).await.status(), 200);
    wait_for_blocked_writer(&pool, backend).await;
    lock.rollback().await.expect("unlocked");
    wait_for(&app, "select count(*) from requests", 2).await;

    assert_eq!(app.db.count(GAPS).await, 0, "no message stored past a gap");
    assert_eq!(app.db.count("select count(*) from messages").await, 0);

    allow_poison(&pool, backend).await;
    let mut c = history(7);
    c.pop();
    assert_eq!(ask(&app, &c).await.status(), 200);
    wait_for(&app, "select count(*) from messages", c.len() as i64).await;
    assert_eq!(app.db.count(GAPS).await, 0);
    assert_eq!(
        app.db.count("select count(*) from messages").await,
        c.len() as i64
    );
}

/// Holds the write lock while the proxy answers, then stops it: past the
/// grace period the queue is still written, within its own deadline.
async fn shutdown_writes_the_queue_past_the_grace_period(backend: TestBackend) {
    let upstream = FakeUpstream::start(FakeConfig::default()).await;
    let db = TestDb::new(backend).await;
    let env = [
        ("CONDENSER_OPENAI_BASE_URL", upstream.openai_base_url()),
        ("DATABASE_URL", db.url.clone()),
        ("CONDENSER__SHUTDOWN_GRACE", "500ms".to_owned()),
        ("CONDENSER__STORAGE__FLUSH_DEADLINE", "30s".to_owned()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let client = reqwest::Client::new();
    let mut proxy = ProxyProcess::start(&env);
    let pool = db.pool().await;
    let answered: Vec<Vec<Value>> = (0..6)
        .map(|n| {
            vec![
                json!({"role": "system", "content": "You are terse."}),
                json!({"role": "user", "content": format!("session {n}: a question")}),
            ]
        })
        .collect();

    let lock = block_writes(&pool, backend).await;
    for messages in &answered {
        let response = client
            .post(proxy.url("/v1/chat/completions"))
            .bearer_auth(OPENAI_KEY)
            .json(&json!({"model": "gpt-4o-mini", "messages": messages}))
            .send()
            .await
            .expect("answers");
        assert_eq!(response.status(), 200);
    }
    proxy.signal("TERM");
    // Well past the grace period: the process waits for its queue. Time
    // passing is the behaviour under test: a sleep is a lower bound on it,
    // so a busy machine cannot make this fail.
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    assert!(
        proxy.child.try_wait().expect("try_wait").is_none(),
        "the process left before its queue was written: {}",
        proxy.log_text()
    );
    lock.rollback().await.expect("unlocked");
    let status = proxy.wait_exit(Duration::from_secs(30)).expect("exits");
    assert!(status.success(), "{}", proxy.log_text());

    let bodies: BTreeSet<String> = sqlx::query_scalar("select body from messages")
        .fetch_all(&pool)
        .await
        .expect("messages")
        .into_iter()
        .collect();
    for messages in &answered {
        // The system part is the root, stored once for all six.
        for message in messages.iter().skip(1) {
            assert!(bodies.contains(&message.to_string()), "{message} lost");
        }
    }
    assert_eq!(
        bodies.len(),
        1 + answered.len(),
        "one shared root, each question once"
    );
    let heads = "select count(*) from conversation_heads";
    assert_eq!(
        db.count(heads).await,
        answered.len() as i64,
        "each its conversation"
    );
    assert!(
        proxy.log_text().contains("queued writes written"),
        "{}",
        proxy.log_text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_shutdown_writes_the_queue_past_the_grace_period() {
    shutdown_writes_the_queue_past_the_grace_period(TestBackend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_shutdown_writes_the_queue_past_the_grace_period() {
    shutdown_writes_the_queue_past_the_grace_period(TestBackend::Sqlite).await;
}
