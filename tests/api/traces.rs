//! Traces: the real binary exporting OTLP/HTTP to a receiver in the test,
//! against the fake upstream with a small window, so that a request
//! overflows, is compacted and retried. The span tree of that request on
//! every chat API, with the GenAI attributes; a collector that is down or
//! silent; no credential and no message content in any span.

use crate::helpers::agent::filler;
use crate::helpers::app::{ANTHROPIC_KEY, OPENAI_KEY};
use crate::helpers::otlp::{self, OtlpReceiver, Span, CLIENT, ERROR, INTERNAL, SERVER};
use crate::helpers::process::ProxyProcess;
use crate::helpers::wait::{wait_for_some, PATIENCE};
use fake_upstream::{FakeConfig, FakeUpstream};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The span the client's own trace called Condenser from.
const CLIENT_PARENT: &str = "00f067aa0ba902b7";
/// The client's vendor state, which travels with its trace.
const TRACE_STATE: &str = "congo=t61rcWkgMzE";
/// Text of the fake's answers, to look for in spans.
const REPLY: &str = "reply-canary: the answer to everything";

#[derive(Debug, Clone, Copy, PartialEq)]
enum Api {
    Chat,
    ChatStreamed,
    Messages,
    Responses,
}

impl Api {
    fn path(self) -> &'static str {
        match self {
            Api::Chat | Api::ChatStreamed => "/v1/chat/completions",
            Api::Messages => "/v1/messages",
            Api::Responses => "/v1/responses",
        }
    }

    fn model(self) -> &'static str {
        match self {
            Api::Messages => "claude-sonnet-4-5",
            _ => "gpt-4o-mini",
        }
    }

    fn provider(self) -> &'static str {
        match self {
            Api::Messages => "anthropic",
            _ => "openai",
        }
    }

    fn finish_reasons(self) -> &'static str {
        match self {
            Api::Chat | Api::ChatStreamed => "[stop]",
            Api::Messages => "[end_turn]",
            Api::Responses => "[completed]",
        }
    }

    /// Twelve turns of 900 bytes and a question: more than a 2,000-token
    /// window. Every message carries a canary, which no span may show.
    fn conversation(self, seed: &str) -> Value {
        let system = format!("Be brief, canary-system-{seed}.");
        let mut turns = Vec::new();
        for turn in 0..12 {
            let text = format!("canary-user-{turn} {}", filler(900, turn));
            turns.push(("user", text));
            turns.push(("assistant", format!("Noted, canary-assistant-{turn}.")));
        }
        turns.push(("user", format!("Sum it up, canary-last-{seed}.")));
        let model = self.model();
        match self {
            Api::Chat | Api::ChatStreamed => {
                let mut messages = vec![json!({"role": "system", "content": system})];
                messages.extend(turns.iter().map(|(r, t)| json!({"role": r, "content": t})));
                let mut body = json!({"model": model, "messages": messages});
                if self == Api::ChatStreamed {
                    body["stream"] = true.into();
                    body["stream_options"] = json!({"include_usage": true});
                }
                body
            }
            Api::Messages => {
                let messages: Vec<Value> = turns
                    .iter()
                    .map(|(r, t)| json!({"role": r, "content": t}))
                    .collect();
                json!({"model": model, "max_tokens": 256, "system": system, "messages": messages})
            }
            Api::Responses => {
                let input: Vec<Value> = turns
                    .iter()
                    .map(|(role, text)| {
                        let kind = if *role == "user" { "input_text" } else { "output_text" };
                        json!({"type": "message", "role": role, "content": [{"type": kind, "text": text}]})
                    })
                    .collect();
                json!({"model": model, "instructions": system, "input": input, "store": false})
            }
        }
    }
}

/// The fake, with a 2,000-token window and its summary calls recognized.
async fn small_window_upstream() -> FakeUpstream {
    FakeUpstream::start(FakeConfig {
        summary_marker: Some(condenser::protocol::SUMMARY_MARKER.to_string()),
        default_context_window: 2_000,
        reply_text: Some(REPLY.to_string()),
        ..FakeConfig::default()
    })
    .await
}

