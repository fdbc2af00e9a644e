//! Step 7, compact: the plan.
//!
//! Where to cut (pure): history in, cut point and trims out.
//!
//! A cut before message `c` summarizes `messages[..c]` and keeps the rest.
//! It is safe only where every tool call made before `c` was answered before
//! `c` (ARCHITECTURE.md invariant 4), which includes boundaries inside the
//! client's current turn between complete tool exchanges (invariant 3).

use crate::protocol::ToolLinks;
use std::collections::HashSet;

/// Smallest size a trimmed tool result is cut to, in tokens, in a window
/// large enough for it (small windows use less: see `Layout::min_kept`).
pub const MIN_KEPT_TOKENS: u64 = 256;

/// What the planner knows of one message.
#[derive(Debug, Clone, Default)]
pub struct Item {
    pub tokens: u64,
    pub links: ToolLinks,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Messages `[..cut]` are covered by the summary after this compaction.
    pub cut: usize,
    /// Tool-result messages in the kept tail to trim: (index, tokens to keep).
    pub trims: Vec<(usize, u64)>,
}

/// Boundaries `c` (1 ≤ c < len) where a cut keeps every tool pair whole.
/// The last message is always kept: it is the client's current input.
pub fn safe_cuts(items: &[Item]) -> Vec<usize> {
    let mut open: HashSet<&str> = HashSet::new();
    let mut cuts = Vec::new();
    for (index, item) in items.iter().enumerate().take(items.len().saturating_sub(1)) {
        for result in &item.links.results {
            open.remove(result.as_str());
        }
        open.extend(item.links.calls.iter().map(String::as_str));
        let next_is_result = !items[index + 1].links.results.is_empty();
        if open.is_empty() && !next_is_result {
            cuts.push(index + 1);
        }
    }
    cuts
}

/// Keeps as much recent history as fits `tail_budget` tokens, summarizing
/// everything before, and always moves past `compacted` (what the current
/// summary already covers) when any safe cut lies beyond it. When even the
/// shortest safe tail is too large, the largest tool results in it are
/// trimmed, none below `min_kept` tokens. `None` when nothing can be made
/// smaller.
pub fn plan(items: &[Item], compacted: usize, tail_budget: u64, min_kept: u64) -> Option<Plan> {
    // Sizes come from bodies and upstream counts: their sum saturates.
    let tail_tokens = |cut: usize| {
        items[cut..]
            .iter()
            .map(|item| item.tokens)
            .fold(0, u64::saturating_add)
    };
    let candidates: Vec<usize> = safe_cuts(items)
        .into_iter()
        .filter(|&cut| cut > compacted)
        .collect();
    if let Some(&cut) = candidates
        .iter()
        .find(|&&cut| tail_tokens(cut) <= tail_budget)
    {
        return Some(Plan {
            cut,
            trims: Vec::new(),
        });
    }
    let cut = candidates.last().copied().unwrap_or(compacted);
    let trims = trims_for(items, cut, tail_tokens(cut), tail_budget, min_kept);
    (cut > compacted || !trims.is_empty()).then_some(Plan { cut, trims })
}

