//! What each fuzz target checks, beyond "no panic": the properties the
//! proxy relies on when it reads a client's body or an upstream's answer.

use condenser::compaction::plan::{plan, safe_cuts, Item};
use condenser::protocol::Adapter;
use serde_json::Value;

/// Parse, canonicalize and plan, as the pipeline does with a chat body.
pub fn chat_request(adapter: &dyn Adapter, data: &[u8]) {
    let Some(chat) = adapter.parse(data) else {
        return;
    };
    // `build` is how a rewritten request goes upstream: with the messages
    // unchanged it must give back the request Condenser parsed.
    let rebuilt = adapter.build(&chat, &chat.messages.iter().collect::<Vec<_>>());
    let again = adapter
        .parse(&rebuilt)
        .expect("a rebuilt request parses again");
    assert_eq!(again.messages, chat.messages);
    assert_eq!(again.system, chat.system);
    assert_eq!((&again.model, again.stream), (&chat.model, chat.stream));
    let _ = adapter.max_output_tokens(&chat);

    let items: Vec<Item> = chat
        .messages
        .iter()
        .map(|message| {
            let canonical = adapter.canonical(message);
            serde_json::from_slice::<Value>(&canonical).expect("canonical form is JSON");
            let _ = adapter.transcript_entry(message);
            let _ = adapter.role(message);
            if let Some(trimmed) = adapter.trim_tool_result(message, canonical.len() / 3) {
                let _ = adapter.canonical(&trimmed.message);
            }
            Item {
                tokens: canonical.len() as u64 / 4 + 1,
                links: adapter.tool_links(message),
            }
        })
        .collect();
    check_plan(&items, data);
}

fn check_plan(items: &[Item], data: &[u8]) {
    let cuts = safe_cuts(items);
    assert!(cuts.iter().all(|&cut| cut >= 1 && cut < items.len()));
    // Budgets from the input's own bytes, so the fuzzer explores them too.
    let byte = |i: usize| u64::from(data.get(i).copied().unwrap_or(0));
    let compacted = (byte(0) as usize) % (items.len() + 1);
    let total: u64 = items.iter().map(|item| item.tokens).sum();
    let tail_budget = total * byte(1) / 255;
    let min_kept = byte(2) + 1;
    let Some(planned) = plan(items, compacted, tail_budget, min_kept) else {
        return;
    };
    assert!(planned.cut > compacted || !planned.trims.is_empty());
    assert!(planned.cut == compacted || cuts.contains(&planned.cut));
    for &(index, keep) in &planned.trims {
        assert!(index >= planned.cut && index < items.len());
        assert!(keep < items[index].tokens);
    }
}