/// The binary against `fake`, exporting to `endpoint`, quickly.
fn traced(fake: &FakeUpstream, endpoint: &str, extra: &[(&str, &str)]) -> ProxyProcess {
    let openai = fake.openai_base_url();
    let anthropic = fake.base_url();
    let mut env = vec![
        ("CONDENSER_OPENAI_BASE_URL", openai.as_str()),
        ("CONDENSER_ANTHROPIC_BASE_URL", anthropic.as_str()),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ];
    env.extend_from_slice(extra);
    ProxyProcess::start(&env)
}

async fn send(
    proxy: &ProxyProcess,
    api: Api,
    body: &Value,
    trace: Option<&str>,
) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(proxy.url(api.path()))
        .json(body);
    request = match api {
        Api::Messages => request
            .header("x-api-key", ANTHROPIC_KEY)
            .header("anthropic-version", "2023-06-01"),
        _ => request.bearer_auth(OPENAI_KEY),
    };
    if let Some(trace) = trace {
        request = request
            .header("traceparent", format!("00-{trace}-{CLIENT_PARENT}-01"))
            .header("tracestate", TRACE_STATE);
    }
    request.send().await.expect("answers")
}

/// A trace id of its own for each case.
fn trace_id(case: usize) -> String {
    format!("4bf92f3577b34da6a3ce929d0e0e47{case:02x}")
}

/// The server span is the last to end: the others ended before it.
fn complete(spans: &[Span]) -> bool {
    spans.iter().any(|s| s.kind == SERVER)
}

/// Sends a long conversation in trace `trace`; its spans.
async fn compacted(
    proxy: &ProxyProcess,
    receiver: &OtlpReceiver,
    api: Api,
    trace: &str,
) -> Vec<Span> {
    let response = send(proxy, api, &api.conversation(trace), Some(trace)).await;
    assert_eq!(response.status(), 200, "{api:?}");
    assert_eq!(
        response.headers()["x-condenser-compactions"],
        "1",
        "{api:?}"
    );
    let body = response.text().await.expect("whole body");
    assert!(body.contains("reply-cana"), "{api:?}: {body}");
    receiver.trace(trace, complete).await
}

/// A request compacted before it was sent: one call, after the compaction.
fn assert_proactive(spans: &[Span]) {
    let server = one(spans, "server span", |s| s.kind == SERVER);
    let compaction = one(spans, "compaction", |s| s.kind == INTERNAL);
    assert_eq!(
        compaction.attr("condenser.compaction.trigger"),
        Some("proactive")
    );
    assert_eq!(
        compaction.attr("condenser.compaction.outcome"),
        Some("stored")
    );
    assert_eq!(
        compaction.attr("condenser.overflow.signature"),
        Some("estimate")
    );
    let call = one(spans, "request call", |s| {
        s.attr("condenser.call") == Some("request")
    });
    assert_eq!(call.attr("condenser.attempt"), Some("1"));
    assert_eq!(call.attr("error.type"), None);
    assert!(number(call, "gen_ai.usage.input_tokens") > 0);
    assert_eq!(call.parent_span_id, server.span_id);
    assert_eq!(compaction.parent_span_id, server.span_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compacted_request_exports_its_span_tree_on_every_api() {
    let fake = small_window_upstream().await;
    let receiver = OtlpReceiver::start().await;
    let apis = [Api::Chat, Api::ChatStreamed, Api::Messages, Api::Responses];
    for (case, api) in apis.into_iter().enumerate() {
        // An instance of its own: one that learned the window from an
        // earlier overflow compacts before sending (below).
        let proxy = traced(&fake, &receiver.endpoint(), &[]);
        let trace = trace_id(case);
        let spans = compacted(&proxy, &receiver, api, &trace).await;
        assert_tree(api, &trace, &spans, &fake);
        if api == Api::Chat {
            let trace = trace_id(0x10);
            let spans = compacted(&proxy, &receiver, api, &trace).await;
            assert_proactive(&spans);
        }
    }
    assert_nothing_leaks(&receiver.spans());
    assert!(
        receiver
            .content_types()
            .iter()
            .all(|t| t == "application/x-protobuf"),
        "protobuf by default: {:?}",
        receiver.content_types()
    );
}

fn one<'s>(spans: &'s [Span], what: &str, pick: impl Fn(&Span) -> bool) -> &'s Span {
    let found: Vec<&Span> = spans.iter().filter(|s| pick(s)).collect();
    assert_eq!(found.len(), 1, "one {what}: {spans:#?}");
    found[0]
}

