//! Beside the flow, the operator page: what templates print.
//!
//! What the templates print, built from store rows: pure functions from
//! rows to serializable views, so the pages are plain templates.

use crate::conversation::{ChainHash, ConversationId};
use crate::domain::Compaction;
use crate::format::{human_bytes, utc_time};
use crate::store::{ConversationDetail, ConversationRow, MessageText, RequestPoint};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::HashSet;

#[derive(Serialize)]
pub struct RowView {
    pub href: String,
    pub label: Option<String>,
    pub id_short: String,
    pub tenant_short: String,
    pub last_activity: String,
    pub messages: i64,
    pub compactions: i64,
    pub branches: i64,
    pub context: String,
    /// Percent of the known window the newest request filled.
    pub fill: Option<i64>,
    pub model: String,
}

pub fn href(row_tenant: &str, conversation: &ConversationId) -> String {
    format!(
        "/admin/conversations/{row_tenant}/{}",
        conversation.to_hex()
    )
}

/// `12,345 / 128,000 tokens` or `12,345 tokens` with no known window.
pub fn context(tokens: i64, window: Option<i64>) -> String {
    match window {
        Some(window) => format!("{tokens} / {window} tokens"),
        None => format!("{tokens} tokens"),
    }
}

pub fn row(row: &ConversationRow) -> RowView {
    RowView {
        href: href(row.tenant.as_str(), &row.conversation),
        label: row.label.clone(),
        id_short: row.conversation.short(),
        tenant_short: row.tenant.short(),
        last_activity: utc_time(row.last_activity_ms),
        messages: row.messages,
        compactions: row.compactions,
        branches: row.branches,
        context: context(row.tokens, row.window_tokens),
        fill: row
            .window_tokens
            .filter(|w| *w > 0)
            .map(|w| (row.tokens * 100 / w).min(100)),
        model: row.model.clone(),
    }
}

#[derive(Serialize)]
pub struct CompactionView {
    pub prefix_len: i64,
    pub summary: String,
    pub model: String,
    pub created: String,
    pub tokens_before: i64,
    pub tokens_after: i64,
    /// `41 messages · overflow · summary 2.3 s · 1 trim`.
    pub mark: String,
    pub covered: Vec<TextView>,
}

#[derive(Serialize)]
pub struct TextView {
    pub position: i64,
    pub role: String,
    pub preview: String,
}

fn text(message: &MessageText) -> TextView {
    TextView {
        position: message.position,
        role: message.role.clone(),
        preview: message.preview.clone(),
    }
}

/// Tool results a compaction trimmed, and how much of them was cut.
fn trims(compaction: &Compaction) -> String {
    let trims = &compaction.trims;
    if trims.is_empty() {
        return "no trims".into();
    }
    let cut: usize = trims
        .iter()
        .map(|t| t.original_bytes.saturating_sub(t.kept_bytes))
        .sum();
    let plural = if trims.len() == 1 { "" } else { "s" };
    let cut = human_bytes(i64::try_from(cut).unwrap_or(i64::MAX));
    format!("{} trim{plural} ({cut} cut)", trims.len())
}

fn duration(ms: i64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else {
        format!("{:.1} s", ms as f64 / 1000.0)
    }
}

pub fn mark(compaction: &Compaction) -> String {
    format!(
        "{} messages · {} · summary {} · {}",
        compaction.prefix_len,
        compaction.trigger,
        duration(compaction.duration_ms),
        trims(compaction)
    )
}

/// Each compaction, with the messages it folded in beyond the previous one
/// when they lie on the live branch (`path`, oldest first).
pub fn compactions(detail: &ConversationDetail, path: &[MessageText]) -> Vec<CompactionView> {
    let on_path: HashSet<ChainHash> = path.iter().map(|m| m.hash).collect();
    let mut previous = 0;
    detail
        .compactions
        .iter()
        .map(|c| {
            let covered = if on_path.contains(&c.prefix_hash) {
                path.iter()
                    .filter(|m| m.position > previous && m.position <= c.prefix_len)
                    .map(text)
                    .collect()
            } else {
                Vec::new()
            };
            previous = c.prefix_len;
            CompactionView {
                prefix_len: c.prefix_len,
                summary: c.summary.clone(),
                model: c.model.clone(),
                created: utc_time(c.created_at_ms),
                tokens_before: c.tokens_before,
                tokens_after: c.tokens_after,
                mark: mark(c),
                covered,
            }
        })
        .collect()
}

pub fn texts(path: &[MessageText], newest: usize) -> Vec<TextView> {
    path.iter().rev().take(newest).rev().map(text).collect()
}

#[derive(Serialize)]
pub struct BranchView {
    pub hash: String,
    pub position: i64,
    pub created: String,
    pub live: bool,
}

/// The conversation's leaves, newest first; the one on the live path is
/// live.
pub fn branches(detail: &ConversationDetail, path: &[MessageText]) -> Vec<BranchView> {
    let parents: HashSet<ChainHash> = detail.messages.iter().filter_map(|m| m.parent).collect();
    let on_path: HashSet<ChainHash> = path.iter().map(|m| m.hash).collect();
    let mut leaves: Vec<_> = detail
        .messages
        .iter()
        .filter(|m| !parents.contains(&m.hash))
        .collect();
    leaves.sort_by_key(|m| std::cmp::Reverse(m.created_at_ms));
    leaves
        .into_iter()
        .map(|m| BranchView {
            hash: m.hash.short(),
            position: m.position,
            created: utc_time(m.created_at_ms),
            live: on_path.contains(&m.hash),
        })
        .collect()
}

/// The chart's data: uPlot's column arrays, x being the request's number in
/// the conversation (agents send in bursts, so time would squeeze the
/// sawtooth into a line; each point's time is in `at`), and one mark per
/// compaction just before the first request that carried its summary.
pub fn chart(points: &[RequestPoint], compactions: &[Compaction]) -> Value {
    let x: Vec<usize> = (1..=points.len()).collect();
    let at: Vec<String> = points.iter().map(|p| utc_time(p.at_ms)).collect();
    let estimated: Vec<i64> = points.iter().map(|p| p.estimated_tokens).collect();
    let reported: Vec<Option<i64>> = points.iter().map(|p| p.upstream_input_tokens).collect();
    let window: Vec<Option<i64>> = points.iter().map(|p| p.window_tokens).collect();
    let marks: Vec<Value> = compactions
        .iter()
        .map(|c| {
            let first = points
                .iter()
                .position(|p| p.compacted_messages == Some(c.prefix_len))
                .or_else(|| points.iter().position(|p| p.at_ms >= c.created_at_ms))
                .unwrap_or(points.len());
            json!({"x": first as f64 + 0.5, "label": mark(c), "covered": c.prefix_len})
        })
        .collect();
    json!({"x": x, "at": at, "estimated": estimated, "reported": reported, "window": window, "marks": marks})
}
