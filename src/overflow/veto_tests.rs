//! Step 6, detect overflow: tests of look-alikes.
//!
//! Look-alikes that must not count, in-band stream errors, and signatures
//! from config.

use super::*;

/// (case, status, body): none of these is a context overflow.
const NOT_OVERFLOW: &[(&str, u16, &str)] = &[
    (
        // OpenAI echoes an unknown field's name: here one a client chose.
        "echoed unknown field",
        400,
        r#"{"error":{"message":"Unrecognized request argument supplied: maximum context length is 1000 tokens","type":"invalid_request_error","param":null,"code":null}}"#,
    ),
    (
        "echoed unknown parameter on Azure",
        400,
        r#"{"error":{"message":"Unknown parameter: 'this model's maximum context length is 1000 tokens'.","type":"invalid_request_error","param":"this model's maximum context length is 1000 tokens","code":"unknown_parameter"}}"#,
    ),
    (
        "bedrock throttling",
        400,
        r#"{"__type":"ThrottlingException","message":"Too many tokens, please wait before trying again."}"#,
    ),
    (
        "rate limit text",
        400,
        r#"{"error":{"message":"Rate limit reached for gpt-4 in organization org-1 on tokens per min (TPM): Limit 10000, Used 9000, Requested 4000.","type":"tokens","code":"rate_limit_exceeded"}}"#,
    ),
    (
        "too many requests",
        400,
        r#"{"error":{"message":"Too many requests: the maximum context length is 8192 tokens"}}"#,
    ),
    (
        "429 with overflow text",
        429,
        "prompt is too long: 208310 tokens > 200000 maximum",
    ),
    (
        "string_above_max_length",
        400,
        r#"{"error":{"message":"Invalid 'messages[1].content': string too long. Expected a string with maximum length 10485760, but got a string with length 10485761 instead.","type":"invalid_request_error","param":"messages[1].content","code":"string_above_max_length"}}"#,
    ),
    (
        "invalid user",
        400,
        r#"{"error":{"message":"Invalid 'user': string too long. Expected a string with maximum length 64, but got a string with length 100 instead.","type":"invalid_request_error","param":"user","code":null}}"#,
    ),
    (
        "invalid api key",
        401,
        r#"{"error":{"message":"Incorrect API key provided: sk-abc. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#,
    ),
    (
        "invalid parameter",
        400,
        r#"{"error":{"message":"Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.","type":"invalid_request_error","param":"messages.[2].role","code":null}}"#,
    ),
    (
        "max_tokens too large",
        400,
        r#"{"error":{"message":"max_tokens is too large: 100000. This model supports at most 4096 completion tokens, whereas you provided 100000.","type":"invalid_request_error","param":"max_tokens","code":"invalid_value"}}"#,
    ),
    (
        "500 with overflow text",
        500,
        r#"{"error":{"message":"prompt is too long: 208310 tokens > 200000 maximum"}}"#,
    ),
    (
        // Only llama.cpp's wordings count at 500, and at no other 5xx.
        "500 of llama.cpp, not overflow",
        500,
        r#"{"error":{"code":500,"message":"Compute error.","type":"server_error"}}"#,
    ),
    (
        "502 with llama.cpp text",
        502,
        r#"{"error":{"code":502,"message":"Context size has been exceeded.","type":"server_error"}}"#,
    ),
    (
        // The output cap alone exceeds the window: compaction cannot help
        // (SGLang serving_chat.py; the missing space is SGLang's).
        "sglang max_completion_tokens too large",
        400,
        r#"{"object":"error","message":"max_completion_tokens is too large: 300000.This model supports at most 262144 completion tokens.","type":"BadRequestError","param":null,"code":400}"#,
    ),
    (
        "503 with overflow code",
        503,
        r#"{"error":{"message":"upstream failed","code":"context_length_exceeded"}}"#,
    ),
    (
        "groq tpm 413",
        413,
        r#"{"error":{"message":"Request too large for model `llama3-70b-8192` in organization `org_01` on tokens per minute (TPM): Limit 6000, Requested 12000, please reduce your message size and try again. Visit https://console.groq.com/docs/rate-limits for more information.","type":"tokens","code":"rate_limit_exceeded"}}"#,
    ),
    (
        "200 is never an error body",
        200,
        r#"{"error":{"code":"context_length_exceeded"}}"#,
    ),
    ("empty 400", 400, ""),
];

#[test]
fn look_alikes_are_vetoed() {
    let table = SignatureTable::builtin();
    for (case, status, body) in NOT_OVERFLOW {
        assert_eq!(table.detect(*status, body.as_bytes()), None, "case {case}");
    }
}