fn number(span: &Span, key: &str) -> i64 {
    let value = span
        .attr(key)
        .unwrap_or_else(|| panic!("{key} on {}: {span:#?}", span.name));
    value.parse().unwrap_or_else(|_| panic!("{key} = {value}"))
}

/// The spans of one compacted request.
struct Tree<'s> {
    server: &'s Span,
    failed: &'s Span,
    retried: &'s Span,
    compaction: &'s Span,
    summaries: Vec<&'s Span>,
}

fn tree(spans: &[Span]) -> Tree<'_> {
    let call = |attempt: &str| {
        one(spans, "request call", |s| {
            s.kind == CLIENT && s.attr("condenser.attempt") == Some(attempt)
        })
    };
    // A 2,000-token window takes a few summary calls, one span each.
    let summaries: Vec<&Span> = spans
        .iter()
        .filter(|s| s.attr("condenser.call") == Some("summary"))
        .collect();
    assert!(!summaries.is_empty(), "a summary call");
    Tree {
        server: one(spans, "server span", |s| s.kind == SERVER),
        failed: call("1"),
        retried: call("2"),
        compaction: one(spans, "compaction", |s| s.kind == INTERNAL),
        summaries,
    }
}

fn assert_tree(api: Api, trace: &str, spans: &[Span], fake: &FakeUpstream) {
    let tree = tree(spans);
    assert_server_span(api, tree.server);
    assert_calls_and_parents(api, &tree, fake);
    assert_compaction(api, &tree);
    assert_answers(api, &tree);
    assert_propagated(trace, &tree, fake);
}

fn assert_server_span(api: Api, server: &Span) {
    let path = api.path();
    assert_eq!(server.name, format!("POST {path}"));
    assert_eq!(
        server.parent_span_id, CLIENT_PARENT,
        "continues the client's trace"
    );
    assert_eq!(server.attr("http.request.method"), Some("POST"));
    assert_eq!(server.attr("url.path"), Some(path));
    assert_eq!(server.attr("url.scheme"), Some("http"));
    assert_eq!(server.attr("http.route"), Some(path));
    assert_eq!(server.attr("http.response.status_code"), Some("200"));
    assert_ne!(server.status_code, ERROR);
    assert!(server
        .resource
        .contains(&("service.name".into(), "condenser".into())));
}

/// Every call's GenAI names, each span under its parent, one conversation.
fn assert_calls_and_parents(api: Api, tree: &Tree<'_>, fake: &FakeUpstream) {
    let model = api.model();
    let Tree {
        server,
        failed,
        retried,
        compaction,
        summaries,
    } = tree;
    for client in [*failed, *retried]
        .into_iter()
        .chain(summaries.iter().copied())
    {
        assert_eq!(client.name, format!("chat {model}"), "{api:?}");
        assert_eq!(client.attr("gen_ai.operation.name"), Some("chat"));
        assert_eq!(client.attr("gen_ai.provider.name"), Some(api.provider()));
        assert_eq!(client.attr("gen_ai.request.model"), Some(model));
        assert_eq!(client.attr("server.address"), Some("127.0.0.1"));
        assert_eq!(number(client, "server.port"), i64::from(fake.addr().port()));
    }
    for child in [failed, retried, compaction] {
        assert_eq!(
            child.parent_span_id, server.span_id,
            "{} under the server span",
            child.name
        );
    }
    for summary in summaries {
        assert_eq!(
            summary.parent_span_id, compaction.span_id,
            "the summary calls under the compaction"
        );
    }
    let conversation = failed
        .attr("gen_ai.conversation.id")
        .expect("conversation id");
    assert_eq!(conversation.len(), 64);
    assert!(conversation.chars().all(|c| c.is_ascii_hexdigit()));
    for span in [*retried, *compaction, summaries[0]] {
        assert_eq!(
            span.attr("gen_ai.conversation.id"),
            Some(conversation),
            "{}",
            span.name
        );
    }
}

