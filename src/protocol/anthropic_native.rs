//! Step 4, rewrite: Anthropic's context management, served by Condenser.
//!
//! Anthropic Messages defines context editing (beta
//! `context-management-2025-06-27`: `clear_tool_uses_20250919`,
//! `clear_thinking_20251015`) and server-side compaction (beta
//! `compact-2026-01-12`), which servers other than Anthropic's refuse
//! (`context_management: Extra inputs are not permitted`). For those
//! upstreams Condenser applies the edits as Anthropic documents them
//! (platform.claude.com, build-with-claude/context-editing: defaults, the
//! `applied_edits` report, streamed in the final `message_delta`), replaces
//! everything before a `compaction` block with the summary it carries (as
//! the API does, build-with-claude/compaction), and removes the field and
//! the beta flags. A summary asked on demand (`"compaction": {"type":
//! "summarize"}`, beta `compact-2026-09-04`) is answered in the documented
//! shape (build-with-claude/compaction-on-demand) with Condenser's summary.
//! Past the trigger of a `compact_20260112` edit, Condenser summarizes
//! the conversation: one that pauses (`pause_after_compaction`) is
//! answered with the compaction block alone, as on demand; one that does
//! not gets its reply made from the summary and led by the block.

use super::native::Lead;
use super::served::{Served, ServedForms};
use super::{summary_text, Usage, SUMMARY_MARKER};
use http::{HeaderMap, HeaderValue};
use serde_json::{json, Map, Value};

/// Anthropic's native forms.
pub struct AnthropicForms;

/// The beta flags of the forms Condenser serves; other flags pass.
const SERVED_BETAS: &[&str] = &[
    "context-management-2025-06-27",
    "compact-2026-01-12",
    "compact-2026-09-04",
];

/// What a cleared tool result says instead of its content.
pub const CLEARED_RESULT: &str = "[tool result cleared by context management]";

/// Documented defaults of `clear_tool_uses_20250919`.
const DEFAULT_TRIGGER_TOKENS: u64 = 100_000;
const DEFAULT_KEEP_TOOL_USES: u64 = 3;
/// Documented default trigger of `compact_20260112`, in input tokens.
const DEFAULT_COMPACTION_TRIGGER: u64 = 150_000;

impl ServedForms for AnthropicForms {
    fn made_by(&self, host: &str) -> bool {
        host.eq_ignore_ascii_case("api.anthropic.com")
    }

    fn asked(&self, body: &[u8], headers: &HeaderMap) -> bool {
        let finder = |needle: &str| memchr::memmem::find(body, needle.as_bytes()).is_some();
        finder("\"context_management\"") || finder("\"compaction\"") || served_beta(headers)
    }

    fn serve(&self, body: &[u8], tokens: &dyn Fn(usize) -> u64) -> Option<Served> {
        let mut request: Map<String, Value> = serde_json::from_slice(body).ok()?;
        let management = request.remove("context_management");
        let messages = request.get_mut("messages")?.as_array_mut()?;
        let replaced = replace_before_compaction(messages);
        if management.is_none() && !replaced {
            return None;
        }
        let input_tokens = tokens(body.len());
        let edits = management
            .as_ref()
            .and_then(|m| m.get("edits"))
            .and_then(Value::as_array);
        let applied: Vec<Value> = edits
            .into_iter()
            .flatten()
            .filter_map(|edit| apply_edit(messages, edit, input_tokens, tokens))
            .collect();
        let applied = match management {
            Some(_) => json!({ "applied_edits": applied }),
            None => Value::Null,
        };
        Some(Served {
            body: serde_json::to_vec(&request).ok()?,
            applied,
        })
    }

    fn strip_headers(&self, headers: &mut HeaderMap) {
        let kept: Vec<String> = headers
            .get_all("anthropic-beta")
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .map(str::trim)
            .filter(|flag| !flag.is_empty() && !SERVED_BETAS.contains(flag))
            .map(String::from)
            .collect();
        headers.remove("anthropic-beta");
        if let Ok(value) = HeaderValue::from_str(&kept.join(",")) {
            if !kept.is_empty() {
                headers.insert("anthropic-beta", value);
            }
        }
    }

