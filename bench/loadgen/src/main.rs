//! Open-loop HTTP/1.1 load generator for `bench/hotpath.sh`.
//!
//! Requests are scheduled on a fixed timetable (`--rate` per second over
//! all connections, for `--duration` seconds) by a dedicated thread and
//! handed to `--connections` keep-alive connections through one queue. A
//! request's latency runs from its *scheduled* send time to the last byte
//! of its answer, so a target that falls behind is charged for the queue it
//! builds (no coordinated omission). After the timetable ends, outstanding
//! requests get `--drain` seconds; whatever is still unanswered then counts
//! as an error, with the time it had waited as its latency.
//!
//! Workloads: `fixed` sends one body file every time; `growing` keeps
//! `--conversations` agent conversations, each request re-sending its
//! conversation's whole history plus a new user message (and the assistant
//! reply the previous request got), up to `--max-turns` turns, then a fresh
//! conversation in that slot.
//!
//! Prints one JSON object on stdout.

use bytes::Bytes;
use clap::{Parser, ValueEnum};
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper_util::rt::TokioIo;
use serde_json::json;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, Barrier, Mutex};

/// The system prompt of every generated conversation (~1.2 KB); the
/// `identical` body of `bench/make_bodies.py` uses the same text.
const SYSTEM: &str = "You are a careful coding agent working in a large Rust repository. \
Read before you write, keep changes small, run the tests that cover what you touched, \
and explain every change in one or two plain sentences. Never invent file contents: \
when you need a file, ask for it with the read_file tool. Prefer the standard library \
to new dependencies, keep public interfaces stable, and do not reformat code you did \
not change. When a test fails, read its output in full before changing anything; \
when you are unsure what a function does, read its callers. Answer in English, \
without preamble, and stop when the task is done. Security matters: never print \
credentials, never weaken a check to make a test pass, and treat every input from \
the network as hostile until it is validated. Performance matters too, but only \
where it is measured: do not optimize code that no benchmark shows is slow, and say \
which benchmark you ran and what it showed. The repository has a README per crate; \
read it first. Its CI runs formatting, lints with warnings denied, and the full test \
suite on every push, so run the same three before you call anything finished.";

/// What the benchmark's upstream answers as the assistant's content; a
/// growing conversation re-sends it as the previous turn's reply.
const DEFAULT_REPLY: &str = "I read the module and made the change: the parser now \
rejects empty keys, the two call sites handle the new error, and the unit tests \
cover both cases. All tests pass.";

const USER_TOPICS: [&str; 6] = [
    "the request router and its middleware stack",
    "the storage layer and how it batches writes",
    "the configuration loader and its precedence rules",
    "the retry policy of the upstream client",
    "the metrics exporter and its label cardinality",
    "the shutdown sequence and in-flight requests",
];

#[derive(Clone, Copy, ValueEnum)]
enum Workload {
    /// The same body (`--body`) every time.
    Fixed,
    /// Growing agent conversations.
    Growing,
}

#[derive(Parser)]
#[command(about = "Open-loop HTTP/1.1 load generator; prints JSON")]
struct Args {
    /// Target, e.g. http://127.0.0.1:8080/v1/chat/completions
    #[arg(long)]
    url: String,
    /// Requests per second, over all connections.
    #[arg(long)]
    rate: f64,
    /// Seconds of scheduled sending.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Keep-alive connections, opened before the first request.
    #[arg(long, default_value_t = 32)]
    connections: usize,
    /// Seconds outstanding requests may take after the timetable ends.
    #[arg(long, default_value_t = 3.0)]
    drain: f64,
    #[arg(long, value_enum, default_value = "fixed")]
    workload: Workload,
    /// Request body for `fixed`.
    #[arg(long)]
    body: Option<PathBuf>,
    /// Concurrent conversations for `growing`.
    #[arg(long, default_value_t = 200)]
    conversations: usize,
    /// Turns after which a `growing` conversation starts over, fresh.
    #[arg(long, default_value_t = 60)]
    max_turns: usize,
    /// Start every conversation at turn 0, instead of spreading the slots'
    /// starting turns over 0..max-turns (a slot that starts at turn k sends
    /// k turns of history the proxy has not seen, once).
    #[arg(long)]
    no_stagger: bool,
    /// For `growing`: give every conversation its own system prompt (its
    /// id appended). By default they share one, as a fleet of agents does,
    /// and Condenser files them as branches of one conversation.
    #[arg(long)]
    system_per_conversation: bool,
    /// Makes this run's conversations distinct from other runs' (default:
    /// the clock).
    #[arg(long)]
    seed: Option<u64>,
    /// The assistant reply re-sent in `growing` histories; should equal
    /// what the upstream answers.
    #[arg(long, default_value = DEFAULT_REPLY)]
    reply: String,
    /// For `growing`: continue where an earlier run with the same `--seed`
    /// stopped after sending this many requests (its `scheduled`).
    #[arg(long, default_value_t = 0)]
    skip: u64,
    /// Model name in generated bodies.
    #[arg(long, default_value = "bench-model")]
    model: String,
    #[arg(long, default_value = "Bearer sk-bench")]
    authorization: String,
    /// More request headers, `name: value`, repeatable (Anthropic's
    /// `anthropic-version`, say).
    #[arg(long = "header", value_name = "NAME: VALUE")]
    headers: Vec<String>,
    /// Runtime worker threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
}

