//! Beside the flow, configuration: the listener.
//!
//! How the listening side treats clients: what a slow or idle one may hold.

use super::ConfigError;
use serde::Deserialize;
use std::time::Duration;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSettings {
    /// Longest wait for a request's head, from the first byte or from the
    /// end of the previous response on a kept-alive connection.
    #[serde(default = "header_read_timeout", with = "humantime_serde")]
    pub header_read_timeout: Duration,
    /// Longest silence while a request body is read.
    #[serde(default = "body_read_timeout", with = "humantime_serde")]
    pub body_read_timeout: Duration,
    /// Client connections open at once; more wait in the listen backlog.
    #[serde(default = "max_connections")]
    pub max_connections: usize,
}

/// hyper's own default, which only takes effect with a timer set.
fn header_read_timeout() -> Duration {
    Duration::from_secs(30)
}
/// nginx's `client_body_timeout`.
fn body_read_timeout() -> Duration {
    Duration::from_secs(60)
}
/// Lowered at start to what the file-descriptor limit allows.
fn max_connections() -> usize {
    4096
}

impl Default for ServerSettings {
    fn default() -> Self {
        Self {
            header_read_timeout: header_read_timeout(),
            body_read_timeout: body_read_timeout(),
            max_connections: max_connections(),
        }
    }
}

impl ServerSettings {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.max_connections == 0 {
            return Err(ConfigError::invalid(
                "server.max_connections",
                "must be at least 1",
            ));
        }
        for (key, value) in [
            ("server.header_read_timeout", self.header_read_timeout),
            ("server.body_read_timeout", self.body_read_timeout),
        ] {
            if value.is_zero() {
                return Err(ConfigError::invalid(key, "must be longer than 0s"));
            }
        }
        Ok(())
    }
}