    /// Only a 400 that refuses a form as unknown counts: the Messages
    /// endpoint is the chat endpoint itself, so a 404 there is a missing
    /// model, and the maker's own complaints (a misplaced block) are not
    /// about an unknown form.
    fn refuses(&self, status: u16, body: &[u8]) -> bool {
        let names = |needle: &str| memchr::memmem::find(body, needle.as_bytes()).is_some();
        let unknown = names("Extra inputs are not permitted")
            || names("does not match any of the expected tags")
            || names("Unexpected value(s)")
            || names("invalid beta flag");
        let form = names("context_management")
            || names("compaction")
            || names("anthropic-beta")
            || names("beta flag")
            || SERVED_BETAS.iter().any(|flag| names(flag));
        status == 400 && unknown && form
    }

    fn report_json(&self, answer: &mut Value, applied: &Value) {
        if let Some(answer) = answer.as_object_mut() {
            answer.insert("context_management".into(), applied.clone());
        }
    }

    fn report_event(&self, event: &mut Value, applied: &Value) -> bool {
        if event.get("type").and_then(Value::as_str) != Some("message_delta") {
            return false;
        }
        self.report_json(event, applied);
        true
    }

    /// On-demand compaction (`"compaction": {"type": "summarize"}`), or a
    /// `compact_20260112` edit with `pause_after_compaction` whose trigger
    /// the input passed: both are answered with the summary alone.
    fn summary_asked(&self, body: &Map<String, Value>, input_tokens: u64) -> bool {
        let kind = body.get("compaction").and_then(|c| c.get("type"));
        kind.and_then(Value::as_str) == Some("summarize")
            || paused_compaction(body).is_some_and(|trigger| input_tokens > trigger)
    }

    /// A `compact_20260112` edit that does not pause, past its trigger.
    fn compacts_before_reply(&self, body: &Map<String, Value>, input_tokens: u64) -> bool {
        compaction_edit(body).is_some_and(|(trigger, pauses)| !pauses && input_tokens > trigger)
    }

    fn lead(&self, summary: &str, usage: Usage) -> Box<dyn Lead> {
        Box::new(LeadBlock {
            summary: summary.to_string(),
            usage,
            inserted: false,
        })
    }

