//! The Responses API's WebSocket mode (issue 41): a raw WebSocket client
//! drives `response.create` frames through Condenser as Codex does, and
//! each answer's frames are the SSE events the same request gets over
//! HTTP; what the mode refuses ends as docs/apis.md says, with nothing
//! lost and the tenant unaffected. Upstream, Condenser speaks the mode
//! where the upstream serves it (the fake's `responses_websocket`, which
//! keeps per-connection state as OpenAI does) and HTTP elsewhere.

use crate::helpers::agent::filler;
use crate::helpers::app::{spawn_app_with, Options, TestApp, OPENAI_KEY};
use crate::helpers::db::{both_backends, TestBackend};
use crate::helpers::raw_upstream::{Behaviour, RawUpstream};
use crate::helpers::responses::user_item;
use crate::helpers::wait::{wait_until, PATIENCE};
use fake_upstream::Transport;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use std::time::Duration;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;

const MODEL: &str = "gpt-4o-mini";

both_backends!(
    a_previous_response_id_chain_is_answered_as_over_http_across_compactions,
    malformed_and_unknown_frames_get_error_frames_and_the_socket_goes_on,
    an_oversized_frame_closes_its_socket_and_the_tenant_goes_on,
    requests_sent_before_their_answers_are_refused_then_the_socket_is_closed,
    a_socket_closed_during_a_summary_still_stores_the_compaction,
    an_overflow_condenser_cannot_compact_arrives_as_the_upstream_sent_it,
    codex_cli_answers_every_turn_over_the_socket_through_compactions,
    codex_cli_over_the_socket_toward_an_upstream_serving_the_mode,
    a_chain_toward_an_upstream_serving_the_mode_continues_there_between_compactions,
    a_chain_continues_upstream_when_its_completed_event_lists_no_output,
    a_handshake_refused_for_one_key_leaves_the_mode_on_for_the_others,
    with_the_mode_off_or_past_a_tenants_sockets_the_upgrade_is_a_426,
    a_socket_waiting_on_a_summary_gets_pings_then_its_answer,
    a_request_sent_as_soon_as_the_last_answer_completed_is_answered,
);

fn small_window(backend: TestBackend) -> Options {
    Options::on(backend)
        .window(MODEL, 4_000)
        .settings(json!({"compaction": {"summary_max_tokens": 300}}))
}

type Stream =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A socket on `/v1/responses`, opened as Codex opens it.
async fn connect(app: &TestApp) -> Stream {
    try_connect(app, OPENAI_KEY)
        .await
        .expect("the upgrade is accepted")
}

async fn try_connect(
    app: &TestApp,
    key: &str,
) -> Result<Stream, tokio_tungstenite::tungstenite::Error> {
    let url = app.url("/v1/responses").replacen("http://", "ws://", 1);
    let mut request = url.into_client_request().expect("a request");
    let headers = request.headers_mut();
    headers.insert(
        "authorization",
        format!("Bearer {key}").parse().expect("value"),
    );
    headers.insert(
        "openai-beta",
        "responses_websockets=2026-02-06".parse().expect("value"),
    );
    let (socket, _) = tokio_tungstenite::connect_async(request).await?;
    Ok(socket)
}

async fn send(socket: &mut Stream, frame: &Value) {
    socket
        .send(Message::text(frame.to_string()))
        .await
        .expect("sent");
}

/// The next text frame; `None` once the socket closed.
async fn next_text(socket: &mut Stream) -> Option<String> {
    loop {
        match socket.next().await? {
            Ok(Message::Text(text)) => return Some(text.to_string()),
            Ok(Message::Close(_)) | Err(_) => return None,
            Ok(_) => {}
        }
    }
}

/// Text frames up to the one that ends an answer (`response.completed`,
/// `response.failed`, `error`).
async fn answer(socket: &mut Stream) -> Vec<String> {
    let mut frames = Vec::new();
    while let Some(text) = next_text(socket).await {
        let kind = serde_json::from_str::<Value>(&text).expect("json")["type"].clone();
        frames.push(text);
        if ["response.completed", "response.failed", "error"]
            .contains(&kind.as_str().unwrap_or_default())
        {
            return frames;
        }
    }
    panic!("the socket closed mid-answer after {frames:?}")
}

fn last(frames: &[String]) -> Value {
    serde_json::from_str(frames.last().expect("a frame")).expect("json")
}

