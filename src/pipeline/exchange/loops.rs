//! Step 7, compact, across a conversation's requests: a compaction is
//! paid for only where the client sent something new since the last one
//! (`compaction::progress`); asked again with nothing new, it goes deeper
//! without a summary call where that helps, and is refused where nothing
//! can.

use super::{Exchange, Incoming};
use crate::compaction::progress::{Asking, Content, Verdict, Written};
use crate::conversation::ConversationId;
use crate::domain::Usage;
use crate::error::ProxyError;
use axum::response::Response;

/// A folded request must stand at most this share of the one that asked:
/// "clearly below", so the client's next look at its size does not ask
/// again.
const FOLD_AT_MOST: (usize, usize) = (9, 10);

/// The request being compacted, as the ledger weighs it.
pub(super) struct Weighed {
    /// The ledger it is weighed against: the client's session where it
    /// names one, else its system part's root. Without a session the
    /// conversation is its first message, which a summary or a
    /// compaction item replaces at every compaction.
    ledger: ConversationId,
    content: Content,
    request: u128,
}

/// A summary for a compaction the client asked for.
pub(super) struct AskedSummary {
    pub text: String,
    /// What its summary calls reported; `None` when none was made.
    pub used: Option<Usage>,
    /// The summary stands for everything before it: what the client
    /// keeps beside it is folded in.
    pub folds: bool,
}

/// Why an asked compaction was not made.
pub(super) enum NotAsked {
    /// Asked again with nothing new, where nothing can help: the client's
    /// error, so it ends its turn instead of asking again.
    Loop(ProxyError),
    /// The summary could not be written.
    Failed(&'static str),
}

impl NotAsked {
    /// The client's answer, in its protocol's error shape.
    pub(super) fn into_response_for(self, protocol: crate::protocol::Protocol) -> Response {
        match self {
            Self::Loop(error) => error.into_response_for(protocol),
            Self::Failed(kind) => {
                tracing::warn!(error.kind = kind, "native compaction not served");
                ProxyError::CompactionFailed(kind).into_response_for(protocol)
            }
        }
    }
}

impl Exchange {
    /// The ledger this request is weighed against (see [`Weighed`]).
    fn ledger(&self) -> ConversationId {
        let conversation = &self.incoming.conversation;
        match conversation.label {
            Some(_) => conversation.id,
            None => ConversationId::first_turn(&conversation.chain[..1]),
        }
    }

    /// This request, as the ledger weighs it.
    pub(super) fn weighed(&self) -> Weighed {
        let Incoming {
            adapter,
            request,
            conversation,
            ..
        } = &self.incoming;
        let last = conversation.chain.last().map(|link| *link.as_bytes());
        let request_digest = last.map_or(0, |bytes| {
            u128::from_le_bytes(bytes[..16].try_into().unwrap_or_default())
        });
        Weighed {
            ledger: self.ledger(),
            content: Content::of(*adapter, request.messages()),
            request: request_digest,
        }
    }

    /// This request as weighed, where its ledger holds a compaction:
    /// weighing reads every message, and only there can a loop be.
    pub(super) fn weighed_if_known(&self) -> Option<Weighed> {
        let conversation = &self.incoming.conversation;
        let ledger = self.ledger();
        let known = (self.state.progress).knows(&conversation.tenant, &ledger);
        known.then(|| self.weighed())
    }

    fn asking<'a>(&'a self, weighed: &'a Weighed) -> Asking<'a> {
        Asking {
            tenant: &self.incoming.conversation.tenant,
            conversation: &weighed.ledger,
            request: weighed.request,
            content: &weighed.content,
        }
    }

    pub(super) fn verdict(&self, weighed: &Weighed) -> Verdict {
        self.state.progress.verdict(&self.asking(weighed))
    }

    pub(super) fn made(&self, weighed: &Weighed, written: Written, folded: bool) {
        self.state
            .progress
            .made(&self.asking(weighed), written, folded);
    }

    /// Counts a loop, logs it once per conversation, and reports it on
    /// the request.
    pub(super) fn loop_found(&mut self, weighed: &Weighed) {
        self.report.compaction_error = Some(crate::domain::CompactionFailure::Loop);
        let first = self.state.progress.refused(&self.asking(weighed));
        let conversation = self.incoming.conversation.id.to_hex();
        let message = "compaction asked again with nothing new from the client: refused without a summary call until it sends something new";
        match first {
            true => tracing::warn!(conversation, message),
            false => tracing::debug!(conversation, message),
        }
    }

    /// The summary for a compaction the client asked for (every message
    /// of the request): the one already written for the identical
    /// request; asked again with nothing new, one that folds what the
    /// client keeps, where that brings the request clearly below where it
    /// stood (`may_fold`: the API's item can stand for everything before
    /// it), else the client's error; else a new one.
    pub(super) async fn summarize_asked(
        &mut self,
        may_fold: bool,
    ) -> Result<AskedSummary, NotAsked> {
        let weighed = self.weighed();
        let folds = match self.verdict(&weighed) {
            Verdict::Identical { written, folds, .. } => {
                return Ok(AskedSummary {
                    text: written.summary,
                    used: written.used,
                    folds,
                })
            }
            Verdict::Loop => {
                self.loop_found(&weighed);
                return Err(NotAsked::Loop(self.cannot_progress(None)));
            }
            // Deeper: the summary written anew stands for everything
            // before it, what the client keeps beside it included.
            Verdict::Repeat { summary } if may_fold => match self.fold_clears(&summary) {
                Ok(()) => true,
                Err(fixed) => {
                    self.loop_found(&weighed);
                    return Err(NotAsked::Loop(self.cannot_progress(Some(fixed))));
                }
            },
            Verdict::Repeat { .. } => false,
            Verdict::Fresh { folds } => folds && may_fold,
        };
        let (text, used) = Box::pin(self.summarize_all())
            .await
            .map_err(NotAsked::Failed)?;
        let written = Written {
            summary: text.clone(),
            used,
        };
        self.made(&weighed, written, folds);
        Ok(AskedSummary { text, used, folds })
    }

    /// Whether the request, with `summary` in place of every message
    /// before the client's ask, stands clearly below the request as sent;
    /// else the bytes of what no compaction shrinks (instructions, tools).
    fn fold_clears(&self, summary: &str) -> Result<(), usize> {
        let Incoming {
            adapter, request, ..
        } = &self.incoming;
        let sent = self.incoming.original.len();
        let messages: usize = request.messages().iter().map(|m| m.to_string().len()).sum();
        let fixed = sent.saturating_sub(messages);
        let role = &self.state.settings.compaction.summary_role;
        let folded = fixed + adapter.summary_message(role, summary).to_string().len();
        let (at_most, of) = FOLD_AT_MOST;
        match folded * of <= sent * at_most {
            true => Ok(()),
            false => Err(fixed),
        }
    }

    /// The error that ends a client's compaction loop: what stands in the
    /// way, in tokens, and what to change.
    pub(super) fn cannot_progress(&self, fixed_bytes: Option<usize>) -> ProxyError {
        let calibration = self.model_size().calibration.unwrap_or_default();
        let sent = self.incoming.original.len();
        ProxyError::CompactionLoop {
            asked_tokens: calibration.tokens(sent),
            fixed_tokens: fixed_bytes.map(|bytes| calibration.tokens(bytes)),
        }
    }
}
