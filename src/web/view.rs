//! Beside the flow, the operator page: what templates print.
//!
//! What the templates print, built from store rows: pure functions from
//! rows to serializable views, so the pages are plain templates.

use crate::conversation::{ChainHash, ConversationId};
use crate::domain::Compaction;
use crate::format::{human_bytes, utc_time};
use crate::store::{Branch, ConversationRow, MessageText, RequestPoint};
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
    /// Its number in the conversation, 1 the oldest.
    pub number: i64,
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

/// A page of compactions (oldest first, the first numbered `first`), each
/// with the messages it folded in beyond the previous one (`before`: the
/// prefix of the one before the page) when they lie on the live branch
/// (`path`, oldest first).
pub fn compactions(
    page: &[Compaction],
    first: i64,
    before: i64,
    path: &[MessageText],
) -> Vec<CompactionView> {
    let on_path: HashSet<ChainHash> = path.iter().map(|m| m.hash).collect();
    let mut previous = before;
    page.iter()
        .zip(first..)
        .map(|(c, number)| {
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
                number,
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

/// The conversation's newest branches, newest first; the one ending at
/// the live head is live.
pub fn branches(branches: &[Branch], live: &ChainHash) -> Vec<BranchView> {
    branches
        .iter()
        .map(|b| BranchView {
            hash: b.head.short(),
            position: b.position.unwrap_or(0),
            created: utc_time(b.created_at_ms),
            live: b.head == *live,
        })
        .collect()
}

/// The chart's data: uPlot's column arrays, x being the request's number in
/// the conversation (agents send in bursts, so time would squeeze the
/// sawtooth into a line; each point's time is in `at`), and one mark per
/// compaction just before the first request that carried its summary.
///
/// The y axis is scaled to what was sent: a sawtooth of a few thousand
/// tokens under a window of 128,000 would otherwise be a flat line at the
/// bottom. The window is drawn when it lies within that scale, or not far
/// above it (the scale then reaches it); else it is named in
/// `window_note` instead of drawn.
pub fn chart(points: &[RequestPoint], first: usize, compactions: &[Compaction]) -> Value {
    let x: Vec<usize> = (first..first + points.len()).collect();
    let at: Vec<String> = points.iter().map(|p| utc_time(p.at_ms)).collect();
    let estimated: Vec<i64> = points.iter().map(|p| p.estimated_tokens).collect();
    let reported: Vec<Option<i64>> = points.iter().map(|p| p.upstream_input_tokens).collect();
    let scale = Scale::of(points);
    let window: Vec<Option<i64>> = match scale.window_shown {
        true => points.iter().map(|p| p.window_tokens).collect(),
        false => Vec::new(),
    };
    let marks: Vec<Value> = compactions
        .iter()
        .map(|c| {
            let index = points
                .iter()
                .position(|p| p.compacted_messages == Some(c.prefix_len))
                .or_else(|| points.iter().position(|p| p.at_ms >= c.created_at_ms))
                .unwrap_or(points.len());
            json!({"x": (first + index) as f64 - 0.5, "label": mark(c), "covered": c.prefix_len})
        })
        .collect();
    json!({
        "x": x, "at": at, "estimated": estimated, "reported": reported, "window": window,
        "marks": marks, "y_max": scale.y_max, "window_shown": scale.window_shown,
        "window_note": scale.window_note,
    })
}

/// The chart's y axis: from 0 to a round number above the largest
/// request sent, or to the window when it is near.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scale {
    pub y_max: i64,
    pub window_shown: bool,
    pub window_note: Option<String>,
}

/// The window is drawn when the largest request sent fills at least this
/// share of it (in percent): the sawtooth then keeps most of the height.
const WINDOW_NEAR_PERCENT: i64 = 60;

impl Scale {
    pub fn of(points: &[RequestPoint]) -> Self {
        let sent = points
            .iter()
            .map(|p| p.estimated_tokens.max(p.upstream_input_tokens.unwrap_or(0)))
            .max()
            .unwrap_or(0)
            .max(1);
        let window = points.iter().filter_map(|p| p.window_tokens).max();
        match window {
            Some(window) if window > 0 && sent * 100 >= window * WINDOW_NEAR_PERCENT => Self {
                y_max: round_up(sent.max(window) + sent.max(window) / 20),
                window_shown: true,
                window_note: None,
            },
            Some(window) if window > 0 => Self {
                y_max: round_up(sent + sent / 10),
                window_shown: false,
                window_note: Some(format!(
                    "The known window, {window} tokens, is above this scale: \
                     the largest request sent was {sent} tokens ({}% of it).",
                    sent * 100 / window
                )),
            },
            _ => Self {
                y_max: round_up(sent + sent / 10),
                window_shown: false,
                window_note: None,
            },
        }
    }
}

/// A round number at least `n`: 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6 or 8
/// times a power of ten, so the sawtooth keeps most of the chart's height.
fn round_up(n: i64) -> i64 {
    if n <= 10 {
        return n.max(1);
    }
    let mut power = 1_i64;
    while power.saturating_mul(10) <= n {
        power = power.saturating_mul(10);
    }
    [10, 12, 15, 20, 25, 30, 40, 50, 60, 80, 100]
        .into_iter()
        .map(|tenths| power.saturating_mul(tenths) / 10)
        .find(|round| *round >= n)
        .unwrap_or(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(at: i64, tokens: i64, window: Option<i64>) -> RequestPoint {
        RequestPoint {
            at_ms: at,
            messages: at,
            estimated_tokens: tokens,
            upstream_input_tokens: Some(tokens - 40),
            window_tokens: window,
            compacted_messages: None,
            compactions: 0,
            overflows: 0,
            status: 200,
        }
    }

    fn sawtooth(low: i64, high: i64, window: Option<i64>) -> Vec<RequestPoint> {
        (0..60)
            .map(|n| point(n, low + (high - low) * (n % 10) / 9, window))
            .collect()
    }

    #[test]
    fn a_small_sawtooth_under_a_large_window_fills_the_chart_and_names_the_window() {
        let points = sawtooth(2_000, 5_000, Some(128_000));
        let chart = chart(&points, 1, &[]);
        let y_max = chart["y_max"].as_i64().expect("a number");
        assert!(
            (5_000..=10_000).contains(&y_max),
            "the scale follows what was sent, not the window: {y_max}"
        );
        assert_eq!(chart["window_shown"], json!(false));
        assert_eq!(chart["window"], json!([]), "no window line off the scale");
        let note = chart["window_note"].as_str().expect("a note");
        assert!(note.contains("128000") && note.contains("5000"), "{note}");
    }

    #[test]
    fn a_sawtooth_near_its_window_shows_the_window_within_the_scale() {
        let points = sawtooth(40_000, 110_000, Some(128_000));
        let chart = chart(&points, 1, &[]);
        let y_max = chart["y_max"].as_i64().expect("a number");
        assert!((128_000..=200_000).contains(&y_max), "{y_max}");
        assert_eq!(chart["window_shown"], json!(true));
        assert_eq!(chart["window"].as_array().map(Vec::len), Some(60));
        assert_eq!(chart["window_note"], Value::Null);
    }

    #[test]
    fn without_a_window_the_scale_follows_the_largest_request() {
        let chart = chart(&sawtooth(100, 900, None), 1, &[]);
        assert_eq!(chart["y_max"], json!(1_000));
        assert_eq!(chart["window_shown"], json!(false));
        assert_eq!(chart["window_note"], Value::Null);
    }

    #[test]
    fn round_up_picks_a_round_number_not_far_above() {
        assert_eq!(
            [1, 3, 10, 11, 5_500, 134_400, 140_800].map(round_up),
            [1, 3, 10, 12, 6_000, 150_000, 150_000]
        );
    }
}
