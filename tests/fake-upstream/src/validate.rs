//! What the real APIs refuse, with their messages, plus Condenser's own
//! invariants (ARCHITECTURE.md 1, 4, 8) checked on every request.

use crate::config::FakeConfig;
use crate::state::{Protocol, RequestKind};
use axum::response::Response;
use http::{HeaderMap, StatusCode};
use serde_json::Value;

const NO_OPENAI_KEY: &str = "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), or as the password field (i.e. Authorization: Basic ...";

/// The caller's key, or the real 401.
// The error is the response itself, returned once per request: boxing it
// would buy nothing.
#[allow(clippy::result_large_err)]
pub fn credential(protocol: Protocol, headers: &HeaderMap) -> Result<String, Response> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let bearer =
        header("authorization").and_then(|v| v.strip_prefix("Bearer ").map(str::to_string));
    let protocol = protocol.errors();
    let key = match protocol {
        Protocol::OpenAi | Protocol::Responses => bearer,
        Protocol::Anthropic => header("x-api-key").or(bearer),
    };
    let unauthorized =
        |message: &str| crate::chat::error(protocol, StatusCode::UNAUTHORIZED, message);
    match (protocol, key) {
        (Protocol::OpenAi, None) => Err(unauthorized(NO_OPENAI_KEY)),
        (Protocol::Anthropic, None) => Err(unauthorized("x-api-key header is required")),
        (Protocol::OpenAi, Some(key)) if key == "sk-invalid" => Err(invalid_openai_key()),
        (Protocol::Anthropic, Some(key)) if key == "sk-invalid" => {
            Err(unauthorized("invalid x-api-key"))
        }
        (Protocol::Responses, None) => Err(unauthorized(NO_OPENAI_KEY)),
        (_, Some(key)) => Ok(key),
    }
}

