//! Provider-native compaction in the Responses API, served by Condenser
//! (issue 40): a `compaction_trigger` answered with one sealed compaction
//! item, the item expanded into Condenser's summary message on the next
//! request (on another instance too), forged items refused, and forward
//! mode passing every form byte for byte.

use crate::helpers::agent::filler;
use crate::helpers::app::{spawn_app_with, Options, TestApp, OPENAI_KEY};
use crate::helpers::db::{both_backends, TestBackend};
use condenser::protocol::SUMMARY_MARKER;
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

const MODEL: &str = "gpt-5-codex";

fn options(backend: TestBackend) -> Options {
    Options::on(backend).settings(json!({"compaction": {"summary_max_tokens": 300}}))
}

fn user(text: &str) -> Value {
    json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
}

fn history() -> Vec<Value> {
    vec![
        user(&format!("Read this log: {}", filler(2_000, 1))),
        json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Read it."}]}),
        user("Now fix the bug."),
    ]
}

fn triggered(stream: bool) -> Value {
    let mut input = history();
    input.push(json!({"type": "compaction_trigger"}));
    json!({"model": MODEL, "instructions": "You are a coding agent.", "input": input, "store": false, "stream": stream})
}

/// The SSE events of a streamed answer.
fn events(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter_map(|data| serde_json::from_str(data).ok())
        .collect()
}

/// Asks for a compaction, streamed; returns the compaction item.
async fn compaction_item(app: &TestApp) -> Value {
    let response = app.post_responses(&triggered(true)).await;
    assert_eq!(response.status(), 200);
    let events = events(&response.text().await.expect("body"));
    let done: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "response.output_item.done")
        .collect();
    assert_eq!(done.len(), 1, "{events:?}");
    let completed = events.last().expect("events");
    assert_eq!(completed["type"], "response.completed");
    assert!(completed["response"]["usage"]["input_tokens"].as_u64() > Some(0));
    let item = done[0]["item"].clone();
    assert_eq!(item["type"], "compaction");
    assert!(item["id"].is_string());
    item
}

fn after_compaction(item: &Value) -> Value {
    let input = vec![
        user(&format!("Read this log: {}", filler(2_000, 1))),
        user("Now fix the bug."),
        json!({"type": "compaction", "encrypted_content": item["encrypted_content"]}),
        user("And run the tests."),
    ];
    json!({"model": MODEL, "input": input, "store": false, "stream": false})
}

both_backends!(
    a_compaction_trigger_is_answered_by_condenser,
    a_compaction_item_comes_back_as_the_summary_message,
    a_compaction_item_opens_on_another_instance,
    an_altered_item_is_refused_and_nothing_is_stored,
    an_item_of_another_key_is_refused,
    forward_mode_passes_the_forms_untouched,
    the_compact_endpoint_is_answered_by_condenser,
    forward_mode_passes_the_compact_endpoint_untouched,
    context_management_is_removed_where_condenser_serves,
    past_its_threshold_a_request_is_answered_after_a_compaction_item,
    past_its_threshold_a_stream_carries_the_compaction_item_first,
    forward_mode_to_openai_is_byte_identical_for_every_form,
);

async fn a_compaction_trigger_is_answered_by_condenser(backend: TestBackend) {
    let app = spawn_app_with(options(backend)).await;
    let item = compaction_item(&app).await;
    let sealed = item["encrypted_content"].as_str().expect("content");
    assert!(sealed.starts_with("condenser.v1."), "{sealed}");
    assert_eq!(app.upstream.summary_requests().len(), 1);
    // Stored like Condenser's own compactions, for the operator page.
    let asked = "select count(*) from compactions where trigger = 'asked'";
    assert_eq!(app.db.count(asked).await, 1);
    for request in app.upstream.requests() {
        let body = String::from_utf8_lossy(&request.body);
        assert!(!body.contains("compaction_trigger"), "{body}");
    }
    // Asked without streaming, the same answer as one JSON response.
    let response = app.post_responses(&triggered(false)).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["object"], "response");
    assert_eq!(body["status"], "completed");
    let output = body["output"].as_array().expect("output");
    assert_eq!(output.len(), 1);
    assert_eq!(output[0]["type"], "compaction");
    assert!(body["usage"]["total_tokens"].as_u64() > Some(0));
    // The usage is what the summary call used, as the upstream reported.
    let summary = app.upstream.summary_requests().last().cloned();
    let reported = summary.expect("a summary call").input_tokens;
    assert_eq!(body["usage"]["input_tokens"].as_u64(), reported);
}

