//! An upstream's error answer: status and body, judged for overflow.
#![no_main]

use condenser::overflow::SignatureTable;
use std::sync::OnceLock;

static TABLE: OnceLock<SignatureTable> = OnceLock::new();

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let table = TABLE.get_or_init(SignatureTable::builtin);
    let Some((&status, body)) = data.split_first() else {
        return;
    };
    // 400..=499 mostly, and a few statuses that must never count.
    let status = match status {
        250..=255 => [200, 429, 500, 503, 302, 100][usize::from(status - 250)],
        other => 400 + u16::from(other) % 100,
    };
    if let Some(signal) = table.detect(status, body) {
        // A success, a redirect or a rate limit never counts; a 5xx only
        // where llama.cpp reports overflow as 500 (signatures.rs).
        assert!(((400..500).contains(&status) && status != 429) || status == 500);
        let _ = signal.excess_tokens();
    }
    if let Some(signal) = table.detect_stream_event(&String::from_utf8_lossy(body)) {
        let _ = signal.excess_tokens();
    }
});
