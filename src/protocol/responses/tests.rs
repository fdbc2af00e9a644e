//! Steps 2 to 7, the protocol seam: tests of the Responses adapter.

use super::*;

fn parse(body: Value) -> ChatRequest {
    Responses
        .parse(body.to_string().as_bytes())
        .expect("parses")
}

#[test]
fn instructions_and_leading_developer_items_are_the_system_part() {
    let body = json!({"model": "m", "instructions": "be brief", "input": [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "sandbox"}]},
        {"role": "user", "content": "hi"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "42"}
    ], "store": false, "include": ["reasoning.encrypted_content"]});
    let request = parse(body.clone());
    assert_eq!(request.system()["instructions"], "be brief");
    assert_eq!(request.system()["input"].as_array().map(Vec::len), Some(1));
    assert_eq!(request.messages().len(), 3);
    assert_eq!(
        Responses.build(&request, &request.messages().iter().collect::<Vec<_>>()),
        serde_json::to_vec(&body).expect("json")
    );
}

#[test]
fn a_string_input_is_one_user_message() {
    let request = parse(json!({"model": "m", "input": "hello"}));
    assert_eq!(
        request.messages(),
        vec![json!({"role": "user", "content": "hello"})]
    );
}

#[test]
fn stateful_requests_are_left_alone() {
    for field in ["previous_response_id", "conversation"] {
        let body = json!({"model": "m", "input": "more", field: "resp_123"});
        assert!(Responses.parse(body.to_string().as_bytes()).is_none());
    }
    let unset = json!({"model": "m", "input": "more", "previous_response_id": null});
    assert!(Responses.parse(unset.to_string().as_bytes()).is_some());
}

#[test]
fn the_summary_goes_right_after_the_system_part() {
    let request = parse(json!({"model": "m", "instructions": "i", "input": [
        {"role": "developer", "content": "d"}, {"role": "user", "content": "u"}]}));
    let summary = Responses.summary_message("user", "facts");
    let built: Value =
        serde_json::from_slice(&Responses.build(&request, &[&summary, &request.messages()[0]]))
            .expect("json");
    assert_eq!(built["input"][0]["role"], "developer");
    let text = built["input"][1]["content"][0]["text"]
        .as_str()
        .expect("text");
    assert!(text.starts_with(crate::protocol::SUMMARY_MARKER));
    assert_eq!(built["instructions"], "i");
}

#[test]
fn usage_comes_from_the_body_and_from_response_completed() {
    let response = json!({"object": "response", "usage": {"input_tokens": 120, "output_tokens": 8, "total_tokens": 128}});
    let expected = Some(Usage {
        input_tokens: 120,
        output_tokens: 8,
        ..Usage::default()
    });
    assert_eq!(Responses.usage(&response["usage"]), expected);
    let completed =
        json!({"type": "response.completed", "sequence_number": 9, "response": response});
    assert_eq!(Responses.stream_usage(&completed), expected);
    assert_eq!(
        Responses.stream_usage(&json!({"type": "response.output_text.delta", "delta": "usage"})),
        None
    );
}

#[test]
fn summary_replies_are_read_from_output_text() {
    let reply = json!({"output": [
        {"type": "reasoning", "summary": []},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "the gist", "annotations": []}]}
    ]});
    assert_eq!(Responses.response_text(&reply).as_deref(), Some("the gist"));
    assert_eq!(Responses.response_text(&json!({"output": []})), None);
}

