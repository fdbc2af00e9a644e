//! Google's Gemini API (ARCHITECTURE.md "Gemini"): Google's own Python SDK
//! through compactions, streamed and not, on both API versions; the
//! guarantees the other protocols give, checked on Gemini's shapes by the
//! strict fake (`tests/fake-upstream/src/gemini_rules.rs`).

use crate::helpers::agent::{filler, text, Agent, Dialect};
pub use crate::helpers::app::GEMINI_KEY;
use crate::helpers::app::{spawn_app_with, Options, TestApp};
use crate::helpers::db::{both_backends, TestBackend};
use crate::helpers::wait::{wait_until, PATIENCE};
use condenser::protocol::SUMMARY_MARKER;
use fake_upstream::{RequestKind, Scripted};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

/// A Gemini 3 model: the fake requires thought signatures back.
const MODEL: &str = "gemini-3-flash-preview";
const WINDOW: u64 = 6_000;

fn python() -> String {
    std::env::var("CONDENSER_TEST_PYTHON")
        .expect("CONDENSER_TEST_PYTHON is not set: run the suite with scripts/test")
}

/// The proxy with Gemini's paths going to the fake. With `slow_summaries`
/// each summary takes a second, and streams get keep-alives meanwhile.
pub async fn gemini_app(backend: TestBackend, window: u64, slow_summaries: bool) -> TestApp {
    let mut options = Options::on(backend).window(MODEL, window);
    if slow_summaries {
        options.fake.summary_delay = std::time::Duration::from_secs(1);
        options = options.settings(json!({"compaction": {"keepalive_interval": "200ms"}}));
    }
    spawn_app_with(options).await
}

