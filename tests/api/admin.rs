//! The operator page over HTTP: who may open it, what it shows after a real
//! agent run, and that it prints stored text as text.

use crate::helpers::admin::{
    admin_get, conversation_links, first_conversation_link, post_labelled,
    run_until_three_summaries, spawn_admin_app, wait_for_requests, ADMIN_TOKEN,
};
use crate::helpers::agent::{Agent, Dialect};
use crate::helpers::app::{spawn_app, OPENAI_KEY};
use crate::helpers::db::{both_backends, TestBackend};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

both_backends!(
    after_three_compactions_the_conversation_page_shows_three_marks_and_three_summaries,
    a_stored_script_renders_as_text,
    the_list_sorts_filters_and_pages,
    the_list_stays_fast_with_100000_conversations,
);

#[tokio::test]
async fn the_page_is_a_404_when_no_admin_token_is_set() {
    let app = spawn_app().await;
    for path in ["/admin/", "/admin/overview", "/admin/login"] {
        let response = app
            .client
            .get(app.url(path))
            .bearer_auth(OPENAI_KEY)
            .send()
            .await
            .expect("answers");
        assert_eq!(response.status(), 404, "{path}");
    }
    assert!(app.upstream.requests().is_empty(), "nothing was forwarded");
}

#[tokio::test]
async fn without_the_admin_token_every_page_is_refused_and_an_api_key_opens_nothing() {
    let app = spawn_admin_app(TestBackend::Sqlite, json!({})).await;
    let body = json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hello"}]});
    post_labelled(&app, OPENAI_KEY, "secret-project", &body).await;
    wait_for_requests(&app, 1).await;
    let (_, list) = admin_get(&app, "/admin/").await;
    let link = first_conversation_link(&list);

    for path in ["/admin/", "/admin/overview", link.as_str()] {
        for credential in [
            None,
            Some(OPENAI_KEY),
            Some("admin-token-for-tests-012345678"),
        ] {
            let mut request = app.client.get(app.url(path));
            if let Some(credential) = credential {
                request = request.bearer_auth(credential);
            }
            let response = request.send().await.expect("answers");
            assert_eq!(response.status(), 401, "{path} with {credential:?}");
            let text = response.text().await.expect("body");
            assert!(!text.contains("secret-project"), "{path} leaked a label");
        }
    }
    let cookie = app
        .client
        .get(app.url("/admin/"))
        .header("cookie", format!("condenser_admin={ADMIN_TOKEN}"))
        .send()
        .await
        .expect("answers");
    assert_eq!(
        cookie.status(),
        401,
        "the raw token is not a session cookie"
    );
}

#[tokio::test]
async fn the_login_form_sets_an_http_only_cookie_that_opens_the_page() {
    let app = spawn_admin_app(TestBackend::Sqlite, json!({})).await;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let wrong = client
        .post(app.url("/admin/login"))
        .form(&[("token", "not-the-token-at-all")])
        .send()
        .await
        .expect("answers");
    assert_eq!(wrong.status(), 401);
    assert!(wrong.headers().get("set-cookie").is_none());

    let right = client
        .post(app.url("/admin/login"))
        .form(&[("token", ADMIN_TOKEN)])
        .send()
        .await
        .expect("answers");
    assert_eq!(right.status(), 303);
    let cookie = right.headers()["set-cookie"]
        .to_str()
        .expect("ascii")
        .to_owned();
    assert!(cookie.contains("HttpOnly"), "{cookie}");
    assert!(cookie.contains("SameSite=Strict"), "{cookie}");
    assert!(
        !cookie.contains(ADMIN_TOKEN),
        "the cookie carries a digest, not the token"
    );
    let session = cookie.split(';').next().expect("name=value").to_owned();
    let page = client
        .get(app.url("/admin/"))
        .header("cookie", session)
        .send()
        .await
        .expect("answers");
    assert_eq!(page.status(), 200);
    assert!(page.text().await.expect("body").contains("Conversations"));
}