/// How a request over HTTP is answered: its events' `data`.
async fn over_http(app: &TestApp, body: &Value) -> Vec<String> {
    let text = app.post_responses(body).await.text().await.expect("body");
    text.split("\n\n")
        .filter_map(|event| {
            let data: Vec<&str> = event
                .lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .collect();
            (!data.is_empty()).then(|| data.join("\n"))
        })
        .collect()
}

/// A request as Codex sends it, `input` aside.
fn request(input: Vec<Value>) -> Value {
    json!({
        "model": MODEL,
        "instructions": "You are a coding agent.",
        "input": input,
        "tools": [{"type": "function", "name": "read_file", "description": "Read a file", "strict": false,
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}],
        "tool_choice": "auto",
        "parallel_tool_calls": true,
        "store": false,
        "stream": true,
        "prompt_cache_key": "session-1",
    })
}

/// The frame that continues `previous` with `new` items.
fn continuation(new: Vec<Value>, previous: Option<&str>) -> Value {
    let mut frame = json!({"type": "response.create"});
    for (key, value) in request(new).as_object().expect("object") {
        frame[key] = value.clone();
    }
    if let Some(id) = previous {
        frame["previous_response_id"] = json!(id);
    }
    frame
}

/// What a turn's step sends next: the outputs of the calls just made, or
/// the next user message.
fn next_items(output: &[Value], turn: usize) -> Vec<Value> {
    let calls: Vec<Value> = output
        .iter()
        .filter(|item| item["type"] == "function_call")
        .map(|call| json!({"type": "function_call_output", "call_id": call["call_id"], "output": filler(1_500, turn)}))
        .collect();
    if !calls.is_empty() {
        return calls;
    }
    vec![user_item(&format!(
        "Turn {turn}: read the next file. [tools]\n{}",
        filler(1_200, turn)
    ))]
}

/// One socket, one chain of `previous_response_id`s, turn after turn
/// through compactions; a twin Condenser gets the same requests over HTTP,
/// whole, and answers each with the same events.
async fn a_previous_response_id_chain_is_answered_as_over_http_across_compactions(
    backend: TestBackend,
) {
    let app = spawn_app_with(small_window(backend)).await;
    chain_through_compactions(&app, small_window(backend)).await;
    for request in app.upstream.chat_requests() {
        assert_eq!(request.transport, Transport::Http, "the fake has no socket");
    }
}

/// The same chain toward an upstream that serves the mode: Condenser
/// speaks it there too, sending only the new items after the last
/// response that upstream socket answered, and the whole compacted
/// history after each compaction (the upstream never saw it).
async fn a_chain_toward_an_upstream_serving_the_mode_continues_there_between_compactions(
    backend: TestBackend,
) {
    let mut options = small_window(backend);
    options.fake.responses_websocket = true;
    let app = spawn_app_with(options).await;
    chain_through_compactions(&app, small_window(backend)).await;
    assert_continued_upstream(&app);
}

/// The same where `response.completed` lists no output (the ChatGPT
/// backend's Codex endpoint): the response is still its items, as their
/// `response.output_item.done` events gave them, and a history that
/// extends it still goes as new items only.
async fn a_chain_continues_upstream_when_its_completed_event_lists_no_output(backend: TestBackend) {
    let mut twin = small_window(backend);
    twin.fake.responses_completed_without_output = true;
    let mut options = small_window(backend);
    options.fake.responses_completed_without_output = true;
    options.fake.responses_websocket = true;
    let app = spawn_app_with(options).await;
    chain_through_compactions(&app, twin).await;
    assert_continued_upstream(&app);
}

/// Every request went over Condenser's upstream socket, most as new items
/// after the last response that socket answered.
fn assert_continued_upstream(app: &TestApp) {
    let sent = app.upstream.chat_requests();
    assert!(
        sent.iter().all(|r| r.transport == Transport::Websocket),
        "every request went over the upstream socket"
    );
    assert!(sent.iter().all(|r| r.status == 200 || r.status == 400));
    let continued = sent.iter().filter(|r| r.continued).count();
    let whole = sent.len() - continued;
    assert!(
        continued * 2 > sent.len(),
        "{continued} of {} continued the upstream's last response",
        sent.len()
    );
    // The first request, each retry after a compaction, and each request
    // after a compaction applied went whole.
    assert!(whole >= 3, "{whole} went whole");
    assert_eq!(app.upstream.websocket_connections(), 1);
}