async fn a_compaction_item_comes_back_as_the_summary_message(backend: TestBackend) {
    let app = spawn_app_with(options(backend)).await;
    let item = compaction_item(&app).await;
    let response = app.post_responses(&after_compaction(&item)).await;
    let status = response.status();
    assert_eq!(status, 200, "{}", response.text().await.unwrap_or_default());
    let accepted = app.upstream.last_accepted().expect("accepted");
    let input = accepted.json.expect("json")["input"].clone();
    let input = input.as_array().expect("input");
    // Invariant 1: the summary right after the system part (none here),
    // then the messages Codex kept, in order.
    assert_eq!(input.len(), 4);
    let summary = input[0]["content"][0]["text"].as_str().expect("text");
    assert!(summary.starts_with(SUMMARY_MARKER), "{summary}");
    assert_eq!(input[0]["type"], "message");
    assert_eq!(input[2], user("Now fix the bug."));
    assert_eq!(input[3], user("And run the tests."));
}

async fn a_compaction_item_opens_on_another_instance(backend: TestBackend) {
    let mut app = spawn_app_with(options(backend)).await;
    let item = compaction_item(&app).await;
    // A second instance on the same database (the first still runs).
    app.restart().await;
    let response = app.post_responses(&after_compaction(&item)).await;
    assert_eq!(response.status(), 200);
    let accepted = app.upstream.last_accepted().expect("accepted");
    assert!(String::from_utf8_lossy(&accepted.body).contains(SUMMARY_MARKER));
}

async fn an_altered_item_is_refused_and_nothing_is_stored(backend: TestBackend) {
    let app = spawn_app_with(options(backend)).await;
    let item = compaction_item(&app).await;
    let sealed = item["encrypted_content"].as_str().expect("content");
    let mut altered = sealed.as_bytes().to_vec();
    let index = altered.len() / 2;
    altered[index] = if altered[index] == b'a' { b'b' } else { b'a' };
    let altered = json!({"encrypted_content": String::from_utf8(altered).expect("test value")});
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let stored = app.db.count("select count(*) from messages").await;
    let seen = app.upstream.requests().len();
    let response = app.post_responses(&after_compaction(&altered)).await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.expect("json");
    assert_eq!(error["error"]["type"], "invalid_request_error", "{error}");
    assert!(error["error"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("compaction item")));
    assert_eq!(app.upstream.requests().len(), seen, "nothing forwarded");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(app.db.count("select count(*) from messages").await, stored);
}

async fn an_item_of_another_key_is_refused(backend: TestBackend) {
    let settings = json!({"compaction": {"summary_max_tokens": 300, "item_key": "one"}});
    let mut app = spawn_app_with(Options::on(backend).settings(settings)).await;
    let item = compaction_item(&app).await;
    app.reconfigure(json!({"compaction": {"item_key": "two"}}))
        .await;
    let response = app.post_responses(&after_compaction(&item)).await;
    assert_eq!(response.status(), 400);
    // Another credential (tenant) cannot open it either.
    app.reconfigure(json!({"compaction": {"item_key": "one"}}))
        .await;
    let response = app
        .client
        .post(app.url("/v1/responses"))
        .bearer_auth(format!("{OPENAI_KEY}-other"))
        .json(&after_compaction(&item))
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status(), 400);
}

async fn forward_mode_passes_the_forms_untouched(backend: TestBackend) {
    let settings = json!({"upstreams": {"openai": {"native_compaction": "forward"}}});
    let app = spawn_app_with(Options::on(backend).settings(settings)).await;
    let body = serde_json::to_vec(&triggered(false)).expect("test value");
    let provider_item =
        json!({"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAAABprovider"});
    let mut later = after_compaction(&provider_item);
    later["input"][2] = provider_item;
    for body in [body, serde_json::to_vec(&later).expect("test value")] {
        let response = app
            .client
            .post(app.url("/v1/responses"))
            .bearer_auth(OPENAI_KEY)
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .expect("sent");
        assert_eq!(response.status(), 200);
        let received = app.upstream.requests().last().expect("forwarded").clone();
        assert_eq!(received.body.as_ref(), body.as_slice(), "byte-identical");
    }
    assert!(app.upstream.summary_requests().is_empty());
}

