//! Steps 5 to 7, knowing sizes: what an upstream reported of a response.
//!
//! The token counts an answer's `usage` carries, read by each protocol
//! adapter, summed by the relay, and used to calibrate sizes.

use serde_json::Value;

/// Token counts an upstream reported for a response.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Every token of the prompt, cached ones included: what the window
    /// holds.
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Prompt tokens the upstream served from its cache, where it reports
    /// them apart (`prompt_tokens_details.cached_tokens`). Some servers
    /// count them in the input, some do not: whoever compares the input
    /// with what was sent adds them, to err towards the larger count.
    pub cached_tokens: u64,
}

impl Usage {
    /// The counts named `input` and `output` of a `usage` object; the
    /// input count is required.
    pub(crate) fn read(usage: &Value, input: &str, output: &str) -> Option<Usage> {
        let count = |key: &str| usage.get(key).and_then(Value::as_u64);
        // `get` twice, not `pointer`: a pointer is split and unescaped at
        // every call, and this runs on every answer.
        let cached = ["prompt_tokens_details", "input_tokens_details"]
            .iter()
            .find_map(|details| usage.get(details)?.get("cached_tokens")?.as_u64());
        Some(Usage {
            input_tokens: count(input)?,
            output_tokens: count(output).unwrap_or(0),
            cached_tokens: cached.unwrap_or(0),
        })
    }

    /// Streams report usage in parts (Anthropic's input in `message_start`,
    /// output in `message_delta`); later counts only grow.
    pub fn merged(self, later: Usage) -> Usage {
        Usage {
            input_tokens: self.input_tokens.max(later.input_tokens),
            output_tokens: self.output_tokens.max(later.output_tokens),
            cached_tokens: self.cached_tokens.max(later.cached_tokens),
        }
    }
}
