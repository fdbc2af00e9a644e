//! What each fuzz target checks, beyond "no panic": the properties the
//! proxy relies on when it reads a client's body or an upstream's answer.

use bytes::Bytes;
use condenser::compaction::plan::{plan, safe_cuts, Item};
use condenser::conversation::ChainMemo;
use condenser::conversation::identify;
use condenser::protocol::{Adapter, ChatRequest};
use http::HeaderMap;
use serde_json::value::RawValue;

/// Parse, canonicalize and plan, as the pipeline does with a chat body.
pub fn chat_request(adapter: &dyn Adapter, data: &[u8]) {
    let parsed = adapter.parse(data);
    check_outline(adapter, data, parsed.as_ref());
    let Some(chat) = parsed else {
        return;
    };
    // `build` is how a rewritten request goes upstream: with the messages
    // unchanged it must give back the request Condenser parsed.
    let rebuilt = adapter.build(&chat, &chat.messages().iter().collect::<Vec<_>>());
    let again = adapter
        .parse(&rebuilt)
        .expect("a rebuilt request parses again");
    assert_eq!(again.messages(), chat.messages());
    assert_eq!(again.system(), chat.system());
    assert_eq!((&again.model, again.stream), (&chat.model, chat.stream));
    let _ = adapter.max_output_tokens(&chat);

    let items: Vec<Item> = chat
        .messages()
        .iter()
        .map(|message| {
            let canonical = adapter.canonical(message);
            // Checked as JSON text, not parsed into a value: canonical
            // forms sort keys, so serde_json's raw-value marker may come
            // first in an object, which the value parse reads its own way.
            serde_json::from_slice::<Box<RawValue>>(&canonical).expect("canonical form is JSON");
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

/// A Responses body: as [`chat_request`], and its units, outlined as
/// spans of items, must be what grouping the parsed items gives.
pub fn responses_request(data: &[u8]) {
    let adapter = &condenser::protocol::responses::Responses;
    chat_request(adapter, data);
    let whole = condenser::protocol::responses::parse_whole(data).and_then(|o| o.parse_all());
    match (whole, adapter.parse(data)) {
        (Some(whole), Some(outlined)) => {
            assert_eq!(outlined.messages(), whole.messages());
            assert_eq!(outlined.system(), whole.system());
            assert_eq!(outlined.body, whole.body);
            assert_eq!((&outlined.model, outlined.stream), (&whole.model, whole.stream));
        }
        (Some(_), None) => panic!("a body that parses whole is outlined"),
        // The outline may take what a whole parse refuses: items nested
        // deeper than serde_json parses in a whole body parse one by one,
        // and an earlier `input` that a repeated key replaces is scanned,
        // not parsed.
        (None, _) => {}
    }
}

/// The proxy identifies a body from its outline, parsing only what its
/// memo has not seen: that must give the request and chain a whole parse
/// gives, the first time and when the body is sent again, and a request
/// whose every part then parses.
fn check_outline(adapter: &dyn Adapter, data: &[u8], parsed: Option<&ChatRequest>) {
    let memo = ChainMemo::new(1000);
    let headers = HeaderMap::new();
    let identify = |memo: Option<&ChainMemo>| {
        let outline = adapter.outline(Bytes::copy_from_slice(data))?;
        identify::conversation(adapter, b"", &headers, None, outline, memo)
    };
    let whole = identify(None);
    for _ in 0..2 {
        match (parsed, identify(Some(&memo)), &whole) {
            (Some(parsed), Some((lazy, conversation)), Some((_, plain))) => {
                assert_eq!(lazy.messages(), parsed.messages());
                assert_eq!(lazy.system(), parsed.system());
                assert_eq!(lazy.body, parsed.body);
                assert_eq!((&lazy.model, lazy.stream), (&parsed.model, parsed.stream));
                assert_eq!(conversation.chain, plain.chain);
            }
            (Some(_), _, _) => panic!("a body that parses whole is identified"),
            // Parts nested deeper than serde_json parses in a whole body
            // can parse one by one: such a request must then parse whole.
            (None, Some((lazy, _)), _) => {
                assert_eq!(lazy.messages().len(), lazy.message_count());
                let _ = lazy.system();
            }
            (None, None, _) => {}
        }
    }
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

/// Sizes as a client or an upstream may claim them (`max_tokens` near
/// `u64::MAX`, an overflow's counts): the planner's arithmetic saturates,
/// and a summary budget it grants is never above the one it planned.
pub fn sizing(data: &[u8]) {
    use condenser::compaction::{exceeds, Layout, Numbers};
    let mut words = data
        .chunks(8)
        .map(|chunk| chunk.iter().fold(0u64, |n, &b| n << 8 | u64::from(b)));
    let mut next = || words.next().unwrap_or(0);
    let numbers = Numbers {
        window: next(),
        evidence: next() % 2 == 0,
        overhead: next(),
        max_output: next(),
        summary_max_tokens: next(),
        old_summary: next(),
        compacted: (next() % 64) as usize,
        items: (0..next() % 64).map(|_| next()).collect(),
    };
    let layout = Layout::from_numbers(&numbers);
    let _ = exceeds(numbers.window, 0.9, numbers.overhead, numbers.max_output);
    let Some((plan, budget)) = layout.plan() else {
        return;
    };
    let _ = layout.summary_room(&plan);
    let _ = layout.tokens_after(&plan, budget);
    if let Ok(sized) = layout.size(plan.clone(), budget) {
        assert!(sized.summary_tokens <= budget);
    }
    let text = String::from_utf8_lossy(data).into_owned();
    let _ = layout.fit_summary(&plan, text, |t| t.len() as u64 / 4);
}
