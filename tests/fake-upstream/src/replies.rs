//! Deterministic replies: the same request bytes always get the same answer,
//! ids included, so a proxied call can be compared with a direct one.

use crate::config::FakeConfig;
use crate::state::{Protocol, RequestKind};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

const SIGNING_SECRET: &str = "fake-upstream-thinking-key";
const CREATED: u64 = 1_760_000_000;

#[derive(Debug, Clone)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

#[derive(Debug, Clone)]
pub struct Thinking {
    pub text: String,
    pub signature: String,
}

#[derive(Debug, Clone)]
pub struct Reply {
    pub id: String,
    pub model: String,
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    pub thinking: Option<Thinking>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Output tokens spent reasoning before the text.
    pub reasoning_tokens: u64,
    /// The output limit stopped the answer (`finish_reason: "length"`,
    /// `status: "incomplete"`).
    pub truncated: bool,
}

/// The prompt's size as the real tokenizers roughly see it: a quarter of its
/// JSON bytes, plus a little per message.
pub fn count_tokens(protocol: Protocol, request: &Value) -> u64 {
    let mut bytes = request["messages"].to_string().len() + request["tools"].to_string().len();
    if protocol == Protocol::Responses {
        return crate::responses::count_tokens(request) + image_tokens(&request["input"]);
    }
    if protocol == Protocol::Anthropic {
        bytes += request["system"].to_string().len();
    }
    let messages = request["messages"].as_array().map_or(0, Vec::len) as u64;
    (bytes as u64).div_ceil(4) + 3 * messages + image_tokens(&request["messages"])
}

/// An image costs tokens by its size, not the bytes of its URL: OpenAI's
/// vision guide prices a 512-pixel image at high detail at 85 + 170 × 4 =
/// 765 tokens, whatever the request spends to point at it.
const IMAGE_TOKENS: u64 = 765;

fn image_tokens(parts: &Value) -> u64 {
    match parts {
        Value::Object(map) => {
            let kind = map.get("type").and_then(Value::as_str);
            let image = matches!(kind, Some("image_url" | "input_image" | "image"));
            let own = if image { IMAGE_TOKENS } else { 0 };
            own + map.values().map(image_tokens).sum::<u64>()
        }
        Value::Array(items) => items.iter().map(image_tokens).sum(),
        _ => 0,
    }
}

/// The signature a thinking block must carry back unchanged.
pub fn sign(text: &str) -> String {
    hex::encode(Sha256::digest(format!("{SIGNING_SECRET}{text}")))
}

impl Reply {
    pub fn new(
        protocol: Protocol,
        request: &Value,
        body: &[u8],
        config: &FakeConfig,
        kind: RequestKind,
        input_tokens: u64,
    ) -> Self {
        let digest = hex::encode(Sha256::digest(body));
        let model = request["model"].as_str().unwrap_or_default().to_string();
        let max_tokens = ["max_completion_tokens", "max_tokens", "max_output_tokens"]
            .iter()
            .find_map(|k| request[*k].as_u64());
        // Reasoning comes out of the same output budget, first.
        let reasoning_tokens = crate::models::reasoning_tokens(request, config);
        let room = max_tokens.map_or(u64::MAX, |m| m.saturating_sub(reasoning_tokens));
        let wanted = match kind {
            RequestKind::Summary => {
                // Ollama's limit is `options.num_predict`, applied by its
                // own answer (`ollama.rs`): facts are written within it.
                let limit = room.min(
                    request["options"]["num_predict"]
                        .as_u64()
                        .unwrap_or(u64::MAX),
                );
                crate::facts::summary(&digest, request, config, limit)
            }
            _ => config
                .reply_text
                .clone()
                .unwrap_or_else(|| answer_text(request, input_tokens)),
        };
        let truncated = (wanted.len() as u64).div_ceil(4) > room;
        let text = cut_to_tokens(wanted, room);
        let tool_calls = if kind == RequestKind::Chat && wants_tools(request) && !truncated {
            vec![tool_call(protocol, &digest)]
        } else {
            Vec::new()
        };
        let thinking = (protocol == Protocol::Anthropic
            && request["thinking"]["type"] == "enabled")
            .then(|| {
                let text = format!("Considering the request {}.", &digest[..12]);
                Thinking {
                    signature: sign(&text),
                    text,
                }
            });
        let id = match protocol {
            Protocol::OpenAi => format!("chatcmpl-{}", &digest[..29]),
            Protocol::Anthropic => format!("msg_{}", &digest[..24]),
            Protocol::Responses => format!("resp_{}", &digest[..32]),
        };
        let output_tokens =
            (text.len() as u64).div_ceil(4) + 10 * tool_calls.len() as u64 + reasoning_tokens;
        Reply {
            id,
            model,
            text,
            tool_calls,
            thinking,
            input_tokens,
            output_tokens,
            reasoning_tokens,
            truncated,
        }
    }