struct Job {
    scheduled: Instant,
    body: Bytes,
}

/// Bodies of `growing`: per slot, the JSON of the messages sent so far.
struct Growing {
    head: String,
    /// Set: each conversation's system prompt ends with its own id, so
    /// each is a conversation of its own, not a branch of a shared one.
    model: Option<String>,
    reply: String,
    slots: Vec<Slot>,
    next: usize,
    seed: u64,
    max_turns: usize,
}

struct Slot {
    generation: u64,
    turn: usize,
    /// `,{user},{assistant}…` of the turns before `turn`.
    messages: Vec<u8>,
}

impl Growing {
    fn new(args: &Args, seed: u64) -> Self {
        let system = json!({"role": "system", "content": SYSTEM});
        let head = format!(r#"{{"model":{},"messages":[{}"#, json!(args.model), system);
        let model = args
            .system_per_conversation
            .then(|| json!(args.model).to_string());
        let reply = format!(
            ",{}",
            json!({"role": "assistant", "content": args.reply.as_str()})
        );
        let mut growing = Growing {
            head,
            model,
            reply,
            slots: Vec::new(),
            next: 0,
            seed,
            max_turns: args.max_turns.max(1),
        };
        let count = args.conversations.max(1);
        for index in 0..count {
            let mut slot = Slot {
                generation: 0,
                turn: 0,
                messages: Vec::new(),
            };
            let start = if args.no_stagger {
                0
            } else {
                index * growing.max_turns / count
            };
            for _ in 0..start {
                growing.advance(index, &mut slot);
            }
            growing.slots.push(slot);
        }
        growing
    }

    fn user_message(&self, index: usize, slot: &Slot) -> String {
        let topic = USER_TOPICS[(index + slot.turn) % USER_TOPICS.len()];
        let text = if slot.turn == 0 {
            format!(
                "Conversation {}-{}-{}: we are reviewing a service written in Rust. \
                 Start with {topic}: read the code, tell me what it does, and list what \
                 you would change first. Keep the answer short; we go one module at a time.",
                self.seed, index, slot.generation
            )
        } else {
            format!(
                "Step {}: good. Now look at {topic}. Check the error handling, the tests \
                 that cover it, and whether anything allocates per request. Make the \
                 smallest change that fixes what you find and tell me what you changed.",
                slot.turn
            )
        };
        json!({"role": "user", "content": text}).to_string()
    }

    /// Records turn `slot.turn` as sent and answered.
    fn advance(&self, index: usize, slot: &mut Slot) {
        let user = self.user_message(index, slot);
        slot.messages.push(b',');
        slot.messages.extend_from_slice(user.as_bytes());
        slot.messages.extend_from_slice(self.reply.as_bytes());
        slot.turn += 1;
        if slot.turn >= self.max_turns {
            slot.generation += 1;
            slot.turn = 0;
            slot.messages.clear();
        }
    }

    /// The next slot, taken out of `slots` until it is put back.
    fn take_next(&mut self) -> (usize, Slot) {
        let index = self.next;
        self.next = (self.next + 1) % self.slots.len();
        let slot = std::mem::replace(
            &mut self.slots[index],
            Slot {
                generation: 0,
                turn: 0,
                messages: Vec::new(),
            },
        );
        (index, slot)
    }

    /// Moves on as if `count` bodies had been sent (by an earlier run with
    /// the same seed, e.g. a warm-up).
    fn skip(&mut self, count: u64) {
        for _ in 0..count {
            let (index, mut slot) = self.take_next();
            self.advance(index, &mut slot);
            self.slots[index] = slot;
        }
    }

    fn next_body(&mut self) -> Bytes {
        let (index, mut slot) = self.take_next();
        let user = self.user_message(index, &slot);
        let head = match &self.model {
            None => self.head.clone(),
            Some(model) => {
                let system = format!(
                    "{SYSTEM} Session {}-{}-{}.",
                    self.seed, index, slot.generation
                );
                let system = json!({"role": "system", "content": system});
                format!(r#"{{"model":{model},"messages":[{system}"#)
            }
        };
        let mut body = Vec::with_capacity(head.len() + slot.messages.len() + user.len() + 4);
        body.extend_from_slice(head.as_bytes());
        body.extend_from_slice(&slot.messages);
        body.push(b',');
        body.extend_from_slice(user.as_bytes());
        body.extend_from_slice(b"]}");
        self.advance(index, &mut slot);
        self.slots[index] = slot;
        Bytes::from(body)
    }
}

enum Bodies {
    Fixed(Bytes),
    Growing(Box<Growing>),
}

impl Bodies {
    fn next(&mut self) -> Bytes {
        match self {
            Bodies::Fixed(body) => body.clone(),
            Bodies::Growing(growing) => growing.next_body(),
        }
    }
}

/// What one connection saw.
struct Stats {
    latency: Histogram<u64>,
    service: Histogram<u64>,
    lag: Histogram<u64>,
    ok: u64,
    /// Of `ok`, answers the proxy served without storing.
    degraded: u64,
    status_errors: u64,
    transport_errors: u64,
    abandoned: u64,
    connects: u64,
    bytes_sent: u64,
    last_ok: Option<Instant>,
}

impl Stats {
    fn new() -> Self {
        let histogram = || {
            Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")
        };
        Stats {
            latency: histogram(),
            service: histogram(),
            lag: histogram(),
            ok: 0,
            degraded: 0,
            status_errors: 0,
            transport_errors: 0,
            abandoned: 0,
            connects: 0,
            bytes_sent: 0,
            last_ok: None,
        }
    }

    fn merge(&mut self, other: &Stats) {
        self.latency.add(&other.latency).expect("same bounds");
        self.service.add(&other.service).expect("same bounds");
        self.lag.add(&other.lag).expect("same bounds");
        self.ok += other.ok;
        self.degraded += other.degraded;
        self.status_errors += other.status_errors;
        self.transport_errors += other.transport_errors;
        self.abandoned += other.abandoned;
        self.connects += other.connects;
        self.bytes_sent += other.bytes_sent;
        self.last_ok = self.last_ok.max(other.last_ok);
    }
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

struct Target {
    address: String,
    host: String,
    path: String,
    authorization: String,
    headers: Vec<(String, String)>,
}

fn parse_url(url: &str, authorization: String, headers: &[String]) -> Result<Target, String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{url}: only http:// URLs"))?;
    let (host, path) = match rest.find('/') {
        Some(slash) => (&rest[..slash], &rest[slash..]),
        None => (rest, "/"),
    };
    let address = if host.contains(':') {
        host.to_string()
    } else {
        format!("{host}:80")
    };
    Ok(Target {
        address,
        host: host.to_string(),
        path: path.to_string(),
        authorization,
        headers: headers
            .iter()
            .map(|header| parse_header(header))
            .collect::<Result<_, _>>()?,
    })
}

fn parse_header(header: &str) -> Result<(String, String), String> {
    let (name, value) = header
        .split_once(':')
        .ok_or_else(|| format!("--header {header}: expected `name: value`"))?;
    Ok((name.trim().to_string(), value.trim().to_string()))
}

/// Connection failures reported on stderr so far (the first few only).
static CONNECT_FAILURES: AtomicU64 = AtomicU64::new(0);

async fn connect(target: &Target, stats: &mut Stats) -> Option<http1::SendRequest<Full<Bytes>>> {
    let stream = match TcpStream::connect(&target.address).await {
        Ok(stream) => stream,
        Err(error) => {
            if CONNECT_FAILURES.fetch_add(1, Ordering::Relaxed) < 3 {
                eprintln!("loadgen: connect {}: {error}", target.address);
            }
            return None;
        }
    };
    let _ = stream.set_nodelay(true);
    let (sender, connection) = match http1::handshake(TokioIo::new(stream)).await {
        Ok(pair) => pair,
        Err(error) => {
            eprintln!("loadgen: handshake: {error}");
            return None;
        }
    };
    tokio::spawn(connection);
    stats.connects += 1;
    Some(sender)
}

enum Outcome {
    /// A 2xx answer; `degraded` when the proxy said it did not store the
    /// request (`x-condenser-degraded`): served, but not the work measured.
    Ok {
        degraded: bool,
    },
    Status(u16),
    Transport(String),
}

async fn exchange(
    sender: &mut http1::SendRequest<Full<Bytes>>,
    target: &Target,
    body: Bytes,
) -> Outcome {
    let mut request = hyper::Request::post(target.path.as_str())
        .header(HOST, target.host.as_str())
        .header(CONTENT_TYPE, "application/json")
        .header(AUTHORIZATION, target.authorization.as_str());
    for (name, value) in &target.headers {
        request = request.header(name.as_str(), value.as_str());
    }
    let request = match request.body(Full::new(body)) {
        Ok(request) => request,
        Err(error) => return Outcome::Transport(error.to_string()),
    };
    let response = match sender.send_request(request).await {
        Ok(response) => response,
        Err(error) => return Outcome::Transport(error.to_string()),
    };
    let status = response.status();
    let degraded = response.headers().contains_key("x-condenser-degraded");
    match response.into_body().collect().await {
        Ok(_) if status.is_success() => Outcome::Ok { degraded },
        Ok(_) => Outcome::Status(status.as_u16()),
        Err(error) => Outcome::Transport(error.to_string()),
    }
}

async fn worker(
    target: Arc<Target>,
    jobs: Arc<Mutex<mpsc::UnboundedReceiver<Job>>>,
    ready: Arc<Barrier>,
    deadline: Arc<std::sync::OnceLock<Instant>>,
) -> Stats {
    let mut stats = Stats::new();
    let mut sender = connect(&target, &mut stats).await;
    ready.wait().await;
    let mut reported = 0;
    loop {
        let job = jobs.lock().await.recv().await;
        let Some(job) = job else { break };
        let deadline = *deadline.get().expect("set before the first job");
        let now = Instant::now();
        if now >= deadline {
            stats.abandoned += 1;
            stats.latency.saturating_record(micros(now - job.scheduled));
            continue;
        }
        // A connection the server closed (or never opened) is replaced.
        if let Some(open) = &mut sender {
            if open.ready().await.is_err() {
                sender = None;
            }
        }
        if sender.is_none() {
            sender = connect(&target, &mut stats).await;
        }
        let Some(open) = &mut sender else {
            stats.transport_errors += 1;
            stats
                .latency
                .saturating_record(micros(Instant::now() - job.scheduled));
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let sent = Instant::now();
        stats.bytes_sent += job.body.len() as u64;
        let outcome =
            tokio::time::timeout_at(deadline.into(), exchange(open, &target, job.body)).await;
        let done = Instant::now();
        stats
            .latency
            .saturating_record(micros(done - job.scheduled));
        stats.service.saturating_record(micros(done - sent));
        stats.lag.saturating_record(micros(sent - job.scheduled));
        match outcome {
            Ok(Outcome::Ok { degraded }) => {
                stats.ok += 1;
                stats.degraded += u64::from(degraded);
                stats.last_ok = Some(done);
            }
            Ok(Outcome::Status(status)) => {
                stats.status_errors += 1;
                if reported < 3 {
                    eprintln!("loadgen: status {status}");
                    reported += 1;
                }
            }
            Ok(Outcome::Transport(error)) => {
                stats.transport_errors += 1;
                sender = None;
                if reported < 3 {
                    eprintln!("loadgen: {error}");
                    reported += 1;
                }
            }
            Err(_) => {
                stats.abandoned += 1;
                sender = None;
            }
        }
    }
    stats
}

/// This process's user+system CPU time, from /proc/self/stat.
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // Fields 14 and 15 of the file; the 12th and 13th after the command.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    let per_second: u64 = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(100);
    Some(Duration::from_micros(ticks * 1_000_000 / per_second))
}

fn summary(histogram: &Histogram<u64>) -> serde_json::Value {
    if histogram.is_empty() {
        return json!(null);
    }
    json!({
        "p50": histogram.value_at_quantile(0.50),
        "p90": histogram.value_at_quantile(0.90),
        "p99": histogram.value_at_quantile(0.99),
        "p999": histogram.value_at_quantile(0.999),
        "max": histogram.max(),
        "mean": (histogram.mean() * 10.0).round() / 10.0,
    })
}

fn main() -> Result<(), String> {
    let args = Args::parse();
    if args.rate.is_nan()
        || args.rate <= 0.0
        || args.duration.is_nan()
        || args.duration <= 0.0
        || args.connections == 0
    {
        return Err("--rate, --duration and --connections must be positive".into());
    }
    let target = Arc::new(parse_url(
        &args.url,
        args.authorization.clone(),
        &args.headers,
    )?);
    let seed = args.seed.unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|t| t.as_nanos() as u64 % 1_000_000_000_000)
            .unwrap_or(0)
    });
    let mut bodies = match args.workload {
        Workload::Fixed => {
            let path = args.body.as_ref().ok_or("--workload fixed needs --body")?;
            let body = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
            Bodies::Fixed(Bytes::from(body))
        }
        Workload::Growing => {
            let mut growing = Growing::new(&args, seed);
            growing.skip(args.skip);
            Bodies::Growing(Box::new(growing))
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let cpu_before = cpu_time();

    let (queue, jobs) = mpsc::unbounded_channel::<Job>();
    let jobs = Arc::new(Mutex::new(jobs));
    let ready = Arc::new(Barrier::new(args.connections + 1));
    let deadline = Arc::new(std::sync::OnceLock::new());
    let workers: Vec<_> = (0..args.connections)
        .map(|_| {
            runtime.spawn(worker(
                target.clone(),
                jobs.clone(),
                ready.clone(),
                deadline.clone(),
            ))
        })
        .collect();
    runtime.block_on(ready.wait());

    let interval = Duration::from_secs_f64(1.0 / args.rate);
    let total = (args.rate * args.duration).round() as u64;
    let start = Instant::now() + Duration::from_millis(5);
    let _ = deadline.set(start + Duration::from_secs_f64(args.duration + args.drain));
    let mut scheduled = 0u64;
    let mut sizes = (u64::MAX, 0u64, 0u64); // min, max, sum
    for index in 0..total {
        let body = bodies.next();
        let len = body.len() as u64;
        sizes = (sizes.0.min(len), sizes.1.max(len), sizes.2 + len);
        let at = start + interval.mul_f64(index as f64);
        let now = Instant::now();
        if at > now {
            std::thread::sleep(at - now);
        }
        if queue
            .send(Job {
                scheduled: at,
                body,
            })
            .is_err()
        {
            break;
        }
        scheduled += 1;
    }
    drop(queue);

    let mut stats = Stats::new();
    for handle in workers {
        let worker_stats = runtime
            .block_on(handle)
            .map_err(|e| format!("worker: {e}"))?;
        stats.merge(&worker_stats);
    }
    let cpu_ms = match (cpu_before, cpu_time()) {
        (Some(before), Some(after)) => json!((after.saturating_sub(before)).as_millis() as u64),
        _ => json!(null),
    };
    let elapsed = stats
        .last_ok
        .map(|last| (last - start).as_secs_f64())
        .unwrap_or(args.duration)
        .max(args.duration);
    let errors = stats.status_errors + stats.transport_errors + stats.abandoned;
    let report = json!({
        "url": args.url,
        "workload": match args.workload { Workload::Fixed => "fixed", Workload::Growing => "growing" },
        "seed": seed,
        "offered_rate": args.rate,
        "duration_s": args.duration,
        "connections": args.connections,
        "scheduled": scheduled,
        "ok": stats.ok,
        "degraded": stats.degraded,
        "errors": errors,
        "status_errors": stats.status_errors,
        "transport_errors": stats.transport_errors,
        "abandoned": stats.abandoned,
        "connects": stats.connects,
        "bytes_sent": stats.bytes_sent,
        "elapsed_s": (elapsed * 1000.0).round() / 1000.0,
        "achieved_rate": ((stats.ok as f64 / elapsed) * 10.0).round() / 10.0,
        "latency_us": summary(&stats.latency),
        "service_us": summary(&stats.service),
        "send_lag_us": summary(&stats.lag),
        "body_bytes": {
            "min": if scheduled > 0 { sizes.0 } else { 0 },
            "max": sizes.1,
            "mean": sizes.2.checked_div(scheduled).unwrap_or(0),
        },
        "loadgen_cpu_ms": cpu_ms,
    });
    println!("{report}");
    runtime.shutdown_timeout(Duration::from_millis(100));
    Ok(())
}
