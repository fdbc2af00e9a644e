//! A client's Ollama chat body: parse, canonicalize, plan.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    condenser_fuzz::chat_request(condenser::protocol::ollama::PROTOCOL.adapter(), data);
});
