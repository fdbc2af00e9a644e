//! A client's Openai chat body: parse, canonicalize, plan.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    condenser_fuzz::chat_request(condenser::protocol::openai::PROTOCOL.adapter(), data);
});