/// The call the upstream refused for its window, and the compaction.
fn assert_compaction(api: Api, tree: &Tree<'_>) {
    let Tree {
        failed,
        compaction,
        summaries,
        ..
    } = tree;
    assert_eq!(failed.attr("condenser.call"), Some("request"));
    assert_eq!(failed.attr("error.type"), Some("context_length_exceeded"));
    assert!(failed.attr("condenser.overflow.signature").is_some());
    assert_eq!(failed.status_code, ERROR);
    assert_eq!(failed.attr("gen_ai.usage.input_tokens"), None);

    assert_eq!(compaction.name, "compaction");
    let attr = |key: &str| compaction.attr(&format!("condenser.compaction.{key}"));
    assert_eq!(attr("trigger"), Some("overflow"));
    assert_eq!(attr("outcome"), Some("stored"));
    assert_eq!(attr("summary_model"), Some(api.model()));
    let figure = |key: &str| number(compaction, &format!("condenser.compaction.{key}"));
    assert!(figure("messages") > 0);
    assert!(figure("messages_kept") > 0);
    assert!(figure("tokens_after") < figure("tokens_before"));
    assert!(figure("summary_tokens") > 0);
    assert_eq!(figure("summary_calls"), summaries.len() as i64);
    assert_eq!(figure("trims"), 0);
    assert!(figure("lease_wait_ms") >= 0);
    assert_eq!(compaction.attr("error.type"), None);
}

/// The summary calls (a window guessed from an overflow without numbers,
/// the Responses API's, may make one overflow too: retried smaller), and
/// the retry with the usage read as it passed.
fn assert_answers(api: Api, tree: &Tree<'_>) {
    let Tree {
        retried, summaries, ..
    } = tree;
    let (overflowed, written): (Vec<&Span>, Vec<&Span>) = summaries
        .iter()
        .partition(|s| s.attr("error.type").is_some());
    assert!(!written.is_empty(), "a summary written");
    for summary in overflowed {
        assert_eq!(summary.attr("error.type"), Some("context_length_exceeded"));
        assert_eq!(summary.status_code, ERROR);
    }
    for answered in written.into_iter().chain([*retried]) {
        assert_ne!(answered.status_code, ERROR, "{api:?}: {answered:#?}");
        assert_eq!(answered.attr("error.type"), None);
        assert_eq!(answered.attr("http.response.status_code"), Some("200"));
        assert_eq!(answered.attr("gen_ai.response.model"), Some(api.model()));
        assert!(!answered
            .attr("gen_ai.response.id")
            .unwrap_or_default()
            .is_empty());
        assert!(number(answered, "gen_ai.usage.input_tokens") > 0);
        assert!(number(answered, "gen_ai.usage.output_tokens") > 0);
    }
    assert_eq!(
        retried.attr("gen_ai.response.finish_reasons"),
        Some(api.finish_reasons())
    );
    assert!(number(summaries[0], "gen_ai.request.max_tokens") > 0);
    assert_eq!(number(retried, "gen_ai.usage.cache_read.input_tokens"), 0);
    if api == Api::Messages {
        assert_eq!(
            number(retried, "gen_ai.usage.cache_creation.input_tokens"),
            0
        );
    }
    let streamed = (api == Api::ChatStreamed).then_some("true");
    assert_eq!(retried.attr("gen_ai.request.stream"), streamed);
}

/// The upstream saw each call's own span as its parent, and the client's
/// vendor state.
fn assert_propagated(trace: &str, tree: &Tree<'_>, fake: &FakeUpstream) {
    let traced: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| r.header("traceparent").is_some_and(|t| t.contains(trace)))
        .collect();
    for request in &traced {
        assert_eq!(request.header("tracestate"), Some(TRACE_STATE));
    }
    let mut sent: Vec<String> = traced
        .iter()
        .filter_map(|r| r.header("traceparent").map(str::to_string))
        .collect();
    sent.sort();
    let mut expected: Vec<String> = [tree.failed, tree.retried]
        .iter()
        .chain(&tree.summaries)
        .map(|s| format!("00-{trace}-{}-01", s.span_id))
        .collect();
    expected.sort();
    assert_eq!(sent, expected);
}

