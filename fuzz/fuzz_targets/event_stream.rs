//! Bedrock's binary event stream, as any upstream may send it, read by
//! its adapter's decoder in pieces: it must never panic, and a stream cut
//! anywhere must give the events the whole stream gives, in order, or
//! fewer (a broken stream yields nothing more).
#![no_main]

use condenser::protocol::bedrock::Bedrock;
use condenser::protocol::Adapter;
use libfuzzer_sys::fuzz_target;

fn events(data: &[u8], piece: usize) -> Vec<String> {
    let frames = Bedrock.frames().expect("Bedrock frames its streams");
    let mut decoder = frames.decoder();
    let mut events = Vec::new();
    for chunk in data.chunks(piece.max(1)) {
        decoder.feed(chunk, &mut events);
    }
    events
}

fuzz_target!(|data: &[u8]| {
    let whole = events(data, data.len().max(1));
    let cut = events(data, data.first().map_or(1, |b| usize::from(*b % 17) + 1));
    assert_eq!(whole, cut);
});