/// `POST /v1/responses/compact` as `client.responses.compact` sends it.
async fn compact(app: &TestApp, body: &Value) -> reqwest::Response {
    app.client
        .post(app.url("/v1/responses/compact"))
        .bearer_auth(OPENAI_KEY)
        .json(body)
        .send()
        .await
        .expect("sent")
}

async fn the_compact_endpoint_is_answered_by_condenser(backend: TestBackend) {
    let app = spawn_app_with(options(backend)).await;
    let asked =
        json!({"model": MODEL, "instructions": "You are a coding agent.", "input": history()});
    let response = compact(&app, &asked).await;
    let status = response.status();
    let body: Value = response.json().await.expect("json");
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["object"], "response.compaction");
    assert!(body["id"].is_string() && body["created_at"].is_u64());
    assert!(body["usage"]["input_tokens"].as_u64() > Some(0));
    let output = body["output"].as_array().expect("output");
    // Every user message, then one compaction item.
    assert_eq!(output.len(), 3, "{body}");
    assert_eq!(output[0], history()[0]);
    assert_eq!(output[1], history()[2]);
    assert_eq!(output[2]["type"], "compaction");
    let asked = "select count(*) from compactions where trigger = 'asked'";
    assert_eq!(app.db.count(asked).await, 1);
    let summaries = app.upstream.summary_requests();
    assert_eq!(summaries.len(), 1);
    assert!(
        summaries[0].path.ends_with("/responses"),
        "{}",
        summaries[0].path
    );
    assert!(app
        .upstream
        .requests()
        .iter()
        .all(|r| !r.path.ends_with("/compact")));
    // The session goes on with the compacted output as its input; compacted
    // again, the old summary is folded in, not kept as a user message.
    let mut input = output.clone();
    input.push(user("Run the tests."));
    let next = json!({"model": MODEL, "input": input, "store": false});
    let response = app.post_responses(&next).await;
    assert_eq!(response.status(), 200);
    let accepted = app.upstream.last_accepted().expect("accepted");
    assert!(String::from_utf8_lossy(&accepted.body).contains(SUMMARY_MARKER));
    let again = compact(&app, &json!({"model": MODEL, "input": input})).await;
    let again: Value = again.json().await.expect("json");
    let output = again["output"].as_array().expect("output");
    assert_eq!(output.len(), 4, "{again}");
    assert_eq!(output[3]["type"], "compaction");
}

async fn forward_mode_passes_the_compact_endpoint_untouched(backend: TestBackend) {
    let settings = json!({"upstreams": {"openai": {"native_compaction": "forward"}}});
    let app = spawn_app_with(Options::on(backend).settings(settings)).await;
    let asked = json!({"model": MODEL, "input": history()});
    // The third-party server has no such endpoint: its own 404 comes back.
    let response = compact(&app, &asked).await;
    assert_eq!(response.status(), 404);
    assert!(app.upstream.summary_requests().is_empty());
    assert!(app.upstream.requests().is_empty());
}

async fn context_management_is_removed_where_condenser_serves(backend: TestBackend) {
    let app = spawn_app_with(options(backend)).await;
    let mut body = json!({"model": MODEL, "input": history(), "store": false});
    body["context_management"] = json!([{"type": "compaction", "compact_threshold": 1000}]);
    let response = app.post_responses(&body).await;
    assert_eq!(response.status(), 200);
    let accepted = app.upstream.last_accepted().expect("accepted");
    assert!(accepted
        .json
        .expect("json")
        .get("context_management")
        .is_none());
    // Forwarded, the third-party server refuses the field.
    let mut app = app;
    app.reconfigure(json!({"upstreams": {"openai": {"native_compaction": "forward"}}}))
        .await;
    let response = app.post_responses(&body).await;
    assert_eq!(response.status(), 400);
    let error = response.text().await.unwrap_or_default();
    assert!(error.contains("Extra inputs are not permitted"), "{error}");
}

/// A conversation of about 1,600 tokens (four bytes a token) whose old
/// turns are worth compacting, asking for compaction past 1,000 tokens.
fn managed(stream: bool) -> Value {
    let input = vec![
        user(&format!("Read this log: {}", filler(3_000, 1))),
        json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Read it."}]}),
        user(&format!("And this one: {}", filler(3_000, 2))),
        json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Noted."}]}),
        user("Now fix the bug."),
    ];
    json!({"model": MODEL, "input": input, "store": false, "stream": stream,
        "context_management": [{"type": "compaction", "compact_threshold": 1000}]})
}

