//! Beside the flow, the command line: the operator views as text.
//!
//! Plain-text rendering of the operator views: aligned tables, branches as
//! indented child lines, compaction points as marker lines. Pure functions,
//! so the CLI only prints what these return.

use crate::conversation::ChainHash;
use crate::domain::Compaction;
use crate::format::{align, human_bytes, utc_time};
use crate::store::{ConversationDetail, ConversationSummary, Listed, MessageNode, RequestPoint};
use std::collections::{HashMap, HashSet};
use std::fmt::Write;

/// The `conversations list` table.
pub fn render_list(rows: &[ConversationSummary]) -> String {
    if rows.is_empty() {
        return "no conversations stored\n".to_owned();
    }
    let header = [
        "CONVERSATION",
        "TENANT",
        "MESSAGES",
        "BRANCHES",
        "SIZE",
        "COMPACTIONS",
        "LAST ACTIVITY",
        "LABEL",
    ];
    let mut table = vec![header.map(str::to_owned).to_vec()];
    for row in rows {
        let label = row.label.clone().unwrap_or_else(|| "-".to_owned());
        table.push(vec![
            row.conversation.short(),
            row.tenant.short(),
            row.messages.to_string(),
            row.branches.to_string(),
            human_bytes(row.bytes),
            row.compactions.to_string(),
            utc_time(row.last_activity_ms),
            label,
        ]);
    }
    let mut out = align(&table, &[2, 3, 4, 5]).join("\n");
    out.push('\n');
    out
}

/// The `conversations show` view: a header, then the tree, one message per
/// line. The oldest child continues a line; every later child (an edit or a
/// regeneration) starts an indented branch (`↳`) after its sibling's subtree.
/// Only the newest positions are read; then a page of the newest
/// compactions and of the newest requests, each saying how many there are.
pub fn render_detail(detail: &ConversationDetail) -> String {
    let compactions: HashMap<ChainHash, &Compaction> = detail
        .compactions
        .iter()
        .map(|compaction| (compaction.prefix_hash, compaction))
        .collect();
    let mut table = vec![["POS", "ROLE", "SIZE", "TOKENS", "HASH"]
        .map(str::to_owned)
        .to_vec()];
    let mut layout = vec![Layout::default()];
    for (message, mut line) in walk(detail) {
        table.push(message_cells(message));
        line.marker = compactions.get(&message.hash).map(|c| compaction_marker(c));
        layout.push(line);
    }
    let mut out = detail_header(detail);
    for (text, line) in align(&table, &[0, 2, 3]).iter().zip(&layout) {
        let indent = "    ".repeat(line.depth);
        match line.branch {
            true => writeln!(out, "{}↳ {text}", &indent[2..]),
            false => writeln!(out, "{indent}{text}"),
        }
        .ok();
        if let Some(marker) = &line.marker {
            writeln!(out, "{indent}     {marker}").ok();
        }
    }
    if detail.from_position > 0 {
        writeln!(
            out,
            "(positions {} and later; --messages N shows more)",
            detail.from_position
        )
        .ok();
    }
    out.push_str(&render_compactions(&detail.newest_compactions));
    out.push_str(&render_requests(&detail.newest_requests));
    out
}

/// `compactions 21–40 of 10000, newest first (--page 3: older)`.
fn page_line<T>(what: &str, listed: &Listed<T>) -> String {
    let (first, last) = (listed.offset + 1, listed.offset + listed.items.len() as i64);
    let mut line = match listed.items.is_empty() {
        true => format!("\n{what}: none of {}", listed.total),
        false => format!("\n{what} {first}–{last} of {}, newest first", listed.total),
    };
    if last < listed.total {
        let page = listed.offset / (listed.items.len().max(1) as i64) + 2;
        line.push_str(&format!(" (--page {page}: older)"));
    }
    line.push('\n');
    line
}

fn render_compactions(listed: &Listed<Compaction>) -> String {
    let mut out = page_line("compactions", listed);
    if listed.items.is_empty() {
        return out;
    }
    let mut table = vec![[
        "CREATED", "PREFIX", "TRIGGER", "MODEL", "SUMMARY", "TOKENS", "TOOK", "HASH",
    ]
    .map(str::to_owned)
    .to_vec()];
    for c in &listed.items {
        table.push(vec![
            utc_time(c.created_at_ms),
            c.prefix_len.to_string(),
            c.trigger.to_string(),
            c.model.clone(),
            human_bytes(i64::try_from(c.summary.len()).unwrap_or(i64::MAX)),
            format!("{} → {}", c.tokens_before, c.tokens_after),
            format!("{} ms", c.duration_ms),
            c.prefix_hash.short(),
        ]);
    }
    out.push_str(&align(&table, &[1, 4, 6]).join("\n"));
    out.push('\n');
    out
}

