//! Token estimates. Where an upstream has told us the real count of a
//! request (an overflow error, `usage`), estimates scale by that ratio;
//! otherwise about four bytes of JSON make a token for the languages and
//! tokenizers Condenser meets.

/// Bytes per token when nothing better is known.
pub const DEFAULT_BYTES_PER_TOKEN: f64 = 4.0;

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
        let rate = tokens as f64 / bytes as f64;
        Self {
            tokens_per_byte: rate.clamp(0.05, 1.0),
        }
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
}
