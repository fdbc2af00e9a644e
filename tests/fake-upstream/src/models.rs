//! What OpenAI's model families accept, as the real API enforces it. Each
//! rule carries its source; where a rule could not be confirmed, it says so
//! and the fake stays lenient.
//!
//! - Reasoning models (o1, o3, o4, gpt-5 and later, codex-mini) refuse
//!   `max_tokens` ("Use 'max_completion_tokens' instead"; OpenAI API
//!   reference: `max_tokens` "is not compatible with o-series models";
//!   captured in griptape-ai/ComfyUI-Griptape#312 for gpt-5 and
//!   teilomillet/gollm#33 for o1/o3-mini), any `temperature` but 1
//!   (pal-mcp-server#78, OpenHands#4131), and `top_p`, the penalties and
//!   `logprobs` (aandrew-me/tgpt#333, lobehub#7747).
//! - `reasoning_effort` takes only the values the family supports
//!   (openai-openapi `ReasoningEffort`; openai-agents-python#2089 for
//!   gpt-5.1, openai/codex#6647 for codex).
//! - Reasoning tokens count against `max_completion_tokens` /
//!   `max_output_tokens` (API reference); a budget spent on reasoning ends
//!   with empty content and `finish_reason: "length"`, or
//!   `status: "incomplete"` (OpenAI reasoning guide).
//! - Non-reasoning models refuse `reasoning_effort` ("Unrecognized request
//!   argument supplied: reasoning_effort", langchain_dart#712) and
//!   `reasoning.effort` (BoundaryML/baml#2708). Only the families known not
//!   to reason are held to this; an unknown name (a test's own model) may
//!   reason or not.
//! - `max_output_tokens` is at least 16 (API reference `minimum: 16`;
//!   vectorize-io/hindsight#58).

use crate::config::FakeConfig;
use serde_json::{json, Value};

/// An OpenAI error body: `(message, param, code)`.
pub type Refusal = Value;

