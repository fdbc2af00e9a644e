//! Step 7, compact, as the store records it: why a compaction ran, and why
//! one could not be made. Each is a closed set, written to its column, its
//! metric label and its response header by the one `as_str` below.

use std::fmt;

/// Why a compaction ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Trigger {
    /// The upstream answered with a context overflow.
    Overflow,
    /// The estimate showed the upstream would refuse: compacted before
    /// sending.
    Proactive,
    /// The client asked, in its provider's own compaction form, and
    /// Condenser answered it.
    Asked,
}

impl Trigger {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Overflow => "overflow",
            Self::Proactive => "proactive",
            Self::Asked => "asked",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [Self::Overflow, Self::Proactive, Self::Asked]
            .into_iter()
            .find(|trigger| trigger.as_str() == text)
    }
}

/// Why a needed compaction was not made: `x-condenser-compaction-error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CompactionFailure {
    /// Even the deepest compaction would not fit a window known from
    /// evidence.
    CannotFit,
    NothingToCompact,
    /// The history needs more summary calls than allowed.
    SummaryInputCap,
    /// The summary call overflowed the summarizer's window, however shrunk.
    SummaryOverflow,
    /// The summary call got an error answer from the upstream.
    UpstreamError,
    Transport,
    Timeout,
    /// The summary call answered without text.
    Empty,
    /// Another instance held the prefix's lease and no summary came.
    LeaseWaitTimeout,
    /// `max_compactions` were used up on this request.
    LimitReached,
    /// The conversation was compacted again and again with nothing new
    /// from its client between (`compaction::progress`): no more summary
    /// calls until it sends something new.
    Loop,
    /// The client signed its request (its signature covers the body), so
    /// no compaction may change it.
    SignedByClient,
}

impl CompactionFailure {
    pub const ALL: [Self; 12] = [
        Self::CannotFit,
        Self::NothingToCompact,
        Self::SummaryInputCap,
        Self::SummaryOverflow,
        Self::UpstreamError,
        Self::Transport,
        Self::Timeout,
        Self::Empty,
        Self::LeaseWaitTimeout,
        Self::LimitReached,
        Self::Loop,
        Self::SignedByClient,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::CannotFit => "cannot_fit",
            Self::NothingToCompact => "nothing_to_compact",
            Self::SummaryInputCap => "summary_input_cap",
            Self::SummaryOverflow => "summary_overflow",
            Self::UpstreamError => "upstream_error",
            Self::Transport => "transport",
            Self::Timeout => "timeout",
            Self::Empty => "empty",
            Self::LeaseWaitTimeout => "lease_wait_timeout",
            Self::LimitReached => "limit_reached",
            Self::Loop => "loop",
            Self::SignedByClient => "signed_by_client",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == text)
    }
}

impl fmt::Display for Trigger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for CompactionFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_label_parses_back_to_its_value() {
        for kind in CompactionFailure::ALL {
            assert_eq!(CompactionFailure::parse(kind.as_str()), Some(kind));
        }
        for trigger in [Trigger::Overflow, Trigger::Proactive, Trigger::Asked] {
            assert_eq!(Trigger::parse(trigger.as_str()), Some(trigger));
        }
        assert_eq!(Trigger::parse("threshold"), None);
    }
}
