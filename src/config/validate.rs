//! Beside the flow, configuration: validation.
//!
//! Checks that need more than types, run once at start-up so a bad setting
//! fails there with one line naming the key, not at the first request.

use super::{CompactionSettings, Settings};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("configuration: {0}")]
    Load(String),
    #[error("configuration: {key}: {problem}")]
    Invalid { key: String, problem: String },
}

impl ConfigError {
    pub(super) fn load(error: config::ConfigError) -> Self {
        Self::Load(error.to_string())
    }

    pub(super) fn field(error: serde_path_to_error::Error<config::ConfigError>) -> Self {
        let key = error.path().to_string();
        let problem = error.into_inner().to_string();
        Self::Invalid { key, problem }
    }

    pub(super) fn invalid(key: impl Into<String>, problem: impl Into<String>) -> Self {
        Self::Invalid {
            key: key.into(),
            problem: problem.into(),
        }
    }
}

impl Settings {
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_database_url(&self.database_url)?;
        self.validate_upstreams()?;
        self.server.validate(self.max_body_bytes)?;
        self.compaction.validate()?;
        if self.max_body_bytes < 1024 {
            return Err(ConfigError::invalid(
                "max_body_bytes",
                "must be at least 1024",
            ));
        }
        self.validate_operations()?;
        crate::overflow::SignatureTable::with_custom(&self.overflow_signatures)
            .map_err(|error| ConfigError::invalid("overflow_signatures", error.to_string()))?;
        Ok(())
    }
}

impl CompactionSettings {
    fn validate(&self) -> Result<(), ConfigError> {
        let compaction = self;
        if compaction.max_compactions > 16 {
            return Err(ConfigError::invalid(
                "compaction.max_compactions",
                "must be at most 16",
            ));
        }
        if compaction.summary_max_tokens < 64 {
            return Err(ConfigError::invalid(
                "compaction.summary_max_tokens",
                "must be at least 64",
            ));
        }
        if !(0.05..=0.95).contains(&compaction.keep_share) {
            return Err(ConfigError::invalid(
                "compaction.keep_share",
                "must be between 0.05 and 0.95",
            ));
        }
        if compaction.headroom_turns > 10 {
            return Err(ConfigError::invalid(
                "compaction.headroom_turns",
                "must be at most 10",
            ));
        }
        if !(0.1..=1.0).contains(&compaction.proactive_threshold) {
            return Err(ConfigError::invalid(
                "compaction.proactive_threshold",
                "must be between 0.1 and 1.0 (a share of the window)",
            ));
        }
        let lease_ttl = compaction.lease_ttl;
        if !(Duration::from_secs(1)..=Duration::from_secs(600)).contains(&lease_ttl) {
            return Err(ConfigError::invalid(
                "compaction.lease_ttl",
                "must be between 1s and 10m: the summarizer renews it every third of it, \
                 and a crashed summarizer's conversation waits up to this long",
            ));
        }
        if compaction.max_summary_calls == 0 {
            return Err(ConfigError::invalid(
                "compaction.max_summary_calls",
                "must be at least 1",
            ));
        }
        if !["user", "system", "developer"].contains(&compaction.summary_role.as_str()) {
            return Err(ConfigError::invalid(
                "compaction.summary_role",
                "must be user, system or developer",
            ));
        }
        Ok(())
    }
}

impl Settings {
    fn validate_operations(&self) -> Result<(), ConfigError> {
        let token = self.admin_token.as_ref().map_or("", |t| t.expose());
        if !token.is_empty() && token.len() < 16 {
            return Err(ConfigError::invalid(
                "admin_token",
                "must be at least 16 characters",
            ));
        }
        let ttl = self.admin_session_ttl;
        if !(Duration::from_secs(1)..=Duration::from_secs(30 * 86_400)).contains(&ttl) {
            return Err(ConfigError::invalid(
                "admin_session_ttl",
                "must be between 1s and 30d",
            ));
        }
        if self.storage.maintenance_interval.is_zero() {
            return Err(ConfigError::invalid(
                "storage.maintenance_interval",
                "must be more than zero",
            ));
        }
        if self.storage.write_linger > Duration::from_secs(10) {
            return Err(ConfigError::invalid(
                "storage.write_linger",
                "must be at most 10s",
            ));
        }
        let flush = self.storage.flush_deadline;
        if !(Duration::from_millis(1)..=Duration::from_secs(600)).contains(&flush) {
            return Err(ConfigError::invalid(
                "storage.flush_deadline",
                "must be between 1ms and 10m",
            ));
        }
        Ok(())
    }
}

pub(super) fn check_base_url(key: &str, value: &str) -> Result<(), ConfigError> {
    let url = url::Url::parse(value)
        .map_err(|error| ConfigError::invalid(key, format!("{error} ({value:?})")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(ConfigError::invalid(
            key,
            format!("must be an http or https URL ({value:?})"),
        ));
    }
    if url.query().is_some() || !url.username().is_empty() || url.password().is_some() {
        return Err(ConfigError::invalid(
            key,
            "must not carry a query string or credentials",
        ));
    }
    Ok(())
}

fn check_database_url(value: &str) -> Result<(), ConfigError> {
    let known = ["sqlite:", "postgres://", "postgresql://"];
    if known.iter().any(|scheme| value.starts_with(scheme)) {
        return Ok(());
    }
    Err(ConfigError::invalid(
        "database_url",
        "must start with sqlite:, postgres:// or postgresql://",
    ))
}