/// A handshake refused for one credential (a 401) says nothing of the
/// mode: that request goes over HTTP and gets the upstream's own answer,
/// and a socket with a good key still speaks the mode upstream.
async fn a_handshake_refused_for_one_key_leaves_the_mode_on_for_the_others(backend: TestBackend) {
    let mut options = Options::on(backend);
    options.fake.responses_websocket = true;
    let app = spawn_app_with(options).await;
    let mut refused = try_connect(&app, "sk-invalid")
        .await
        .expect("Condenser accepts the socket");
    send(&mut refused, &continuation(vec![user_item("hello")], None)).await;
    let error = last(&answer(&mut refused).await);
    assert_eq!(
        (&error["type"], &error["status"]),
        (&json!("error"), &json!(401)),
        "{error}"
    );
    let mut socket = connect(&app).await;
    send(&mut socket, &continuation(vec![user_item("hello")], None)).await;
    let completed = last(&answer(&mut socket).await);
    assert_eq!(completed["type"], "response.completed", "{completed}");
    let sent = app.upstream.chat_requests();
    let answered = sent.last().expect("a request reached the upstream");
    assert_eq!(
        (answered.transport, answered.status),
        (Transport::Websocket, 200)
    );
}

/// Drives one socket's chain through at least two compactions, checking
/// each answer against a twin Condenser's over HTTP.
async fn chain_through_compactions(app: &TestApp, twin: Options) {
    let twin = spawn_app_with(twin).await;
    let mut socket = connect(app).await;
    let (mut history, mut previous): (Vec<Value>, Option<String>) = (Vec::new(), None);
    let mut new = next_items(&[], 1);
    let mut requests = 0;
    for turn in 1..=40 {
        if app.upstream.summary_requests().len() >= 2 && new[0]["type"] == "message" {
            break;
        }
        assert!(turn < 40, "fewer than two compactions in 40 steps");
        history.extend(new.clone());
        send(&mut socket, &continuation(new, previous.as_deref())).await;
        let frames = answer(&mut socket).await;
        assert_eq!(
            frames,
            over_http(&twin, &request(history.clone())).await,
            "step {turn}"
        );
        let completed = last(&frames);
        assert_eq!(
            completed["type"], "response.completed",
            "step {turn}: {completed}"
        );
        // The items as their `output_item.done` events gave them, as Codex
        // reads them: `response.completed` may list none.
        let output: Vec<Value> = frames
            .iter()
            .map(|frame| serde_json::from_str::<Value>(frame).expect("json"))
            .filter(|event| event["type"] == "response.output_item.done")
            .map(|event| event["item"].clone())
            .collect();
        history.extend(output.clone());
        previous = completed["response"]["id"].as_str().map(String::from);
        new = next_items(&output, turn + 1);
        requests += 1;
    }
    assert_eq!(
        app.upstream.summary_requests().len(),
        twin.upstream.summary_requests().len()
    );
    let stored = "select count(*) from messages";
    wait_until(PATIENCE, "every message stored, as over HTTP", || async {
        let (ours, theirs) = (app.db.count(stored).await, twin.db.count(stored).await);
        ours == theirs && ours >= requests as i64
    })
    .await;
    // Metrics are the process's, shared by the tests running beside this one.
    let counted = metric(
        &app.metrics().await,
        "condenser_websocket_requests_total{status=\"200\"}",
    );
    assert!(counted >= requests as u64, "{counted} requests counted");
}

