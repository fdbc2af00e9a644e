//! Retention and deletion on both backends: idle conversations go with
//! everything that names them, newer ones stay; a tenant's deletion leaves
//! no row with its digest; one conversation can be deleted by id, and if
//! its client carries on, the running server stores it again whole.

use crate::helpers::admin::{post_labelled, spawn_admin_app, wait_for};
use crate::helpers::agent::{Agent, Dialect};
use crate::helpers::app::{TestApp, ANTHROPIC_KEY, OPENAI_KEY};
use crate::helpers::db::{both_backends, TestBackend};
use crate::helpers::process::binary;
use crate::helpers::wait::{wait_until, PATIENCE};
use condenser::conversation::TenantId;
use pretty_assertions::assert_eq;
use serde_json::json;
use std::process::Stdio;
use tokio::io::AsyncWriteExt;

/// The request row of the conversation labelled "recent".
const RECENT_RECORDED: &str = "select count(*) from requests r join conversations c \
     on c.tenant = r.tenant and c.conversation = r.conversation where c.label = 'recent'";

both_backends!(
    conversations_idle_past_the_retention_are_deleted_and_newer_ones_kept,
    deleting_a_tenant_leaves_no_row_with_its_digest,
    one_conversation_is_deleted_by_its_id,
    a_conversation_deleted_beside_the_server_is_stored_whole_when_it_goes_on,
    the_background_task_prunes_an_old_dead_end_and_keeps_the_live_branch,
);

/// One short conversation of `key`, labelled `label`, with its own system prompt.
async fn chat(app: &TestApp, key: &str, label: &str) {
    let body = json!({"model": "gpt-4o-mini", "max_tokens": 64, "messages": [
        {"role": "system", "content": format!("You help with {label}.")},
        {"role": "user", "content": format!("hello from {label}")}]});
    let request = match key {
        ANTHROPIC_KEY => app.client.post(app.url("/v1/messages")).header("x-api-key", key).header("anthropic-version", "2023-06-01")
            .json(&json!({"model": "claude-test", "max_tokens": 64, "system": format!("You help with {label}."),
                "messages": [{"role": "user", "content": format!("hello from {label}")}]})),
        _ => app.client.post(app.url("/v1/chat/completions")).bearer_auth(key).json(&body),
    };
    let response = request
        .header("x-conversation-id", label)
        .send()
        .await
        .expect("answers");
    assert_eq!(response.status(), 200);
}

/// Runs the `condenser` command line on the app's database. Awaited, not
/// blocked on: the proxy runs on this test's runtime and must be able to
/// finish its writes while the command waits for the database.
pub async fn condenser_cli(app: &TestApp, args: &[&str], stdin: &str) -> std::process::Output {
    let mut command = tokio::process::Command::from(binary());
    let mut child = command
        .args(args)
        .env("DATABASE_URL", &app.db.url)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("runs");
    let mut input = child.stdin.take().expect("stdin");
    input
        .write_all(stdin.as_bytes())
        .await
        .expect("writes stdin");
    drop(input);
    child.wait_with_output().await.expect("exits")
}

