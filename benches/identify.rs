//! What identifying a conversation costs on the 200-message, ~750 KB
//! history that `bench/make_bodies.py` writes, from the body's bytes (its
//! outline included): without the memo (every message parsed,
//! canonicalized and hashed), on first sight with the memo, and re-sent
//! with the memo; beside it, the other walks of the whole history a
//! request may pay on its way upstream. `cargo bench --bench identify`;
//! bench/README.md has the figures.
//!
//! Times are the CPU time of the measuring thread, not wall time: on a
//! shared 2-core machine other processes stretch wall time by up to 2×,
//! and what a request costs the proxy is its CPU time anyway.

use bytes::Bytes;
use condenser::conversation::identify;
use condenser::conversation::{memo::DEFAULT_CAPACITY, ChainMemo};
use condenser::protocol::responses::{self, Responses};
use condenser::protocol::{bearer_or_key, Adapter, ChatRequest};
use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use http::HeaderMap;
use std::hint::black_box;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// CPU time of the calling thread (`CLOCK_THREAD_CPUTIME_ID`).
struct ThreadCpuTime;

impl ThreadCpuTime {
    fn now() -> Duration {
        let time = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
        Duration::new(time.tv_sec as u64, time.tv_nsec as u32)
    }
}

impl Measurement for ThreadCpuTime {
    type Intermediate = Duration;
    type Value = Duration;

    fn start(&self) -> Duration {
        Self::now()
    }

    fn end(&self, start: Duration) -> Duration {
        Self::now().saturating_sub(start)
    }

    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }

    fn zero(&self) -> Duration {
        Duration::ZERO
    }

    fn to_f64(&self, value: &Duration) -> f64 {
        value.as_nanos() as f64
    }

    fn formatter(&self) -> &dyn ValueFormatter {
        // Durations, as criterion prints wall time.
        static WALL: WallTime = WallTime;
        WALL.formatter()
    }
}

/// Runs `bench/make_bodies.py` into the target directory and reads its
/// history body, `history.json` or `history-responses.json`.
fn history_body(name: &str) -> Vec<u8> {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-bodies");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/make_bodies.py");
    let status = Command::new("python3")
        .arg(script)
        .arg(&out)
        .status()
        .expect("python3 runs bench/make_bodies.py");
    assert!(status.success(), "bench/make_bodies.py failed");
    std::fs::read(out.join(name)).expect("history bodies written")
}

fn headers() -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        "authorization",
        "Bearer sk-bench".parse().expect("header value"),
    );
    headers
}

/// Outlines `body` and identifies its conversation, as a request does.
fn identify(
    adapter: &dyn Adapter,
    headers: &HeaderMap,
    body: &Bytes,
    memo: Option<&ChainMemo>,
) -> usize {
    let outline = adapter.outline(body.clone()).expect("outlines");
    identify::conversation(
        adapter,
        b"salt",
        headers,
        bearer_or_key(headers),
        outline,
        memo,
    )
    .expect("parses")
    .1
    .chain
    .len()
}

/// `request` as a client serializes it (compact, as SDKs do), with only
/// its first `messages` messages.
fn serialized(adapter: &dyn Adapter, request: &ChatRequest, messages: usize) -> Bytes {
    let request = request.truncated(messages);
    let messages: Vec<&serde_json::Value> = request.messages().iter().collect();
    Bytes::from(adapter.build(&request, &messages))
}