    /// The answer as documented: one `compaction` block, `stop_reason:
    /// "compaction"`, the summary step's usage in `usage.iterations`
    /// (build-with-claude/compaction, compaction-on-demand). Streamed, an
    /// on-demand block arrives whole in one `content_block_start`
    /// (compaction-on-demand); a triggered one as an empty block then one
    /// `compaction_delta` holding the summary (compaction: "streamed as
    /// content_block_start + compaction_delta").
    fn summary_answer(
        &self,
        body: &Map<String, Value>,
        summary: &str,
        usage: Usage,
        stream: bool,
    ) -> Vec<u8> {
        let model = body.get("model").cloned().unwrap_or(Value::Null);
        let id = format!(
            "msg_condenser_{:016x}",
            xxhash_rust::xxh3::xxh3_64(summary.as_bytes())
        );
        let block = json!({"type": "compaction", "content": summary});
        let iterations = json!([{"type": "compaction",
            "input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens}]);
        let message = |content: Value, stop: Value, usage: Value| {
            json!({"id": id, "type": "message", "role": "assistant", "model": model,
                "content": content, "stop_reason": stop, "stop_sequence": null, "usage": usage})
        };
        let totals = json!({"input_tokens": 0, "output_tokens": 0, "iterations": iterations});
        if !stream {
            let answer = message(json!([block]), json!("compaction"), totals);
            return answer.to_string().into_bytes();
        }
        let start = message(
            json!([]),
            Value::Null,
            json!({"input_tokens": 0, "output_tokens": 0}),
        );
        let mut events = vec![(
            "message_start",
            json!({"type": "message_start", "message": start}),
        )];
        events.extend(compaction_block_events(body, summary));
        events.push((
            "message_delta",
            json!({"type": "message_delta",
                "delta": {"stop_reason": "compaction", "stop_sequence": null}, "usage": totals}),
        ));
        events.push(("message_stop", json!({"type": "message_stop"})));
        let events = events
            .iter()
            .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"));
        events.collect::<String>().into_bytes()
    }
}

/// The trigger, in input tokens, of a `compact_20260112` edit, and
/// whether it pauses after compacting; the trigger is 150,000 when it sets
/// none (build-with-claude/compaction, "trigger" defaults to 150,000
/// tokens).
fn compaction_edit(body: &Map<String, Value>) -> Option<(u64, bool)> {
    let edits = body.get("context_management")?.get("edits")?.as_array()?;
    let edit = edits
        .iter()
        .find(|edit| block_type(edit) == "compact_20260112")?;
    let pauses = edit.get("pause_after_compaction").and_then(Value::as_bool);
    let trigger = edit.pointer("/trigger/value").and_then(Value::as_u64);
    Some((
        trigger.unwrap_or(DEFAULT_COMPACTION_TRIGGER),
        pauses == Some(true),
    ))
}

/// The trigger of a `compact_20260112` edit that pauses.
fn paused_compaction(body: &Map<String, Value>) -> Option<u64> {
    compaction_edit(body).and_then(|(trigger, pauses)| pauses.then_some(trigger))
}

/// The events of the compaction block: whole in its start on demand, its
/// content in one `compaction_delta` where a trigger made it.
fn compaction_block_events(body: &Map<String, Value>, summary: &str) -> Vec<(&'static str, Value)> {
    let on_demand = body.contains_key("compaction");
    let start = match on_demand {
        true => json!({"type": "compaction", "content": summary}),
        false => json!({"type": "compaction", "content": ""}),
    };
    let mut events = vec![(
        "content_block_start",
        json!({"type": "content_block_start", "index": 0, "content_block": start}),
    )];
    if !on_demand {
        events.push((
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "compaction_delta", "content": summary}}),
        ));
    }
    events.push((
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    ));
    events
}

/// A reply led by the compaction block, as the API answers where a
/// `compact_20260112` edit that does not pause compacted first
/// (build-with-claude/compaction): the block first in `content`, streamed
/// as an empty block and one `compaction_delta` before the reply's first
/// block, every later block `index` moved up, and `usage.iterations`
/// holding the compaction step, then the reply's own.
struct LeadBlock {
    summary: String,
    usage: Usage,
    inserted: bool,
}

impl LeadBlock {
    fn iterations(&self, reply: &Value) -> Value {
        let count = |key: &str| reply.get(key).and_then(Value::as_u64).unwrap_or(0);
        json!([
            {"type": "compaction", "input_tokens": self.usage.input_tokens,
                "output_tokens": self.usage.output_tokens},
            {"type": "message", "input_tokens": count("input_tokens"),
                "output_tokens": count("output_tokens")},
        ])
    }
}

impl Lead for LeadBlock {
    fn json(&mut self, answer: &mut Value) {
        let block = json!({"type": "compaction", "content": self.summary});
        if let Some(Value::Array(content)) = answer.get_mut("content") {
            content.insert(0, block);
        }
        if let Some(usage) = answer.get_mut("usage") {
            usage["iterations"] = self.iterations(usage);
        }
    }

