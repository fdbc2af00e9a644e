//! Steps 5 to 7, knowing sizes.
//!
//! Token estimates. Where an upstream has told us the real count of a
//! request (an overflow error, `usage`), estimates scale by that ratio;
//! otherwise about four bytes of JSON make a token for the languages and
//! tokenizers Condenser meets.

mod book;
pub mod evidence;
mod known;
mod rates;
pub mod sizes;
pub mod usage;
mod windows;

pub use book::{ModelSize, SizeBook, SizeSource};
pub use known::{documented_max_output, documented_window};
pub use sizes::Sizes;

/// Bytes per token when nothing better is known.
pub const DEFAULT_BYTES_PER_TOKEN: f64 = 4.0;

/// Weight of a lower `usage` observation in a model's running calibration.
/// A higher one is taken at once: estimates err high, so a request near the
/// window is compacted before sending rather than refused by the upstream.
const CALIBRATION_DECAY: f64 = 0.2;

pub fn estimate_bytes(bytes: usize) -> u64 {
    (bytes as f64 / DEFAULT_BYTES_PER_TOKEN).ceil() as u64
}

/// Converts bytes to tokens at a measured rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Calibration {
    tokens_per_byte: f64,
}

impl Default for Calibration {
    fn default() -> Self {
        Self {
            tokens_per_byte: 1.0 / DEFAULT_BYTES_PER_TOKEN,
        }
    }
}

impl Calibration {
    /// From a request of `bytes` bytes the upstream counted as `tokens`;
    /// clamped so one odd report cannot make estimates absurd.
    pub fn measured(tokens: u64, bytes: usize) -> Self {
        if bytes == 0 || tokens == 0 {
            return Self::default();
        }
        Self::from_rate(tokens as f64 / bytes as f64)
    }

    pub fn from_rate(tokens_per_byte: f64) -> Self {
        if !tokens_per_byte.is_finite() {
            return Self::default();
        }
        Self {
            tokens_per_byte: tokens_per_byte.clamp(0.05, 1.0),
        }
    }

    pub fn rate(&self) -> f64 {
        self.tokens_per_byte
    }

    /// This calibration after a new observation: up to a higher rate at
    /// once, part of the way down to a lower one.
    pub fn blended(self, observed: Calibration) -> Self {
        if observed.tokens_per_byte >= self.tokens_per_byte {
            return observed;
        }
        let rate = self.tokens_per_byte * (1.0 - CALIBRATION_DECAY)
            + observed.tokens_per_byte * CALIBRATION_DECAY;
        Self::from_rate(rate)
    }

    pub fn tokens(&self, bytes: usize) -> u64 {
        (bytes as f64 * self.tokens_per_byte).ceil() as u64
    }

    pub fn bytes(&self, tokens: u64) -> usize {
        (tokens as f64 / self.tokens_per_byte) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_measured_rate_converts_both_ways() {
        let calibration = Calibration::measured(1000, 3000);
        assert_eq!(calibration.tokens(300), 100);
        assert_eq!(calibration.bytes(100), 300);
        assert_eq!(Calibration::default().tokens(400), 100);
    }

    #[test]
    fn a_higher_rate_is_taken_at_once_and_a_lower_one_slowly() {
        let start = Calibration::from_rate(0.25);
        let higher = Calibration::from_rate(0.35);
        assert_eq!(start.blended(higher), higher);
        let lowered = higher.blended(start);
        assert!((lowered.rate() - 0.33).abs() < 1e-9, "{}", lowered.rate());
    }

    #[test]
    fn absurd_reports_are_clamped() {
        assert_eq!(Calibration::measured(10, 1).rate(), 1.0);
        assert_eq!(Calibration::measured(1, 1_000).rate(), 0.05);
        assert_eq!(Calibration::from_rate(f64::NAN), Calibration::default());
    }
}
