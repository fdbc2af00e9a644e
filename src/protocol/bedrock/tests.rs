//! Steps 1 to 7, the protocol seam: Bedrock's paths, frames and callers.

use super::*;

fn events_of(bytes: &[u8], piece: usize) -> Vec<String> {
    let mut decoder = EventStream.decoder();
    let mut events = Vec::new();
    for chunk in bytes.chunks(piece) {
        decoder.feed(chunk, &mut events);
    }
    events
}

#[test]
fn the_model_is_read_from_the_path_even_as_an_encoded_arn() {
    let arn = "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Aapplication-inference-profile%2Fabc/invoke-with-response-stream";
    let (model, action) = model_and_action(arn).expect("a model path");
    assert_eq!(
        model,
        "arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/abc"
    );
    assert_eq!(action, "invoke-with-response-stream");
    assert_eq!(Bedrock.endpoint(&Method::POST, arn), Endpoint::Chat);
    assert!(Bedrock.claims("/inference-profiles", &HeaderMap::new()));
    let count = "/model/us.anthropic.claude-sonnet-4-5-20250929-v1:0/count-tokens";
    assert_eq!(
        Bedrock.endpoint(&Method::POST, count),
        Endpoint::Passthrough
    );
    assert!(Bedrock.claims(count, &HeaderMap::new()));
}

#[test]
fn the_summary_call_goes_to_the_summary_models_invoke() {
    let url: reqwest::Url = "https://gw.example/bedrock/model/global.anthropic.claude-opus-4-1-v1:0/invoke-with-response-stream"
        .parse()
        .expect("url");
    let arn = "arn:aws:bedrock:us-east-1:1:inference-profile/us.anthropic.claude-haiku-4-5-v1:0";
    let summary = Bedrock.summary_url(&url, arn);
    assert_eq!(
        summary.path(),
        "/bedrock/model/arn:aws:bedrock:us-east-1:1:inference-profile%2Fus.anthropic.claude-haiku-4-5-v1:0/invoke"
    );
    let (model, _) = model_and_action(&summary.path()["/bedrock".len()..]).expect("a model path");
    assert_eq!(model, arn);
}

#[test]
fn a_streamed_request_is_outlined_with_its_model_and_its_summary_request_keeps_the_version() {
    let body = Bytes::from_static(
        br#"{"anthropic_version":"bedrock-2023-05-31","anthropic_beta":["interleaved-thinking-2025-05-14"],"max_tokens":100,"messages":[{"role":"user","content":"hi"}]}"#,
    );
    let path = "/model/us.anthropic.claude-sonnet-4-5-20250929-v1:0/invoke-with-response-stream";
    let request = Bedrock
        .outline_at(body, path)
        .and_then(Outline::parse_all)
        .expect("outlines");
    assert_eq!(
        request.model,
        "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
    );
    assert!(request.stream);
    let call = SummaryCall {
        model: "m",
        instructions: "summarize",
        transcript: "[user] hi",
        max_tokens: 50,
        reasoning_tokens: 0,
        output_field: None,
    };
    let summary = Bedrock.summary_request(&request, &call);
    assert_eq!(summary.get("model"), None);
    assert_eq!(summary["anthropic_version"], "bedrock-2023-05-31");
    assert_eq!(summary["max_tokens"], 50);
}

#[test]
fn chunks_decode_however_the_stream_is_cut() {
    let mut stream = chunk_frame(
        br#"{"type":"message_start","message":{"usage":{"input_tokens":12,"output_tokens":1}}}"#,
    );
    stream.extend(Bedrock.keepalive());
    stream.extend(chunk_frame(
        br#"{"type":"message_delta","usage":{"output_tokens":7}}"#,
    ));
    for piece in [1, 7, stream.len()] {
        let events = events_of(&stream, piece);
        assert_eq!(events.len(), 3, "cut every {piece} bytes");
        assert_eq!(events[1], r#"{"type":"ping"}"#);
        let start: Value = serde_json::from_str(&events[0]).expect("json");
        let usage = Bedrock.stream_usage(&start).expect("usage");
        assert_eq!(usage.input_tokens, 12);
    }
}

#[test]
fn an_exception_frame_reads_as_an_error_event_naming_its_type() {
    let error = json!({"message": "Input is too long for requested model."});
    let events = events_of(&Bedrock.stream_error_event(400, &error), 5);
    assert_eq!(events.len(), 1);
    let event: Value = serde_json::from_str(&events[0]).expect("json");
    assert_eq!(event["type"], "error");
    assert_eq!(event["error"]["type"], "validationException");
    assert_eq!(
        event["error"]["message"],
        "Input is too long for requested model."
    );
}

#[test]
fn a_broken_stream_yields_nothing_more() {
    let mut stream = chunk_frame(br#"{"type":"ping"}"#);
    let last = stream.len() - 1;
    stream[last] ^= 0xff;
    stream.extend(chunk_frame(br#"{"type":"ping"}"#));
    assert!(events_of(&stream, 16).is_empty());
}

#[test]
fn the_caller_is_its_key_or_its_signatures_access_key() {
    let mut signed = HeaderMap::new();
    signed.insert(
        "authorization",
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261128/us-east-1/bedrock/aws4_request, SignedHeaders=host, Signature=1"
            .parse()
            .expect("header"),
    );
    let mut resigned = signed.clone();
    resigned.insert(
        "authorization",
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261129/us-east-1/bedrock/aws4_request, SignedHeaders=host, Signature=2"
            .parse()
            .expect("header"),
    );
    let credential = |headers: &HeaderMap| Bedrock.credential(headers, None);
    assert_eq!(credential(&signed), Some(b"AKIDEXAMPLE".to_vec()));
    assert_eq!(credential(&signed), credential(&resigned));
    let mut keyed = HeaderMap::new();
    keyed.insert("authorization", "Bearer ABSK-key".parse().expect("header"));
    assert_eq!(credential(&keyed), Some(b"Bearer ABSK-key".to_vec()));
    let signer = Bedrock.signer().expect("a signer");
    assert!(signer.signed_by_client(&signed));
    assert!(!signer.signed_by_client(&keyed));
}