/// The input of the request the upstream last answered.
fn upstream_input(app: &TestApp) -> Vec<Value> {
    let accepted = app.upstream.last_accepted().expect("accepted");
    let input = accepted.json.expect("json")["input"].clone();
    input.as_array().expect("input").clone()
}

/// What the upstream got for the reply: Condenser's summary in place of
/// the old turns, and no `context_management`.
fn assert_compacted_upstream(app: &TestApp) {
    let accepted = app.upstream.last_accepted().expect("accepted");
    let sent = accepted.json.expect("json");
    assert!(sent.get("context_management").is_none());
    let text = sent["input"][0]["content"][0]["text"]
        .as_str()
        .unwrap_or("");
    assert!(text.starts_with(SUMMARY_MARKER), "{sent}");
    assert!(!accepted.body.windows(10).any(|w| w == b"fact-00001"));
    assert_eq!(app.upstream.summary_requests().len(), 1);
}

async fn past_its_threshold_a_request_is_answered_after_a_compaction_item(backend: TestBackend) {
    let app = spawn_app_with(options(backend)).await;
    let response = app.post_responses(&managed(false)).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.expect("json");
    let output = body["output"].as_array().expect("output");
    assert_eq!(output.len(), 2, "{body}");
    assert_eq!(output[0]["type"], "compaction");
    let sealed = output[0]["encrypted_content"].as_str().expect("sealed");
    assert!(sealed.starts_with("condenser.v1."));
    assert_eq!(output[1]["type"], "message");
    assert_compacted_upstream(&app);
    assert_eq!(app.db.count("select count(*) from compactions").await, 1);
    let first = upstream_input(&app);
    // The client goes on as the compaction guide says: output appended to
    // input. The item stands for everything before it, so the old turns
    // never reach the upstream again, nothing is compacted anew, and what
    // the upstream got last time opens this request unchanged (its prompt
    // cache keeps hitting).
    let mut next = managed(false);
    let input = next["input"].as_array_mut().expect("input");
    input.extend(output.iter().cloned());
    input.push(user("Run the tests."));
    let response = app.post_responses(&next).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.expect("json");
    assert_eq!(
        body["output"].as_array().expect("output").len(),
        1,
        "{body}"
    );
    assert_compacted_upstream(&app);
    let second = upstream_input(&app);
    assert_eq!(second[..first.len()], first[..]);
    assert_eq!(
        second[first.len()..],
        [output[1].clone(), user("Run the tests.")]
    );
    // Below the threshold: the field is removed and nothing else happens.
    let small = json!({"model": MODEL, "input": [user("hi")],
        "context_management": [{"type": "compaction", "compact_threshold": 1000}]});
    let body: Value = app.post_responses(&small).await.json().await.expect("json");
    assert_eq!(body["output"][0]["type"], "message", "{body}");
    assert_eq!(app.upstream.summary_requests().len(), 1);
}

async fn past_its_threshold_a_stream_carries_the_compaction_item_first(backend: TestBackend) {
    let app = spawn_app_with(options(backend)).await;
    let response = app.post_responses(&managed(true)).await;
    assert_eq!(response.status(), 200);
    let events = events(&response.text().await.expect("body"));
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    let added = kinds
        .iter()
        .position(|k| *k == "response.output_item.added")
        .expect("an item");
    let before = ["response.created", "response.in_progress"];
    assert!(
        kinds[..added].iter().all(|k| before.contains(k)),
        "{kinds:?}"
    );
    assert_eq!(events[added]["item"]["type"], "compaction");
    assert_eq!(events[added]["output_index"], 0);
    assert_eq!(kinds[added + 1], "response.output_item.done");
    assert_eq!(events[added + 1]["item"]["type"], "compaction");
    // The reply follows at output index 1, numbered after the item.
    let reply: Vec<&Value> = events[added + 2..]
        .iter()
        .filter(|e| e.get("output_index").is_some())
        .collect();
    assert!(!reply.is_empty());
    assert!(reply.iter().all(|e| e["output_index"] == 1), "{reply:?}");
    let numbers: Vec<u64> = events
        .iter()
        .filter_map(|e| e["sequence_number"].as_u64())
        .collect();
    assert!(numbers.windows(2).all(|w| w[1] == w[0] + 1), "{numbers:?}");
    let completed = events.last().expect("events");
    assert_eq!(completed["type"], "response.completed");
    let output = completed["response"]["output"].as_array().expect("output");
    assert_eq!(output[0]["type"], "compaction");
    assert_eq!(output[1]["type"], "message");
    assert_compacted_upstream(&app);
}

