//! Beside the flow, configuration.
//!
//! Settings, layered: built-in defaults < `config/default.toml` (or
//! `--config FILE`) < environment < command-line flags.
//!
//! Generic environment overrides use `CONDENSER__SECTION__KEY`; the names
//! users and tests rely on (`CONDENSER_LISTEN`, `DATABASE_URL`, …) are explicit
//! aliases listed in [`ENV_ALIASES`].

mod defaults;
mod redact;
mod secret;
mod server;
mod upstreams;
mod validate;

use crate::overflow::CustomSignature;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use secret::Secret;
pub use server::{ServerSettings, BODY_EXPANSION};
pub use upstreams::{LegacySection, NativeCompaction, UpstreamSettings, UpstreamTable};
pub use validate::ConfigError;

/// Documented environment variables and the setting each one sets.
pub const ENV_ALIASES: &[(&str, &str)] = &[
    ("CONDENSER_LISTEN", "listen"),
    ("DATABASE_URL", "database_url"),
    ("CONDENSER_OPENAI_BASE_URL", "openai_base_url"),
    ("CONDENSER_ANTHROPIC_BASE_URL", "anthropic_base_url"),
    ("CONDENSER_OLLAMA_BASE_URL", "ollama.base_url"),
    ("CONDENSER_GEMINI_BASE_URL", "gemini_base_url"),
    ("CONDENSER_LOG_FORMAT", "log_format"),
    ("CONDENSER_MAX_COMPACTIONS", "compaction.max_compactions"),
    (
        "CONDENSER_SUMMARY_MAX_TOKENS",
        "compaction.summary_max_tokens",
    ),
    ("CONDENSER_SUMMARY_MODEL", "compaction.summary_model"),
    ("CONDENSER_TENANT_SALT", "storage.tenant_salt"),
    ("CONDENSER_ADMIN_TOKEN", "admin_token"),
    ("CONDENSER_ITEM_KEY", "compaction.item_key"),
];