    pub fn to_json(&self, protocol: Protocol) -> Value {
        match protocol {
            Protocol::OpenAi | Protocol::Responses => self.openai_json(),
            Protocol::Anthropic => self.anthropic_json(),
        }
    }

    pub fn openai_finish_reason(&self) -> &'static str {
        if self.truncated {
            "length"
        } else if self.tool_calls.is_empty() {
            "stop"
        } else {
            "tool_calls"
        }
    }

    pub fn anthropic_stop_reason(&self) -> &'static str {
        if self.truncated {
            "max_tokens"
        } else if self.tool_calls.is_empty() {
            "end_turn"
        } else {
            "tool_use"
        }
    }

    pub fn openai_usage(&self) -> Value {
        json!({
            "prompt_tokens": self.input_tokens,
            "completion_tokens": self.output_tokens,
            "total_tokens": self.input_tokens + self.output_tokens,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": self.reasoning_tokens, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
        })
    }

    pub fn anthropic_usage(&self) -> Value {
        json!({
            "input_tokens": self.input_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": self.output_tokens,
            "service_tier": "standard"
        })
    }

    fn openai_json(&self) -> Value {
        let mut message =
            json!({"role": "assistant", "content": self.text, "refusal": null, "annotations": []});
        if !self.tool_calls.is_empty() {
            message["content"] = Value::Null;
            message["tool_calls"] = self
                .tool_calls
                .iter()
                .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
                .collect();
        }
        json!({
            "id": self.id,
            "object": "chat.completion",
            "created": CREATED,
            "model": self.model,
            "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": self.openai_finish_reason()}],
            "usage": self.openai_usage(),
            "service_tier": "default",
            "system_fingerprint": "fp_fake0001"
        })
    }

    /// Content blocks in the order the real API sends them.
    pub fn anthropic_blocks(&self) -> Vec<Value> {
        let mut blocks = Vec::new();
        if let Some(thinking) = &self.thinking {
            blocks.push(json!({"type": "thinking", "thinking": thinking.text, "signature": thinking.signature}));
        }
        blocks.push(json!({"type": "text", "text": self.text}));
        for call in &self.tool_calls {
            let input: Value = serde_json::from_str(&call.arguments).unwrap_or_default();
            blocks.push(
                json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}),
            );
        }
        blocks
    }

    fn anthropic_json(&self) -> Value {
        json!({
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": self.anthropic_blocks(),
            "stop_reason": self.anthropic_stop_reason(),
            "stop_sequence": null,
            "usage": self.anthropic_usage()
        })
    }
}

/// A tool call is made when tools are offered and the last message asks for
/// them (`[tools]` from the user, `[more]` in a tool result).
fn wants_tools(request: &Value) -> bool {
    let offered = request["tools"].as_array().is_some_and(|t| !t.is_empty());
    let last = match request.get("input") {
        Some(_) => crate::responses::last_item_text(request),
        None => request["messages"]
            .as_array()
            .and_then(|m| m.last())
            .map(Value::to_string)
            .unwrap_or_default(),
    };
    offered && (last.contains("[tools]") || last.contains("[more]"))
}

fn tool_call(protocol: Protocol, digest: &str) -> ToolCall {
    let id = match protocol {
        Protocol::OpenAi | Protocol::Responses => format!("call_{}", &digest[..24]),
        Protocol::Anthropic => format!("toolu_{}", &digest[..24]),
    };
    ToolCall {
        id,
        name: "read_file".into(),
        arguments: format!("{{\"path\":\"src/{}.rs\"}}", &digest[..8]),
    }
}

fn answer_text(request: &Value, input_tokens: u64) -> String {
    let messages = match request.get("input") {
        Some(_) => crate::responses::items(request).len(),
        None => request["messages"].as_array().map_or(0, Vec::len),
    };
    format!("I have read all {messages} messages ({input_tokens} tokens) and here is my answer.")
}

/// `text` cut to `tokens` of the fake's count (4 bytes a token).
fn cut_to_tokens(mut text: String, tokens: u64) -> String {
    let bytes = usize::try_from(tokens.saturating_mul(4)).unwrap_or(usize::MAX);
    if text.len() > bytes {
        let mut end = bytes;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}