async fn malformed_and_unknown_frames_get_error_frames_and_the_socket_goes_on(
    backend: TestBackend,
) {
    let app = spawn_app_with(Options::on(backend)).await;
    let mut socket = connect(&app).await;
    let refused = [
        Message::text("{"),
        Message::text("[]"),
        Message::text(r#"{"type":"session.update"}"#),
        Message::binary(b"{}".to_vec()),
    ];
    for frame in refused {
        socket.send(frame).await.expect("sent");
        let error = last(&answer(&mut socket).await);
        assert_eq!(error["type"], "error");
        assert_eq!(error["status"], 400, "{error}");
        assert_eq!(error["error"]["code"], "invalid_frame", "{error}");
    }
    // An acknowledgement needs no answer; the next request is served.
    send(
        &mut socket,
        &json!({"type": "response.processed", "response_id": "resp_1"}),
    )
    .await;
    send(&mut socket, &continuation(vec![user_item("hello")], None)).await;
    assert_eq!(
        last(&answer(&mut socket).await)["type"],
        "response.completed"
    );
    assert_eq!(
        app.upstream.chat_requests().len(),
        1,
        "no refused frame reached the upstream"
    );
}

async fn an_oversized_frame_closes_its_socket_and_the_tenant_goes_on(backend: TestBackend) {
    let options =
        Options::on(backend).settings(json!({"server": {"websocket_max_frame_bytes": 8_192}}));
    let app = spawn_app_with(options).await;
    let mut socket = connect(&app).await;
    send(
        &mut socket,
        &continuation(vec![user_item(&filler(20_000, 1))], None),
    )
    .await;
    let error = last(&answer(&mut socket).await);
    assert_eq!(error["status"], 413, "{error}");
    let close = loop {
        match socket.next().await {
            Some(Ok(Message::Close(frame))) => break frame,
            Some(Ok(_)) => {}
            other => panic!("no close frame: {other:?}"),
        }
    };
    assert_eq!(close.expect("a close frame").code, CloseCode::Size);
    assert!(
        app.upstream.chat_requests().is_empty(),
        "nothing reached the upstream"
    );
    let mut again = connect(&app).await;
    send(&mut again, &continuation(vec![user_item("hello")], None)).await;
    assert_eq!(
        last(&answer(&mut again).await)["type"],
        "response.completed"
    );
}

/// A response is over at its `response.completed`: a client that sends
/// its next request at once is answered, never refused as early, even
/// when the upstream keeps its stream open after the last event.
async fn a_request_sent_as_soon_as_the_last_answer_completed_is_answered(backend: TestBackend) {
    let completed = json!({"type": "response.completed", "response": {"id": "resp_1", "object": "response",
        "status": "completed", "model": MODEL, "output": [{"type": "message", "id": "msg_1", "role": "assistant",
        "status": "completed", "content": [{"type": "output_text", "text": "done", "annotations": []}]}]}});
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
    let stream = format!("{head}event: response.completed\ndata: {completed}\n\n");
    let upstream = RawUpstream::start(Behaviour::StallAfter(stream.into_bytes())).await;
    let settings = json!({"openai_base_url": format!("{}/v1", upstream.base_url())});
    let app = spawn_app_with(Options::on(backend).settings(settings)).await;
    let mut socket = connect(&app).await;
    for step in 1..=3 {
        let previous = (step > 1).then_some("resp_1");
        send(
            &mut socket,
            &continuation(vec![user_item(&format!("step {step}"))], previous),
        )
        .await;
        let answered = last(&answer(&mut socket).await);
        assert_eq!(
            answered["type"], "response.completed",
            "step {step}: {answered}"
        );
    }
    // Condenser's one handshake there is refused (a 200, not a 101), and
    // remembered: each request then goes over HTTP.
    let posts = upstream
        .heads()
        .iter()
        .filter(|h| h.starts_with("POST"))
        .count();
    assert_eq!(posts, 3);
}

async fn requests_sent_before_their_answers_are_refused_then_the_socket_is_closed(
    backend: TestBackend,
) {
    let mut options = Options::on(backend);
    options.fake.first_byte_delay = Duration::from_secs(2);
    let app = spawn_app_with(options).await;
    let mut socket = connect(&app).await;
    for number in 0..20 {
        send(
            &mut socket,
            &continuation(vec![user_item(&format!("flood {number}"))], None),
        )
        .await;
    }
    let mut in_progress = 0;
    while let Some(text) = next_text(&mut socket).await {
        let frame: Value = serde_json::from_str(&text).expect("json");
        assert_eq!(frame["status"], 409, "{frame}");
        in_progress += 1;
    }
    assert_eq!(
        in_progress,
        condenser_max_refused(),
        "refused until the socket closed"
    );
    // The tenant goes on, over a new socket and over HTTP.
    let mut again = connect(&app).await;
    send(&mut again, &continuation(vec![user_item("hello")], None)).await;
    assert_eq!(
        last(&answer(&mut again).await)["type"],
        "response.completed"
    );
    assert_eq!(
        app.post_responses(&request(vec![user_item("hi")]))
            .await
            .status(),
        200
    );
}

/// docs/apis.md: eight requests are refused while one is answered.
fn condenser_max_refused() -> usize {
    8
}

async fn a_socket_closed_during_a_summary_still_stores_the_compaction(backend: TestBackend) {
    let mut options = small_window(backend);
    options.fake.summary_delay = Duration::from_secs(2);
    let app = spawn_app_with(options).await;
    let history = long_history();
    let mut socket = connect(&app).await;
    send(&mut socket, &continuation(history.clone(), None)).await;
    wait_until(PATIENCE, "a summary is being written", || async {
        app.upstream.summaries_in_flight() > 0
    })
    .await;
    drop(socket);
    wait_until(
        PATIENCE,
        "the compaction stored and its lease released",
        || async {
            app.db.count("select count(*) from compactions").await >= 1
                && app.db.count("select count(*) from leases").await == 0
        },
    )
    .await;
    let summaries = app.upstream.summary_requests().len();
    let mut again = connect(&app).await;
    send(&mut again, &continuation(history, None)).await;
    assert_eq!(
        last(&answer(&mut again).await)["type"],
        "response.completed"
    );
    assert_eq!(
        app.upstream.summary_requests().len(),
        summaries,
        "the retry reused the compaction"
    );
}

/// With no compaction allowed, the overflow reaches the client as the
/// upstream sent it: a streamed `response.failed` as the same frames, a
/// refusal (a request that does not stream) as an error frame holding the
/// upstream's own error object.
/// Invariant 6 on a socket: while a summary is written, Condenser's
/// keep-alives arrive as pings, then the answer's frames.
async fn a_socket_waiting_on_a_summary_gets_pings_then_its_answer(backend: TestBackend) {
    let mut options =
        small_window(backend).settings(json!({"compaction": {"keepalive_interval": "200ms"}}));
    options.fake.summary_delay = Duration::from_secs(2);
    let app = spawn_app_with(options).await;
    let mut socket = connect(&app).await;
    send(&mut socket, &continuation(long_history(), None)).await;
    let mut pings = 0;
    let completed = loop {
        match socket.next().await.expect("a frame").expect("read") {
            Message::Ping(_) => pings += 1,
            Message::Text(text) => {
                let frame: Value = serde_json::from_str(&text).expect("json");
                if frame["type"] == "response.completed" {
                    break frame;
                }
                assert_ne!(frame["type"], "error", "{frame}");
            }
            other => panic!("unexpected {other:?}"),
        }
    };
    assert!(pings > 0, "no ping while the summary was written");
    assert_eq!(completed["response"]["status"], "completed");
    assert!(!app.upstream.summary_requests().is_empty());
}

/// A history past the small window: twelve turns of a pasted log.
fn long_history() -> Vec<Value> {
    (0..12)
        .flat_map(|turn| {
            [
                user_item(&format!("turn {turn}: {}", filler(1_500, turn))),
                crate::helpers::responses::assistant_item(&filler(300, turn + 100)),
            ]
        })
        .chain([user_item("and now?")])
        .collect()
}

async fn an_overflow_condenser_cannot_compact_arrives_as_the_upstream_sent_it(
    backend: TestBackend,
) {
    let options = small_window(backend).settings(json!({"compaction": {"max_compactions": 0}}));
    let app = spawn_app_with(options).await;
    let huge = vec![user_item(&filler(40_000, 1))];
    let mut socket = connect(&app).await;
    send(&mut socket, &continuation(huge.clone(), None)).await;
    let frames = answer(&mut socket).await;
    assert_eq!(frames, over_http(&app, &request(huge.clone())).await);
    let failed = last(&frames);
    assert_eq!(
        failed["response"]["error"]["code"], "context_length_exceeded",
        "{failed}"
    );

    let mut plain = continuation(huge.clone(), None);
    plain["stream"] = json!(false);
    send(&mut socket, &plain).await;
    let error = last(&answer(&mut socket).await);
    let mut body = request(huge);
    body["stream"] = json!(false);
    let http = app.post_responses(&body).await;
    let status = http.status().as_u16();
    let refusal: Value = http.json().await.expect("json");
    assert_eq!(error["type"], "error");
    assert_eq!((error["status"].as_u64(), status), (Some(400), 400));
    assert_eq!(
        error["error"], refusal["error"],
        "the upstream's own error object"
    );
    assert!(
        error["headers"]["x-condenser-compaction-error"].is_string(),
        "{error}"
    );
}

/// Off, or past a tenant's sockets, the handshake is answered 426 in the
/// API's error shape, so a client falls back to HTTPS at once; another
/// tenant is unaffected.
async fn with_the_mode_off_or_past_a_tenants_sockets_the_upgrade_is_a_426(backend: TestBackend) {
    let off = Options::on(backend).settings(json!({"server": {"responses_websocket": false}}));
    let app = spawn_app_with(off).await;
    assert_upgrade_required(try_connect(&app, OPENAI_KEY).await.err());
    assert_eq!(
        app.post_responses(&request(vec![user_item("hi")]))
            .await
            .status(),
        200
    );

    let one =
        Options::on(backend).settings(json!({"server": {"websocket_connections_per_tenant": 1}}));
    let app = spawn_app_with(one).await;
    let mut first = connect(&app).await;
    assert_upgrade_required(try_connect(&app, OPENAI_KEY).await.err());
    let mut other = try_connect(&app, "sk-another-tenant")
        .await
        .expect("another tenant's socket");
    send(&mut other, &continuation(vec![user_item("hello")], None)).await;
    assert_eq!(
        last(&answer(&mut other).await)["type"],
        "response.completed"
    );
    send(&mut first, &continuation(vec![user_item("hello")], None)).await;
    assert_eq!(
        last(&answer(&mut first).await)["type"],
        "response.completed"
    );
    drop(first);
    wait_until(PATIENCE, "a closed socket frees its slot", || async {
        try_connect(&app, OPENAI_KEY).await.is_ok()
    })
    .await;
}

fn assert_upgrade_required(refused: Option<tokio_tungstenite::tungstenite::Error>) {
    let Some(tokio_tungstenite::tungstenite::Error::Http(response)) = refused else {
        panic!("the upgrade was not refused: {refused:?}")
    };
    assert_eq!(response.status(), 426);
    let body: Value =
        serde_json::from_slice(response.body().as_deref().unwrap_or_default()).expect("json");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("HTTPS")),
        "{body}"
    );
}

