//! The operator page as a script sees it: the proxy with an admin token,
//! requests with and without it, and waiting for the background recorder.

use super::agent::Agent;
use super::app::{spawn_app_with, Options, TestApp};
use super::db::TestBackend;
use super::wait::{wait_until, PATIENCE};
use serde_json::json;

pub const ADMIN_TOKEN: &str = "admin-token-for-tests-0123456789";

/// The proxy with the operator page on, a small window so an agent compacts.
pub async fn spawn_admin_app(backend: TestBackend, extra: serde_json::Value) -> TestApp {
    let options = Options::on(backend)
        .window("gpt-4o-mini", 4_000)
        .settings(json!({"admin_token": ADMIN_TOKEN, "compaction": {"summary_max_tokens": 300}}))
        .settings(extra);
    spawn_app_with(options).await
}

/// `GET path` with the admin token as a bearer; status and body.
pub async fn admin_get(app: &TestApp, path: &str) -> (u16, String) {
    let response = app
        .client
        .get(app.url(path))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .expect("proxy answers");
    let status = response.status().as_u16();
    (status, response.text().await.expect("text body"))
}

/// Waits until the recorder has written `count` request rows.
pub async fn wait_for_requests(app: &TestApp, count: i64) {
    wait_for(app, "select count(*) from requests", count).await;
}

/// Waits until `sql` counts at least `count` (background writes).
pub async fn wait_for(app: &TestApp, sql: &str, count: i64) {
    let what = format!("{sql} to reach {count}");
    wait_until(PATIENCE, &what, || async {
        app.db.count(sql).await >= count
    })
    .await;
}

/// The conversation pages a list links to, in order. Hrefs are unescaped
/// from the page's HTML (the templates escape `/` as `&#x2f;`).
pub fn conversation_links(list_html: &str) -> Vec<String> {
    list_html
        .split("href=\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .map(|href| href.replace("&#x2f;", "/").replace("&amp;", "&"))
        .filter(|href| href.starts_with("/admin/conversations/"))
        .collect()
}

/// The href of the first conversation the list links to.
pub fn first_conversation_link(list_html: &str) -> String {
    conversation_links(list_html)
        .into_iter()
        .next()
        .expect("the list links to a conversation")
}

/// The agent's turns, stopping right after the request that made the
/// third summary.
pub async fn run_until_three_summaries(app: &TestApp, agent: &mut Agent) {
    let three = |app: &TestApp| app.upstream.summary_requests().len() >= 3;
    for turn in 1..=40 {
        for step in agent.turn_until(app, turn, three).await {
            assert_eq!(step.status, 200, "turn {turn}: {}", step.body);
        }
        if three(app) {
            return;
        }
    }
    panic!("fewer than three summaries after 40 turns");
}

/// `POST /v1/chat/completions` of `body` as `key`, labelled `label`.
pub async fn post_labelled(app: &TestApp, key: &str, label: &str, body: &serde_json::Value) {
    let response = app
        .client
        .post(app.url("/v1/chat/completions"))
        .bearer_auth(key)
        .header("x-conversation-id", label)
        .json(body)
        .send()
        .await
        .expect("proxy answers");
    assert_eq!(response.status(), 200, "{label}");
}
