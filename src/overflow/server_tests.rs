//! Step 6, detect overflow: tests with gateways' bodies.
//!
//! Real overflow bodies from gateways (OpenRouter, LiteLLM, Poolside),
//! self-hosted servers (vLLM, SGLang, llama.cpp, Ollama, LM Studio, TGI) and
//! bare HTTP refusals.

use super::tests::{assert_recognized, got, wanted, Case, Want};
use super::OverflowCause::{Bytes, Input, InputPlusOutput};
use super::SignatureTable;

const CASES: &[Case] = &[
    (
        // Ollama v0.12.6–v0.29 with `truncate: false` (ollama commit 6544e1473).
        "ollama input length",
        400,
        r#"{"error":"the input length exceeds the context length"}"#,
        ("ollama", Input, None, None, None),
    ),
    (
        // Ollama v0.30+ with `truncate: false`: llama-server's body as a
        // string (ollama/ollama#16800).
        "ollama wrapping llama-server",
        400,
        r#"{"error":"{\"error\":{\"code\":400,\"message\":\"request (351 tokens) exceeds the available context size (256 tokens), try increasing it\",\"type\":\"exceed_context_size_error\",\"n_prompt_tokens\":351,\"n_ctx\":256}}"}"#,
        ("llama.cpp", Input, Some(256), Some(351), None),
    ),
    (
        "openrouter",
        400,
        r#"{"error":{"message":"This endpoint's maximum context length is 16384 tokens. However, you requested about 94307 tokens (94307 of text input). Please reduce the length of either one, or use the \"middle-out\" transform to compress your prompt automatically.","code":400,"metadata":{"provider_name":null}}}"#,
        ("openrouter", Input, Some(16_384), Some(94_307), None),
    ),
    (
        "openrouter compression plugin",
        400,
        r#"{"error":{"message":"This endpoint's maximum context length is 16384 tokens. However, you requested about 26265 tokens (26255 of text input, 10 in the output). Please reduce the length of either one, or use the context-compression plugin to compress your prompt automatically.","code":400,"metadata":{"provider_name":null}}}"#,
        ("openrouter", Input, Some(16_384), Some(26_255), Some(10)),
    ),
    (
        "openrouter raw",
        400,
        r#"{"error":{"message":"Provider returned error","code":400,"metadata":{"raw":"{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"prompt is too long: 208310 tokens > 200000 maximum\"}}","provider_name":"Anthropic"}}}"#,
        ("anthropic", Input, Some(200_000), Some(208_310), None),
    ),
    (
        "litellm",
        400,
        r#"{"error":{"message":"litellm.ContextWindowExceededError: Requested token count exceeds the model's maximum context length of 131072 tokens","type":null,"param":null,"code":"400"}}"#,
        ("litellm", Input, Some(131_072), None, None),
    ),
    (
        "poolside",
        400,
        r#"{"error":{"message":"Input length 140000 exceeds the maximum allowed input length of 131072 tokens."}}"#,
        ("input-length", Input, Some(131_072), Some(140_000), None),
    ),
    (
        "vllm flat",
        400,
        r#"{"object":"error","message":"This model's maximum context length is 131072 tokens. However, you requested 156632 tokens (152536 in the messages, 4096 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}"#,
        ("openai", Input, Some(131_072), Some(152_536), Some(4096)),
    ),
    (
        "vllm one or other",
        400,
        r#"{"error":{"message":"This model's maximum context length is 2048 tokens. However, your request has 8 input tokens plus 2045 'max_tokens'. Please reduce one or the other. (parameter=input_tokens, max_tokens, value=(8, 2045))","type":"BadRequestError","param":"input_tokens, max_tokens","code":400}}"#,
        ("vllm", InputPlusOutput, Some(2048), Some(8), Some(2045)),
    ),
    (
        "vllm at least",
        400,
        r#"{"error":{"message":"This model's maximum context length is 262144 tokens. However, you requested 128000 output tokens and your prompt contains at least 134145 input tokens, for a total of at least 262145 tokens. Please reduce the length of the input prompt or the number of requested output tokens. (parameter=input_tokens, value=134145)","type":"BadRequestError","param":"input_tokens","code":400}}"#,
        (
            "vllm",
            InputPlusOutput,
            Some(262_144),
            Some(134_145),
            Some(128_000),
        ),
    ),
    (
        "fastapi detail",
        400,
        r#"{"detail":"The input (40000 tokens) is longer than the model's context length (32768 tokens)."}"#,
        ("sglang", Input, Some(32_768), Some(40_000), None),
    ),
    (
        "sglang",
        400,
        r#"{"object":"error","message":"The input (140000 tokens) is longer than the model's context length (131072 tokens).","type":"BadRequestError","param":null,"code":400}"#,
        ("sglang", Input, Some(131_072), Some(140_000), None),
    ),
    (
        "llama.cpp",
        400,
        r#"{"error":{"code":400,"message":"request (13392 tokens) exceeds the available context size (8192 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":13392,"n_ctx":8192}}"#,
        ("llama.cpp", Input, Some(8192), Some(13_392), None),
    ),
    (
        "llama.cpp fields",
        400,
        r#"{"error":{"code":400,"message":"context overflow","type":"exceed_context_size_error","n_prompt_tokens":9000,"n_ctx":8192}}"#,
        ("llama.cpp", Input, Some(8192), Some(9000), None),
    ),
    (
        "llama.cpp older",
        400,
        r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"invalid_request_error"}}"#,
        ("llama.cpp", Input, None, None, None),
    ),
    (
        "ollama go client",
        400,
        r#"{"StatusCode":400,"Status":"400 Bad Request","error":"prompt too long; exceeded max context length by 4 tokens"}"#,
        ("ollama", Input, None, None, None),
    ),
    (
        "lmstudio keep",
        400,
        r#"{"error":"Trying to keep the first 15857 tokens when context the overflows. However, the model is loaded with context length of only 32768 tokens, which is not enough. Try to load the model with a larger context length, or provide a shorter input"}"#,
        ("lmstudio", Input, Some(32_768), Some(15_857), None),
    ),
    (
        "lmstudio older",
        400,
        r#"{"error":"The number of tokens to keep from the initial prompt is greater than the context length"}"#,
        ("lmstudio", Input, None, None, None),
    ),
    (
        "lmstudio mlx",
        400,
        r#"{"error":{"message":"Context size has been exceeded.","type":"invalid_request_error"}}"#,
        ("lmstudio", Input, None, None, None),
    ),
    (
        "together tgi",
        400,
        r#"{"error":{"message":"Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4097. Given: 80125 `inputs` tokens and 4096 `max_new_tokens`","type":"invalid_request_error","param":"max_tokens","code":null}}"#,
        ("tgi", Input, Some(4097), Some(80_125), Some(4096)),
    ),
    (
        "together new",
        400,
        r#"{"error":{"message":"The input (516368 tokens) is longer than the model's context length (262144 tokens).","type":"invalid_request_error"}}"#,
        ("sglang", Input, Some(262_144), Some(516_368), None),
    ),
    (
        "plain text",
        400,
        "prompt is too long: 1,520,294 tokens > 1,000,000 maximum",
        ("anthropic", Input, Some(1_000_000), Some(1_520_294), None),
    ),
    (
        "nginx 413",
        413,
        "<html><head><title>413 Request Entity Too Large</title></head></html>",
        ("http-413", Bytes, None, None, None),
    ),
    ("empty 413", 413, "", ("http-413", Bytes, None, None, None)),
];