/// Codex CLI with its built-in OpenAI provider opens the socket first;
/// every turn is answered over it (no request over HTTP), and Condenser
/// compacts the history Codex only sends as new items.
async fn codex_cli_answers_every_turn_over_the_socket_through_compactions(backend: TestBackend) {
    let app = codex_over_the_socket(backend, false).await;
    // Codex sends only new items after its first request on a socket;
    // the upstream gets whole histories over HTTP (the fake refuses an
    // output without its call), never an id it did not make.
    for request in app.upstream.chat_requests() {
        let body = request.json.unwrap_or_default();
        assert_eq!(request.transport, Transport::Http);
        assert!(body["previous_response_id"].is_null(), "{body}");
        assert!(body.get("generate").is_none(), "{body}");
    }
}

/// The same toward an upstream that serves the mode: every request goes
/// on over Condenser's own socket there, most as new items only.
async fn codex_cli_over_the_socket_toward_an_upstream_serving_the_mode(backend: TestBackend) {
    let app = codex_over_the_socket(backend, true).await;
    let sent = app.upstream.chat_requests();
    let over_http = sent
        .iter()
        .filter(|r| r.transport == Transport::Http)
        .count();
    assert_eq!(over_http, 0, "no request fell back to HTTP upstream");
    assert!(
        sent.iter().any(|r| r.continued),
        "no request continued the upstream's last response"
    );
    for request in &sent {
        let body = request.json.clone().unwrap_or_default();
        assert!(body.get("generate").is_none(), "{body}");
    }
}