    fn event(&mut self, event: &str) -> Option<String> {
        let data = event.lines().find_map(|line| line.strip_prefix("data:"))?;
        let mut data: Value = serde_json::from_str(data.trim_start()).ok()?;
        let kind = block_type(&data).to_string();
        let mut out = String::new();
        let opens = kind.starts_with("content_block") || kind == "message_delta";
        if opens && !self.inserted {
            self.inserted = true;
            let body = Map::from_iter([("stream".to_string(), json!(true))]);
            for (name, event) in compaction_block_events(&body, &self.summary) {
                out.push_str(&format!("event: {name}\ndata: {event}\n\n"));
            }
        }
        match kind.as_str() {
            k if k.starts_with("content_block") => {
                let index = data.get("index").and_then(Value::as_u64).unwrap_or(0);
                data["index"] = json!(index + 1);
            }
            "message_delta" => {
                let usage = data.get("usage").cloned().unwrap_or(json!({}));
                data["usage"]["iterations"] = self.iterations(&usage);
            }
            _ if out.is_empty() => return None,
            _ => {}
        }
        out.push_str(&format!("event: {kind}\ndata: {data}\n\n"));
        Some(out)
    }
}

fn served_beta(headers: &HeaderMap) -> bool {
    headers
        .get_all("anthropic-beta")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|flag| SERVED_BETAS.contains(&flag.trim()))
}

fn block_type(block: &Value) -> &str {
    block.get("type").and_then(Value::as_str).unwrap_or("")
}

fn blocks_mut(message: &mut Value) -> Option<&mut Vec<Value>> {
    message.get_mut("content")?.as_array_mut()
}

/// Everything before the last `compaction` block becomes one summary
/// message holding its content, in Condenser's summary form; the blocks
/// after it in its message stay. Whether anything was replaced.
fn replace_before_compaction(messages: &mut Vec<Value>) -> bool {
    let found = messages
        .iter()
        .enumerate()
        .rev()
        .find_map(|(index, message)| {
            let blocks = message.get("content")?.as_array()?;
            let at = blocks.iter().rposition(|b| block_type(b) == "compaction")?;
            Some((index, at))
        });
    let Some((index, at)) = found else {
        return false;
    };
    let mut tail: Vec<Value> = messages.drain(index..).collect();
    messages.clear();
    let blocks = blocks_mut(&mut tail[0])
        .map(std::mem::take)
        .unwrap_or_default();
    let summary = blocks[at]
        .get("content")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !summary.is_empty() {
        messages.push(summary_message(summary));
    }
    let after: Vec<Value> = blocks.into_iter().skip(at + 1).collect();
    if after.is_empty() {
        tail.remove(0);
    } else {
        tail[0]["content"] = Value::Array(after);
    }
    messages.extend(tail);
    true
}

/// A summary in Condenser's summary message form, marked once.
fn summary_message(summary: &str) -> Value {
    let text = if summary.starts_with(SUMMARY_MARKER) {
        summary.to_string()
    } else {
        summary_text(summary)
    };
    json!({"role": "user", "content": [{"type": "text", "text": text}]})
}

/// Applies one edit; its `applied_edits` entry when it cleared anything.
fn apply_edit(
    messages: &mut [Value],
    edit: &Value,
    input_tokens: u64,
    tokens: &dyn Fn(usize) -> u64,
) -> Option<Value> {
    match block_type(edit) {
        "clear_tool_uses_20250919" => clear_tool_uses(messages, edit, input_tokens, tokens),
        "clear_thinking_20251015" => clear_thinking(messages, edit, tokens),
        _ => None,
    }
}

/// One tool use: where its call is, its id and its tool's name.
struct ToolUse {
    message: usize,
    block: usize,
    id: String,
    name: String,
}

fn tool_uses(messages: &[Value]) -> Vec<ToolUse> {
    let mut uses = Vec::new();
    for (message, value) in messages.iter().enumerate() {
        let blocks = value.get("content").and_then(Value::as_array);
        for (block, b) in blocks.into_iter().flatten().enumerate() {
            if block_type(b) != "tool_use" {
                continue;
            }
            let text = |key: &str| b.get(key).and_then(Value::as_str).unwrap_or("").to_string();
            uses.push(ToolUse {
                message,
                block,
                id: text("id"),
                name: text("name"),
            });
        }
    }
    uses
}