/// Where the default config file is looked for, relative to the working directory.
pub const DEFAULT_CONFIG_FILE: &str = "config/default.toml";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    #[serde(default = "defaults::listen")]
    pub listen: SocketAddr,
    #[serde(default = "defaults::database_url")]
    pub database_url: String,
    /// Every upstream, one `[upstreams.NAME]` table each (`upstreams`).
    #[serde(default, deserialize_with = "upstreams::tables")]
    pub upstreams: Vec<UpstreamTable>,
    /// Older keys for the providers' own upstreams, still read; the
    /// `[upstreams.NAME]` table wins over them.
    #[serde(default)]
    pub openai_base_url: Option<String>,
    #[serde(default)]
    pub anthropic_base_url: Option<String>,
    #[serde(default)]
    pub gemini_base_url: Option<String>,
    #[serde(default)]
    pub ollama: Option<LegacySection>,
    #[serde(default)]
    pub log_format: LogFormat,
    #[serde(default = "defaults::max_body_bytes")]
    pub max_body_bytes: usize,
    #[serde(default = "defaults::shutdown_grace", with = "humantime_serde")]
    pub shutdown_grace: Duration,
    #[serde(default)]
    pub server: ServerSettings,
    #[serde(default)]
    pub timeouts: Timeouts,
    #[serde(default)]
    pub storage: StorageSettings,
    #[serde(default)]
    pub compaction: CompactionSettings,
    /// Overflow signatures added to the built-in table.
    #[serde(default)]
    pub overflow_signatures: Vec<CustomSignature>,
    /// Known context windows in tokens, by model name.
    #[serde(default)]
    pub context_windows: BTreeMap<String, u64>,
    /// Opens the operator page at `/admin/`; unset (or empty), it is a 404.
    #[serde(default)]
    pub admin_token: Option<Secret>,
    /// How long an operator page session lasts after logging in.
    #[serde(default = "defaults::admin_session_ttl", with = "humantime_serde")]
    pub admin_session_ttl: Duration,
    /// What exported traces carry. Export itself is configured by the
    /// standard `OTEL_*` variables (README, "Traces").
    #[serde(default)]
    pub traces: TraceSettings,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceSettings {
    /// Message content in spans (`gen_ai.input.messages`,
    /// `gen_ai.system_instructions`, `gen_ai.output.messages`): off unless
    /// set, as the GenAI conventions recommend.
    #[serde(default)]
    pub capture_message_content: bool,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Human,
    Json,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Timeouts {
    #[serde(default = "defaults::connect_timeout", with = "humantime_serde")]
    pub connect: Duration,
    /// From sending the request to the upstream's response headers.
    #[serde(default = "defaults::first_byte_timeout", with = "humantime_serde")]
    pub first_byte: Duration,
    /// Longest silence allowed between two chunks of a response body.
    #[serde(default = "defaults::idle_timeout", with = "humantime_serde")]
    pub idle: Duration,
    /// How long an unused upstream connection is kept for reuse.
    #[serde(default = "defaults::pool_idle_timeout", with = "humantime_serde")]
    pub pool_idle: Duration,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageSettings {
    #[serde(default = "defaults::max_connections")]
    pub max_connections: u32,
    #[serde(default = "defaults::acquire_timeout", with = "humantime_serde")]
    pub acquire_timeout: Duration,
    /// Start (degraded, forwarding without storing) when the database is down at start-up.
    #[serde(default)]
    pub allow_degraded_start: bool,
    /// While the database is down, how often a warning is logged and a reconnect tried.
    #[serde(default = "defaults::degraded_retry", with = "humantime_serde")]
    pub degraded_retry: Duration,
    /// Mixed into tenant digests so they mean nothing outside this deployment.
    #[serde(default)]
    pub tenant_salt: String,
    /// Conversations idle longer than this are deleted; unset keeps them.
    #[serde(default, with = "humantime_serde")]
    pub retention: Option<Duration>,
    /// Dead-end branches whose every message is older than this are
    /// deleted; unset keeps them.
    #[serde(default, with = "humantime_serde")]
    pub prune_branches_after: Option<Duration>,
    /// How often one instance runs retention and pruning.
    #[serde(default = "defaults::maintenance_interval", with = "humantime_serde")]
    pub maintenance_interval: Duration,
    /// Bytes of messages waiting to be written; past it a request is
    /// forwarded unstored (degraded) and its next request stores them.
    #[serde(default = "defaults::write_queue_bytes")]
    pub write_queue_bytes: usize,
    /// How long a group commit gathers writes before it is made: longer
    /// is fewer commits, shorter is less lost in a crash.
    #[serde(default = "defaults::write_linger", with = "humantime_serde")]
    pub write_linger: Duration,
    /// On shutdown, how long what is queued may take to be written once
    /// the requests in flight are done, or `shutdown_grace` is over.
    #[serde(default = "defaults::flush_deadline", with = "humantime_serde")]
    pub flush_deadline: Duration,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompactionSettings {
    #[serde(default = "defaults::max_compactions")]
    pub max_compactions: u32,
    #[serde(default = "defaults::summary_max_tokens")]
    pub summary_max_tokens: u64,
    /// Model for summary calls; unset (or empty) means the request's own.
    #[serde(default, deserialize_with = "non_empty")]
    pub summary_model: Option<String>,
    /// Role of the inserted summary message.
    #[serde(default = "defaults::summary_role")]
    pub summary_role: String,
    /// Share of the context window the kept history may fill after a compaction.
    #[serde(default = "defaults::keep_share")]
    pub keep_share: f64,
    /// Turns of the conversation's measured growth a compaction leaves
    /// room for before the next one is due (0: as much tail as fits).
    #[serde(default = "defaults::headroom_turns")]
    pub headroom_turns: u32,
    /// Interval of SSE keep-alive comments while a summary is written (0 disables).
    #[serde(default = "defaults::keepalive_interval", with = "humantime_serde")]
    pub keepalive_interval: Duration,
    /// How long a summarizer's claim on a prefix lasts before another may take over.
    #[serde(default = "defaults::lease_ttl", with = "humantime_serde")]
    pub lease_ttl: Duration,
    /// Longest a summary call may take.
    #[serde(default = "defaults::summary_timeout", with = "humantime_serde")]
    pub summary_timeout: Duration,
    /// Summary calls one compaction may make; a larger part to summarize
    /// has its largest entries cut to fit.
    #[serde(default = "defaults::max_summary_calls")]
    pub max_summary_calls: u32,
    /// Share of a known window past which a request is compacted before it
    /// is sent: 1.0 compacts only what the upstream would certainly refuse.
    #[serde(default = "defaults::proactive_threshold")]
    pub proactive_threshold: f64,
    /// The key Condenser's compaction items are authenticated with (README
    /// "Native compaction"); unset, one is generated once and kept in the
    /// database, shared by every instance.
    #[serde(default)]
    pub item_key: Option<Secret>,
}

impl Settings {
    /// Loads the layers. `overrides` are (key, value) pairs from flags, applied last.
    pub fn load(file: Option<&Path>, overrides: &[(&str, String)]) -> Result<Self, ConfigError> {
        let mut builder = config::Config::builder();
        builder = match file {
            Some(path) => builder.add_source(config::File::from(path.to_path_buf()).required(true)),
            None => builder
                .add_source(config::File::from(PathBuf::from(DEFAULT_CONFIG_FILE)).required(false)),
        };
        builder = builder.add_source(
            config::Environment::with_prefix("CONDENSER")
                .prefix_separator("__")
                .separator("__")
                .try_parsing(true),
        );
        for (env_name, key) in ENV_ALIASES {
            builder = builder
                .set_override_option(*key, std::env::var(env_name).ok())
                .map_err(ConfigError::load)?;
        }
        for (key, value) in overrides {
            builder = builder
                .set_override(*key, value.as_str())
                .map_err(ConfigError::load)?;
        }
        let layered = builder.build().map_err(ConfigError::load)?;
        let settings: Settings =
            serde_path_to_error::deserialize(layered).map_err(ConfigError::field)?;
        settings.validate()?;
        Ok(settings)
    }
}

/// An optional string where an empty one, as an empty environment variable
/// gives, means unset.
fn non_empty<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<String>, D::Error> {
    let value: Option<String> = Option::deserialize(deserializer)?;
    Ok(value.filter(|text| !text.is_empty()))
}
