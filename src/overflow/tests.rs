//! Step 6, detect overflow: tests with providers' bodies.
//!
//! Real overflow bodies, as each provider answers them (the sources are
//! beside the signatures in `signatures.rs`), one row per provider wording: each must match, with the right name and numbers.

use super::OverflowCause::{Bytes, Input, InputPlusOutput};
use super::*;

pub(super) type Want = (
    &'static str,
    OverflowCause,
    Option<u64>,
    Option<u64>,
    Option<u64>,
);

/// (case, status, body, expected (signature, cause, limit, actual, output)).
pub(super) type Case = (&'static str, u16, &'static str, Want);

/// Hosted APIs; gateways and self-hosted servers are in `server_tests.rs`.
const CASES: &[Case] = &[
    (
        "openai messages",
        400,
        r#"{"error":{"message":"This model's maximum context length is 4097 tokens. However, your messages resulted in 6988 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
        ("openai", Input, Some(4097), Some(6988), None),
    ),
    (
        "openai completion",
        400,
        r#"{"error":{"message":"This model's maximum context length is 4097 tokens. However, you requested 4201 tokens (3177 in the messages, 1024 in the completion). Please reduce the length of the messages or completion.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
        (
            "openai",
            InputPlusOutput,
            Some(4097),
            Some(3177),
            Some(1024),
        ),
    ),
    (
        "openai functions",
        400,
        r#"{"error":{"message":"This model's maximum context length is 8192 tokens. However, you requested 8213 tokens (6683 in the messages, 730 in the functions, and 800 in the completion). Please reduce the length of the messages, functions, or completion.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
        ("openai", InputPlusOutput, Some(8192), Some(7413), Some(800)),
    ),
    (
        "openai responses",
        400,
        r#"{"error":{"message":"Your input exceeds the context window of this model. Please adjust your input and try again.","type":"invalid_request_error","param":"input","code":"context_length_exceeded"}}"#,
        ("openai", Input, None, None, None),
    ),
    (
        "azure",
        400,
        r#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, you requested 1124171 tokens (124171 in the messages, 1000000 in the completion). Please reduce the length of the messages or completion.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
        (
            "openai",
            InputPlusOutput,
            Some(128_000),
            Some(124_171),
            Some(1_000_000),
        ),
    ),
    (
        "anthropic",
        400,
        r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"},"request_id":"req_011CVQe1dLrGNMJyE1ghG1av"}"#,
        ("anthropic", Input, Some(200_000), Some(208_310), None),
    ),
    (
        "anthropic 1m",
        400,
        r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 1520294 tokens > 1000000 maximum"}}"#,
        ("anthropic", Input, Some(1_000_000), Some(1_520_294), None),
    ),
    (
        "anthropic max_tokens",
        400,
        r#"{"type":"error","error":{"type":"invalid_request_error","message":"input length and `max_tokens` exceed context limit: 199759 + 8192 > 200000, decrease input length or `max_tokens` and try again"}}"#,
        (
            "anthropic",
            InputPlusOutput,
            Some(200_000),
            Some(199_759),
            Some(8192),
        ),
    ),
    (
        "anthropic 413",
        413,
        r#"{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum size"}}"#,
        ("anthropic-bytes", Bytes, None, None, None),
    ),
    (
        "bedrock invoke",
        400,
        r#"{"errorType":"ValidationException","errorMessage":"Input is too long for requested model.","$metadata":{"httpStatusCode":400}}"#,
        ("bedrock", Input, None, None, None),
    ),
    (
        "bedrock converse claude",
        400,
        r#"{"message":"The model returned the following errors: prompt is too long: 200049 tokens > 200000 maximum"}"#,
        ("anthropic", Input, Some(200_000), Some(200_049), None),
    ),
    (
        "bedrock converse",
        400,
        r#"{"message":"The model returned the following errors: Input is too long for requested model."}"#,
        ("bedrock", Input, None, None, None),
    ),
    (
        "bedrock mantle",
        400,
        r#"{"message":"prompt tokens (250000) exceed model maximum (200000)"}"#,
        ("bedrock", Input, Some(200_000), Some(250_000), None),
    ),
    // Bedrock behind OpenAI-compatible gateways (Databricks):
    // strands-agents/harness-sdk#1528, #152, #1663.
    (
        "bedrock gateway",
        400,
        r#"{"message":"Input is too long for requested model."}"#,
        ("bedrock", Input, None, None, None),
    ),
    (
        "bedrock gateway max_tokens",
        400,
        r#"{"message":"input length and `max_tokens` exceed context limit"}"#,
        ("anthropic", InputPlusOutput, None, None, None),
    ),
    (
        "bedrock gateway max_tokens numbers",
        400,
        r#"{"message":"input length and max_tokens exceed context limit: 142422 + 64000 > 204658"}"#,
        (
            "anthropic",
            InputPlusOutput,
            Some(204_658),
            Some(142_422),
            Some(64_000),
        ),
    ),
    (
        "bedrock gateway bytes",
        400,
        r#"{"message":"too many total text bytes"}"#,
        ("bedrock-bytes", Bytes, None, None, None),
    ),
    (
        "bedrock gateway claude",
        400,
        r#"{"message":"The model returned the following errors: prompt is too long: 903884 tokens > 200000 maximum"}"#,
        ("anthropic", Input, Some(200_000), Some(903_884), None),
    ),
    (
        "gemini",
        400,
        r#"{"error":{"code":400,"message":"The input token count (132478) exceeds the maximum number of tokens allowed (131072).","status":"INVALID_ARGUMENT"}}"#,
        ("gemini", Input, Some(131_072), Some(132_478), None),
    ),
    (
        "gemini numberless",
        400,
        r#"{"error":{"code":400,"message":"The input token count exceeds the maximum number of tokens allowed 1048576.","status":"INVALID_ARGUMENT"}}"#,
        ("gemini", Input, Some(1_048_576), None, None),
    ),
    (
        "gemini array",
        400,
        r#"[{"error":{"code":400,"message":"The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).","errors":[{"message":"The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).","domain":"global","reason":"badRequest"}],"status":"INVALID_ARGUMENT"}}]"#,
        ("gemini", Input, Some(1_048_576), Some(1_200_000), None),
    ),
    (
        "gemini 1m",
        400,
        r#"{"error":{"code":400,"message":"The input token count (3475108) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}"#,
        ("gemini", Input, Some(1_048_576), Some(3_475_108), None),
    ),
    (
        // The OpenAI-compatible endpoint answers errors as an array (issue 29).
        "gemini openai-compatible",
        400,
        r#"[{"error":{"code":400,"message":"The input token count (3475108) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}]"#,
        ("gemini", Input, Some(1_048_576), Some(3_475_108), None),
    ),
    (
        "mistral",
        400,
        r#"{"object":"error","message":"Prompt contains 40960 tokens and 0 draft tokens, too large for model with 32768 maximum context length","type":"invalid_request_invalid_args","param":null,"code":"3051","raw_status_code":400}"#,
        ("mistral", Input, Some(32_768), Some(40_960), None),
    ),
    (
        "groq",
        400,
        r#"{"error":{"message":"Please reduce the length of the messages or completion.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
        ("groq", Input, None, None, None),
    ),
    (
        "deepseek",
        400,
        r#"{"error":{"message":"This model's maximum context length is 131072 tokens. However, you requested 131329 tokens (123137 in the messages, 8192 in the completion). Please reduce the length of the messages or completion.","type":"invalid_request_error","param":null,"code":"invalid_request_error"}}"#,
        (
            "openai",
            InputPlusOutput,
            Some(131_072),
            Some(123_137),
            Some(8192),
        ),
    ),
    (
        "xai",
        400,
        r#"{"code":"Client specified an invalid argument","error":"This model's maximum prompt length is 131072 but the request contains 149617 tokens."}"#,
        ("xai", Input, Some(131_072), Some(149_617), None),
    ),
    (
        "kimi",
        400,
        r#"{"error":{"message":"Your request exceeded model token limit: 131072 (requested: 140000)","type":"invalid_request_error"}}"#,
        ("kimi", Input, Some(131_072), Some(140_000), None),
    ),
    (
        "minimax",
        400,
        r#"{"base_resp":{"status_code":2013,"status_msg":"invalid params, context window exceeds limit"}}"#,
        ("minimax", Input, None, None, None),
    ),
    (
        "copilot",
        400,
        r#"{"error":{"message":"prompt token count of 140000 exceeds the limit of 128000","code":"model_max_prompt_tokens_exceeded"}}"#,
        ("copilot", Input, Some(128_000), Some(140_000), None),
    ),
    (
        "cerebras",
        400,
        r#"{"error":{"message":"Please reduce the length of the messages or completion. Current length is 9000 while limit is 8192","code":"context_length_exceeded"}}"#,
        ("cerebras", Input, Some(8192), Some(9000), None),
    ),
];