async fn run_sdk(app: &TestApp, stream: bool, version: &str) {
    let path = format!("{}/tests/sdk/gemini_agent.py", env!("CARGO_MANIFEST_DIR"));
    let output = tokio::process::Command::new(python())
        .arg(&path)
        .env("CONDENSER_URL", &app.address)
        .env("MODEL", MODEL)
        .env("TURNS", "30")
        .env("STREAM", if stream { "1" } else { "0" })
        .env("API_VERSION", version)
        .env("GEMINI_KEY", GEMINI_KEY)
        .output()
        .await
        .expect("python runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "gemini_agent.py failed:\n{stderr}");
}

/// The fake refused nothing but for size, summaries were written, and
/// every fact they carried reached the request each stands for.
async fn assert_compacted_and_nothing_refused(app: &TestApp, summaries_at_least: i64) {
    let requests = app.upstream.requests();
    for request in &requests {
        let body = String::from_utf8_lossy(&request.body);
        let size = request.status == 400 && request.input_tokens.is_some_and(|t| t > WINDOW);
        assert!(
            request.status == 200 || size,
            "refused with {}: {}",
            request.status,
            &body[..body.len().min(400)]
        );
    }
    let summaries = requests
        .iter()
        .filter(|r| r.kind == RequestKind::Summary)
        .count();
    assert!(summaries >= 2, "{summaries} summary calls");
    let compactions = app.db.count("select count(*) from compactions").await;
    assert!(
        compactions >= summaries_at_least,
        "{compactions} compactions"
    );
    app.upstream.assert_facts_survive();
}

both_backends!(
    googles_sdk_runs_thirty_tool_turns_through_compactions,
    googles_sdk_streams_thirty_tool_turns_through_compactions_on_v1beta,
    the_summary_is_the_first_content_and_the_system_instruction_is_untouched,
    signatures_pairs_and_media_in_the_kept_tail_reach_the_upstream_byte_identical,
    a_huge_function_response_is_trimmed_without_looping,
    summaries_stay_flat_and_bounded_over_thirty_compactions,
    a_restarted_proxy_reuses_the_stored_compaction,
    a_failed_summary_returns_geminis_own_overflow_error,
    every_content_is_stored_once_and_each_key_has_its_own_history,
    what_is_not_a_conversation_passes_through_byte_identical,
);

async fn googles_sdk_runs_thirty_tool_turns_through_compactions(backend: TestBackend) {
    let app = gemini_app(backend, WINDOW, false).await;
    run_sdk(&app, false, "v1").await;
    assert_compacted_and_nothing_refused(&app, 2).await;
    let chats = app.upstream.chat_requests();
    assert!(chats.iter().all(|r| r
        .path
        .starts_with("/v1/models/gemini-3-flash-preview:generateContent")));
}

async fn googles_sdk_streams_thirty_tool_turns_through_compactions_on_v1beta(backend: TestBackend) {
    // Slow summaries: the SDK reads keep-alives before its answer.
    let app = gemini_app(backend, WINDOW, true).await;
    run_sdk(&app, true, "v1beta").await;
    assert_compacted_and_nothing_refused(&app, 2).await;
    let chats = app.upstream.chat_requests();
    assert!(chats.iter().all(
        |r| r.path.ends_with(":streamGenerateContent") && r.query.as_deref() == Some("alt=sse")
    ));
}

/// A small window and a 300-token summary cap, on the Gemini 3 model.
fn small_window(backend: TestBackend) -> Options {
    Options::on(backend)
        .window(MODEL, 4_000)
        .settings(json!({"compaction": {"summary_max_tokens": 300}}))
}

fn last_accepted(app: &TestApp) -> Value {
    let accepted = app.upstream.last_accepted().expect("an accepted request");
    accepted.json.expect("json")
}

async fn the_summary_is_the_first_content_and_the_system_instruction_is_untouched(
    backend: TestBackend,
) {
    let app = spawn_app_with(small_window(backend)).await;
    let mut agent = Agent::new(Dialect::Gemini, MODEL, 1_500, 3);
    agent.run_until_summaries(&app, 1, 19).await;
    let sent = last_accepted(&app);
    assert_eq!(
        sent["systemInstruction"],
        json!({"parts": [{"text": agent.system}]})
    );
    let contents = sent["contents"].as_array().expect("contents");
    assert_eq!(contents[0]["role"], "user");
    assert_eq!(
        contents[0]["parts"].as_array().map(Vec::len),
        Some(1),
        "a content of its own"
    );
    assert!(text(&contents[0]).starts_with(SUMMARY_MARKER));
    let holding = contents
        .iter()
        .filter(|c| text(c).contains(SUMMARY_MARKER))
        .count();
    assert_eq!(holding, 1);
}

/// A Gemini 3 agent whose user turns carry an image: the fake refuses a
/// missing or altered thought signature and a call parted from its
/// response; every kept content must also be one the client sent, byte for
/// byte.
async fn signatures_pairs_and_media_in_the_kept_tail_reach_the_upstream_byte_identical(
    backend: TestBackend,
) {
    let app = spawn_app_with(small_window(backend)).await;
    let mut agent = Agent::new(Dialect::Gemini, MODEL, 1_200, 3);
    let image = json!({"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="}});
    for turn in 1..=12 {
        let ask = format!("Turn {turn}: what is in this image, and in module {turn}? [tools]");
        agent
            .messages
            .push(json!({"role": "user", "parts": [image, {"text": ask}]}));
        for round in 0..=3 {
            let step = agent.send(&app).await;
            assert_eq!(step.status, 200, "turn {turn}: {}", step.body);
            if !step.body.to_string().contains("functionCall") {
                break;
            }
            let more = if round == 0 { "[more]" } else { "done" };
            agent.answer_tools(&format!("{more} {}", filler(1_200, turn * 10 + round)));
        }
    }
    assert!(app.db.count("select count(*) from compactions").await >= 2);
    let sent = last_accepted(&app);
    let kept = &sent["contents"].as_array().expect("contents")[1..];
    let signed = kept
        .iter()
        .filter(|c| c.to_string().contains("thoughtSignature"))
        .count();
    let images = kept
        .iter()
        .filter(|c| c.to_string().contains("inlineData"))
        .count();
    assert!(
        signed > 0 && images > 0,
        "the kept tail holds signatures ({signed}) and images ({images})"
    );
    let sent_by_client: Vec<String> = agent.messages.iter().map(Value::to_string).collect();
    for content in kept {
        assert!(
            sent_by_client.contains(&content.to_string()),
            "changed on its way upstream: {content}"
        );
    }
}