#[test]
fn only_events_before_any_output_are_preamble() {
    assert!(Responses.is_stream_preamble(r#"{"type":"response.created","response":{}}"#));
    assert!(!Responses.is_stream_preamble(r#"{"type":"response.output_item.added"}"#));
    assert!(!Responses.is_stream_preamble(r#"{"type":"response.failed"}"#));
}

#[test]
fn a_stream_error_is_a_response_failed_event_with_the_upstream_error() {
    let error = json!({"error": {"message": "Your input exceeds the context window of this model.", "type": "invalid_request_error", "code": "context_length_exceeded"}});
    let event = String::from_utf8(Responses.stream_error_event(500, &error)).expect("text");
    assert!(event.starts_with("event: response.failed\ndata: "));
    let data: Value = serde_json::from_str(
        event
            .trim_start_matches("event: response.failed\ndata: ")
            .trim(),
    )
    .expect("json");
    assert_eq!(data["response"]["error"]["code"], "context_length_exceeded");
}

/// The pieces identity digests: the client's bytes when outlined.
fn piece_texts(outline: &Outline) -> Vec<String> {
    outline
        .message_pieces()
        .iter()
        .map(|piece| match piece {
            crate::protocol::Piece::Text(text) => String::from_utf8_lossy(text).into_owned(),
            crate::protocol::Piece::Parsed(_) => panic!("outlined bodies give their bytes"),
        })
        .collect()
}

#[test]
fn units_are_outlined_as_their_items_bytes_and_parse_as_a_whole_parse_does() {
    let body = br#"{"model": "m", "instructions": "be brief", "input": [
        {"type": "message", "role": "developer", "content": "sandbox"},
        {"role": "user", "content": "hi"},
        {"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAA"} ,
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "item_reference", "id": "x"},
        {"type": 7, "role": null, "note": "a message by its role key"},
        {"type": "function_call_output", "call_id": "c1", "output": "42"},
        {"type": "reasoning", "id": "rs_2"}
    ], "stream": true}"#;
    let outline = Responses
        .outline(Bytes::from_static(body))
        .expect("outlined");
    assert_eq!(
        piece_texts(&outline),
        [
            r#"{"role": "user", "content": "hi"}"#,
            "{\"type\": \"reasoning\", \"id\": \"rs_1\", \"encrypted_content\": \"gAAA\"} ,\n        \
             {\"type\": \"function_call\", \"call_id\": \"c1\", \"name\": \"f\", \"arguments\": \"{}\"},\n        \
             {\"type\": \"item_reference\", \"id\": \"x\"}",
            r#"{"type": 7, "role": null, "note": "a message by its role key"}"#,
            r#"{"type": "function_call_output", "call_id": "c1", "output": "42"}"#,
            r#"{"type": "reasoning", "id": "rs_2"}"#,
        ]
    );
    let outlined = outline.parse_all().expect("parses");
    let whole = parse_whole(body)
        .and_then(Outline::parse_all)
        .expect("parses whole");
    assert_eq!(outlined.messages(), whole.messages());
    assert_eq!(outlined.system(), whole.system());
    assert_eq!(outlined.body, whole.body);
    assert_eq!((&outlined.model, outlined.stream), (&whole.model, true));
    assert_eq!(Responses.tool_links(&outlined.messages()[1]).calls, ["c1"]);
}

#[test]
fn unusual_bodies_are_read_as_a_whole_parse_reads_them() {
    // serde_json's value parse reads an object whose first key is this
    // marker as the JSON text in its value.
    let marker = "$serde_json::private::RawValue";
    for body in [
        json!({"model": "m", "input": [{"type": "message", "role": {marker: "\"developer\""}, "content": "s"}, {"role": "user", "content": "a"}]}),
        json!({"model": "m", "input": [{"role": "user", "content": "a"}, {marker: "{\"type\":\"reasoning\"}"}, {"role": "user", "content": "b"}]}),
        json!({"model": "m", "input": "hello"}),
        json!({"model": "m", "input": [{"role": "user", "content": "a"}, 42, ["b"]]}),
        json!({"model": "m", "input": [{"role": "user", "content": "a"}], "previous_response_id": "r"}),
        json!({"model": "m", "input": {"role": "user"}}),
        json!({"model": "m"}),
        json!({"input": []}),
    ] {
        let text = body.to_string();
        let outlined = Responses.parse(text.as_bytes());
        let whole = parse_whole(text.as_bytes()).and_then(Outline::parse_all);
        assert_eq!(outlined.is_some(), whole.is_some(), "{body}");
        if let (Some(outlined), Some(whole)) = (outlined, whole) {
            assert_eq!(outlined.messages(), whole.messages());
            assert_eq!(outlined.system(), whole.system());
        }
    }
}