/// No span shows a credential, a header or a word any message carried.
fn assert_nothing_leaks(spans: &[Span]) {
    assert!(!spans.is_empty());
    let forbidden = [
        OPENAI_KEY,
        ANTHROPIC_KEY,
        "Bearer",
        "canary",
        "fact-0",
        "Sum it up",
        "worked through the task",
        condenser::protocol::SUMMARY_MARKER,
    ];
    for span in spans {
        for text in span.texts() {
            for word in forbidden {
                assert!(
                    !text.contains(word),
                    "{word:?} in span {}: {text:?}",
                    span.name
                );
            }
        }
        for (key, _) in &span.attributes {
            assert!(
                !key.starts_with("gen_ai.input") && !key.starts_with("gen_ai.output"),
                "content attribute {key} without opting in"
            );
        }
    }
}

/// With `traces.capture_message_content`, the conventions' content
/// attributes carry the messages; still no credential.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_content_is_exported_only_when_opted_in() {
    let fake = small_window_upstream().await;
    let receiver = OtlpReceiver::start().await;
    let opt_in = [("CONDENSER__TRACES__CAPTURE_MESSAGE_CONTENT", "true")];
    let proxy = traced(&fake, &receiver.endpoint(), &opt_in);
    let trace = trace_id(0x40);
    let response = send(
        &proxy,
        Api::Messages,
        &Api::Messages.conversation(&trace),
        Some(&trace),
    )
    .await;
    assert_eq!(response.status(), 200);
    response.text().await.expect("whole body");
    let spans = receiver.trace(&trace, complete).await;
    let retried = one(&spans, "retry", |s| {
        s.attr("condenser.attempt") == Some("2")
    });
    let input: Value =
        serde_json::from_str(retried.attr("gen_ai.input.messages").expect("input")).expect("json");
    let last = &input
        .as_array()
        .expect("messages")
        .last()
        .expect("a message")["parts"][0];
    assert_eq!(last["content"], format!("Sum it up, canary-last-{trace}."));
    let system = retried.attr("gen_ai.system_instructions").expect("system");
    assert!(system.contains("canary-system"), "{system}");
    let output = retried.attr("gen_ai.output.messages").expect("output");
    assert!(output.contains(REPLY), "{output}");
    let summary = spans
        .iter()
        .find(|s| s.attr("condenser.call") == Some("summary"))
        .expect("a summary call");
    let asked = summary
        .attr("gen_ai.input.messages")
        .expect("summary input");
    assert!(asked.contains("canary-user-0"), "{asked}");
    let written = summary
        .attr("gen_ai.output.messages")
        .expect("summary output");
    assert!(written.contains("Summary of conversation"), "{written}");
    for span in &spans {
        for text in span.texts() {
            assert!(!text.contains(ANTHROPIC_KEY) && !text.contains(OPENAI_KEY));
        }
    }
}

/// The same requests, through an instance without traces and one whose
/// collector is down (closed port) or silent (accepts, never answers):
/// the same answers, in the same time, and the lost spans are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_collector_changes_nothing_for_requests() {
    let fake = small_window_upstream().await;
    let plain = ProxyProcess::start(&[("CONDENSER_OPENAI_BASE_URL", &fake.openai_base_url())]);
    let baseline = serve_requests(&plain, "plain").await;
    let closed = format!("http://{}", otlp::closed_port());
    let silent = format!("http://{}", otlp::silent_collector().await);
    for (label, endpoint) in [("closed", closed), ("silent", silent)] {
        let small_queue = [
            ("OTEL_BSP_MAX_QUEUE_SIZE", "4"),
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "2"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2000"),
        ];
        let mut proxy = traced(&fake, &endpoint, &small_queue);
        let served = serve_requests(&proxy, label).await;
        eprintln!(
            "{label} collector: median {:?}, slowest {:?}; without traces: median {:?}, slowest {:?}",
            served.median, served.slowest, baseline.median, baseline.slowest
        );
        assert_eq!(
            served.answers, baseline.answers,
            "{label}: the same answers"
        );
        assert!(
            served.slowest < Duration::from_millis(1_000),
            "{label}: slowest request {:?} (an export blocks for 2 s)",
            served.slowest
        );
        assert!(
            served.median < baseline.median * 3 + Duration::from_millis(25),
            "{label}: median {:?} against {:?} without traces",
            served.median,
            baseline.median
        );
        let dropped = dropped_spans(&proxy).await;
        eprintln!("{label} collector: {dropped} spans dropped and counted");
        assert!(dropped > 0.0, "{label}: no dropped span counted");
        let stopping = Instant::now();
        proxy.signal("TERM");
        let status = proxy.wait_exit(Duration::from_secs(15)).expect("exits");
        assert!(status.success(), "{label}");
        assert!(
            stopping.elapsed() < Duration::from_secs(8),
            "{label}: exit took {:?}",
            stopping.elapsed()
        );
        assert!(!proxy.log_text().contains("panicked"), "{label}");
    }
}

