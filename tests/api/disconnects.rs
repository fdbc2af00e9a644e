//! A client that hangs up while its conversation is being compacted: the
//! compaction still completes, is stored, releases its lease, and the
//! client's retry reuses it without a new summary call.

use crate::helpers::agent::Dialect;
use crate::helpers::app::{spawn_app_with, Options, TestApp, OPENAI_KEY};
use crate::helpers::db::{both_backends, TestBackend};
use crate::helpers::wait::{wait_until, PATIENCE};
use crate::streaming::overflowing;
use fake_upstream::FakeConfig;
use serde_json::{json, Value};
use std::time::Duration;

const MODEL: &str = "gpt-4o-mini";

both_backends!(
    a_plain_client_that_hangs_up_mid_compaction_finds_it_done_on_retry,
    a_streaming_client_that_hangs_up_mid_compaction_finds_it_done_on_retry,
);

async fn a_plain_client_that_hangs_up_mid_compaction_finds_it_done_on_retry(backend: TestBackend) {
    hang_up_then_retry(backend, false).await;
}

async fn a_streaming_client_that_hangs_up_mid_compaction_finds_it_done_on_retry(
    backend: TestBackend,
) {
    hang_up_then_retry(backend, true).await;
}

async fn hang_up_then_retry(backend: TestBackend, stream: bool) {
    let fake = FakeConfig {
        summary_delay: Duration::from_secs(2),
        summary_marker: Some(condenser::protocol::SUMMARY_MARKER.into()),
        ..FakeConfig::default()
    };
    let options = Options {
        fake,
        ..Options::on(backend)
    }
    .window(MODEL, 12_000)
    .settings(json!({"compaction": {"summary_max_tokens": 300, "keep_share": 0.7}}));
    let app = spawn_app_with(options).await;
    let mut request = overflowing(Dialect::OpenAi, MODEL).request();
    request["stream"] = stream.into();

    hang_up_after(&app, &request, Duration::from_millis(700)).await;
    wait_for(&app, "select count(*) from compactions", 1).await;
    wait_for(&app, "select count(*) from leases", 0).await;
    assert_eq!(app.upstream.summary_requests().len(), 1);

    let retry = app.post_chat(&request).await;
    assert_eq!(retry.status(), 200);
    assert_eq!(
        retry.headers()["x-condenser-compactions"],
        "0",
        "the retry reuses the finished compaction"
    );
    retry.bytes().await.expect("whole answer");
    assert_eq!(
        app.upstream.summary_requests().len(),
        1,
        "no new summary call"
    );
}

/// Sends `request` and drops the connection after `patience`, mid-summary.
async fn hang_up_after(app: &TestApp, request: &Value, patience: Duration) {
    let send = async {
        let response = app
            .client
            .post(app.url("/v1/chat/completions"))
            .bearer_auth(OPENAI_KEY)
            .json(request)
            .send()
            .await?;
        response.bytes().await
    };
    assert!(
        tokio::time::timeout(patience, send).await.is_err(),
        "the answer came before the client hung up"
    );
}

async fn wait_for(app: &TestApp, sql: &str, expected: i64) {
    let what = format!("{sql} to be {expected}");
    wait_until(PATIENCE, &what, || async {
        app.db.count(sql).await == expected
    })
    .await;
}