/// Codex CLI, built-in OpenAI provider, 12 tool turns over the socket at a
/// small window: every turn answered, none over HTTP, compactions made.
async fn codex_over_the_socket(backend: TestBackend, upstream_serves_the_mode: bool) -> TestApp {
    const CODEX_MODEL: &str = "fake-model";
    const TURNS: usize = 12;
    let settings =
        json!({"compaction": {"summary_max_tokens": 300, "keepalive_interval": "300ms"}});
    let mut options = Options::on(backend)
        .window(CODEX_MODEL, 14_000)
        .settings(settings);
    options.fake.responses_websocket = upstream_serves_the_mode;
    let app = spawn_app_with(options).await;
    let (tap, heads) = request_tap(app.address.trim_start_matches("http://")).await;
    let home = tempfile::tempdir().expect("a CODEX_HOME");
    let workdir = tempfile::tempdir().expect("a working directory");
    let config = format!(
        "model = \"{CODEX_MODEL}\"\nmodel_provider = \"openai\"\nopenai_base_url = \"{}/v1\"\n\n\
         [analytics]\nenabled = false\n\n[features]\nplugins = false\n",
        tap
    );
    std::fs::write(home.path().join("config.toml"), config).expect("the Codex config");
    let auth = json!({"auth_mode": "apikey", "OPENAI_API_KEY": OPENAI_KEY});
    std::fs::write(home.path().join("auth.json"), auth.to_string()).expect("auth.json");
    for number in 1..=TURNS {
        let events =
            crate::codex::run_turn_pasting(home.path(), workdir.path(), number, 2_400).await;
        let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
        assert!(
            kinds.contains(&"turn.completed") && !kinds.contains(&"turn.failed"),
            "turn {number}: {events:?}"
        );
        let answered = events.iter().any(|e| {
            e["item"]["type"] == "agent_message"
                && e["item"]["text"].as_str().is_some_and(|t| !t.is_empty())
        });
        assert!(answered, "turn {number}: no answer in {events:?}");
    }
    let summaries = app.upstream.summary_requests().len();
    assert!(summaries >= 2, "{summaries} compactions over {TURNS} turns");
    let sent = heads.lock().expect("heads").clone();
    let upgrades = sent.matches("GET /v1/responses HTTP/1.1").count();
    let posts = sent.matches("POST /v1/responses").count();
    assert_eq!(posts, 0, "Codex fell back to HTTP");
    assert!(upgrades >= TURNS, "{upgrades} sockets for {TURNS} turns");
    let sent = app.upstream.chat_requests().len() as i64;
    wait_until(
        PATIENCE,
        "a request row for every turn's requests",
        || async { app.db.count("select count(*) from requests").await * 2 >= sent },
    )
    .await;
    assert!(app.db.count("select count(*) from messages").await >= 4 * TURNS as i64);
    app
}