/// `auto` mode where the upstream is named OpenAI's host: it is asked
/// first, and what shows it does not know a form is served on the same
/// request and remembered. The upstream's address is `api.openai.com`,
/// reached through an HTTP proxy that is the third-party fake itself.
mod auto_mode {
    use super::*;
    use crate::helpers::process::ProxyProcess;
    use fake_upstream::{FakeConfig, FakeUpstream};
    use pretty_assertions::assert_eq;

    async fn openai_named_third_party() -> (FakeUpstream, ProxyProcess) {
        let config = FakeConfig {
            summary_marker: Some(SUMMARY_MARKER.into()),
            ..FakeConfig::default()
        };
        let fake = FakeUpstream::start(config).await;
        let proxy = format!("http://{}", fake.addr());
        let process = ProxyProcess::start(&[
            ("CONDENSER_OPENAI_BASE_URL", "http://api.openai.com/v1"),
            ("HTTP_PROXY", &proxy),
            ("CONDENSER_SUMMARY_MAX_TOKENS", "300"),
        ]);
        (fake, process)
    }

    async fn post(process: &ProxyProcess, body: &Value) -> reqwest::Response {
        reqwest::Client::new()
            .post(format!("{}/v1/responses", process.address))
            .bearer_auth(OPENAI_KEY)
            .json(body)
            .send()
            .await
            .expect("sent")
    }

