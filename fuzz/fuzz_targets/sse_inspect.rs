//! A 200 event stream's opening, read for an in-band overflow before
//! anything reaches the client, by each protocol's adapter; the bytes
//! arrive in up to three chunks, as the network may deliver them.
#![no_main]

use bytes::Bytes;
use condenser::overflow::SignatureTable;
use condenser::overflow::inspect::{inspect, Inspected};
use condenser::protocol::{responses::Responses, Adapter};
use std::sync::OnceLock;
use std::time::Duration;

static TABLE: OnceLock<SignatureTable> = OnceLock::new();
static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();

fn response(data: &[u8]) -> reqwest::Response {
    let (first, second) = (data.len() / 3, data.len() * 2 / 3);
    let chunks: Vec<Result<Bytes, std::io::Error>> =
        [&data[..first], &data[first..second], &data[second..]]
            .into_iter()
            .map(|part| Ok(Bytes::copy_from_slice(part)))
            .collect();
    let body = reqwest::Body::wrap_stream(futures_util::stream::iter(chunks));
    let response = http::Response::builder()
        .header("content-type", "text/event-stream")
        .body(body)
        .expect("a response");
    reqwest::Response::from(response)
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let table = TABLE.get_or_init(SignatureTable::builtin);
    let runtime = RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime")
    });
    let adapters: [&dyn Adapter; 3] = [
        condenser::protocol::openai::PROTOCOL.adapter(),
        condenser::protocol::anthropic::PROTOCOL.adapter(),
        &Responses,
    ];
    for adapter in adapters {
        runtime.block_on(async {
            let inspected = inspect(response(data), table, adapter, Duration::from_secs(5))
                .await
                .expect("bytes in memory never stall");
            match inspected {
                // What the client gets is exactly what the upstream sent.
                Inspected::Relay {
                    response,
                    first_chunk,
                } => {
                    let rest = response.bytes().await.expect("the rest");
                    let mut relayed = first_chunk.map(|c| c.to_vec()).unwrap_or_default();
                    relayed.extend_from_slice(&rest);
                    assert_eq!(relayed, data);
                }
                Inspected::Overflow { body, signal, .. } => {
                    assert!(data.starts_with(&body));
                    let _ = signal.excess_tokens();
                }
                Inspected::Error { .. } => panic!("a 200 judged as an error"),
            }
        });
    }
});
