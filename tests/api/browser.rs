//! The operator page in a real headless Chromium: it refuses a browser
//! without the token, logs in through its form, draws the sawtooth with one
//! mark per compaction, and shows stored markup as text. Leaves a
//! screenshot of the conversation page in `target/admin-conversation.png`.

use crate::helpers::admin::{
    conversation_links, post_labelled, run_until_three_summaries, spawn_admin_app, wait_for,
    ADMIN_TOKEN,
};
use crate::helpers::agent::{Agent, Dialect};
use crate::helpers::app::{TestApp, OPENAI_KEY};
use crate::helpers::browser::Browser;
use crate::helpers::db::TestBackend;
use crate::helpers::wait::{wait_for_some, PATIENCE};
use fantoccini::{Client, Locator};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

async fn count(browser: &Client, css: &str) -> usize {
    browser
        .find_all(Locator::Css(css))
        .await
        .expect("query")
        .len()
}

async fn script(browser: &Client, js: &str) -> Value {
    browser.execute(js, vec![]).await.expect("script runs")
}

/// Waits until the chart script has drawn (it sets `data-marks`).
async fn wait_for_chart(browser: &Client) -> Value {
    let drawn = "return document.getElementById('chart').dataset.marks || null";
    wait_for_some(PATIENCE, "the chart drawn", || async {
        Some(script(browser, drawn).await).filter(|marks| !marks.is_null())
    })
    .await
}

async fn post_script_message(app: &TestApp) {
    let body = json!({"model": "gpt-4o-mini", "messages": [
        {"role": "system", "content": "You review HTML."},
        {"role": "user", "content": "<script>window.pwned = 1</script><img src=x onerror=\"window.pwned = 2\">"}]});
    post_labelled(app, OPENAI_KEY, "html-review", &body).await;
}

#[tokio::test]
async fn a_browser_sees_the_sawtooth_with_three_compaction_marks_and_three_summaries() {
    let app = spawn_admin_app(TestBackend::Sqlite, json!({})).await;
    let mut agent = Agent::new(Dialect::OpenAi, "gpt-4o-mini", 1_500, 3);
    agent.system = "You are a coding agent working on the billing service.".into();
    run_until_three_summaries(&app, &mut agent).await;
    post_script_message(&app).await;
    let sent = app
        .upstream
        .chat_requests()
        .iter()
        .filter(|r| r.status == 200)
        .count();
    wait_for(&app, "select count(*) from requests", sent as i64).await;
    let (_, list) = crate::helpers::admin::admin_get(&app, "/admin/?sort=compactions").await;
    let links = conversation_links(&list);
    let (agent_page, html_page) = (app.url(&links[0]), app.url(&links[1]));
    let browser = Browser::start().await;
    let b = &browser.client;

    // Without the token: the login form, and none of the data.
    b.goto(&agent_page).await.expect("opens");
    assert_eq!(count(b, "#token").await, 1, "the login form is shown");
    assert_eq!(count(b, "#chart").await, 0);
    b.goto(&app.url("/admin/")).await.expect("opens");
    assert_eq!(count(b, "#conversations").await, 0);

    b.find(Locator::Id("token"))
        .await
        .expect("field")
        .send_keys(ADMIN_TOKEN)
        .await
        .expect("types");
    b.find(Locator::Id("login"))
        .await
        .expect("button")
        .click()
        .await
        .expect("submits");
    b.wait()
        .for_element(Locator::Id("conversations"))
        .await
        .expect("the list opens after logging in");
    assert_eq!(
        count(b, "#conversations tbody tr").await,
        2,
        "the list after logging in"
    );

    b.goto(&agent_page).await.expect("opens");
    assert_eq!(wait_for_chart(b).await, json!("3"));
    assert_eq!(count(b, "#chart canvas").await, 1, "uPlot drew the chart");
    // uPlot's y axis runs to the scale the page gave it, above the largest
    // request sent and not far above it.
    let scale = wait_for_some(PATIENCE, "the y axis drawn", || async {
        let read = script(
            b,
            "var d = JSON.parse(document.getElementById('chart-data').textContent); \
             var sent = d.estimated.concat(d.reported.filter(function (v) { return v !== null; })); \
             var drawn = document.getElementById('chart').dataset.yMax; \
             return drawn ? [Number(drawn), d.y_max, Math.max.apply(null, sent)] : null;",
        )
        .await;
        Some(read).filter(|read| !read.is_null())
    })
    .await;
    let [drawn, given, sent] = [0, 1, 2].map(|i| scale[i].as_f64().expect("a number"));
    assert_eq!(drawn, given, "the chart's y axis is the page's scale");
    assert!(given >= sent && given <= 2.0 * sent.max(4_000.0), "{scale}");
    assert_eq!(
        count(b, "#chart .cmark").await,
        3,
        "three compaction marks on the chart"
    );
    assert_eq!(
        count(b, "article.compaction pre.summary").await,
        3,
        "three summaries"
    );
    let screenshot = b.screenshot().await.expect("screenshot");
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/target/admin-conversation.png");
    std::fs::write(path, &screenshot).expect("writing the screenshot");
    assert!(
        screenshot.starts_with(b"\x89PNG"),
        "a PNG was written to {path}"
    );

    b.goto(&html_page).await.expect("opens");
    wait_for_chart(b).await;
    let shown = script(b, "return document.getElementById('messages').innerText").await;
    assert!(
        shown
            .as_str()
            .is_some_and(|t| t.contains("<script>window.pwned = 1</script>")),
        "the stored markup shows as text: {shown}"
    );
    assert_eq!(
        script(b, "return window.pwned === undefined").await,
        json!(true)
    );
    assert_eq!(count(b, "#messages script, #messages img").await, 0);

    b.goto(&app.url("/admin/overview")).await.expect("opens");
    assert_eq!(count(b, "#totals").await, 1, "the overview opens");
    assert_eq!(
        count(b, "#triggers tbody tr").await,
        2,
        "overflow and proactive"
    );
    browser.close().await;
}
