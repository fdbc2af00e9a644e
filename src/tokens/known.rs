//! Steps 5 to 7, knowing sizes: documented windows.
//!
//! Context windows documented for popular models, shipped with Condenser so
//! that a first overflow whose error states no numbers (the Responses API's)
//! is planned against the model's real window rather than a guess.
//!
//! The table is generated from LiteLLM's maintained
//! `model_prices_and_context_window.json` by `scripts/refresh-known-windows`;
//! it is documentation, not evidence from this upstream: configuration
//! overrides it, what the upstream reports corrects it, and it never makes
//! Condenser refuse a request (ARCHITECTURE.md "Knowing sizes").

use std::collections::HashMap;
use std::sync::LazyLock;

const TABLE: &str = include_str!("known_windows.tsv");

/// What the table documents of one model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Documented {
    max_input: u64,
    /// 0 when not documented.
    max_output: u64,
}

static MODELS: LazyLock<HashMap<&'static str, Documented>> = LazyLock::new(|| parse(TABLE));

/// The documented max input tokens of `model`, by the name clients send.
pub fn documented_window(model: &str) -> Option<u64> {
    MODELS.get(model).map(|m| m.max_input)
}

/// The documented max output tokens of `model`: a request asking for more
/// is refused ("max_tokens: 128001 > 64000, which is the maximum allowed
/// number of output tokens", anthropics/claude-code#24451).
pub fn documented_max_output(model: &str) -> Option<u64> {
    MODELS
        .get(model)
        .map(|m| m.max_output)
        .filter(|&tokens| tokens > 0)
}

fn parse(table: &str) -> HashMap<&str, Documented> {
    table
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let mut fields = line.split('\t');
            let model = fields.next()?;
            let max_input = fields.next()?.trim().parse().ok()?;
            let max_output = fields.next()?.trim().parse().ok()?;
            Some((
                model,
                Documented {
                    max_input,
                    max_output,
                },
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_line_of_the_shipped_table_parses() {
        let lines = TABLE.lines().filter(|l| !l.starts_with('#')).count();
        assert_eq!(parse(TABLE).len(), lines);
        assert!(lines > 100, "{lines} models");
    }

    #[test]
    fn popular_models_have_their_documented_windows() {
        assert_eq!(documented_window("gpt-4o"), Some(128_000));
        assert_eq!(documented_window("claude-sonnet-4-5"), Some(200_000));
        assert_eq!(documented_window("gemini-2.5-pro"), Some(1_048_576));
        assert_eq!(documented_window("a-model-nobody-documented"), None);
        assert_eq!(documented_max_output("claude-sonnet-4-5"), Some(64_000));
    }
}