/// Wordings of issue 29 (sources beside each signature in `signatures.rs`).
const ISSUE_29: &[Case] = &[
    (
        "sglang total",
        400,
        r#"{"object":"error","message":"Requested token count exceeds the model's maximum context length of 262144 tokens. You requested a total of 263925 tokens: 199925 tokens from the input messages and 64000 tokens for the completion. Please reduce the number of tokens in the input messages or the completion to fit within the limit.","type":"BadRequestError","param":null,"code":400}"#,
        (
            "sglang",
            InputPlusOutput,
            Some(262_144),
            Some(199_925),
            Some(64_000),
        ),
    ),
    (
        "sglang total relayed by litellm",
        400,
        r#"{"error":{"message":"litellm.ContextWindowExceededError: litellm.BadRequestError: OpenAIException - Requested token count exceeds the model's maximum context length of 16384 tokens. You requested a total of 17964 tokens: 1580 tokens from the input messages and 16384 tokens for the completion. Please reduce the number of tokens in the input messages or the completion to fit within the limit.","type":null,"param":null,"code":"400"}}"#,
        (
            "sglang",
            InputPlusOutput,
            Some(16_384),
            Some(1580),
            Some(16_384),
        ),
    ),
    (
        "sglang total as floats",
        400,
        r#"{"message":"Bad request!: Requested token count exceeds the model's maximum context length of 131072 tokens. You requested a total of 524300.0 tokens: 12 tokens from the input messages and 524288.0 tokens for the completion.","error_code":400}"#,
        (
            "sglang",
            InputPlusOutput,
            Some(131_072),
            Some(12),
            Some(524_288),
        ),
    ),
    (
        "vllm prompt alone",
        400,
        r#"{"error":{"message":"This model's maximum context length is 32768 tokens. However, your prompt contains 40000 input tokens, which exceeds this limit even without any output tokens. Please reduce the length of the input prompt.","type":"BadRequestError","param":null,"code":400}}"#,
        ("vllm", Input, Some(32_768), Some(40_000), None),
    ),
    (
        "vllm prompt at least",
        400,
        r#"{"error":{"message":"This model's maximum context length is 131072 tokens. However, your prompt contains at least 131073 input tokens, which exceeds this limit even without any output tokens. Please reduce the length of the input prompt.","type":"BadRequestError","param":null,"code":400}}"#,
        ("vllm", Input, Some(131_072), Some(131_073), None),
    ),
    (
        "vllm prompt characters",
        400,
        r#"{"error":{"message":"This model's maximum context length is 32768 tokens. However, your prompt contains 1200000 characters (more than 1048576 characters, which is the upper bound for 32768 input tokens). Please reduce the length of the input prompt.","type":"BadRequestError","param":null,"code":400}}"#,
        ("vllm", Input, Some(32_768), None, None),
    ),
    (
        "vllm passed",
        400,
        r#"{"error":{"message":"You passed 7500 input tokens and requested 1024 output tokens. However, the model's context length is only 8192 tokens, resulting in a maximum input length of 7168 tokens. Please reduce the length of the input prompt.","type":"BadRequestError","param":"input_tokens","code":400}}"#,
        ("vllm", InputPlusOutput, Some(8192), Some(7500), Some(1024)),
    ),
    (
        "vllm input length",
        400,
        r#"{"error":{"message":"Input length (265330) exceeds model's maximum context length (262144).","type":"BadRequestError","param":null,"code":400}}"#,
        ("vllm", Input, Some(262_144), Some(265_330), None),
    ),
    (
        "vllm decoder prompt",
        400,
        r#"{"error":{"message":"The decoder prompt (length 8825) is longer than the maximum model length of 8192. Make sure that `max_model_len` is no smaller than the number of text tokens.","type":"BadRequestError","param":null,"code":400}}"#,
        ("vllm", Input, Some(8192), Some(8825), None),
    ),
    (
        "vllm max_tokens too large",
        400,
        r#"{"error":{"message":"'max_tokens' or 'max_completion_tokens' is too large: 32000. This model's maximum context length is 100001 tokens and your request has 81126 input tokens (32000 > 100001 - 81126). (parameter=max_tokens, value=32000)","type":"BadRequestError","param":null,"code":400}}"#,
        (
            "vllm",
            InputPlusOutput,
            Some(100_001),
            Some(81_126),
            Some(32_000),
        ),
    ),
    (
        "vllm max_tokens too large, older",
        400,
        r#"{"error":{"message":"'max_tokens' or 'max_completion_tokens' is too large: 8000. This model's maximum context length is 4096 tokens and your request has 2778 input tokens (8000 > 4096 - 2778). None","type":"BadRequestError","param":null,"code":400}}"#,
        ("vllm", InputPlusOutput, Some(4096), Some(2778), Some(8000)),
    ),
    (
        "llama.cpp older, 400",
        400,
        r#"{"error":{"code":400,"message":"the request exceeds the available context size. try increasing the context size or enable context shift","type":"invalid_request_error"}}"#,
        ("llama.cpp", Input, None, None, None),
    ),
    (
        "llama.cpp older, 500",
        500,
        r#"{"error":{"code":500,"message":"the request exceeds the available context size. try increasing the context size or enable context shift","type":"server_error"}}"#,
        ("llama.cpp", Input, None, None, None),
    ),
    (
        "llama.cpp decoding, 500",
        500,
        r#"{"error":{"code":500,"message":"Context size has been exceeded.","type":"server_error"}}"#,
        ("llama.cpp", InputPlusOutput, None, None, None),
    ),
    (
        "lmstudio first message",
        400,
        r#"{"error":"Trying to keep the first 111490 tokens when context the overflows. However, the model is loaded with context length of only 32768 tokens, which is not enough. Try to load the model with a larger context length, or provide a shorter input"}"#,
        ("lmstudio", Input, Some(32_768), Some(111_490), None),
    ),
    (
        "lmstudio n_keep",
        400,
        r#"{"error":"The number of tokens to keep from the initial prompt is greater than the context length (n_keep: 13055>= n_ctx: 4096). Try to load the model with a larger context length, or provide a shorter input."}"#,
        ("lmstudio", Input, Some(4096), Some(13_055), None),
    ),
];

