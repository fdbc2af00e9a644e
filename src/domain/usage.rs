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
    /// Output tokens spent reasoning, where the upstream reports them
    /// apart (`completion_tokens_details.reasoning_tokens`,
    /// `output_tokens_details.reasoning_tokens`, Gemini's
    /// `thoughtsTokenCount`): part of `output_tokens`, none of the text.
    pub reasoning_tokens: u64,
}

impl Usage {
    /// The counts named `input` and `output` of a `usage` object; the
    /// input count is required.
    pub(crate) fn read(usage: &Value, input: &str, output: &str) -> Option<Usage> {
        let count = |key: &str| usage.get(key).and_then(Value::as_u64);
        // `get` twice, not `pointer`: a pointer is split and unescaped at
        // every call, and this runs on every answer.
        let detail = |sections: [&str; 2], key: &str| {
            sections
                .iter()
                .find_map(|details| usage.get(details)?.get(key)?.as_u64())
        };
        let cached = detail(
            ["prompt_tokens_details", "input_tokens_details"],
            "cached_tokens",
        );
        let reasoning = detail(
            ["completion_tokens_details", "output_tokens_details"],
            "reasoning_tokens",
        );
        Some(Usage {
            input_tokens: count(input)?,
            output_tokens: count(output).unwrap_or(0),
            cached_tokens: cached.unwrap_or(0),
            reasoning_tokens: reasoning.unwrap_or(0),
        })
    }

    /// Output tokens of the answer's text: the output less its reasoning.
    pub fn text_tokens(&self) -> u64 {
        self.output_tokens.saturating_sub(self.reasoning_tokens)
    }

    /// Streams report usage in parts (Anthropic's input in `message_start`,
    /// output in `message_delta`); later counts only grow.
    pub fn merged(self, later: Usage) -> Usage {
        Usage {
            input_tokens: self.input_tokens.max(later.input_tokens),
            output_tokens: self.output_tokens.max(later.output_tokens),
            cached_tokens: self.cached_tokens.max(later.cached_tokens),
            reasoning_tokens: self.reasoning_tokens.max(later.reasoning_tokens),
        }
    }
}
