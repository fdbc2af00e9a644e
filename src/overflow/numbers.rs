//! Step 6, detect overflow: the numbers in a message.
//!
//! Token counts inside error messages: the `{N}` placeholder signatures use,
//! and turning the named capture groups into limit / input / output.

use regex::Captures;

/// A count as providers print it: `131072` or `1,048,576`. The grouped form
/// comes first so a separated number is read whole; the `\b` stops it from
/// taking the `8` of `(8, 2045)`.
const COUNT: &str = r"(?:[0-9]{1,3}(?:,[0-9]{3})+\b|[0-9]+)";

/// Replaces every `{N}` in a signature pattern with [`COUNT`]. `{N}` is not
/// valid regex repetition, so it cannot clash with what an author meant.
pub(super) fn expand(pattern: &str) -> String {
    pattern.replace("{N}", COUNT)
}

/// Reads a captured count, ignoring thousands separators.
pub(super) fn parse_count(text: &str) -> Option<u64> {
    let digits: String = text.chars().filter(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// What a message said about sizes, straight from its capture groups.
///
/// Groups a pattern may use: `limit` (the window), `actual` (input tokens),
/// `extra` (more input, e.g. OpenAI's "in the functions"), `output` (the
/// max_tokens part) and `total` (input + output, when only the sum is given).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Numbers {
    pub limit: Option<u64>,
    pub actual: Option<u64>,
    pub extra: Option<u64>,
    pub output: Option<u64>,
    pub total: Option<u64>,
}

impl Numbers {
    /// Collects the named groups a match filled in.
    pub(super) fn from_captures(caps: &Captures<'_>) -> Self {
        let get = |name: &str| caps.name(name).and_then(|m| parse_count(m.as_str()));
        Self {
            limit: get("limit"),
            actual: get("actual"),
            extra: get("extra"),
            output: get("output"),
            total: get("total"),
        }
    }

    /// Input tokens: the stated input plus extra input, or else the total
    /// minus the output part (a total alone is the best we have).
    pub(super) fn input(&self) -> Option<u64> {
        match (self.actual, self.total) {
            (Some(actual), _) => Some(actual.saturating_add(self.extra.unwrap_or(0))),
            (None, Some(total)) => Some(total.saturating_sub(self.output.unwrap_or(0))),
            (None, None) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use regex::Regex;

    #[test]
    fn counts_with_and_without_separators() {
        assert_eq!(parse_count("131072"), Some(131_072));
        assert_eq!(parse_count("1,048,576"), Some(1_048_576));
        assert_eq!(parse_count(""), None);
    }

    #[test]
    fn placeholder_reads_whole_numbers_only() {
        let re = Regex::new(&expand(r"\((?P<actual>{N}), (?P<output>{N})\)")).expect("valid");
        let caps = re.captures("value=(8, 2,045)").expect("matches");
        let numbers = Numbers::from_captures(&caps);
        assert_eq!((numbers.actual, numbers.output), (Some(8), Some(2045)));
    }

    #[test]
    fn input_prefers_actual_then_total() {
        let with_extra = Numbers {
            actual: Some(10),
            extra: Some(5),
            ..Numbers::default()
        };
        assert_eq!(with_extra.input(), Some(15));
        let total_only = Numbers {
            total: Some(100),
            output: Some(30),
            ..Numbers::default()
        };
        assert_eq!(total_only.input(), Some(70));
        assert_eq!(Numbers::default().input(), None);
    }
}
