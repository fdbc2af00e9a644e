//! A 200 event stream's first chunk, read for an in-band overflow, and
//! its events read for usage, as the relay does on the side.
#![no_main]

use bytes::Bytes;
use condenser::overflow::SignatureTable;
use condenser::pipeline::inspect::first_event_overflow;
use condenser::protocol::Protocol;
use eventsource_stream::Eventsource;
use futures_util::{FutureExt, StreamExt};
use std::sync::OnceLock;

static TABLE: OnceLock<SignatureTable> = OnceLock::new();

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let table = TABLE.get_or_init(SignatureTable::builtin);
    let chunk = Bytes::copy_from_slice(data);
    // One chunk in memory: the inspection completes without waiting.
    let inspected = first_event_overflow(Some(&chunk), table).now_or_never();
    assert!(inspected.is_some(), "inspecting a chunk in memory waited");

    // The same bytes split in two, as the network may deliver them.
    let middle = data.len() / 2;
    let parts = [
        Ok::<_, std::io::Error>(chunk.slice(..middle)),
        Ok(chunk.slice(middle..)),
    ];
    let events = futures_util::stream::iter(parts)
        .eventsource()
        .collect::<Vec<_>>()
        .now_or_never()
        .expect("events in memory need no waiting");
    for event in events.into_iter().flatten() {
        let Ok(value) = serde_json::from_str(&event.data) else {
            continue;
        };
        for protocol in [Protocol::Openai, Protocol::Anthropic] {
            let _ = protocol.adapter().stream_usage(&value);
            let _ = protocol.adapter().usage(&value);
        }
    }
});