struct Served {
    /// Status, Condenser's headers and body of each answer.
    answers: Vec<(u16, String, String)>,
    median: Duration,
    slowest: Duration,
}

/// Thirty small requests and a compacted one.
async fn serve_requests(proxy: &ProxyProcess, label: &str) -> Served {
    let mut answers = Vec::new();
    let mut times = Vec::new();
    for turn in 0..31 {
        let body = if turn == 15 {
            Api::Chat.conversation("dead-collector")
        } else {
            json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": format!("Say hi, {turn}.")}]})
        };
        let started = Instant::now();
        let response = send(proxy, Api::Chat, &body, None).await;
        let status = response.status().as_u16();
        let compactions = response
            .headers()
            .get("x-condenser-compactions")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("none")
            .to_string();
        let text = response.text().await.expect("whole body");
        times.push(started.elapsed());
        answers.push((status, compactions, text));
    }
    assert!(
        answers.iter().all(|(status, ..)| *status == 200),
        "{label}: {answers:?}"
    );
    assert_eq!(answers[15].1, "1", "{label}: the long one compacted");
    let slowest = times.iter().max().copied().unwrap_or_default();
    times.sort();
    Served {
        answers,
        median: times[times.len() / 2],
        slowest,
    }
}

/// Dropped spans, whatever the reason, once the exporter tried.
async fn dropped_spans(proxy: &ProxyProcess) -> f64 {
    wait_for_some(PATIENCE, "a dropped span counted", || async {
        let mut dropped = 0.0;
        for reason in ["queue_full", "export_failed"] {
            let series = format!("condenser_trace_spans_dropped_total{{reason=\"{reason}\"}}");
            dropped += proxy.metric(&series).await;
        }
        Some(dropped).filter(|dropped| *dropped > 0.0)
    })
    .await
}

/// `http/json` is the other protocol the standard variable names; `grpc`
/// is refused at start, with one line that says what to set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_protocol_variable_chooses_json_and_refuses_grpc() {
    let fake = small_window_upstream().await;
    let receiver = OtlpReceiver::start().await;
    let json_protocol = [
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ("OTEL_SERVICE_NAME", "edge-proxy"),
    ];
    let proxy = traced(&fake, &receiver.endpoint(), &json_protocol);
    let trace = trace_id(0x50);
    let response = send(
        &proxy,
        Api::Chat,
        &Api::Chat.conversation(&trace),
        Some(&trace),
    )
    .await;
    assert_eq!(response.status(), 200);
    response.text().await.expect("whole body");
    let spans = receiver.trace(&trace, complete).await;
    assert!(receiver
        .content_types()
        .iter()
        .all(|t| t == "application/json"));
    let server = one(&spans, "server span", |s| s.kind == SERVER);
    assert!(server
        .resource
        .contains(&("service.name".into(), "edge-proxy".into())));
    let retried = one(&spans, "retry", |s| {
        s.attr("condenser.attempt") == Some("2")
    });
    assert!(number(retried, "gen_ai.usage.input_tokens") > 0);

    // Without a traceparent the request starts a trace of its own, which
    // the upstream joins.
    fake.clear_requests();
    let small = json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Hi."}]});
    let response = send(&proxy, Api::Chat, &small, None).await;
    assert_eq!(response.status(), 200);
    let sent = fake.last_accepted().expect("the upstream answered");
    let traceparent = sent.header("traceparent").expect("a traceparent upstream");
    assert_eq!(sent.header("tracestate"), None, "no empty tracestate");
    let trace = traceparent
        .split('-')
        .nth(1)
        .expect("a trace id")
        .to_string();
    let spans = receiver.trace(&trace, complete).await;
    let server = one(&spans, "server span", |s| s.kind == SERVER);
    assert_eq!(server.parent_span_id, "", "a root span");
    let call = one(&spans, "call", |s| s.kind == CLIENT);
    assert_eq!(traceparent, format!("00-{trace}-{}-01", call.span_id));

    let output = crate::helpers::process::binary()
        .arg("serve")
        .env("CONDENSER_LISTEN", "127.0.0.1:0")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint())
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("OTEL_EXPORTER_OTLP_PROTOCOL=grpc"),
        "{stderr}"
    );
}

