//! The fake serves the Responses API's WebSocket mode as OpenAI does:
//! each frame answered as its HTTP request would be, errors as error
//! frames on an open connection, and `previous_response_id` continuing
//! only the connection's own last response.

use fake_upstream::{FakeConfig, FakeUpstream, Transport};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

fn socket_config() -> FakeConfig {
    FakeConfig {
        responses_websocket: true,
        ..FakeConfig::default()
    }
}

async fn connect(
    fake: &FakeUpstream,
    key: Option<&str>,
) -> Result<Socket, tokio_tungstenite::tungstenite::Error> {
    let url = format!("ws://{}/v1/responses", fake.addr());
    let mut request = url.into_client_request().expect("request");
    let headers = request.headers_mut();
    headers.insert(
        "openai-beta",
        "responses_websockets=2026-02-06".parse().expect("header"),
    );
    if let Some(key) = key {
        let bearer = format!("Bearer {key}").parse().expect("header");
        headers.insert("authorization", bearer);
    }
    let (socket, _) = tokio_tungstenite::connect_async(request).await?;
    Ok(socket)
}

async fn open(fake: &FakeUpstream) -> Socket {
    connect(fake, Some("sk-test")).await.expect("upgraded")
}

async fn send(socket: &mut Socket, frame: Value) {
    socket
        .send(Message::Text(frame.to_string().into()))
        .await
        .expect("sent");
}

async fn next(socket: &mut Socket) -> Value {
    loop {
        match socket.next().await.expect("a frame").expect("readable") {
            Message::Text(text) => return serde_json::from_str(&text).expect("json frame"),
            Message::Close(close) => panic!("closed: {close:?}"),
            _ => continue,
        }
    }
}

/// Frames up to a terminal one: `response.completed`, `response.failed`
/// or an error frame.
async fn answer(socket: &mut Socket, frame: Value) -> Vec<Value> {
    send(socket, frame).await;
    let mut frames = Vec::new();
    loop {
        let frame = next(socket).await;
        let kind = frame["type"].as_str().unwrap_or_default().to_string();
        frames.push(frame);
        if ["response.completed", "response.failed", "error"].contains(&kind.as_str()) {
            return frames;
        }
    }
}

fn create(body: Value) -> Value {
    let mut frame = json!({"type": "response.create"});
    for (key, value) in body.as_object().expect("object") {
        frame[key] = value.clone();
    }
    frame
}