/// Deletes the conversation labelled `label` with `condenser conversations
/// delete`, naming it by a prefix of its id as an operator would.
async fn delete_by_command_line(app: &TestApp, label: &str) {
    let pool = app.db.pool().await;
    let id: String = sqlx::query_scalar("select conversation from conversations where label = $1")
        .bind(label)
        .fetch_one(&pool)
        .await
        .expect("id");
    let output = condenser_cli(app, &["conversations", "delete", &id[..10]], "").await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Rows of `table` labelled or rooted in the conversation labelled `label`.
async fn rows_of(app: &TestApp, label: &str) -> [i64; 3] {
    let id = format!("(select conversation from conversations where label = '{label}')");
    [
        app.db
            .count(&format!(
                "select count(*) from messages where label = '{label}'"
            ))
            .await,
        app.db
            .count(&format!(
                "select count(*) from conversations where label = '{label}'"
            ))
            .await,
        app.db
            .count(&format!(
                "select count(*) from requests where conversation in {id}"
            ))
            .await,
    ]
}

async fn conversations_idle_past_the_retention_are_deleted_and_newer_ones_kept(
    backend: TestBackend,
) {
    let app = spawn_admin_app(
        backend,
        json!({"storage": {"retention": "1h", "maintenance_interval": "100ms"}}),
    )
    .await;
    let mut agent = Agent::new(Dialect::OpenAi, "gpt-4o-mini", 1_500, 3);
    agent.run_until_summaries(&app, 1, 19).await;
    chat(&app, OPENAI_KEY, "recent").await;
    wait_for(&app, RECENT_RECORDED, 1).await;
    wait_for(
        &app,
        "select count(*) from messages where label = 'recent'",
        2,
    )
    .await;
    // Every request the agent made is recorded before the clock is turned back.
    let sent = agent
        .messages
        .iter()
        .filter(|m| m["role"] == "assistant")
        .count();
    wait_for(&app, "select count(*) from requests", sent as i64 + 1).await;
    assert!(app.db.count("select count(*) from compactions").await >= 1);
    let recent_before = rows_of(&app, "recent").await;

    // The agent's conversation was last active two hours ago.
    let pool = app.db.pool().await;
    sqlx::query(
        "update conversations set last_activity = last_activity - 7200000 where label is null",
    )
    .execute(&pool)
    .await
    .expect("backdating");
    wait_until(PATIENCE, "the idle conversation gone", || async {
        app.db.count("select count(*) from conversations").await == 1
    })
    .await;

    assert_eq!(app.db.count("select count(*) from compactions").await, 0);
    assert_eq!(
        app.db
            .count("select count(*) from messages where label is null")
            .await,
        0
    );
    assert_eq!(
        app.db.count("select count(*) from messages").await,
        recent_before[0],
        "only the recent conversation's messages remain"
    );
    assert_eq!(rows_of(&app, "recent").await, recent_before);
    assert_eq!(recent_before, [2, 1, 1]);
}

async fn deleting_a_tenant_leaves_no_row_with_its_digest(backend: TestBackend) {
    let app = spawn_admin_app(backend, json!({})).await;
    let mut agent = Agent::new(Dialect::OpenAi, "gpt-4o-mini", 1_500, 3);
    agent.run_until_summaries(&app, 1, 19).await;
    chat(&app, OPENAI_KEY, "second").await;
    chat(&app, ANTHROPIC_KEY, "other-tenant").await;
    wait_for(&app, "select count(*) from conversations", 3).await;
    for label in ["second", "other-tenant"] {
        let sql = format!("select count(*) from messages where label = '{label}'");
        wait_for(&app, &sql, 2).await;
    }
    let digest = TenantId::from_credential(b"", Some(format!("Bearer {OPENAI_KEY}").as_bytes()));

    let output = condenser_cli(&app, &["tenants", "delete"], &format!("{OPENAI_KEY}\n")).await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(said.contains("2 conversations"), "{said}");
    assert!(!said.contains(OPENAI_KEY) && !said.contains(digest.as_str()));

    for table in [
        "messages",
        "compactions",
        "leases",
        "requests",
        "conversations",
    ] {
        let sql = format!(
            "select count(*) from {table} where tenant = '{}'",
            digest.as_str()
        );
        assert_eq!(app.db.count(&sql).await, 0, "{table}");
    }
    assert_eq!(
        rows_of(&app, "other-tenant").await,
        [2, 1, 1],
        "another tenant is untouched"
    );
}

async fn one_conversation_is_deleted_by_its_id(backend: TestBackend) {
    let app = spawn_admin_app(backend, json!({})).await;
    chat(&app, OPENAI_KEY, "doomed").await;
    chat(&app, OPENAI_KEY, "kept").await;
    wait_for(&app, "select count(*) from conversations", 2).await;
    wait_for(&app, "select count(*) from messages", 4).await;

    delete_by_command_line(&app, "doomed").await;

    assert_eq!(rows_of(&app, "doomed").await, [0, 0, 0]);
    assert_eq!(rows_of(&app, "kept").await, [2, 1, 1]);
}

/// The server remembers which messages it stored; a deletion by the
/// command line, in another process, must not leave it believing so.
async fn a_conversation_deleted_beside_the_server_is_stored_whole_when_it_goes_on(
    backend: TestBackend,
) {
    let app = spawn_admin_app(backend, json!({})).await;
    chat(&app, OPENAI_KEY, "doomed").await;
    wait_for(&app, "select count(*) from conversations", 1).await;
    let pool = app.db.pool().await;
    let id: String = sqlx::query_scalar("select conversation from conversations where label = $1")
        .bind("doomed")
        .fetch_one(&pool)
        .await
        .expect("id");
    let doomed = app.stored_head(&id).await;
    delete_by_command_line(&app, "doomed").await;
    assert_eq!(rows_of(&app, "doomed").await, [0, 0, 0]);
    app.wait_until_forgotten(doomed).await;

    let next_turn = json!({"model": "gpt-4o-mini", "max_tokens": 64, "messages": [
        {"role": "system", "content": "You help with doomed."},
        {"role": "user", "content": "hello from doomed"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "still there?"}]});
    let response = app
        .client
        .post(app.url("/v1/chat/completions"))
        .bearer_auth(OPENAI_KEY)
        .header("x-conversation-id", "doomed")
        .json(&next_turn)
        .send()
        .await
        .expect("answers");
    assert_eq!(response.status(), 200);

    let recorded = "select count(*) from requests r join conversations c \
         on c.tenant = r.tenant and c.conversation = r.conversation where c.label = 'doomed'";
    wait_for(&app, recorded, 1).await;
    assert_eq!(
        rows_of(&app, "doomed").await,
        [4, 1, 1],
        "all four messages stored again, not only the two new ones"
    );
}

async fn the_background_task_prunes_an_old_dead_end_and_keeps_the_live_branch(
    backend: TestBackend,
) {
    let app = spawn_admin_app(
        backend,
        json!({"storage": {"prune_branches_after": "1h", "maintenance_interval": "100ms"}}),
    )
    .await;
    let request = |last: &str| {
        json!({"model": "gpt-4o-mini", "messages": [
            {"role": "system", "content": "You answer questions."},
            {"role": "user", "content": "first question"},
            {"role": "user", "content": last}]})
    };
    // An edit of the last message: the first version is a dead end.
    post_labelled(&app, OPENAI_KEY, "edited", &request("second question")).await;
    wait_for(&app, "select count(*) from messages", 3).await;
    post_labelled(
        &app,
        OPENAI_KEY,
        "edited",
        &request("second question, edited"),
    )
    .await;
    wait_for(&app, "select count(*) from messages", 4).await;
    wait_for(&app, "select branches from conversations", 2).await;
    assert_eq!(app.db.count("select count(*) from messages").await, 4);
    // The task looks at the branched conversation at its next run, finds
    // nothing old enough, and marks it looked at (`pruned_at`, now); it
    // looks again once that mark is as old as the grace period. Time moves
    // only after that look: a run that read the conversation before the
    // back-dating would otherwise mark it with its own "now" after it, and
    // leave it alone for an hour.
    let looked = "select count(*) from conversations where pruned_at is not null";
    wait_until(
        PATIENCE,
        "the task's first look at the branches",
        || async { app.db.count(looked).await == 1 },
    )
    .await;

    // Two hours pass: every stored time moves back at once (one
    // transaction), including when the task last looked.
    let pool = app.db.pool().await;
    let mut backdating = pool.begin().await.expect("transaction");
    for sql in [
        "update messages set created_at = created_at - 7200000",
        "update conversations set pruned_at = pruned_at - 7200000, \
         last_activity = last_activity - 7200000",
    ] {
        sqlx::query(sql)
            .execute(&mut *backdating)
            .await
            .expect("backdating");
    }
    backdating.commit().await.expect("backdated");
    wait_until(PATIENCE, "the dead end pruned", || async {
        app.db.count("select count(*) from messages").await < 4
    })
    .await;

    let left = app.db.count("select count(*) from messages").await;
    assert_eq!(left, 3, "the dead end is pruned, and only it");
    let live = sqlx::query_scalar::<_, String>("select body from messages where position = 2")
        .fetch_one(&pool)
        .await
        .expect("the live branch's tip");
    assert!(live.contains("second question, edited"), "{live}");
    assert_eq!(app.db.count("select branches from conversations").await, 1);
}