fn render_requests(listed: &Listed<RequestPoint>) -> String {
    let mut out = page_line("requests kept", listed);
    if listed.items.is_empty() {
        return out;
    }
    let mut table = vec![[
        "AT",
        "MESSAGES",
        "ESTIMATED",
        "REPORTED",
        "WINDOW",
        "COMPACTED",
        "COMPACTIONS",
        "STATUS",
    ]
    .map(str::to_owned)
    .to_vec()];
    let or_dash = |value: Option<i64>| value.map_or_else(|| "-".to_owned(), |v| v.to_string());
    for r in listed.items.iter().rev() {
        table.push(vec![
            utc_time(r.at_ms),
            r.messages.to_string(),
            r.estimated_tokens.to_string(),
            or_dash(r.upstream_input_tokens),
            or_dash(r.window_tokens),
            or_dash(r.compacted_messages),
            r.compactions.to_string(),
            r.status.to_string(),
        ]);
    }
    out.push_str(&align(&table, &[1, 2, 3, 4, 5, 6, 7]).join("\n"));
    out.push('\n');
    out
}

/// The tree in display order, depth first, each message with its depth.
/// An explicit stack, not recursion: a long chain is thousands deep.
fn walk(detail: &ConversationDetail) -> Vec<(&MessageNode, Layout)> {
    let mut children: HashMap<ChainHash, Vec<&MessageNode>> = HashMap::new();
    for message in &detail.messages {
        if let Some(parent) = message.parent {
            children.entry(parent).or_default().push(message);
        }
    }
    // The root, or the top of what is stored when a gap left none.
    let stored: HashSet<ChainHash> = detail.messages.iter().map(|m| m.hash).collect();
    let roots = detail
        .messages
        .iter()
        .filter(|m| m.parent.is_none_or(|parent| !stored.contains(&parent)));
    let mut stack: Vec<(&MessageNode, Layout)> = roots.map(|m| (m, Layout::default())).collect();
    let mut ordered = Vec::with_capacity(detail.messages.len());
    while let Some((message, line)) = stack.pop() {
        let depth = line.depth;
        ordered.push((message, line));
        let kids = children
            .get(&message.hash)
            .map(Vec::as_slice)
            .unwrap_or_default();
        // Pushed in reverse so the oldest child, the main line, pops first.
        for (index, child) in kids.iter().enumerate().rev() {
            let branch = index > 0;
            let depth = depth + usize::from(branch);
            stack.push((
                child,
                Layout {
                    depth,
                    branch,
                    marker: None,
                },
            ));
        }
    }
    ordered
}

/// Where a table line sits in the tree, and what follows it.
#[derive(Default)]
struct Layout {
    depth: usize,
    /// First line of a branch: drawn with an arrow.
    branch: bool,
    /// A compaction covers the messages up to this one.
    marker: Option<String>,
}

fn detail_header(detail: &ConversationDetail) -> String {
    let figures = &detail.figures;
    let mut out = format!(
        "conversation {}  tenant {}  root {}\n",
        detail.conversation.short(),
        detail.tenant.short(),
        detail.root.short()
    );
    if let Some(label) = &detail.label {
        out.push_str(&format!("label: {label}\n"));
    }
    out.push_str(&format!(
        "messages {}  branches {}  size {}  compactions {}  requests kept {}\n\n",
        figures.messages,
        figures.branches,
        human_bytes(figures.bytes),
        figures.compactions,
        figures.requests_kept
    ));
    out
}

fn message_cells(message: &MessageNode) -> Vec<String> {
    vec![
        message.position.to_string(),
        message.role.clone(),
        human_bytes(message.bytes),
        message.token_estimate.to_string(),
        message.hash.short(),
    ]
}

/// `── compaction: 41 messages → summary 1.9 KB (overflow, gpt-4o) ──`
fn compaction_marker(compaction: &Compaction) -> String {
    format!(
        "── compaction: {} messages → summary {} ({}, {}) ──",
        compaction.prefix_len,
        human_bytes(i64::try_from(compaction.summary.len()).unwrap_or(i64::MAX)),
        compaction.trigger,
        compaction.model
    )
}