/// Largest tool results first, each cut just enough (not below `min_kept`)
/// until the tail fits.
fn trims_for(
    items: &[Item],
    cut: usize,
    mut tail: u64,
    budget: u64,
    min_kept: u64,
) -> Vec<(usize, u64)> {
    let mut results: Vec<usize> = (cut..items.len())
        .filter(|&i| !items[i].links.results.is_empty())
        .collect();
    results.sort_by_key(|&i| std::cmp::Reverse(items[i].tokens));
    let mut trims = Vec::new();
    for index in results {
        if tail <= budget {
            break;
        }
        let size = items[index].tokens;
        let keep = size.saturating_sub(tail - budget).max(min_kept);
        if keep < size {
            tail = tail.saturating_sub(size).saturating_add(keep);
            trims.push((index, keep));
        }
    }
    trims
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(tokens: u64) -> Item {
        Item {
            tokens,
            links: ToolLinks::default(),
        }
    }
    fn call(tokens: u64, ids: &[&str]) -> Item {
        Item {
            tokens,
            links: ToolLinks {
                calls: ids.iter().map(|s| s.to_string()).collect(),
                results: vec![],
            },
        }
    }
    fn result(tokens: u64, id: &str) -> Item {
        Item {
            tokens,
            links: ToolLinks {
                calls: vec![],
                results: vec![id.to_string()],
            },
        }
    }

    /// user, assistant→(a,b), tool a, tool b, assistant→c, tool c, assistant, user
    fn agent_turns() -> Vec<Item> {
        vec![
            text(10),
            call(10, &["a", "b"]),
            result(10, "a"),
            result(10, "b"),
            call(10, &["c"]),
            result(10, "c"),
            text(10),
            text(10),
        ]
    }

    #[test]
    fn cuts_never_separate_a_call_from_its_results() {
        assert_eq!(safe_cuts(&agent_turns()), vec![1, 4, 6, 7]);
    }

    #[test]
    fn the_current_turn_has_cut_points_between_tool_exchanges() {
        // One user message, then an agent working through many tool rounds.
        let mut turn = vec![text(5)];
        for round in 0..3 {
            let id = format!("t{round}");
            turn.push(call(5, &[&id]));
            turn.push(result(100, &id));
        }
        assert_eq!(safe_cuts(&turn), vec![1, 3, 5]);
        let plan = plan(&turn, 0, 120, MIN_KEPT_TOKENS).expect("a plan");
        assert_eq!(
            plan,
            Plan {
                cut: 5,
                trims: vec![]
            }
        );
    }

    #[test]
    fn keeps_the_most_recent_history_that_fits() {
        assert_eq!(
            plan(&agent_turns(), 0, 45, MIN_KEPT_TOKENS),
            Some(Plan {
                cut: 4,
                trims: vec![]
            })
        );
        assert_eq!(
            plan(&agent_turns(), 0, 25, MIN_KEPT_TOKENS),
            Some(Plan {
                cut: 6,
                trims: vec![]
            })
        );
    }

    #[test]
    fn always_moves_past_what_is_already_summarized() {
        assert_eq!(
            plan(&agent_turns(), 4, 1000, MIN_KEPT_TOKENS),
            Some(Plan {
                cut: 6,
                trims: vec![]
            })
        );
    }

    #[test]
    fn a_huge_tool_result_in_the_kept_tail_is_trimmed() {
        let items = vec![text(10), call(10, &["x"]), result(100_000, "x")];
        let plan = plan(&items, 0, 2_000, MIN_KEPT_TOKENS).expect("a plan");
        assert_eq!(plan.cut, 1);
        assert_eq!(plan.trims, vec![(2, 1_990)]);
    }

    #[test]
    fn nothing_to_do_is_none() {
        assert_eq!(plan(&[text(10)], 0, 1, MIN_KEPT_TOKENS), None);
        assert_eq!(plan(&agent_turns(), 7, 1, MIN_KEPT_TOKENS), None);
    }
    /// A Responses request's units as the planner sees them: no safe cut
    /// parts a reasoning item from the item after it, or a call from its
    /// output.
    #[test]
    fn no_safe_cut_parts_reasoning_from_its_item_or_a_call_from_its_output() {
        use crate::protocol::responses::Responses;
        use crate::protocol::Adapter;
        use serde_json::{json, Value};
        let reasoning = |id: &str| json!({"type": "reasoning", "id": id, "encrypted_content": "e"});
        let call = |id: &str| json!({"type": "function_call", "call_id": id, "name": "f", "arguments": "{}"});
        let output =
            |id: &str| json!({"type": "function_call_output", "call_id": id, "output": "x"});
        let body = json!({"model": "m", "input": [
            {"role": "user", "content": "one"},
            reasoning("rs_1"), call("c1"), call("c2"), output("c1"), output("c2"),
            reasoning("rs_2"), {"type": "message", "role": "assistant", "content": []},
            {"role": "user", "content": "two"},
            reasoning("rs_3"), call("c3"), output("c3")
        ]});
        let request = Responses
            .parse(body.to_string().as_bytes())
            .expect("parses");
        let units = request.messages();
        let items: Vec<Item> = units
            .iter()
            .map(|unit| Item {
                tokens: 1,
                links: Responses.tool_links(unit),
            })
            .collect();
        let cuts = safe_cuts(&items);
        assert_eq!(cuts, vec![1, 5, 6, 7]);
        let of = |unit: &Value| match unit {
            Value::Array(items) => items.clone(),
            item => vec![item.clone()],
        };
        for cut in cuts {
            let before = of(&units[cut - 1]);
            assert_ne!(
                before.last().map(|i| i["type"].clone()),
                Some(json!("reasoning"))
            );
            assert_ne!(of(&units[cut])[0]["type"], "function_call_output");
        }
    }
}