fn types(frames: &[Value]) -> Vec<String> {
    frames
        .iter()
        .map(|f| f["type"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The `data` payloads of an HTTP SSE answer.
async fn http_events(fake: &FakeUpstream, body: Value) -> Vec<Value> {
    let text = reqwest::Client::new()
        .post(format!("{}/responses", fake.openai_base_url()))
        .bearer_auth("sk-test")
        .json(&body)
        .send()
        .await
        .expect("answers")
        .text()
        .await
        .expect("body");
    text.lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .map(|data| serde_json::from_str(data).expect("json data"))
        .collect()
}

fn first_turn() -> Value {
    json!({"model": "gpt-5", "stream": true, "store": false,
        "tools": [{"type": "function", "name": "read_file", "parameters": {}}],
        "input": [{"role": "user", "content": "look [tools]"}]})
}

#[tokio::test]
async fn without_the_mode_the_upgrade_is_refused_405() {
    let fake = FakeUpstream::start(FakeConfig::default()).await;
    let refused = connect(&fake, Some("sk-test")).await.expect_err("refused");
    let tokio_tungstenite::tungstenite::Error::Http(response) = refused else {
        panic!("not an HTTP refusal: {refused:?}");
    };
    assert_eq!(response.status(), 405);
    assert_eq!(fake.websocket_connections(), 0);
}

#[tokio::test]
async fn with_the_mode_a_plain_get_is_still_405_and_a_keyless_upgrade_401() {
    let fake = FakeUpstream::start(socket_config()).await;
    let plain = reqwest::get(format!("{}/responses", fake.openai_base_url()))
        .await
        .expect("answers");
    assert_eq!(plain.status(), 405);
    let refused = connect(&fake, None).await.expect_err("refused");
    let tokio_tungstenite::tungstenite::Error::Http(response) = refused else {
        panic!("not an HTTP refusal: {refused:?}");
    };
    assert_eq!(response.status(), 401);
    let body: Value =
        serde_json::from_slice(response.body().as_deref().expect("body")).expect("json body");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert_eq!(fake.websocket_connections(), 0);
}

#[tokio::test]
async fn a_chain_is_answered_as_over_http_and_continued_with_its_full_input() {
    let fake = FakeUpstream::start(socket_config()).await;
    let mut socket = open(&fake).await;
    assert_eq!(fake.websocket_connections(), 1);

    let frames = answer(&mut socket, create(first_turn())).await;
    let over_http = http_events(&fake, first_turn()).await;
    assert_eq!(types(&frames), types(&over_http));
    assert_eq!(frames.last(), over_http.last());
    let completed = &frames.last().expect("frames")["response"];
    assert_eq!(frames.last().expect("frames")["type"], "response.completed");
    let call = &completed["output"][0];
    assert_eq!(call["type"], "function_call");

    let result =
        json!({"type": "function_call_output", "call_id": call["call_id"], "output": "ok"});
    let continuation = json!({"model": "gpt-5", "stream": true, "store": false,
        "previous_response_id": completed["id"], "input": [result]});
    let frames = answer(&mut socket, create(continuation)).await;
    assert_eq!(
        frames.last().expect("frames")["type"],
        "response.completed",
        "{frames:?}"
    );

    let requests = fake.requests();
    let last = requests.last().expect("recorded");
    assert_eq!(last.transport, Transport::Websocket);
    assert!(last.continued);
    assert_eq!(last.status, 200);
    let body = last.json.as_ref().expect("json body");
    let mut full = first_turn()["input"].as_array().expect("input").clone();
    full.push(call.clone());
    full.push(result);
    assert_eq!(body["input"], Value::Array(full));
    assert!(body.get("previous_response_id").is_none());
    assert!(body.get("type").is_none());
    let first = &requests[0];
    assert_eq!(first.transport, Transport::Websocket);
    assert!(!first.continued);
    assert_eq!(requests[1].transport, Transport::Http);
}

#[tokio::test]
async fn an_unknown_previous_response_is_refused_and_the_connection_answers_on() {
    let fake = FakeUpstream::start(socket_config()).await;
    let mut socket = open(&fake).await;
    let stranger = json!({"model": "gpt-5", "previous_response_id": "resp_unknown",
        "input": [{"role": "user", "content": "hi"}]});
    let frames = answer(&mut socket, create(stranger)).await;
    assert_eq!(
        frames,
        [json!({"type": "error", "status": 400, "error": {
            "type": "invalid_request_error", "code": "previous_response_not_found",
            "message": "Previous response with id 'resp_unknown' not found.",
            "param": "previous_response_id"}})]
    );
    let refused = fake.requests();
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0].status, 400);
    assert!(!refused[0].continued);

    let frames = answer(&mut socket, create(first_turn())).await;
    assert_eq!(frames.last().expect("frames")["type"], "response.completed");
}

#[tokio::test]
async fn an_overflow_is_the_http_overflow_error_in_an_error_frame() {
    let mut config = socket_config();
    config.context_windows.insert("gpt-5".into(), 100);
    let fake = FakeUpstream::start(config).await;
    let mut socket = open(&fake).await;
    let long = json!({"model": "gpt-5", "input": "word ".repeat(400)});
    let frames = answer(&mut socket, create(long)).await;
    assert_eq!(
        frames,
        [json!({"type": "error", "status": 400, "error": {
            "message": "Your input exceeds the context window of this model. Please adjust your input and try again.",
            "type": "invalid_request_error", "param": "input", "code": "context_length_exceeded"}})]
    );
    assert_eq!(fake.requests()[0].status, 400);
    assert!(fake.requests()[0].input_tokens.expect("counted") > 100);
}

#[tokio::test]
async fn a_fresh_connection_does_not_know_another_connections_responses() {
    let fake = FakeUpstream::start(socket_config()).await;
    let mut first = open(&fake).await;
    let frames = answer(&mut first, create(first_turn())).await;
    let id = frames.last().expect("frames")["response"]["id"].clone();

    let mut second = open(&fake).await;
    let follow = json!({"model": "gpt-5", "previous_response_id": id,
        "input": [{"role": "user", "content": "and then?"}]});
    let frames = answer(&mut second, create(follow)).await;
    assert_eq!(frames[0]["type"], "error");
    assert_eq!(frames[0]["error"]["code"], "previous_response_not_found");
    assert_eq!(fake.websocket_connections(), 2);
}

#[tokio::test]
async fn a_prewarm_answers_an_empty_response_the_next_frame_continues() {
    let fake = FakeUpstream::start(socket_config()).await;
    let mut socket = open(&fake).await;
    let mut warm = first_turn();
    warm["generate"] = json!(false);
    let frames = answer(&mut socket, create(warm)).await;
    assert_eq!(
        types(&frames),
        [
            "response.created",
            "response.in_progress",
            "response.completed"
        ]
    );
    let completed = &frames[2]["response"];
    assert_eq!(completed["output"], json!([]));

    let next = json!({"model": "gpt-5", "previous_response_id": completed["id"], "input": []});
    let frames = answer(&mut socket, create(next)).await;
    assert_eq!(frames.last().expect("frames")["type"], "response.completed");
    let last = fake.last_accepted().expect("accepted");
    assert!(last.continued);
    assert_eq!(
        last.json.expect("json")["input"],
        first_turn()["input"],
        "the prewarm's input, continued"
    );
}