fn invalid_openai_key() -> Response {
    let body = serde_json::json!({"error": {"message": "Incorrect API key provided: sk-inval*****. You can find your API key at https://platform.openai.com/account/api-keys.", "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}});
    axum::response::IntoResponse::into_response((StatusCode::UNAUTHORIZED, axum::Json(body)))
}

pub fn request(
    protocol: Protocol,
    request: &Value,
    key: &str,
    body: &[u8],
    config: &FakeConfig,
    kind: RequestKind,
) -> Result<(), String> {
    if protocol == Protocol::Responses {
        no_credential(body, key)?;
        crate::responses::validate(request, config.responses_mode)?;
        let items = crate::responses::items(request);
        return match (&config.summary_marker, kind) {
            (Some(marker), RequestKind::Chat) => {
                summary_placement(protocol, request, &items, marker)
            }
            _ => Ok(()),
        };
    }
    let messages = request["messages"]
        .as_array()
        .ok_or("messages: Field required")?;
    if protocol == Protocol::Anthropic && request["max_tokens"].as_u64().is_none() {
        return Err("max_tokens: Field required".into());
    }
    no_credential(body, key)?;
    match protocol {
        Protocol::OpenAi | Protocol::Responses => openai_tool_pairs(messages)?,
        Protocol::Anthropic => {
            anthropic_tool_pairs(messages)?;
            thinking_signatures(messages)?;
        }
    }
    match (&config.summary_marker, kind) {
        (Some(marker), RequestKind::Chat) => summary_placement(protocol, request, messages, marker),
        _ => Ok(()),
    }
}

fn no_credential(body: &[u8], key: &str) -> Result<(), String> {
    if String::from_utf8_lossy(body).contains(key) {
        return Err(
            "fake-upstream invariant: the caller's credential appears in the request body".into(),
        );
    }
    Ok(())
}

fn openai_tool_pairs(messages: &[Value]) -> Result<(), String> {
    let mut open: Vec<String> = Vec::new();
    let mut answerable = false;
    for (index, message) in messages.iter().enumerate() {
        let role = message["role"].as_str().unwrap_or_default();
        if role == "tool" {
            let id = message["tool_call_id"].as_str().unwrap_or_default();
            let Some(position) = open
                .iter()
                .position(|open_id| open_id == id)
                .filter(|_| answerable)
            else {
                return Err(format!("Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'. (messages.[{index}].role)"));
            };
            open.remove(position);
            continue;
        }
        if !open.is_empty() {
            return Err(unanswered_openai(index - 1, &open));
        }
        open = message["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["id"].as_str().map(String::from))
            .collect();
        answerable = role == "assistant";
    }
    if open.is_empty() {
        Ok(())
    } else {
        Err(unanswered_openai(messages.len() - 1, &open))
    }
}

fn unanswered_openai(index: usize, ids: &[String]) -> String {
    format!("An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: {} (messages.[{index}].role)", ids.join(", "))
}

fn blocks<'a>(message: &'a Value, kind: &'a str) -> impl Iterator<Item = (usize, &'a Value)> + 'a {
    message["content"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
        .filter(move |(_, b)| b["type"] == kind)
}

fn anthropic_tool_pairs(messages: &[Value]) -> Result<(), String> {
    for (index, message) in messages.iter().enumerate() {
        let uses: Vec<&str> = blocks(message, "tool_use")
            .filter_map(|(_, b)| b["id"].as_str())
            .collect();
        let next = messages.get(index + 1);
        let answered: Vec<&str> = next
            .map(|n| {
                blocks(n, "tool_result")
                    .filter_map(|(_, b)| b["tool_use_id"].as_str())
                    .collect()
            })
            .unwrap_or_default();
        let missing: Vec<&str> = uses
            .iter()
            .copied()
            .filter(|id| !answered.contains(id))
            .collect();
        if !missing.is_empty() {
            return Err(format!("messages.{index}: `tool_use` ids were found without `tool_result` blocks immediately after: {}. Each `tool_use` block must have a corresponding `tool_result` block in the next message.", missing.join(", ")));
        }
        let previous: Vec<&str> = index
            .checked_sub(1)
            .map(|p| {
                blocks(&messages[p], "tool_use")
                    .filter_map(|(_, b)| b["id"].as_str())
                    .collect()
            })
            .unwrap_or_default();
        for (block_index, block) in blocks(message, "tool_result") {
            let id = block["tool_use_id"].as_str().unwrap_or_default();
            if !previous.contains(&id) {
                return Err(format!("messages.{index}.content.{block_index}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."));
            }
        }
    }
    Ok(())
}

fn thinking_signatures(messages: &[Value]) -> Result<(), String> {
    for (index, message) in messages.iter().enumerate() {
        for (block_index, block) in blocks(message, "thinking") {
            let text = block["thinking"].as_str().unwrap_or_default();
            if block["signature"].as_str() != Some(crate::replies::sign(text).as_str()) {
                return Err(format!("messages.{index}.content.{block_index}: Invalid `signature` in `thinking` block"));
            }
        }
    }
    Ok(())
}

fn text_of(message: &Value) -> String {
    match &message["content"] {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .first()
            .and_then(|b| b["text"].as_str())
            .unwrap_or_default()
            .to_string(),
        _ => String::new(),
    }
}

/// One summary at most, its own user message right after the system part,
/// the marker first, and never inside the system prompt.
fn summary_placement(
    protocol: Protocol,
    request: &Value,
    messages: &[Value],
    marker: &str,
) -> Result<(), String> {
    let fail = |why: &str| Err(format!("fake-upstream invariant: {why}"));
    let system_len = match protocol {
        Protocol::OpenAi | Protocol::Responses => messages
            .iter()
            .take_while(|m| m["role"] == "system" || m["role"] == "developer")
            .count(),
        Protocol::Anthropic => 0,
    };
    let in_system = match protocol {
        Protocol::OpenAi => messages[..system_len]
            .iter()
            .any(|m| m.to_string().contains(marker)),
        Protocol::Responses => {
            request["instructions"].to_string().contains(marker)
                || messages[..system_len]
                    .iter()
                    .any(|m| m.to_string().contains(marker))
        }
        Protocol::Anthropic => request["system"].to_string().contains(marker),
    };
    if in_system {
        return fail("the summary marker appears inside the system prompt");
    }
    let marked: Vec<usize> = (0..messages.len())
        .filter(|&i| messages[i].to_string().contains(marker))
        .collect();
    match marked.as_slice() {
        [] => Ok(()),
        [index] if *index != system_len => {
            fail("the summary message is not right after the system prompt")
        }
        [index] if messages[*index]["role"] != "user" => {
            fail("the summary message is not a user message")
        }
        [index] if !text_of(&messages[*index]).starts_with(marker) => {
            fail("the summary message does not start with the marker")
        }
        [_] => Ok(()),
        _ => fail("more than one message holds a summary"),
    }
}
