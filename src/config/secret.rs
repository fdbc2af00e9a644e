//! Beside the flow, configuration: secrets.
//!
//! A setting that must never be printed (`check-config` prints the rest).

use serde::Deserialize;
use std::fmt;

#[derive(Clone, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// The value, for the one place that compares it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([redacted])")
    }
}
