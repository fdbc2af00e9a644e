//! Step 6, detect overflow: one signature at work.
//!
//! A compiled signature and how it judges an [`ErrorView`].

use regex::{Regex, RegexBuilder};

use super::extract::ErrorView;
use super::numbers::{expand, Numbers};
use super::signatures::{Field, Spec};
use super::{CustomSignature, OverflowCause, OverflowSignal, SignatureName};

/// Status a stream event is judged under: the response itself was a 200.
pub(super) const STREAM_STATUS: u16 = 200;

/// A signature ready to run: regexes compiled once, at table build time.
#[derive(Debug, Clone)]
pub(super) struct Signature {
    name: SignatureName,
    statuses: Vec<u16>,
    patterns: Vec<(Regex, Option<OverflowCause>)>,
    fields: Vec<Field>,
    cause: Option<OverflowCause>,
}

/// What a message pattern found: its numbers and the pattern's cause hint.
#[derive(Debug, Default, Clone)]
pub(super) struct Hit {
    numbers: Numbers,
    hint: Option<OverflowCause>,
    /// The text the pattern matched, lower-cased.
    matched: Option<String>,
}

/// Compiles one pattern with `{N}` expanded. Messages arrive lower-cased,
/// so only patterns that may hold capitals (an operator's) need `(?i)`.
pub(super) fn compile(pattern: &str, case_insensitive: bool) -> Result<Regex, regex::Error> {
    RegexBuilder::new(&expand(pattern))
        .case_insensitive(case_insensitive)
        .build()
}

impl Signature {
    pub(super) fn from_spec(spec: &Spec) -> Result<Self, regex::Error> {
        let patterns = spec
            .patterns
            .iter()
            .map(|pat| Ok((compile(pat.re, false)?, pat.hint)))
            .collect::<Result<_, regex::Error>>()?;
        Ok(Self {
            name: SignatureName::Builtin(spec.name),
            statuses: spec.statuses.to_vec(),
            patterns,
            fields: spec.fields.to_vec(),
            cause: spec.cause,
        })
    }

    pub(super) fn from_custom(custom: &CustomSignature) -> Result<Self, regex::Error> {
        Ok(Self {
            name: SignatureName::Custom(custom.name.as_str().into()),
            statuses: custom.status.clone(),
            patterns: vec![(compile(&custom.pattern, true)?, None)],
            fields: Vec::new(),
            cause: custom.cause,
        })
    }

    /// Whether this signature applies to a response with `status`.
    pub(super) fn accepts(&self, status: u16) -> bool {
        if self.statuses.is_empty() {
            matches!(status, 400 | 413 | STREAM_STATUS)
        } else {
            self.statuses.contains(&status)
        }
    }

    /// Whether this signature names `status` itself (a 5xx must be named).
    pub(super) fn lists(&self, status: u16) -> bool {
        self.statuses.contains(&status)
    }

    /// The first pattern (in table order) that matches any message.
    pub(super) fn match_messages(&self, view: &ErrorView) -> Option<Hit> {
        self.patterns.iter().find_map(|(re, hint)| {
            let caps = view.messages.iter().find_map(|m| re.captures(m))?;
            let numbers = Numbers::from_captures(&caps);
            Some(Hit {
                numbers,
                hint: *hint,
                matched: caps.get(0).map(|m| m.as_str().to_owned()),
            })
        })
    }

    /// Whether any of this signature's JSON field checks holds.
    pub(super) fn match_fields(&self, view: &ErrorView) -> bool {
        self.fields.iter().any(|field| match *field {
            Field::Equals(key, value) => view.field_equals(key, value),
            Field::Present(key) => view.has_field(key),
        })
    }

    /// Builds the signal; llama.cpp-style numeric fields fill what the
    /// message left out.
    pub(super) fn signal(&self, hit: Hit, view: &ErrorView) -> OverflowSignal {
        let limit = hit.numbers.limit.or_else(|| view.number("n_ctx"));
        let actual = hit
            .numbers
            .input()
            .or_else(|| view.number("n_prompt_tokens"));
        let requested_output = hit.numbers.output;
        OverflowSignal {
            signature: self.name.clone(),
            cause: self.cause(hit.hint, limit, actual, requested_output),
            limit,
            actual,
            requested_output,
            matched: hit.matched,
        }
    }

    /// Fixed cause first; then the numbers, which are the strongest evidence;
    /// then the wording's hint; input by default.
    fn cause(
        &self,
        hint: Option<OverflowCause>,
        limit: Option<u64>,
        actual: Option<u64>,
        output: Option<u64>,
    ) -> OverflowCause {
        if let Some(fixed) = self.cause {
            return fixed;
        }
        match (limit, actual, output) {
            (Some(limit), Some(actual), Some(output)) if output > 0 => {
                if actual <= limit {
                    OverflowCause::InputPlusOutput
                } else {
                    OverflowCause::Input
                }
            }
            _ => hint.unwrap_or(OverflowCause::Input),
        }
    }
}