/// `clear_tool_uses_20250919`: past `trigger`, the oldest tool results
/// (and, with `clear_tool_inputs`, their calls' inputs) are replaced, all
/// but the newest `keep` and those of `exclude_tools`; not at all when
/// less than `clear_at_least` would go.
fn clear_tool_uses(
    messages: &mut [Value],
    edit: &Value,
    input_tokens: u64,
    tokens: &dyn Fn(usize) -> u64,
) -> Option<Value> {
    let number = |key: &str, default: u64| {
        let value = edit.get(key).and_then(|v| v.get("value"));
        value.and_then(Value::as_u64).unwrap_or(default)
    };
    let uses = tool_uses(messages);
    let trigger = number("trigger", DEFAULT_TRIGGER_TOKENS);
    let by_uses = edit.pointer("/trigger/type").and_then(Value::as_str) == Some("tool_uses");
    let measured = if by_uses {
        uses.len() as u64
    } else {
        input_tokens
    };
    if measured <= trigger {
        return None;
    }
    let excluded = names(edit.get("exclude_tools"));
    let clearable: Vec<&ToolUse> = uses
        .iter()
        .filter(|u| !excluded.contains(&u.name))
        .collect();
    let keep = number("keep", DEFAULT_KEEP_TOOL_USES) as usize;
    let oldest = &clearable[..clearable.len().saturating_sub(keep)];
    let mut edited = messages.to_vec();
    let (mut cleared, mut bytes) = (0u64, 0usize);
    for tool_use in oldest {
        let Some(result_bytes) = clear_result(&mut edited[tool_use.message..], &tool_use.id) else {
            continue;
        };
        cleared += 1;
        bytes += result_bytes;
        if clears_input(edit.get("clear_tool_inputs"), &tool_use.name) {
            let input = &mut edited[tool_use.message]["content"][tool_use.block]["input"];
            bytes += input.to_string().len().saturating_sub(2);
            *input = json!({});
        }
    }
    let cleared_tokens = tokens(bytes);
    if cleared == 0 || cleared_tokens < number("clear_at_least", 0) {
        return None;
    }
    messages.clone_from_slice(&edited);
    Some(json!({
        "type": "clear_tool_uses_20250919",
        "cleared_tool_uses": cleared,
        "cleared_input_tokens": cleared_tokens,
    }))
}

fn names(list: Option<&Value>) -> Vec<String> {
    let names = list.and_then(Value::as_array).into_iter().flatten();
    names.filter_map(|n| n.as_str().map(String::from)).collect()
}

/// `clear_tool_inputs`: `true` for every tool, or a list of tool names.
fn clears_input(setting: Option<&Value>, name: &str) -> bool {
    match setting {
        Some(Value::Bool(all)) => *all,
        Some(list @ Value::Array(_)) => names(Some(list)).iter().any(|n| n == name),
        _ => false,
    }
}

/// Replaces the result of tool use `id` in the messages after its call;
/// the bytes that went, `None` when it is missing or already cleared.
fn clear_result(messages: &mut [Value], id: &str) -> Option<usize> {
    let result = messages
        .iter_mut()
        .skip(1)
        .filter_map(blocks_mut)
        .flatten()
        .find(|b| {
            block_type(b) == "tool_result"
                && b.get("tool_use_id").and_then(Value::as_str) == Some(id)
        })?;
    let content = result.get("content").unwrap_or(&Value::Null);
    if content.as_str() == Some(CLEARED_RESULT) {
        return None;
    }
    let bytes = content
        .to_string()
        .len()
        .saturating_sub(CLEARED_RESULT.len());
    result["content"] = Value::String(CLEARED_RESULT.into());
    Some(bytes)
}

fn is_thinking(block: &Value) -> bool {
    matches!(block_type(block), "thinking" | "redacted_thinking")
}

