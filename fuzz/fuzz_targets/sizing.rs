//! Sizes as a client or an upstream may claim them: the planner's
//! arithmetic never panics.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    condenser_fuzz::sizing(data);
});