fn bench_identify(c: &mut Criterion<ThreadCpuTime>) {
    let adapter = condenser::protocol::openai::PROTOCOL.adapter();
    let request = adapter
        .parse(&history_body("history.json"))
        .expect("the history parses");
    let count = request.message_count();
    let body = serialized(adapter, &request, count);
    let headers = headers();
    // The turn before: the same history less its last round.
    let earlier = serialized(adapter, &request, count - 4);

    let mut group = c.benchmark_group("identify_history");
    group.bench_function("today_no_memo", |b| {
        b.iter(|| identify(adapter, &headers, black_box(&body), None))
    });
    group.bench_function("memo_first_sight", |b| {
        b.iter_batched(
            || ChainMemo::new(DEFAULT_CAPACITY),
            |memo| {
                identify(adapter, &headers, black_box(&body), Some(&memo));
                memo
            },
            BatchSize::SmallInput,
        )
    });
    // First sight once the memo is full of other conversations: each
    // insert also evicts.
    let full = ChainMemo::new(DEFAULT_CAPACITY);
    let caller = |key: String| {
        let mut headers = HeaderMap::new();
        headers.insert("authorization", key.parse().expect("header value"));
        headers
    };
    for other in 0..DEFAULT_CAPACITY / count + 100 {
        identify(
            adapter,
            &caller(format!("other-{other}")),
            &body,
            Some(&full),
        );
    }
    let mut new_caller = 0u64;
    group.bench_function("memo_first_sight_full_memo", |b| {
        b.iter_batched(
            || {
                new_caller += 1;
                caller(format!("new-{new_caller}"))
            },
            |headers| identify(adapter, &headers, black_box(&body), Some(&full)),
            BatchSize::SmallInput,
        )
    });
    let warm = ChainMemo::new(DEFAULT_CAPACITY);
    identify(adapter, &headers, &body, Some(&warm));
    group.bench_function("memo_resent", |b| {
        b.iter(|| identify(adapter, &headers, black_box(&body), Some(&warm)))
    });
    group.bench_function("memo_next_turn_4_new", |b| {
        b.iter_batched(
            || {
                let memo = ChainMemo::new(DEFAULT_CAPACITY);
                identify(adapter, &headers, &earlier, Some(&memo));
                memo
            },
            |memo| {
                identify(adapter, &headers, black_box(&body), Some(&memo));
                memo
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();

    let mut group = c.benchmark_group("request_path_history");
    group.bench_function("parse", |b| {
        b.iter(|| adapter.parse(black_box(&body)).map(|r| r.messages().len()))
    });
    group.bench_function("outline", |b| {
        b.iter(|| {
            adapter
                .outline(black_box(body.clone()))
                .map(|r| r.message_count())
        })
    });
    group.bench_function("build", |b| {
        let messages: Vec<&serde_json::Value> = request.messages().iter().collect();
        b.iter(|| adapter.build(black_box(&request), &messages).len())
    });
    group.bench_function("serialize_each_message", |b| {
        b.iter(|| {
            black_box(&request)
                .messages()
                .iter()
                .map(|m| m.to_string().len())
                .sum::<usize>()
        })
    });
    group.finish();
}

/// The same history as a Responses body (Codex CLI's API): its units are
/// outlined as spans of several items.
fn bench_responses(c: &mut Criterion<ThreadCpuTime>) {
    let adapter: &dyn Adapter = &Responses;
    let body = Bytes::from(history_body("history-responses.json"));
    let headers = headers();
    let warm = ChainMemo::new(DEFAULT_CAPACITY);
    identify(adapter, &headers, &body, Some(&warm));

    let mut group = c.benchmark_group("responses_history");
    group.bench_function("memo_resent", |b| {
        b.iter(|| identify(adapter, &headers, black_box(&body), Some(&warm)))
    });
    group.bench_function("whole_parse_memo_resent", |b| {
        b.iter(|| {
            let outline = responses::parse_whole(black_box(&body)).expect("parses");
            identify::conversation(
                adapter,
                b"salt",
                &headers,
                bearer_or_key(&headers),
                outline,
                Some(&warm),
            )
            .map(|(_, conversation)| conversation.chain.len())
        })
    });
    group.bench_function("outline", |b| {
        b.iter(|| {
            adapter
                .outline(black_box(body.clone()))
                .map(|r| r.message_count())
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(ThreadCpuTime);
    targets = bench_identify, bench_responses
}
criterion_main!(benches);