/// `OTEL_TRACES_SAMPLER` is the SDK's own: `always_off` exports nothing,
/// and the upstream is told its call was not sampled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sampler_variable_is_honoured() {
    let fake = small_window_upstream().await;
    let receiver = OtlpReceiver::start().await;
    let off = [("OTEL_TRACES_SAMPLER", "always_off")];
    let mut proxy = traced(&fake, &receiver.endpoint(), &off);
    let trace = trace_id(0x60);
    let response = send(&proxy, Api::Chat, &Api::Chat.conversation(&trace), None).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-condenser-compactions"], "1");
    response.text().await.expect("whole body");
    let sent = fake.last_accepted().expect("the upstream answered");
    let traceparent = sent.header("traceparent").expect("a traceparent upstream");
    assert!(traceparent.ends_with("-00"), "not sampled: {traceparent}");
    // A graceful exit flushes the exporter: whatever would have been
    // exported has been once the process is gone.
    let exited = proxy.stop();
    assert!(exited.success(), "{}", proxy.log_text());
    assert!(receiver.spans().is_empty(), "{:#?}", receiver.spans());
}

/// A request over the Responses API's WebSocket mode is traced as one
/// request: a server span in the trace the handshake's `traceparent`
/// names, marked `transport = websocket`, with its upstream call below it.
#[tokio::test]
async fn a_websocket_request_exports_a_server_span_with_its_transport() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::Message;
    let fake = small_window_upstream().await;
    let receiver = OtlpReceiver::start().await;
    let proxy = traced(&fake, &receiver.endpoint(), &[]);
    let trace = trace_id(0x20);
    let url = proxy.url("/v1/responses").replacen("http://", "ws://", 1);
    let mut handshake = url.into_client_request().expect("a request");
    let headers = handshake.headers_mut();
    headers.insert(
        "authorization",
        format!("Bearer {OPENAI_KEY}").parse().expect("value"),
    );
    let parent = format!("00-{trace}-{CLIENT_PARENT}-01");
    headers.insert("traceparent", parent.parse().expect("value"));
    let (mut socket, _) = tokio_tungstenite::connect_async(handshake)
        .await
        .expect("upgraded");
    let frame = json!({"type": "response.create", "model": "gpt-4o-mini", "stream": true,
        "input": [{"role": "user", "content": "hello"}]});
    socket
        .send(Message::text(frame.to_string()))
        .await
        .expect("sent");
    while let Some(Ok(message)) = socket.next().await {
        if message
            .to_text()
            .is_ok_and(|t| t.contains("response.completed"))
        {
            break;
        }
    }
    let over_socket = |s: &Span| s.kind == SERVER && s.attr("transport") == Some("websocket");
    let spans = receiver
        .trace(&trace, |spans| spans.iter().any(over_socket))
        .await;
    // The handshake is a request of its own (GET, 101) in the same trace.
    let server = one(&spans, "request over the socket", over_socket);
    assert_eq!(server.attr("http.route"), Some("/v1/responses"));
    assert_eq!(server.parent_span_id, CLIENT_PARENT);
    let call = one(&spans, "upstream call", |s| s.kind == CLIENT);
    assert_eq!(call.parent_span_id, server.span_id);
    assert_nothing_leaks(&spans);
}
