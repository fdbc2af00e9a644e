//! The fake upstream as a process, for benchmarks and manual trials.

use clap::Parser;
use fake_upstream::{FakeConfig, FakeUpstream};
use std::net::SocketAddr;
use std::time::Duration;

#[derive(Parser)]
#[command(about = "A strict stand-in for the OpenAI and Anthropic APIs")]
struct Args {
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Context window of models without their own.
    #[arg(long, default_value_t = 8192)]
    context_window: u64,
    /// A model's own window, as `model=tokens`; repeatable.
    #[arg(long = "window", value_parser = parse_window)]
    windows: Vec<(String, u64)>,
    /// Recognize summary calls and check summary placement.
    #[arg(long)]
    summary_marker: Option<String>,
    #[arg(long, default_value_t = 0)]
    first_byte_delay_ms: u64,
    #[arg(long, default_value_t = 0)]
    chunk_delay_ms: u64,
    /// Extra delay before answering a summary call (a summarizer's latency).
    #[arg(long, default_value_t = 0)]
    summary_delay_ms: u64,
    #[arg(long, default_value_t = 4)]
    stream_chunks: usize,
    /// Do not keep a log of requests (benchmarks).
    #[arg(long)]
    no_record: bool,
    /// Serve the Responses API's WebSocket mode on `/v1/responses`.
    #[arg(long)]
    responses_websocket: bool,
}

fn parse_window(value: &str) -> Result<(String, u64), String> {
    let (model, tokens) = value.split_once('=').ok_or("expected model=tokens")?;
    Ok((
        model.to_string(),
        tokens.parse().map_err(|e| format!("{e}"))?,
    ))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let config = FakeConfig {
        default_context_window: args.context_window,
        context_windows: args.windows.into_iter().collect(),
        summary_marker: args.summary_marker,
        first_byte_delay: Duration::from_millis(args.first_byte_delay_ms),
        chunk_delay: Duration::from_millis(args.chunk_delay_ms),
        summary_delay: Duration::from_millis(args.summary_delay_ms),
        stream_chunks: args.stream_chunks,
        record_requests: !args.no_record,
        responses_websocket: args.responses_websocket,
        ..FakeConfig::default()
    };
    let upstream = FakeUpstream::start_on(config, args.listen).await?;
    // The one line scripts wait for.
    #[allow(clippy::print_stdout)]
    {
        println!("listening on {}", upstream.addr());
    }
    tokio::signal::ctrl_c().await?;
    Ok(())
}