/// The chart data embedded in a conversation page.
fn chart_data(page: &str) -> Value {
    let start = page.find(r#"id="chart-data">"#).expect("chart data") + 16;
    let end = page[start..].find("</script>").expect("end of chart data") + start;
    serde_json::from_str(&page[start..end]).expect("chart data is JSON")
}

async fn after_three_compactions_the_conversation_page_shows_three_marks_and_three_summaries(
    backend: TestBackend,
) {
    let app = spawn_admin_app(backend, json!({})).await;
    let mut agent = Agent::new(Dialect::OpenAi, "gpt-4o-mini", 1_500, 3);
    run_until_three_summaries(&app, &mut agent).await;
    let stored = app.db.count("select count(*) from compactions").await;
    assert_eq!(stored, 3, "the run stopped at the third compaction");
    let sent = app
        .upstream
        .chat_requests()
        .iter()
        .filter(|r| r.status == 200)
        .count();
    wait_for_requests(&app, sent as i64).await;

    let (status, list) = admin_get(&app, "/admin/").await;
    assert_eq!(status, 200);
    let (status, page) = admin_get(&app, &first_conversation_link(&list)).await;
    assert_eq!(status, 200);
    let chart = chart_data(&page);

    assert_eq!(page.matches(r#"<article class="compaction""#).count(), 3);
    assert_eq!(chart["marks"].as_array().map(Vec::len), Some(3));
    assert_eq!(page.matches(r#"<pre class="summary">"#).count(), 3);
    let points = chart["x"].as_array().map_or(0, Vec::len);
    assert!(points >= sent, "{points} chart points for {sent} requests");
    // The sawtooth: the tokens sent drop after each compaction.
    let estimated: Vec<i64> = serde_json::from_value(chart["estimated"].clone()).expect("numbers");
    let drops = estimated.windows(2).filter(|w| w[1] < w[0]).count();
    assert!(drops >= 3, "{drops} drops in {estimated:?}");
    // The fake upstream reports usage: the chart has the upstream's counts.
    assert!(chart["reported"]
        .as_array()
        .expect("reported")
        .iter()
        .any(Value::is_i64));
    // The y axis is scaled to what was sent: its top is above the largest
    // request, not far, and the window is drawn only within it.
    let reported: Vec<i64> = chart["reported"]
        .as_array()
        .expect("reported")
        .iter()
        .filter_map(Value::as_i64)
        .collect();
    let sent_max = estimated
        .iter()
        .chain(&reported)
        .copied()
        .max()
        .expect("points");
    let y_max = chart["y_max"].as_i64().expect("the scale's top");
    let windows: Vec<i64> = chart["window"]
        .as_array()
        .expect("window")
        .iter()
        .filter_map(Value::as_i64)
        .collect();
    let drawn = windows.iter().copied().max().unwrap_or(0);
    assert!(y_max >= sent_max.max(drawn), "{y_max} below what it draws");
    assert!(
        y_max <= 2 * sent_max.max(drawn),
        "{y_max} far above {sent_max} sent"
    );
    assert_eq!(chart["window_shown"], json!(!windows.is_empty()));
}

async fn a_stored_script_renders_as_text(backend: TestBackend) {
    let app = spawn_admin_app(backend, json!({})).await;
    let body = json!({"model": "gpt-4o-mini", "messages": [
        {"role": "user", "content": "<script>window.pwned=1</script><img src=x onerror=alert(1)>"}]});
    post_labelled(&app, OPENAI_KEY, "<b>bold</b>", &body).await;
    wait_for_requests(&app, 1).await;
    let (_, list) = admin_get(&app, "/admin/").await;
    let (_, page) = admin_get(&app, &first_conversation_link(&list)).await;

    for html in [&list, &page] {
        assert!(
            html.contains("&lt;b&gt;bold&lt;&#x2f;b&gt;"),
            "label escaped"
        );
        assert!(!html.contains("<b>bold</b>"));
    }
    assert!(page.contains("&lt;script&gt;window.pwned=1&lt;&#x2f;script&gt;"));
    assert!(!page.contains("<script>window.pwned"));
    assert!(!page.contains("<img src=x"));
}

async fn the_list_sorts_filters_and_pages(backend: TestBackend) {
    let app = spawn_admin_app(backend, json!({})).await;
    for n in 1..=53 {
        // A system prompt of its own: conversations without one would all
        // share the root of the empty system part.
        let system = json!({"role": "system", "content": format!("You are agent {n}.")});
        let messages: Vec<Value> = std::iter::once(system)
            .chain(
                (0..n % 5 + 1).map(|i| json!({"role": "user", "content": format!("message {i}")})),
            )
            .collect();
        post_labelled(
            &app,
            OPENAI_KEY,
            &format!("conv-{n:02}"),
            &json!({"model": "gpt-4o-mini", "messages": messages}),
        )
        .await;
    }
    wait_for_requests(&app, 53).await;

    let (_, first) = admin_get(&app, "/admin/").await;
    assert_eq!(conversation_links(&first).len(), 50);
    assert!(first.contains("next page"));
    let (_, second) = admin_get(&app, "/admin/?sort=activity&dir=desc&offset=50").await;
    assert_eq!(conversation_links(&second).len(), 3);
    assert!(second.contains("conv-01"), "the oldest is on the last page");

    let (_, filtered) = admin_get(&app, "/admin/?q=conv-07").await;
    assert_eq!(conversation_links(&filtered).len(), 1);
    assert!(filtered.contains("conv-07"));

    let (_, by_messages) = admin_get(&app, "/admin/?sort=messages&dir=asc").await;
    let first_row = &by_messages[by_messages.find("<tbody>").expect("rows")..];
    let label_at = first_row.find("conv-").expect("a row");
    let label = &first_row[label_at..label_at + 7];
    let n: usize = label[5..].parse().expect("number");
    assert_eq!(n % 5, 0, "fewest messages first, got {label}");
}

#[tokio::test]
async fn the_overview_counts_requests_overflows_compactions_and_learned_windows() {
    let app = spawn_admin_app(TestBackend::Sqlite, json!({})).await;
    let mut agent = Agent::new(Dialect::OpenAi, "gpt-4o-mini", 1_500, 3);
    agent.run_until_summaries(&app, 2, 19).await;
    let sent = agent
        .messages
        .iter()
        .filter(|m| m["role"] == "assistant")
        .count();
    wait_for_requests(&app, sent as i64).await;
    let overflows = app
        .upstream
        .chat_requests()
        .iter()
        .filter(|r| r.status == 400)
        .count();
    let compactions = app.db.count("select count(*) from compactions").await;
    let overflow_compactions = app
        .db
        .count("select count(*) from compactions where trigger = 'overflow'")
        .await;
    // A window is listed (and shared) once a second credential's overflow
    // agrees with the agent's: one the pipeline cannot compact, refused
    // and so not counted among the requests.
    let lone = json!({"model": "gpt-4o-mini", "max_tokens": 50, "messages": [
        {"role": "user", "content": crate::helpers::agent::filler(40_000, 7)}]});
    let refused = app
        .client
        .post(app.url("/v1/chat/completions"))
        .bearer_auth("sk-test-second-tenant-0123456789")
        .json(&lone)
        .send()
        .await
        .expect("answers");
    assert_eq!(refused.status(), 400);
    crate::helpers::admin::wait_for(
        &app,
        "select count(*) from model_limits where corroborated = 1",
        1,
    )
    .await;

    let (status, page) = admin_get(&app, "/admin/overview?hours=1").await;

    assert_eq!(status, 200);
    for (name, value) in [
        ("Requests", sent),
        ("Overflows", overflows),
        ("Compactions", compactions as usize),
    ] {
        let shown = format!("<dt>{name}</dt><dd>{value}</dd>");
        assert!(page.contains(&shown), "{shown} in {page}");
    }
    assert!(overflows >= 1, "the agent ran into the window");
    let trigger_row =
        format!("<td>overflow</td><td>stored</td><td class=\"num\">{overflow_compactions}</td>");
    assert!(page.contains(&trigger_row), "{trigger_row}");
    assert!(
        page.contains("<td>gpt-4o-mini</td>"),
        "the learned window is listed"
    );
}

/// 100,000 conversation rows, generated in the database itself.
fn generate_conversations_sql(backend: TestBackend) -> &'static str {
    match backend {
        TestBackend::Postgres => {
            "insert into conversations (tenant, conversation, root, label, head, messages, \
             branches, requests, compactions, tokens, window_tokens, model, pruned_at, \
             last_activity, created_at) \
             select lpad(to_hex(i % 97), 64, '0'), lpad(to_hex(i), 64, '0'), \
             lpad(to_hex(i % 89), 64, '0'), 'session-' || i, lpad(to_hex(i), 64, '0'), \
             i % 400, 1 + i % 3, 1 + i % 50, i % 7, i % 120000, 128000, \
             'gpt-4o', null, 1700000000000 + i * 1000, 1700000000000 \
             from generate_series(1, 100000) as i"
        }
        TestBackend::Sqlite => {
            "with recursive n(i) as (select 1 union all select i + 1 from n where i < 100000) \
             insert into conversations (tenant, conversation, root, label, head, messages, \
             branches, requests, compactions, tokens, window_tokens, model, pruned_at, \
             last_activity, created_at) \
             select printf('%064x', i % 97), printf('%064x', i), printf('%064x', i % 89), \
             'session-' || i, printf('%064x', i), \
             i % 400, 1 + i % 3, 1 + i % 50, i % 7, i % 120000, 128000, \
             'gpt-4o', null, 1700000000000 + i * 1000, 1700000000000 from n"
        }
    }
}

async fn the_list_stays_fast_with_100000_conversations(backend: TestBackend) {
    let app = spawn_admin_app(backend, json!({})).await;
    let pool = app.db.pool().await;
    sqlx::query(generate_conversations_sql(backend))
        .execute(&pool)
        .await
        .expect("generating conversations");
    if backend == TestBackend::Postgres {
        sqlx::query("analyze conversations")
            .execute(&pool)
            .await
            .expect("analyze");
    }
    let mut timings = Vec::new();
    let id_prefix = format!("/admin/?q={}", &format!("{:064x}", 77_777)[..62]);
    for path in [
        id_prefix.as_str(),
        "/admin/",
        "/admin/?sort=messages&dir=desc",
        "/admin/?sort=compactions&dir=asc",
        "/admin/?sort=tokens&dir=desc",
        "/admin/?sort=activity&dir=desc&offset=50000",
        "/admin/?q=session-77777",
    ] {
        let started = std::time::Instant::now();
        let (status, page) = admin_get(&app, path).await;
        let elapsed = started.elapsed();
        assert_eq!(status, 200, "{path}");
        assert!(!conversation_links(&page).is_empty(), "{path} lists rows");
        timings.push(format!("{path}: {} ms", elapsed.as_millis()));
        assert!(
            elapsed < std::time::Duration::from_secs(2),
            "{path} took {elapsed:?}"
        );
    }
    eprintln!(
        "{backend:?} with 100,000 conversations:\n{}",
        timings.join("\n")
    );
}

#[test]
fn check_config_never_prints_the_admin_token_and_a_short_one_is_refused() {
    let token = "a-long-admin-token-nobody-may-read";
    let output = crate::helpers::process::binary()
        .arg("check-config")
        .env("CONDENSER_ADMIN_TOKEN", token)
        .output()
        .expect("runs");
    let printed = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{printed}");
    assert!(
        printed.contains("admin_token: Some(\n        Secret([redacted])"),
        "{printed}"
    );
    assert!(!printed.contains(token));

    let short = crate::helpers::process::binary()
        .arg("check-config")
        .env("CONDENSER_ADMIN_TOKEN", "short")
        .output()
        .expect("runs");
    assert_eq!(short.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&short.stderr)
        .contains("admin_token: must be at least 16 characters"));
}

/// A client that shows redirects instead of following them.
fn browser() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

/// Logs in with `token`; the `name=value` of the cookie it set, and the
/// whole `Set-Cookie` line.
async fn log_in(app: &crate::helpers::app::TestApp, token: &str) -> (String, String) {
    let response = browser()
        .post(app.url("/admin/login"))
        .form(&[("token", token)])
        .send()
        .await
        .expect("answers");
    assert_eq!(response.status(), 303, "logged in");
    let line = response.headers()["set-cookie"]
        .to_str()
        .expect("ascii")
        .to_owned();
    let session = line.split(';').next().expect("name=value").to_owned();
    (session, line)
}

async fn list_status(app: &crate::helpers::app::TestApp, session: &str) -> u16 {
    browser()
        .get(app.url("/admin/"))
        .header("cookie", session)
        .send()
        .await
        .expect("answers")
        .status()
        .as_u16()
}

#[tokio::test]
async fn the_session_cookie_expires_and_a_new_admin_token_revokes_it() {
    let mut app = spawn_admin_app(TestBackend::Sqlite, json!({"admin_session_ttl": "2s"})).await;
    let (session, line) = log_in(&app, ADMIN_TOKEN).await;
    assert!(line.contains("Max-Age=2"), "{line}");
    assert_eq!(list_status(&app, &session).await, 200);
    // A session whose issue time is edited is refused.
    let (name, value) = session.split_once('=').expect("name=value");
    let (issued, mac) = value.split_once('.').expect("issued.mac");
    let later: u64 = issued.parse::<u64>().expect("seconds") + 3_600;
    let forged = format!("{name}={later}.{mac}");
    assert_eq!(
        list_status(&app, &forged).await,
        401,
        "an edited issue time"
    );
    // Time passing is the behaviour under test (the session's TTL): a
    // sleep is a lower bound on it, so a busy machine cannot make this fail.
    tokio::time::sleep(std::time::Duration::from_millis(2_500)).await;
    assert_eq!(list_status(&app, &session).await, 401, "an expired session");

    app.reconfigure(json!({"admin_session_ttl": "1h"})).await;
    let (session, _) = log_in(&app, ADMIN_TOKEN).await;
    assert_eq!(list_status(&app, &session).await, 200);
    let new_token = "another-admin-token-9876543210";
    app.reconfigure(json!({"admin_token": new_token})).await;
    assert_eq!(
        list_status(&app, &session).await,
        401,
        "a session of the old token"
    );
    let (session, _) = log_in(&app, new_token).await;
    assert_eq!(list_status(&app, &session).await, 200);
}

#[tokio::test]
async fn login_attempts_are_limited_per_client_address() {
    let app = spawn_admin_app(TestBackend::Sqlite, json!({})).await;
    let attempt = |token: &'static str| {
        browser()
            .post(app.url("/admin/login"))
            .form(&[("token", token)])
            .send()
    };
    for _ in 0..5 {
        let wrong = attempt("not-the-token-at-all").await.expect("answers");
        assert_eq!(wrong.status(), 401);
    }
    let limited = attempt(ADMIN_TOKEN).await.expect("answers");
    assert_eq!(
        limited.status(),
        429,
        "even the right token, past the limit"
    );
    let retry_after: u64 = limited.headers()["retry-after"]
        .to_str()
        .expect("ascii")
        .parse()
        .expect("seconds");
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    assert!(limited.headers().get("set-cookie").is_none());
    // Scripts with the token are not locked out.
    let (status, _) = admin_get(&app, "/admin/").await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn the_login_page_stylesheet_loads_without_a_session() {
    let app = spawn_admin_app(TestBackend::Sqlite, json!({})).await;
    let login = browser()
        .get(app.url("/admin/login"))
        .send()
        .await
        .expect("answers")
        .text()
        .await
        .expect("text");
    let href = login
        .split("rel=\"stylesheet\" href=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the login page links a stylesheet")
        .replace("&#x2f;", "/");
    let css = browser().get(app.url(&href)).send().await.expect("answers");
    assert_eq!(css.status(), 200, "{href}");
    assert_eq!(css.headers()["content-type"], "text/css");
    // The page's other assets still need a session.
    let script = browser()
        .get(app.url("/admin/assets/chart.js"))
        .send()
        .await
        .expect("answers");
    assert_eq!(script.status(), 401);
}
