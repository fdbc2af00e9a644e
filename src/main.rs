//! Beside the flow, the process: the entry point.
//!
//! Thin entry point: parse flags, load settings, start telemetry (logs,
//! and traces when an OTLP endpoint is set), run, flush the traces.

use clap::Parser;
use condenser::app::Application;
use condenser::cli::{Cli, Command};
use condenser::config::Settings;
use condenser::telemetry::Traces;
use std::process::ExitCode;

/// mimalloc returns freed memory to the system within moments; glibc's
/// allocator kept hundreds of MB after a burst of large bodies (see
/// README, "Memory").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let settings = match Settings::load(cli.config.as_deref(), &cli.overrides()) {
        Ok(settings) => settings,
        Err(error) => {
            eprintln!("condenser: {error}");
            return ExitCode::from(2);
        }
    };
    let command = cli.command.unwrap_or(Command::Serve);
    // Traces are the server's: the other commands export none.
    let traces = match command {
        Command::Serve => match Traces::from_env() {
            Ok(traces) => traces,
            Err(error) => {
                eprintln!("condenser: {error}");
                return ExitCode::from(2);
            }
        },
        _ => None,
    };
    condenser::telemetry::capture_content(settings.traces.capture_message_content);
    let subscriber = condenser::telemetry::subscriber_with_traces(
        settings.log_format,
        "info",
        std::io::stderr,
        condenser::telemetry::stderr_takes_colors(),
        traces.as_ref(),
    );
    condenser::telemetry::init(subscriber);
    let ran = run(command, settings).await;
    // After the server drained: the last requests' spans are sent.
    if let Some(traces) = traces {
        traces.shutdown().await;
    }
    match ran {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("condenser: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(command: Command, settings: Settings) -> anyhow::Result<()> {
    match command {
        Command::Serve => {
            let app = Application::build(settings).await?;
            tracing::info!(address = %app.local_addr(), "condenser listening");
            app.run_until_stopped().await?;
        }
        Command::CheckConfig => {
            eprintln!("configuration is valid:\n{:#?}", settings.redacted());
            for upstream in settings.upstreams()? {
                let at = match upstream.path_prefix.as_str() {
                    "" => "/",
                    prefix => prefix,
                };
                eprintln!(
                    "upstream {} ({}) at {at} -> {}",
                    upstream.name, upstream.protocol, upstream.base_url
                );
            }
        }
        Command::Healthcheck => condenser::cli::commands::healthcheck(settings.listen).await?,
        Command::Migrate | Command::Conversations(_) | Command::Tenants(_) => {
            condenser::cli::commands::run(command, &settings).await?
        }
    }
    Ok(())
}
