//! Beside the flow, the command line.
//!
//! Command line: `condenser [serve]`, `check-config`, `migrate`,
//! `healthcheck`, `conversations list|show|delete`, `tenants delete`. Flags are the last configuration layer.

pub mod commands;
pub mod render;

use crate::config::LogFormat;
use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "condenser",
    version,
    about = "A context-compacting reverse proxy for LLM APIs"
)]
pub struct Cli {
    /// Configuration file (default: config/default.toml when present).
    #[arg(long, global = true)]
    pub config: Option<PathBuf>,
    /// Address to listen on (CONDENSER_LISTEN).
    #[arg(long, global = true)]
    pub listen: Option<String>,
    /// sqlite://FILE or postgres://… (DATABASE_URL).
    #[arg(long, global = true)]
    pub database_url: Option<String>,
    /// Log format (CONDENSER_LOG_FORMAT).
    #[arg(long, global = true, value_enum)]
    pub log_format: Option<LogFormat>,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the proxy (the default).
    Serve,
    /// Load and validate the configuration, print it, and exit.
    CheckConfig,
    /// Apply database migrations and exit.
    Migrate,
    /// Ask a running instance's /healthz (at the configured listen address)
    /// and exit 0 when it answers 200: a container HEALTHCHECK without curl.
    Healthcheck,
    /// Inspect or delete stored conversations.
    #[command(subcommand)]
    Conversations(ConversationsCommand),
    /// Delete what is stored for one credential.
    #[command(subcommand)]
    Tenants(TenantsCommand),
}

#[derive(Debug, Subcommand)]
pub enum TenantsCommand {
    /// Delete every conversation, compaction and figure stored under the
    /// digest of the credential read from standard input (as sent in
    /// `x-api-key`, or in `Authorization` with or without `Bearer `).
    Delete,
}

#[derive(Debug, Subcommand)]
pub enum ConversationsCommand {
    /// The most recent conversations.
    List {
        #[arg(long, default_value_t = 50)]
        limit: i64,
    },
    /// One conversation: its figures, the newest messages of its tree by
    /// position (roles, sizes, branches, compaction points), and its
    /// newest compactions and requests, a page at a time.
    Show {
        /// A prefix of the conversation's id, as `conversations list` prints it.
        id: String,
        /// How many of the newest positions of its tree to show.
        #[arg(long, default_value_t = 200)]
        messages: i64,
        /// Compactions and requests per page.
        #[arg(long, default_value_t = 20)]
        limit: i64,
        /// Which page of compactions and requests: 1 is the newest.
        #[arg(long, default_value_t = 1)]
        page: i64,
    },
    /// Delete one conversation with its compactions and figures: the
    /// messages it shares with another conversation (a system prompt, an
    /// identical opening) stay for that one.
    Delete {
        /// A prefix of the conversation's id, as `conversations list` prints it.
        id: String,
    },
}

impl Cli {
    /// Flags as configuration overrides, by setting key.
    pub fn overrides(&self) -> Vec<(&'static str, String)> {
        let mut overrides = Vec::new();
        if let Some(listen) = &self.listen {
            overrides.push(("listen", listen.clone()));
        }
        if let Some(url) = &self.database_url {
            overrides.push(("database_url", url.clone()));
        }
        if let Some(format) = self.log_format {
            let name = match format {
                LogFormat::Human => "human",
                LogFormat::Json => "json",
            };
            overrides.push(("log_format", name.to_string()));
        }
        overrides
    }
}