fn metric(metrics: &str, series: &str) -> u64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0)
}

/// A TCP relay to `target` that keeps what clients send in plain text:
/// HTTP request heads, since a client's WebSocket frames are masked.
async fn request_tap(target: &str) -> (String, std::sync::Arc<std::sync::Mutex<String>>) {
    use crate::helpers::tap::{tap, Watched};
    let target: std::net::SocketAddr = target.parse().expect("address");
    let sent = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let seen = sent.clone();
    let address = tap(target, Watched::FromClient, move |chunk| {
        let text = String::from_utf8_lossy(chunk);
        seen.lock().expect("sent").push_str(&text);
    })
    .await;
    (format!("http://{address}"), sent)
}

/// SIGTERM waits for a request in flight on a socket, as for an HTTP
/// stream: its answer completes, then the process exits.
#[tokio::test]
async fn sigterm_lets_a_request_in_flight_on_a_socket_finish() {
    let fake = fake_upstream::FakeUpstream::start(fake_upstream::FakeConfig {
        chunk_delay: Duration::from_millis(300),
        ..fake_upstream::FakeConfig::default()
    })
    .await;
    let base = fake.openai_base_url();
    let mut proxy =
        crate::helpers::process::ProxyProcess::start(&[("CONDENSER_OPENAI_BASE_URL", &base)]);
    let url = proxy.url("/v1/responses").replacen("http://", "ws://", 1);
    let mut handshake = url.into_client_request().expect("a request");
    let bearer = format!("Bearer {OPENAI_KEY}").parse().expect("value");
    handshake.headers_mut().insert("authorization", bearer);
    let (mut socket, _) = tokio_tungstenite::connect_async(handshake)
        .await
        .expect("upgraded");
    send(&mut socket, &continuation(vec![user_item("hello")], None)).await;
    let first: Value =
        serde_json::from_str(&next_text(&mut socket).await.expect("a frame")).expect("json");
    assert_eq!(first["type"], "response.created");
    proxy.signal("TERM");
    assert_eq!(
        last(&answer(&mut socket).await)["type"],
        "response.completed"
    );
    let status = proxy
        .wait_exit(Duration::from_secs(10))
        .expect("exits after its answer");
    assert!(status.success());
}