fn stream_name(table: &SignatureTable, data: &str) -> Option<String> {
    table
        .detect_stream_event(data)
        .map(|s| s.signature.to_string())
}

#[test]
fn in_band_stream_errors_are_recognized() {
    let table = SignatureTable::builtin();
    let cases = [
        (
            r#"{"type":"error","sequence_number":2,"error":{"type":"invalid_request_error","code":"context_length_exceeded","message":"Your input exceeds the context window of this model. Please adjust your input and try again.","param":"input"}}"#,
            "openai",
        ),
        (
            r#"{"type":"response.failed","response":{"id":"resp_1","status":"failed","error":{"code":"context_length_exceeded","message":"Your input exceeds the context window of this model. Please adjust your input and try again."}}}"#,
            "openai",
        ),
        (
            r#"{"type":"response.failed","response":{"error":{"code":"context_length_exceeded","message":"failed"}}}"#,
            "openai",
        ),
        (
            r#"{"error":{"message":"The input (140000 tokens) is longer than the model's context length (131072 tokens).","code":400}}"#,
            "sglang",
        ),
        (
            r#"{"object":"error","message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.","code":400}"#,
            "openai",
        ),
        (
            r#"{"error_type":"BadRequestError","error_message":"This model's maximum context length is 32768 tokens. However, your request has 40000 input tokens."}"#,
            "vllm",
        ),
        (
            r#"data: {"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}}"#,
            "anthropic",
        ),
    ];
    for (data, want) in cases {
        assert_eq!(stream_name(&table, data).as_deref(), Some(want), "{data}");
    }
}

#[test]
fn normal_stream_events_are_not_errors() {
    let table = SignatureTable::builtin();
    let cases = [
        r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hi"}}]}"#,
        r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[]}}"#,
        r#"{"id":"chatcmpl-1","choices":[{"delta":{"content":"the error said: prompt is too long: 5 tokens > 3 maximum"}}],"error":null}"#,
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        r#"{"type":"error","error":{"type":"rate_limit_error","message":"prompt is too long, rate limit"}}"#,
        "[DONE]",
        "",
    ];
    for data in cases {
        assert_eq!(stream_name(&table, data), None, "{data}");
    }
}

fn custom(json: &str) -> CustomSignature {
    serde_json::from_str(json).expect("test signature deserializes")
}

#[test]
fn custom_signatures_match_with_numbers_and_status() {
    let sig = custom(
        r#"{"name":"acme","status":[422],"pattern":"(?P<actual>{N}) tokens is over the (?P<limit>{N}) budget"}"#,
    );
    let table = SignatureTable::with_custom(&[sig]).expect("valid pattern");
    let body = br#"{"detail":"9,000 tokens is over the 8,192 budget"}"#;
    let signal = table.detect(422, body).expect("custom status matches");
    assert_eq!(signal.signature, "acme");
    assert_eq!((signal.limit, signal.actual), (Some(8192), Some(9000)));
    assert_eq!(signal.excess_tokens(), Some(808));
    assert_eq!(table.detect(400, body), None, "status filter applies");
}

#[test]
fn custom_signatures_take_precedence_and_fix_cause() {
    let sig =
        custom(r#"{"name":"gateway","pattern":"PROMPT IS TOO LONG","cause":"input_plus_output"}"#);
    let table = SignatureTable::with_custom(&[sig]).expect("valid pattern");
    let signal = table
        .detect(400, b"prompt is too long: 300 tokens > 200 maximum")
        .expect("matches");
    assert_eq!(signal.signature, "gateway");
    assert_eq!(signal.cause, OverflowCause::InputPlusOutput);
    let streamed = table.detect_stream_event(r#"{"error":{"message":"Prompt is too long"}}"#);
    assert_eq!(
        streamed.map(|s| s.signature),
        Some(SignatureName::Custom("gateway".into()))
    );
    let vetoed = table.detect(400, b"prompt is too long, rate limit exceeded");
    assert_eq!(vetoed, None, "vetoes still apply to custom signatures");
}

#[test]
fn custom_signature_config_is_strict() {
    let unknown = r#"{"name":"x","pattern":"y","statuses":[400]}"#;
    assert!(serde_json::from_str::<CustomSignature>(unknown).is_err());
    let bad_regex = custom(r#"{"name":"x","pattern":"(unclosed"}"#);
    assert!(SignatureTable::with_custom(&[bad_regex]).is_err());
}
