//! Who serves Anthropic Messages: Anthropic itself, or a third-party
//! service that speaks the API without Anthropic's betas (a gateway, a
//! cloud, a local server). Each rule names its source.

use crate::config::MessagesMode;
use http::HeaderMap;
use serde_json::{json, Value};

/// The beta flags a third-party service knows; any other is refused.
/// Real services differ; these are long-standing ones clients send.
const THIRD_PARTY_BETAS: &[&str] = &[
    "interleaved-thinking-2025-05-14",
    "fine-grained-tool-streaming-2025-05-14",
    "token-efficient-tools-2025-02-19",
    "output-128k-2025-02-19",
    "prompt-caching-2024-07-31",
];

/// What a third-party service refuses in a request it otherwise serves.
pub fn refusal(mode: MessagesMode, headers: &HeaderMap, request: &Value) -> Option<String> {
    if mode != MessagesMode::ThirdParty {
        return None;
    }
    // An unknown flag: "Unexpected value(s) `prompt-caching-scope-2026-01-05`
    // for the `anthropic-beta` header. Please consult our documentation at
    // docs.anthropic.com or try again without the header." as relayed from
    // Vertex (QuantumNous/new-api#2975); Bedrock says "invalid beta flag"
    // (router-for-me/CLIProxyAPI#4750).
    let unknown: Vec<String> = headers
        .get_all("anthropic-beta")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|flag| !flag.is_empty() && !THIRD_PARTY_BETAS.contains(flag))
        .map(|flag| format!("`{flag}`"))
        .collect();
    if !unknown.is_empty() {
        return Some(format!("Unexpected value(s) {} for the `anthropic-beta` header. Please consult our documentation at docs.anthropic.com or try again without the header.", unknown.join(", ")));
    }
    // Fields it does not know: "context_management: Extra inputs are not
    // permitted" (reference/providers.md; mnfst/llm-gateway#2910 lists
    // `context_management` among the fields refused so).
    for field in ["context_management", "compaction"] {
        if request.get(field).is_some() {
            return Some(format!("{field}: Extra inputs are not permitted"));
        }
    }
    compaction_block(request)
}

/// A `compaction` content block is Anthropic's (compact-2026-01-12); a
/// service without it refuses the tag as any unknown block type, in the
/// same validation wording as the field above.
fn compaction_block(request: &Value) -> Option<String> {
    let messages = request["messages"].as_array()?;
    for (index, message) in messages.iter().enumerate() {
        let blocks = message["content"].as_array().into_iter().flatten();
        for (block, value) in blocks.enumerate() {
            if value["type"] == "compaction" {
                return Some(format!("messages.{index}.content.{block}: Input tag 'compaction' found using 'type' does not match any of the expected tags"));
            }
        }
    }
    None
}

/// Anthropic reports the context edits it applied in `context_management`
/// (platform.claude.com, build-with-claude/context-editing, "Context
/// editing response"); this fake applies none, and says so.
pub fn decorate(mode: MessagesMode, request: &Value, answer: &mut Value) {
    if mode == MessagesMode::Anthropic && request.get("context_management").is_some() {
        answer["context_management"] = json!({"applied_edits": []});
    }
}
