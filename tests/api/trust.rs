//! Trust boundaries between tenants (ARCHITECTURE.md "Knowing sizes",
//! "Storage"): what one credential's traffic teaches Condenser changes
//! nothing for another until it holds up, and a request the upstream
//! refuses leaves nothing in the database.

use crate::helpers::agent::filler;
use crate::helpers::app::{spawn_app_with, Options, TestApp, OPENAI_KEY};
use crate::helpers::db::{both_backends, TestBackend};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

const MODEL: &str = "gpt-4o-mini";
const OTHER_KEY: &str = "sk-test-second-tenant-0123456789";
const THIRD_KEY: &str = "sk-test-third-tenant-0123456789";

both_backends!(
    a_max_tokens_near_u64_max_is_answered_as_the_upstream_answers_it,
    requests_the_upstream_refuses_store_nothing,
    an_echoed_overflow_wording_changes_no_other_tenants_compactions,
    a_window_one_tenant_taught_reaches_others_only_once_a_second_agrees,
    one_tenants_images_do_not_skew_another_tenants_estimates,
);

async fn post(app: &TestApp, key: &str, body: &Value) -> reqwest::Response {
    app.client
        .post(app.url("/v1/chat/completions"))
        .bearer_auth(key)
        .json(body)
        .send()
        .await
        .expect("answers")
}

/// A plain request of about `tokens` of the fake's tokens.
fn request(tokens: usize, seed: usize) -> Value {
    json!({"model": MODEL, "max_tokens": 50, "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": filler(tokens * 4, seed)},
    ]})
}

/// A conversation of six turns, about `tokens` in all: one a compaction
/// could shorten.
fn conversation(tokens: usize, seed: usize) -> Value {
    let mut body = request(tokens / 12, seed);
    let history = body["messages"].as_array_mut().expect("messages");
    for turn in 0..5 {
        let text = |n| filler(tokens * 4 / 12, seed * 100 + turn * 2 + n);
        history.push(json!({"role": "assistant", "content": text(0)}));
        history.push(json!({"role": "user", "content": text(1)}));
    }
    body
}

/// A client's `max_tokens` of `u64::MAX` against a configured window: the
/// estimate plus the output saturates (it once overflowed), Condenser
/// cannot help, and the upstream's own refusal reaches the client.
async fn a_max_tokens_near_u64_max_is_answered_as_the_upstream_answers_it(backend: TestBackend) {
    let options = Options::on(backend).settings(json!({"context_windows": {MODEL: 8_000}}));
    let app = spawn_app_with(options).await;
    let mut body = request(500, 1);
    body["max_tokens"] = json!(u64::MAX);
    let response = post(&app, OPENAI_KEY, &body).await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.expect("json");
    let message = error["error"]["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("max_tokens is too large"), "{message}");
    assert_eq!(post(&app, OPENAI_KEY, &request(500, 2)).await.status(), 200);
}

async fn requests_the_upstream_refuses_store_nothing(backend: TestBackend) {
    let app = spawn_app_with(Options::on(backend)).await;
    let count = |table: &'static str| {
        let db = &app.db;
        async move { db.count(&format!("select count(*) from {table}")).await }
    };
    for i in 0..30 {
        let response = post(&app, "sk-invalid", &request(2_000, i)).await;
        assert_eq!(response.status(), 401);
    }
    // The same request with a valid key is stored. The writer is one
    // queue, first in first out: once this request's rows are written,
    // anything the refused ones queued before it would be written too.
    assert_eq!(
        post(&app, OPENAI_KEY, &request(2_000, 0)).await.status(),
        200
    );
    crate::helpers::admin::wait_for(&app, "select count(*) from messages", 2).await;
    crate::helpers::admin::wait_for(&app, "select count(*) from requests", 1).await;
    assert_eq!(count("messages").await, 2, "the valid request's alone");
    assert_eq!(count("conversations").await, 1);
    assert_eq!(count("requests").await, 1);
}