/// A signal as the tuple [`Want`] spells it, its name owned.
type Got = (String, OverflowCause, Option<u64>, Option<u64>, Option<u64>);

pub(super) fn got(signal: OverflowSignal) -> Got {
    let OverflowSignal {
        signature,
        cause,
        limit,
        actual,
        requested_output,
        ..
    } = signal;
    (
        signature.to_string(),
        cause,
        limit,
        actual,
        requested_output,
    )
}

pub(super) fn wanted(want: &Want) -> Got {
    (want.0.to_owned(), want.1, want.2, want.3, want.4)
}

/// Asserts each body is detected with exactly the expected signal.
pub(super) fn assert_recognized(cases: &[Case]) {
    let table = SignatureTable::builtin();
    for (case, status, body, want) in cases {
        let signal = table.detect(*status, body.as_bytes());
        assert_eq!(signal.map(got), Some(wanted(want)), "case {case}");
    }
}

#[test]
fn hosted_api_bodies_are_recognized() {
    assert_recognized(CASES);
}

#[test]
fn every_builtin_pattern_compiles() {
    let table = SignatureTable::builtin();
    assert_eq!(table.signatures.len(), signatures::BUILTIN.len());
    assert_eq!(table.vetoes.len(), signatures::VETOES.len());
}

#[test]
fn builtin_patterns_are_lower_case() {
    // Messages are lower-cased and built-ins compiled without `(?i)`, so a
    // capital letter in a pattern (other than a placeholder) never matches.
    let patterns = signatures::BUILTIN.iter().flat_map(|spec| spec.patterns);
    for re in patterns
        .map(|pat| pat.re)
        .chain(signatures::VETOES.iter().copied())
    {
        assert!(
            !re.replace("{N}", "")
                .chars()
                .any(|c| c.is_ascii_uppercase()),
            "{re}"
        );
    }
}

#[test]
fn excess_counts_output_too() {
    let table = SignatureTable::builtin();
    let excess = |body: &str| {
        table
            .detect(400, body.as_bytes())
            .and_then(|s| s.excess_tokens())
    };
    assert_eq!(
        excess("prompt is too long: 208310 tokens > 200000 maximum"),
        Some(8310)
    );
    let max_tokens = "input length and `max_tokens` exceed context limit: 199759 + 8192 > 200000";
    assert_eq!(excess(max_tokens), Some(7951));
    assert_eq!(excess("Input is too long for requested model."), None);
}