    fn asked_with(fake: &FakeUpstream, form: &str) -> usize {
        let requests = fake.requests();
        let with = requests.iter().filter(|r| {
            let body = String::from_utf8_lossy(&r.body);
            body.contains(form)
        });
        with.count()
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_trigger_answered_without_its_item_is_served_and_remembered() {
        let (fake, process) = openai_named_third_party().await;
        for turn in 1..=2 {
            let response = post(&process, &triggered(true)).await;
            assert_eq!(response.status(), 200);
            let events = events(&response.text().await.expect("body"));
            let done: Vec<&Value> = events
                .iter()
                .filter(|e| e["type"] == "response.output_item.done")
                .collect();
            assert_eq!(done.len(), 1, "turn {turn}: {events:?}");
            assert_eq!(done[0]["item"]["type"], "compaction");
            // Asked of the upstream once, answered with a plain message;
            // served by Condenser from then on: the identical ask again
            // from the compaction already written, without a summary call.
            assert_eq!(asked_with(&fake, "compaction_trigger"), 1);
            assert_eq!(fake.summary_requests().len(), 1);
        }
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn context_management_refused_as_unknown_is_served_on_the_same_request() {
        let (fake, process) = openai_named_third_party().await;
        let mut body = json!({"model": MODEL, "input": history(), "store": false});
        body["context_management"] = json!([{"type": "compaction", "compact_threshold": 1000}]);
        for sent in 1..=2 {
            let response = post(&process, &body).await;
            let status = response.status();
            let answer = response.text().await.expect("body");
            assert_eq!(status, 200, "{answer}");
            // Refused once, with "context_management: Extra inputs are not
            // permitted"; every later request goes without the field.
            assert_eq!(asked_with(&fake, "context_management"), 1);
            assert_eq!(fake.chat_requests().len(), sent + 1);
        }
    }
}

/// `body` posted to `url` as raw bytes; the status and the answer's bytes.
async fn post_bytes(app: &TestApp, url: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let response = app
        .client
        .post(url)
        .bearer_auth(OPENAI_KEY)
        .header("content-type", "application/json")
        .body(body.to_vec())
        .send()
        .await
        .expect("sent");
    let status = response.status().as_u16();
    (status, response.bytes().await.expect("body").to_vec())
}

async fn forward_mode_to_openai_is_byte_identical_for_every_form(backend: TestBackend) {
    let settings = json!({"upstreams": {"openai": {"native_compaction": "forward"}}});
    let mut options = Options::on(backend).settings(settings);
    options.fake.responses_mode = fake_upstream::ResponsesMode::OpenAi;
    let app = spawn_app_with(options).await;
    let compact = json!({"model": MODEL, "input": history()});
    let forms = [
        ("/v1/responses", triggered(true)),
        ("/v1/responses/compact", compact),
        ("/v1/responses", managed(false)),
    ];
    let mut items = Vec::new();
    for (path, body) in forms {
        let body = serde_json::to_vec(&body).expect("test value");
        let (status, through) = post_bytes(&app, &app.url(path), &body).await;
        assert_eq!(status, 200, "{path}: {}", String::from_utf8_lossy(&through));
        let received = app.upstream.requests().last().expect("forwarded").clone();
        assert_eq!(received.body.as_ref(), body.as_slice(), "{path}: request");
        // The provider answers the same request with the same bytes.
        let direct = format!("{}{}", app.upstream.base_url(), path);
        let (_, answer) = post_bytes(&app, &direct, &body).await;
        assert_eq!(through, answer, "{path}: response");
        let text = String::from_utf8_lossy(&through).to_string();
        let found = text
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .chain([text.as_str()]);
        let found = found.filter_map(|data| serde_json::from_str::<Value>(data).ok());
        items.extend(found.filter_map(|value| provider_item(&value)));
    }
    assert!(app.upstream.summary_requests().is_empty());
    assert_eq!(items.len(), 3, "one compaction item per form: {items:?}");
    // The provider's own item comes back on a later request untouched,
    // and the provider reads it.
    let later = serde_json::to_vec(&after_compaction(&items[0])).expect("test value");
    let (status, _) = post_bytes(&app, &app.url("/v1/responses"), &later).await;
    assert_eq!(status, 200);
    let received = app.upstream.requests().last().expect("forwarded").clone();
    assert_eq!(received.body.as_ref(), later.as_slice());
}

/// The provider's compaction item in an answer or event, if it holds one.
fn provider_item(value: &Value) -> Option<Value> {
    if value["type"] == "response.output_item.done" {
        return Some(value["item"].clone()).filter(|item| item["type"] == "compaction");
    }
    let output = value["output"].as_array()?;
    let item = output.iter().find(|item| item["type"] == "compaction")?;
    let content = item["encrypted_content"].as_str()?;
    assert!(!content.starts_with("condenser."), "{content}");
    Some(item.clone())
}

/// A fleet: two instances on one Postgres, no key configured.
mod fleet {
    use super::*;
    use crate::helpers::db::TestDb;
    use crate::helpers::process::ProxyProcess;
    use fake_upstream::{FakeConfig, FakeUpstream};
    use pretty_assertions::assert_eq;

    async fn post(instance: &ProxyProcess, body: &Value) -> reqwest::Response {
        reqwest::Client::new()
            .post(format!("{}/v1/responses", instance.address))
            .bearer_auth(OPENAI_KEY)
            .json(body)
            .send()
            .await
            .expect("sent")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_compaction_item_made_by_one_instance_is_expanded_by_another() {
        let config = FakeConfig {
            summary_marker: Some(SUMMARY_MARKER.into()),
            ..FakeConfig::default()
        };
        let fake = FakeUpstream::start(config).await;
        let db = TestDb::new(TestBackend::Postgres).await;
        let base_url = fake.openai_base_url();
        let env = [
            ("CONDENSER_OPENAI_BASE_URL", base_url.as_str()),
            ("CONDENSER_SUMMARY_MAX_TOKENS", "300"),
            ("DATABASE_URL", db.url.as_str()),
        ];
        let one = ProxyProcess::start(&env);
        let two = ProxyProcess::start(&env);
        let response = post(&one, &triggered(false)).await;
        assert_eq!(response.status(), 200);
        let answer: Value = response.json().await.expect("json");
        let item = answer["output"][0].clone();
        assert_eq!(item["type"], "compaction", "{answer}");
        let response = post(&two, &after_compaction(&item)).await;
        let status = response.status();
        assert_eq!(status, 200, "{}", response.text().await.unwrap_or_default());
        // The second instance opened it: the upstream got the summary.
        let accepted = fake.last_accepted().expect("accepted");
        let body = String::from_utf8_lossy(&accepted.body);
        assert!(body.contains(SUMMARY_MARKER), "{body}");
        assert!(!body.contains("condenser.v1."), "{body}");
        // One key for the fleet, made by whichever instance came first.
        assert_eq!(db.count("select count(*) from server_keys").await, 1);
    }
}