async fn a_huge_function_response_is_trimmed_without_looping(backend: TestBackend) {
    crate::compaction::huge_tool_result_is_trimmed_without_looping(backend, Dialect::Gemini, MODEL)
        .await;
}

/// On a model that does not think, so the summary's limit is its budget.
async fn summaries_stay_flat_and_bounded_over_thirty_compactions(backend: TestBackend) {
    crate::compaction::summaries_stay_flat_and_bounded(
        backend,
        Dialect::Gemini,
        "gemini-2.0-flash",
    )
    .await;
}

async fn a_restarted_proxy_reuses_the_stored_compaction(backend: TestBackend) {
    crate::compaction::restarted_proxy_reuses_the_stored_compaction(
        backend,
        Dialect::Gemini,
        MODEL,
    )
    .await;
}

/// A summary call that fails leaves the client with the upstream's own
/// overflow, in Gemini's shape, after one attempt at compacting.
async fn a_failed_summary_returns_geminis_own_overflow_error(backend: TestBackend) {
    let app = spawn_app_with(Options::on(backend).window(MODEL, 12_000)).await;
    for _ in 0..4 {
        app.upstream.push_script(Scripted::Respond {
            kind: RequestKind::Summary,
            status: 500,
            headers: vec![],
            body: r#"{"error": {"code": 500, "message": "An internal error has occurred.", "status": "INTERNAL"}}"#.into(),
        });
    }
    // A history past a 12,000-token window.
    let mut agent = crate::streaming::overflowing(Dialect::Gemini, MODEL);
    let step = agent.send(&app).await;
    assert_eq!(step.status, 400);
    assert_eq!(step.body["error"]["status"], "INVALID_ARGUMENT");
    let message = step.body["error"]["message"].as_str().expect("a message");
    assert!(message.starts_with("The input token count ("), "{message}");
    assert!(
        !app.upstream.summary_requests().is_empty(),
        "a summary was attempted"
    );
    assert!(app.upstream.chat_requests().len() <= 3, "bounded attempts");
}

async fn every_content_is_stored_once_and_each_key_has_its_own_history(backend: TestBackend) {
    let app = spawn_app_with(Options::on(backend)).await;
    let mut agent = Agent::new(Dialect::Gemini, MODEL, 200, 1);
    agent.run_turns(&app, 5).await;
    agent.say("One more.");
    assert_eq!(agent.send(&app).await.status, 200);
    // The system part and every content the client sent, once each.
    let sent = agent.messages.len() as i64;
    crate::helpers::admin::wait_for(&app, "select count(*) from messages", sent).await;
    assert_eq!(
        app.db
            .count("select count(distinct hash) from messages")
            .await,
        sent
    );
    let other = app
        .client
        .post(app.url(&format!("/v1beta/models/{MODEL}:generateContent")))
        .query(&[("key", "gk-another-tenant-000000")])
        .json(&agent.request())
        .send()
        .await
        .expect("answers");
    assert_eq!(other.status(), 200);
    crate::helpers::admin::wait_for(&app, "select count(distinct tenant) from messages", 2).await;
    let shared = app.db.count("select count(*) from messages a join messages b on a.hash = b.hash and a.tenant <> b.tenant").await;
    assert_eq!(shared, 0, "no stored content shared across keys");
}