/// (case, `data:` line of a 200 stream's first event, expected signal).
type StreamCase = (&'static str, &'static str, Want);

/// SGLang before 0.5.23 and vLLM's engine checks report overflow inside a
/// 200 stream (issue 29; BerriAI/litellm#10793).
const IN_STREAM: &[StreamCase] = &[
    (
        "sglang",
        r#"data: {"error":{"object":"error","message":"The input (140000 tokens) is longer than the model's context length (131072 tokens).","type":"BadRequestError","param":null,"code":400}}"#,
        ("sglang", Input, Some(131_072), Some(140_000), None),
    ),
    (
        "sglang total",
        r#"data: {"error":{"object":"error","message":"Requested token count exceeds the model's maximum context length of 262144 tokens. You requested a total of 263925 tokens: 199925 tokens from the input messages and 64000 tokens for the completion. Please reduce the number of tokens in the input messages or the completion to fit within the limit.","type":"BadRequestError","param":null,"code":400}}"#,
        (
            "sglang",
            InputPlusOutput,
            Some(262_144),
            Some(199_925),
            Some(64_000),
        ),
    ),
    (
        "vllm decoder prompt",
        r#"data: {"error":{"message":"The decoder prompt (length 8825) is longer than the maximum model length of 8192. Make sure that `max_model_len` is no smaller than the number of text tokens.","type":"BadRequestError","param":null,"code":400}}"#,
        ("vllm", Input, Some(8192), Some(8825), None),
    ),
    (
        "vllm prompt alone",
        r#"data: {"error":{"message":"This model's maximum context length is 32768 tokens. However, your prompt contains 40000 input tokens, which exceeds this limit even without any output tokens. Please reduce the length of the input prompt.","type":"BadRequestError","param":null,"code":400}}"#,
        ("vllm", Input, Some(32_768), Some(40_000), None),
    ),
    (
        "vllm flat, older",
        r#"data: {"object":"error","message":"Input length (265330) exceeds model's maximum context length (262144).","type":"BadRequestError","param":null,"code":400}"#,
        ("vllm", Input, Some(262_144), Some(265_330), None),
    ),
];

#[test]
fn server_bodies_are_recognized() {
    assert_recognized(CASES);
    assert_recognized(ISSUE_29);
}

#[test]
fn in_stream_server_errors_are_recognized() {
    let table = SignatureTable::builtin();
    for (case, data, want) in IN_STREAM {
        let signal = table.detect_stream_event(data);
        assert_eq!(signal.map(got), Some(wanted(want)), "case {case}");
    }
}
