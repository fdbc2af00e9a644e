//! A client's OpenAI Responses body: parse, canonicalize, plan, and the
//! outline's units against a whole parse.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    condenser_fuzz::responses_request(data);
});