/// `clear_thinking_20251015`: thinking blocks go from every assistant
/// turn but the newest `keep` turns with thinking (`"all"` keeps every
/// one). The newest turn with thinking is always kept (`keep` is at least
/// 1), so a tool loop's final assistant message still starts with its
/// thinking block, as the extended-thinking rules require; a turn made
/// of thinking alone keeps it. Without `keep`, the last turn is kept.
fn clear_thinking(
    messages: &mut [Value],
    edit: &Value,
    tokens: &dyn Fn(usize) -> u64,
) -> Option<Value> {
    let keep = match edit.get("keep") {
        Some(Value::String(all)) if all == "all" => return None,
        Some(keep) => keep.get("value").and_then(Value::as_u64).unwrap_or(1),
        None => 1,
    }
    .max(1) as usize;
    let turns: Vec<usize> = messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m.get("role").and_then(Value::as_str) == Some("assistant"))
        .filter(|(_, m)| {
            let blocks = m.get("content").and_then(Value::as_array);
            blocks.into_iter().flatten().any(is_thinking)
        })
        .map(|(index, _)| index)
        .collect();
    let (mut cleared, mut bytes) = (0u64, 0usize);
    for &index in &turns[..turns.len().saturating_sub(keep)] {
        let Some(blocks) = blocks_mut(&mut messages[index]) else {
            continue;
        };
        if blocks.iter().all(is_thinking) {
            continue;
        }
        let before = Value::Array(blocks.clone()).to_string().len();
        blocks.retain(|b| !is_thinking(b));
        bytes += before.saturating_sub(Value::Array(blocks.clone()).to_string().len());
        cleared += 1;
    }
    (cleared > 0).then(|| {
        json!({
            "type": "clear_thinking_20251015",
            "cleared_thinking_turns": cleared,
            "cleared_input_tokens": tokens(bytes),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(bytes: usize) -> u64 {
        bytes.div_ceil(4) as u64
    }

    fn served(body: Value) -> Served {
        AnthropicForms
            .serve(body.to_string().as_bytes(), &tokens)
            .expect("served")
    }

    fn tool_loop(rounds: usize) -> Vec<Value> {
        let mut messages = vec![json!({"role": "user", "content": "go"})];
        for round in 0..rounds {
            let id = format!("toolu_{round}");
            let name = if round == 0 { "memory" } else { "read" };
            messages.push(json!({"role": "assistant", "content": [
                {"type": "thinking", "thinking": format!("t{round}"), "signature": "s"},
                {"type": "tool_use", "id": id, "name": name, "input": {"path": "x".repeat(400)}}]}));
            messages.push(json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": id, "content": "r".repeat(4000)}]}));
        }
        messages
    }

    #[test]
    fn tool_uses_are_cleared_oldest_first_as_documented() {
        let edit = json!({"type": "clear_tool_uses_20250919",
            "trigger": {"type": "input_tokens", "value": 1000},
            "keep": {"type": "tool_uses", "value": 2},
            "exclude_tools": ["memory"], "clear_tool_inputs": ["read"]});
        let body = json!({"model": "m", "max_tokens": 9, "messages": tool_loop(5),
            "context_management": {"edits": [edit]}});
        let served = served(body);
        let sent: Value = serde_json::from_slice(&served.body).expect("json");
        assert!(sent.get("context_management").is_none());
        let results: Vec<&Value> = (1..=5)
            .map(|r| &sent["messages"][2 * r]["content"][0]["content"])
            .collect();
        // The excluded first, the newest two: kept; the two between: cleared.
        assert_ne!(results[0], CLEARED_RESULT);
        assert_eq!(results[1], CLEARED_RESULT);
        assert_eq!(results[2], CLEARED_RESULT);
        assert_ne!(results[3], CLEARED_RESULT);
        assert_eq!(sent["messages"][3]["content"][1]["input"], json!({}));
        assert_eq!(sent["messages"][3]["content"][1]["id"], "toolu_1");
        assert_eq!(sent["messages"][3]["content"][0]["type"], "thinking");
        let applied = &served.applied["applied_edits"][0];
        assert_eq!(applied["type"], "clear_tool_uses_20250919");
        assert_eq!(applied["cleared_tool_uses"], 2);
        assert!(applied["cleared_input_tokens"].as_u64().expect("tokens") > 1900);
    }

    #[test]
    fn below_the_trigger_or_clear_at_least_nothing_is_cleared() {
        for edit in [
            json!({"type": "clear_tool_uses_20250919"}),
            json!({"type": "clear_tool_uses_20250919", "trigger": {"type": "tool_uses", "value": 1},
                "keep": {"type": "tool_uses", "value": 0},
                "clear_at_least": {"type": "input_tokens", "value": 1_000_000}}),
        ] {
            let body = json!({"model": "m", "max_tokens": 9, "messages": tool_loop(3),
                "context_management": {"edits": [edit]}});
            let served = served(body);
            let sent: Value = serde_json::from_slice(&served.body).expect("json");
            assert_eq!(sent["messages"], json!(tool_loop(3)));
            assert_eq!(served.applied, json!({"applied_edits": []}));
        }
    }

    #[test]
    fn thinking_is_cleared_but_the_newest_turns_keep_theirs() {
        let edit = json!({"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 1}});
        let body = json!({"model": "m", "max_tokens": 9, "messages": tool_loop(3),
            "context_management": {"edits": [edit]}});
        let served = served(body);
        let sent: Value = serde_json::from_slice(&served.body).expect("json");
        assert_eq!(sent["messages"][1]["content"][0]["type"], "tool_use");
        assert_eq!(sent["messages"][3]["content"][0]["type"], "tool_use");
        assert_eq!(sent["messages"][5]["content"][0]["type"], "thinking");
        assert_eq!(
            served.applied["applied_edits"][0]["cleared_thinking_turns"],
            2
        );
        let all = json!({"model": "m", "max_tokens": 9, "messages": tool_loop(3),
            "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}});
        let served = self::served(all);
        let sent: Value = serde_json::from_slice(&served.body).expect("json");
        assert_eq!(sent["messages"], json!(tool_loop(3)));
        assert_eq!(served.applied, json!({"applied_edits": []}));
    }

    #[test]
    fn everything_before_a_compaction_block_becomes_its_summary() {
        let body = json!({"model": "m", "max_tokens": 9, "messages": [
            {"role": "user", "content": "old"},
            {"role": "assistant", "content": "older answer"},
            {"role": "user", "content": "more"},
            {"role": "assistant", "content": [{"type": "compaction", "content": "what happened"},
                {"type": "text", "text": "after"}]},
            {"role": "user", "content": "next"}]});
        let served = served(body);
        let sent: Value = serde_json::from_slice(&served.body).expect("json");
        let messages = sent["messages"].as_array().expect("messages");
        assert_eq!(messages.len(), 3);
        let summary = messages[0]["content"][0]["text"].as_str().expect("text");
        assert!(summary.starts_with(SUMMARY_MARKER) && summary.contains("what happened"));
        assert_eq!(
            messages[1]["content"],
            json!([{"type": "text", "text": "after"}])
        );
        assert_eq!(served.applied, Value::Null);
    }

    #[test]
    fn served_betas_are_removed_and_others_pass() {
        let mut headers = HeaderMap::new();
        headers.insert(
            "anthropic-beta",
            HeaderValue::from_static(
                "interleaved-thinking-2025-05-14, context-management-2025-06-27,compact-2026-01-12",
            ),
        );
        assert!(AnthropicForms.asked(b"{}", &headers));
        AnthropicForms.strip_headers(&mut headers);
        assert_eq!(headers["anthropic-beta"], "interleaved-thinking-2025-05-14");
        let mut only = HeaderMap::new();
        only.insert(
            "anthropic-beta",
            HeaderValue::from_static("context-management-2025-06-27"),
        );
        AnthropicForms.strip_headers(&mut only);
        assert!(only.get("anthropic-beta").is_none());
        assert!(!AnthropicForms.asked(b"{\"messages\":[]}", &only));
    }

    #[test]
    fn a_summary_on_demand_is_answered_in_the_documented_shape() {
        let asked = json!({"compaction": {"type": "summarize"}});
        assert!(AnthropicForms.summary_asked(asked.as_object().expect("object"), 0));
        assert!(!AnthropicForms.summary_asked(&Map::new(), 0));
        let usage = Usage {
            input_tokens: 100,
            output_tokens: 20,
            ..Usage::default()
        };
        let body = asked.as_object().expect("object");
        let answer = AnthropicForms.summary_answer(body, "the gist", usage, false);
        let answer: Value = serde_json::from_slice(&answer).expect("json");
        assert_eq!(
            answer["content"],
            json!([{"type": "compaction", "content": "the gist"}])
        );
        assert_eq!(answer["stop_reason"], "compaction");
        assert_eq!(
            answer["usage"]["iterations"],
            json!([{"type": "compaction", "input_tokens": 100, "output_tokens": 20}])
        );
        let stream = AnthropicForms.summary_answer(body, "the gist", usage, true);
        let stream = String::from_utf8(stream).expect("utf-8");
        let names: Vec<&str> = stream
            .lines()
            .filter_map(|l| l.strip_prefix("event: "))
            .collect();
        assert_eq!(
            names,
            [
                "message_start",
                "content_block_start",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        assert!(stream.contains(r#""content_block":{"type":"compaction","content":"the gist"}"#));
    }

    #[test]
    fn refusals_of_the_forms_are_recognised() {
        let refused = br#"{"type":"error","error":{"type":"invalid_request_error","message":"context_management: Extra inputs are not permitted"}}"#;
        assert!(AnthropicForms.refuses(400, refused));
        let flag = br#"{"message":"Unexpected value(s) `context-management-2025-06-27` for the `anthropic-beta` header."}"#;
        assert!(AnthropicForms.refuses(400, flag));
        assert!(!AnthropicForms.refuses(404, b"model: claude-x"));
        assert!(!AnthropicForms.refuses(400, b"prompt is too long"));
        assert!(!AnthropicForms.refuses(400, b"compaction_block_misplaced"));
        assert!(!AnthropicForms.refuses(500, refused));
        assert!(AnthropicForms.made_by("api.anthropic.com"));
        assert!(!AnthropicForms.made_by("openrouter.ai"));
    }

    #[test]
    fn a_pausing_compaction_edit_asks_for_the_summary_past_its_trigger() {
        let edit = |pause: bool| {
            json!({"model": "m", "context_management": {"edits": [{"type": "compact_20260112",
                "trigger": {"type": "input_tokens", "value": 50_000},
                "pause_after_compaction": pause}]}})
        };
        let paused = edit(true);
        let paused = paused.as_object().expect("object");
        assert!(AnthropicForms.summary_asked(paused, 60_000));
        assert!(!AnthropicForms.summary_asked(paused, 40_000));
        let going_on = edit(false);
        assert!(!AnthropicForms.summary_asked(going_on.as_object().expect("object"), 60_000));
        let usage = Usage {
            input_tokens: 900,
            output_tokens: 80,
            ..Usage::default()
        };
        let stream = AnthropicForms.summary_answer(paused, "the gist", usage, true);
        let stream = String::from_utf8(stream).expect("utf-8");
        assert!(stream.contains(r#""content_block":{"type":"compaction","content":""}"#));
        assert!(stream.contains(r#""delta":{"type":"compaction_delta","content":"the gist"}"#));
        assert!(stream.contains(r#""stop_reason":"compaction""#));
        assert!(stream.contains(
            r#""iterations":[{"type":"compaction","input_tokens":900,"output_tokens":80}]"#
        ));
    }
}