/// `countTokens`, a model listing and a body that is not JSON reach the
/// upstream unchanged, and its answer comes back.
async fn what_is_not_a_conversation_passes_through_byte_identical(backend: TestBackend) {
    let app = spawn_app_with(Options::on(backend)).await;
    let count = br#"{"contents": [{"role": "user", "parts": [{"text": "how long is this?"}]}]}"#;
    let malformed = br#"{"contents": [{"role": "user", "parts": [{"text": "#;
    for (method, body) in [
        ("countTokens", &count[..]),
        ("generateContent", &malformed[..]),
    ] {
        app.upstream.clear_requests();
        let response = app
            .client
            .post(app.url(&format!("/v1beta/models/{MODEL}:{method}")))
            .header("x-goog-api-key", GEMINI_KEY)
            .header("content-type", "application/json")
            .body(body.to_vec())
            .send()
            .await
            .expect("answers");
        let status = response.status().as_u16();
        let answer: Value = response.json().await.expect("json");
        let seen = app.upstream.requests();
        assert_eq!(seen.len(), 1, "{method}");
        assert_eq!(&seen[0].body[..], body, "{method} forwarded byte for byte");
        assert_eq!(status, seen[0].status, "{method}: the upstream's status");
        let expected = if method == "countTokens" {
            json!({"totalTokens": 17})
        } else {
            json!("INVALID_ARGUMENT")
        };
        let got = if method == "countTokens" {
            json!({"totalTokens": answer["totalTokens"]})
        } else {
            answer["error"]["status"].clone()
        };
        assert_eq!(got, expected, "{method}: {answer}");
    }
}

/// The key in `?key=` reaches neither a log line (at debug, JSON) nor the
/// store, on the paths that log most: a compaction and its summary call,
/// a stream, a passthrough, an upstream that refuses, one that is down.
#[tokio::test]
async fn a_key_in_the_query_never_reaches_a_log_line_or_the_store() {
    use crate::helpers::process::ProxyProcess;
    use fake_upstream::{FakeConfig, FakeUpstream};
    let key = "gk-query-secret-4f1c2a9e77";
    let mut fake = FakeConfig {
        summary_marker: Some(SUMMARY_MARKER.into()),
        ..FakeConfig::default()
    };
    fake.context_windows.insert(MODEL.into(), 12_000);
    let fake = FakeUpstream::start(fake).await;
    let store = tempfile::tempdir().expect("a directory for the store");
    let database = format!("sqlite://{}/condenser.db", store.path().display());
    let proxy = ProxyProcess::start(&[
        ("CONDENSER_GEMINI_BASE_URL", &fake.base_url()),
        ("DATABASE_URL", &database),
    ]);
    let down = ProxyProcess::start(&[("CONDENSER_GEMINI_BASE_URL", "http://127.0.0.1:9")]);
    let client = reqwest::Client::new();
    // A history past a 12,000-token window.
    let agent = crate::streaming::overflowing(Dialect::Gemini, MODEL);
    let calls = [
        (&proxy, "generateContent", "", 200),
        (&proxy, "streamGenerateContent", "&alt=sse", 200),
        (&proxy, "countTokens", "", 200),
        (&down, "generateContent", "", 502),
    ];
    for (instance, method, extra, status) in calls {
        let url = instance.url(&format!("/v1beta/models/{MODEL}:{method}?key={key}{extra}"));
        let response = client
            .post(url)
            .json(&agent.request())
            .send()
            .await
            .expect("answers");
        assert_eq!(response.status().as_u16(), status, "{method}");
        response.bytes().await.expect("a whole body");
    }
    let refused = proxy.url(&format!("/v1beta/models/missing:generateContent?key={key}"));
    let response = client
        .post(refused)
        .json(&agent.request())
        .send()
        .await
        .expect("answers");
    assert_eq!(response.status(), 404);
    assert!(
        !fake.summary_requests().is_empty(),
        "a summary call was made with the key"
    );
    assert!(fake
        .summary_requests()
        .iter()
        .all(|r| r.query.as_deref() == Some(&format!("key={key}")[..])));
    let logs = || format!("{}\n{}", proxy.log_text(), down.log_text());
    wait_until(PATIENCE, "the paths under test logged", || async {
        let logs = logs();
        logs.contains("compacted") && logs.contains("unreachable")
    })
    .await;
    let logs = logs();
    assert!(!logs.contains(key), "the key reached the logs");
    let stored: Vec<u8> = std::fs::read_dir(store.path())
        .expect("store files")
        .flat_map(|f| std::fs::read(f.expect("entry").path()).unwrap_or_default())
        .collect();
    assert!(
        stored.len() > 4096 && !stored.windows(key.len()).any(|w| w == key.as_bytes()),
        "the key reached the store"
    );
}
