//! A client's Gemini chat body: parse, canonicalize, plan.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    condenser_fuzz::chat_request(condenser::protocol::gemini::PROTOCOL.adapter(), data);
});