/// OpenAI echoes an unknown field's name in its refusal; tenant A names
/// one like an overflow. Tenant B's ordinary request must not be compacted.
async fn an_echoed_overflow_wording_changes_no_other_tenants_compactions(backend: TestBackend) {
    let app = spawn_app_with(Options::on(backend).window(MODEL, 8_000)).await;
    let mut bait = request(3_000, 1);
    bait["maximum context length is 1000 tokens"] = json!(true);
    let refused = post(&app, OPENAI_KEY, &bait).await;
    assert_eq!(refused.status(), 400);
    assert_eq!(refused.headers()["x-condenser-compactions"], "0");
    let ordinary = post(&app, OTHER_KEY, &conversation(3_000, 2)).await;
    assert_eq!(ordinary.status(), 200);
    assert_eq!(ordinary.headers()["x-condenser-compactions"], "0");
    assert_eq!(app.upstream.summary_requests().len(), 0);
}

/// Tenant A's genuine overflow teaches A the window; B's request, as large,
/// still goes upstream as sent (and overflows there) until B's own
/// overflow agrees; then a third tenant's is compacted before sending.
async fn a_window_one_tenant_taught_reaches_others_only_once_a_second_agrees(backend: TestBackend) {
    let options = Options::on(backend)
        .window(MODEL, 4_000)
        .settings(json!({"compaction": {"summary_max_tokens": 300}}));
    let app = spawn_app_with(options).await;
    let overflows = |app: &TestApp| {
        let chats = app.upstream.chat_requests();
        chats.iter().filter(|r| r.status == 400).count()
    };
    let large = |seed| {
        let mut body = request(700, seed);
        let history = body["messages"].as_array_mut().expect("messages");
        for turn in 0..6 {
            history.push(json!({"role": "assistant", "content": filler(2_400, seed * 10 + turn)}));
            history.push(json!({"role": "user", "content": filler(400, seed * 100 + turn)}));
        }
        body
    };
    assert_eq!(post(&app, OPENAI_KEY, &large(1)).await.status(), 200);
    assert_eq!(overflows(&app), 1, "A's own overflow");
    assert_eq!(post(&app, OTHER_KEY, &large(2)).await.status(), 200);
    assert_eq!(
        overflows(&app),
        2,
        "B's request went as sent: A's window is A's"
    );
    let third = post(&app, THIRD_KEY, &large(3)).await;
    assert_eq!(third.status(), 200);
    assert_eq!(third.headers()["x-condenser-compactions"], "1");
    assert_eq!(
        overflows(&app),
        2,
        "compacted before sending: agreed by A and B"
    );
}

/// Tenant B's requests carry images: many tokens for few bytes. Tenant A's
/// estimates must not move by more than a tenth.
async fn one_tenants_images_do_not_skew_another_tenants_estimates(backend: TestBackend) {
    let app = spawn_app_with(Options::on(backend)).await;
    for i in 0..3 {
        assert_eq!(
            post(&app, OPENAI_KEY, &request(1_000, i)).await.status(),
            200
        );
    }
    let image = json!({"type": "image_url", "image_url": {"url": "https://example.com/a.png"}});
    for i in 0..10 {
        let mut body = request(100, 100 + i);
        body["messages"][1]["content"] = json!([{"type": "text", "text": "what is in these?"}, image, image, image, image, image]);
        assert_eq!(post(&app, OTHER_KEY, &body).await.status(), 200);
    }
    assert_eq!(
        post(&app, OPENAI_KEY, &request(1_000, 9)).await.status(),
        200
    );
    let sql = "select count(*) from requests where upstream_input_tokens is not null";
    crate::helpers::admin::wait_for(&app, sql, 14).await;
    let pool = app.db.pool().await;
    let last: (i64, i64) = sqlx::query_as(
        "select estimated_tokens, upstream_input_tokens from requests \
         order by created_at desc limit 1",
    )
    .fetch_one(&pool)
    .await
    .expect("A's last request");
    let ratio = last.0 as f64 / last.1 as f64;
    assert!(
        (0.9..=1.1).contains(&ratio),
        "A's estimate over the count: {ratio}"
    );
}