fn refusal(message: &str, param: &str, code: &str) -> Refusal {
    json!({"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}})
}

fn name(model: &str) -> String {
    model
        .rsplit('/')
        .next()
        .unwrap_or(model)
        .to_ascii_lowercase()
}

pub fn is_reasoning(model: &str) -> bool {
    let name = name(model);
    let o_series = name.starts_with('o') && name[1..].starts_with(|c: char| c.is_ascii_digit());
    let gpt = ["gpt-5", "gpt-6"].iter().any(|p| name.starts_with(p));
    let alias = name.contains("chat-latest") || name.starts_with("gpt-5-chat");
    (o_series || gpt || name.starts_with("codex-mini")) && !alias
}

/// Families documented not to reason.
fn known_not_reasoning(model: &str) -> bool {
    let name = name(model);
    ["gpt-4o", "gpt-4.1", "gpt-4-", "gpt-3.5"]
        .iter()
        .any(|p| name.starts_with(p))
        || name.contains("chat-latest")
}

/// The efforts a reasoning model accepts (openai-openapi, 2026-05).
fn efforts(model: &str) -> &'static [&'static str] {
    let name = name(model);
    if name.starts_with("gpt-5-pro") {
        &["high"]
    } else if name.contains("codex") || name.starts_with('o') {
        &["low", "medium", "high"]
    } else if name.starts_with("gpt-5.1") {
        &["none", "low", "medium", "high"]
    } else if name.starts_with("gpt-5.") || name.starts_with("gpt-6") {
        &["none", "low", "medium", "high", "xhigh"]
    } else {
        &["minimal", "low", "medium", "high"]
    }
}

fn listed(values: &[&str]) -> String {
    let quoted: Vec<String> = values.iter().map(|v| format!("'{v}'")).collect();
    match quoted.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{}, and {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// The top-level fields of OpenAI's `CreateChatCompletionRequest` (API
/// reference); OpenAI refuses any other with "Unrecognized request argument
/// supplied: <name>", echoing the name (langchain_dart#712).
const CHAT_FIELDS: &[&str] = &[
    "model",
    "messages",
    "audio",
    "frequency_penalty",
    "function_call",
    "functions",
    "logit_bias",
    "logprobs",
    "max_completion_tokens",
    "max_tokens",
    "metadata",
    "modalities",
    "n",
    "parallel_tool_calls",
    "prediction",
    "presence_penalty",
    "prompt_cache_key",
    "reasoning_effort",
    "response_format",
    "safety_identifier",
    "seed",
    "service_tier",
    "stop",
    "store",
    "stream",
    "stream_options",
    "temperature",
    "tool_choice",
    "tools",
    "top_logprobs",
    "top_p",
    "user",
    "verbosity",
    "web_search_options",
];

/// OpenAI's own models: other servers behind the same protocol accept
/// fields of their own.
fn is_openai_model(model: &str) -> bool {
    known_not_reasoning(model) || is_reasoning(model)
}

/// Chat Completions parameters the model refuses.
pub fn check_chat(request: &Value) -> Result<(), Refusal> {
    let model = request["model"].as_str().unwrap_or_default();
    let unknown = request
        .as_object()
        .into_iter()
        .flat_map(|body| body.keys())
        .find(|key| !CHAT_FIELDS.contains(&key.as_str()));
    if let (true, Some(name)) = (is_openai_model(model), unknown) {
        let message = format!("Unrecognized request argument supplied: {name}");
        return Err(
            json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": null}}),
        );
    }
    let effort = request.get("reasoning_effort");
    if known_not_reasoning(model) && effort.is_some() {
        let message = "Unrecognized request argument supplied: reasoning_effort";
        return Err(
            json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": null}}),
        );
    }
    output_cap(model, request)?;
    if !is_reasoning(model) {
        return Ok(());
    }
    if request.get("max_tokens").is_some() {
        return Err(refusal("Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.", "max_tokens", "unsupported_parameter"));
    }
    sampling(request)?;
    if let Some(effort) = effort {
        let accepted = efforts(model);
        let given = effort.as_str().unwrap_or("null");
        if !accepted.contains(&given) {
            let message = format!("Unsupported value: 'reasoning_effort' does not support '{given}' with this model. Supported values are: {}.", listed(accepted));
            return Err(refusal(&message, "reasoning_effort", "unsupported_value"));
        }
    }
    Ok(())
}

/// Output caps of OpenAI's families: asking for more is its own 400
/// (optillm#4, NextChat#3195).
fn output_cap(model: &str, request: &Value) -> Result<(), Refusal> {
    let name = name(model);
    let caps: &[(&str, u64)] = &[
        ("gpt-4o", 16_384),
        ("gpt-4.1", 32_768),
        ("gpt-5", 128_000),
        ("o", 100_000),
    ];
    let Some(&(_, cap)) = caps.iter().find(|(prefix, _)| name.starts_with(prefix)) else {
        return Ok(());
    };
    for field in ["max_tokens", "max_completion_tokens"] {
        let Some(asked) = request.get(field).and_then(Value::as_u64) else {
            continue;
        };
        if asked > cap && is_openai_model(model) {
            let message = format!("max_tokens is too large: {asked}. This model supports at most {cap} completion tokens, whereas you provided {asked}.");
            return Err(
                json!({"error": {"message": message, "type": "invalid_request_error", "param": field, "code": null}}),
            );
        }
    }
    Ok(())
}

fn sampling(request: &Value) -> Result<(), Refusal> {
    if let Some(temperature) = request.get("temperature").and_then(Value::as_f64) {
        if temperature != 1.0 {
            let message = format!("Unsupported value: 'temperature' does not support {temperature} with this model. Only the default (1) value is supported.");
            return Err(refusal(&message, "temperature", "unsupported_value"));
        }
    }
    for param in [
        "top_p",
        "presence_penalty",
        "frequency_penalty",
        "logprobs",
        "top_logprobs",
    ] {
        if request.get(param).is_some() {
            let message =
                format!("Unsupported parameter: '{param}' is not supported with this model.");
            return Err(refusal(&message, param, "unsupported_parameter"));
        }
    }
    Ok(())
}

/// Responses parameters the model refuses.
pub fn check_responses(request: &Value) -> Result<(), Refusal> {
    if let Some(limit) = request.get("max_output_tokens").and_then(Value::as_u64) {
        if limit < 16 {
            let message = format!("Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16, but got {limit} instead.");
            return Err(refusal(
                &message,
                "max_output_tokens",
                "integer_below_min_value",
            ));
        }
    }
    let model = request["model"].as_str().unwrap_or_default();
    let effort = request.pointer("/reasoning/effort");
    if known_not_reasoning(model) && effort.is_some() {
        let message = "Unsupported parameter: 'reasoning.effort' is not supported with this model.";
        return Err(refusal(
            message,
            "reasoning.effort",
            "unsupported_parameter",
        ));
    }
    if !is_reasoning(model) {
        return Ok(());
    }
    sampling(request)?;
    match effort.and_then(Value::as_str) {
        Some(given) if !efforts(model).contains(&given) => {
            let message = format!("Unsupported value: '{given}' is not supported with the '{model}' model. Supported values are: {}.", listed(efforts(model)));
            Err(refusal(&message, "reasoning.effort", "unsupported_value"))
        }
        _ => Ok(()),
    }
}

/// Anthropic Messages parameters the model refuses: extended thinking's
/// budget rules (Anthropic's extended-thinking guide; themaximalist/llm.js#30,
/// liuw1535/antigravity2api-nodejs#149, MartialBE/one-hub#529) and the
/// model's output cap (OpenHands#11090, anthropics/claude-code#24451).
/// Returns the message of an `invalid_request_error`.
pub fn check_messages(request: &Value) -> Result<(), String> {
    let model = request["model"].as_str().unwrap_or_default();
    let max_tokens = request["max_tokens"].as_u64().unwrap_or(0);
    if let Some(cap) = anthropic_output_cap(model).filter(|&cap| max_tokens > cap) {
        return Err(format!("max_tokens: {max_tokens} > {cap}, which is the maximum allowed number of output tokens for {model}"));
    }
    if request["thinking"]["type"] != "enabled" {
        return Ok(());
    }
    let budget = request["thinking"]["budget_tokens"].as_u64().unwrap_or(0);
    if budget < 1024 {
        return Err(
            "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024".into(),
        );
    }
    if budget >= max_tokens {
        return Err("`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-window-size".into());
    }
    let temperature = request.get("temperature").and_then(Value::as_f64);
    if temperature.is_some_and(|t| t != 1.0) {
        return Err("`temperature` may only be set to 1 when thinking is enabled. Please consult our documentation at https://docs.anthropic.com/en/docs/build-with-claude/extended-thinking#important-considerations-when-using-extended-thinking".into());
    }
    Ok(())
}

/// Documented output caps of Claude families; unknown names are lenient.
fn anthropic_output_cap(model: &str) -> Option<u64> {
    let caps: &[(&str, u64)] = &[
        ("claude-3-haiku", 4096),
        ("claude-3-opus", 4096),
        ("claude-3-5", 8192),
        ("claude-opus-4-1", 32_000),
        ("claude-opus-4-2", 32_000),
        ("claude-sonnet-4", 64_000),
        ("claude-haiku-4-5", 64_000),
        ("claude-opus-4-5", 64_000),
    ];
    let name = name(model);
    caps.iter()
        .find(|(prefix, _)| name.starts_with(prefix))
        .map(|&(_, cap)| cap)
}

/// Reasoning tokens the fake spends before it writes. The real counts vary
/// with the task; these grow with the effort as the real ones do, and a
/// test may fix them (`FakeConfig::reasoning_tokens`). A model reasons when
/// it is a reasoning model, or when a request to a model of unknown family
/// asks it to.
pub fn reasoning_tokens(request: &Value, config: &FakeConfig) -> u64 {
    let model = request["model"].as_str().unwrap_or_default();
    let effort = request
        .get("reasoning_effort")
        .or_else(|| request.pointer("/reasoning/effort"))
        .and_then(Value::as_str);
    let reasons = is_reasoning(model) || (effort.is_some() && !known_not_reasoning(model));
    if !reasons {
        return 0;
    }
    if let Some(fixed) = config.reasoning_tokens {
        return fixed;
    }
    match effort.unwrap_or("medium") {
        "none" => 0,
        "minimal" => 16,
        "low" => 192,
        "medium" => 768,
        _ => 3072,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_list_the_supported_values_as_the_real_api_does() {
        let request =
            json!({"model": "gpt-5.1", "reasoning_effort": "minimal", "max_completion_tokens": 10});
        let refused = check_chat(&request).expect_err("minimal is gpt-5's, not gpt-5.1's");
        assert_eq!(
            refused["error"]["message"],
            "Unsupported value: 'reasoning_effort' does not support 'minimal' with this model. Supported values are: 'none', 'low', 'medium', and 'high'."
        );
        let request = json!({"model": "gpt-5-mini", "max_tokens": 10});
        assert_eq!(
            check_chat(&request).expect_err("refused")["error"]["code"],
            "unsupported_parameter"
        );
        assert!(
            check_chat(&json!({"model": "gpt-4o", "max_tokens": 10, "temperature": 0.2})).is_ok()
        );
        assert!(check_chat(&json!({"model": "gpt-4o", "reasoning_effort": "low"})).is_err());
    }
}
