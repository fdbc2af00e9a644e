//! Step 7, compact: progress between compactions, per conversation.
//!
//! A client may ask for a compaction again on a history that holds nothing
//! new since the last one: Codex keeps up to 64k tokens of user messages
//! through its own compaction, and where what it keeps stays above its
//! threshold it asks again inside the same turn, without end. Every
//! compaction Condenser makes costs the user a summary call, so each
//! conversation keeps a ledger of the client's content at its last
//! compaction, and a compaction asked with nothing new since is answered
//! from what is already written, or refused: never paid for without end.
//!
//! The client's content is its messages (user turns, tool results,
//! answers) by their transcript, ids aside, counted: a tool call made
//! again with the same result after a compaction dropped the first is
//! nothing new; a third identical "continue" after two is.

use crate::conversation::{ConversationId, TenantId};
use crate::domain::Usage;
use crate::protocol::{Adapter, SUMMARY_MARKER};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Compactions one conversation may make between two pieces of new client
/// content, beyond the first: one more, which may go deeper than the one
/// before it (fold what the client re-sends, or write a smaller summary).
/// Past it, a compaction is refused (`CompactionFailure::Loop`).
pub const MAX_WITHOUT_NEWS: u32 = 1;

/// Conversations whose ledger is kept: a few hundred bytes to some
/// kilobytes each; the least recently compacted go first.
const CONVERSATIONS: usize = 4096;

/// The client's own content in one request: each message's digest, with
/// how many times it occurs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Content(HashMap<u64, u32>);

impl Content {
    /// The content of `messages`: what the client brings (user turns, tool
    /// results), by canonical form with ids aside. The model's own output
    /// is no news from the client (asked again, a model answers anew), and
    /// neither are Condenser's summaries, which change with every
    /// compaction.
    pub fn of(adapter: &dyn Adapter, messages: &[Value]) -> Self {
        let mut counts = HashMap::with_capacity(messages.len());
        for message in messages {
            if matches!(adapter.role(message), "assistant" | "model") {
                continue;
            }
            let mut bare = message.clone();
            without_ids(&mut bare);
            let canonical = adapter.canonical(&bare);
            if memchr::memmem::find(&canonical, SUMMARY_MARKER.as_bytes()).is_some() {
                continue;
            }
            *counts
                .entry(xxhash_rust::xxh3::xxh3_64(&canonical))
                .or_insert(0) += 1;
        }
        Self(counts)
    }

    /// Whether any message occurs more often here than in `seen`.
    fn has_news_over(&self, seen: &Content) -> bool {
        self.0
            .iter()
            .any(|(digest, count)| seen.0.get(digest).is_none_or(|was| count > was))
    }

    /// Everything seen in either, at its larger count.
    fn absorb(&mut self, other: Content) {
        for (digest, count) in other.0 {
            let seen = self.0.entry(digest).or_insert(0);
            *seen = (*seen).max(count);
        }
    }
}

/// One conversation's compactions since its client last said something new.
#[derive(Debug, Default)]
struct Ledger {
    /// Everything the client had sent at its compactions.
    seen: Content,
    /// Compactions made since the last one that had news.
    without_news: u32,
    /// The request the last compaction was made for, by digest, its
    /// summary and what writing it used: an identical request is answered
    /// with them.
    last: Option<(u128, Written)>,
    /// A compaction had to fold what the client keeps into the summary:
    /// later ones do it from the start.
    folds: bool,
    /// The loop was logged: once per conversation.
    reported: bool,
}

/// A summary as written, with what its calls reported they used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub summary: String,
    pub used: Option<Usage>,
}

/// What is known of a compaction about to be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The client sent something new since the last compaction, or there
    /// was none: compact as asked. `folds`: the conversation needed its
    /// kept messages folded into the summary before.
    Fresh { folds: bool },
    /// The very request the last compaction was made for: its summary.
    /// `spent`: the compactions allowed without news are spent, so a
    /// compaction that must write anew is refused.
    Identical {
        written: Written,
        folds: bool,
        spent: bool,
    },
    /// Nothing new since the last compaction, whose summary this is; one
    /// deeper compaction is still allowed.
    Repeat { summary: String },
    /// Nothing new, and the compactions allowed without news are spent:
    /// refuse, without a summary call.
    Loop,
}

/// The ledgers of the conversations compacted lately, in memory. A fleet
/// keeps one per instance: a conversation spread over instances may cost
/// one loop allowance per instance, each still bounded.
pub struct Progress(quick_cache::sync::Cache<(TenantId, ConversationId), Arc<Mutex<Ledger>>>);

impl Default for Progress {
    fn default() -> Self {
        Self(quick_cache::sync::Cache::new(CONVERSATIONS))
    }
}

/// Which conversation, and the request being compacted.
pub struct Asking<'a> {
    pub tenant: &'a TenantId,
    pub conversation: &'a ConversationId,
    /// A digest of the whole request as the client sent it.
    pub request: u128,
    pub content: &'a Content,
}

impl Progress {
    /// Whether the conversation was compacted lately: only then is a
    /// request weighed against its ledger.
    pub fn knows(&self, tenant: &TenantId, conversation: &ConversationId) -> bool {
        self.0.contains_key(&(tenant.clone(), *conversation))
    }

    /// What the ledger says of compacting `asking` now.
    pub fn verdict(&self, asking: &Asking<'_>) -> Verdict {
        let Some(ledger) = self.0.get(&key(asking)) else {
            return Verdict::Fresh { folds: false };
        };
        let ledger = ledger.lock().unwrap_or_else(|e| e.into_inner());
        let folds = ledger.folds;
        let spent = ledger.without_news >= MAX_WITHOUT_NEWS;
        match &ledger.last {
            Some((request, written)) if *request == asking.request => {
                return Verdict::Identical {
                    written: written.clone(),
                    folds,
                    spent,
                }
            }
            _ if asking.content.has_news_over(&ledger.seen) => return Verdict::Fresh { folds },
            _ => {}
        }
        if spent {
            return Verdict::Loop;
        }
        match &ledger.last {
            Some((_, written)) => Verdict::Repeat {
                summary: written.summary.clone(),
            },
            None => Verdict::Fresh { folds },
        }
    }

    /// Counts a compaction refused as a loop; true the first time for
    /// this conversation since its client last sent something new, when
    /// it is worth a log line.
    pub fn refused(&self, asking: &Asking<'_>) -> bool {
        metrics::counter!("condenser_compaction_loops_total").increment(1);
        let Some(ledger) = self.0.get(&key(asking)) else {
            return true;
        };
        let mut ledger = ledger.lock().unwrap_or_else(|e| e.into_inner());
        !std::mem::replace(&mut ledger.reported, true)
    }

    /// Records a compaction made for `asking`; `folded` when it folded
    /// the client's kept messages into the summary.
    pub fn made(&self, asking: &Asking<'_>, written: Written, folded: bool) {
        let ledger = self.0.get_or_insert_with(&key(asking), || {
            Ok::<_, std::convert::Infallible>(Arc::default())
        });
        let Ok(ledger) = ledger;
        let mut ledger = ledger.lock().unwrap_or_else(|e| e.into_inner());
        let news = ledger.last.is_none() || asking.content.has_news_over(&ledger.seen);
        ledger.without_news = if news { 0 } else { ledger.without_news + 1 };
        if news {
            ledger.reported = false;
        }
        ledger.seen.absorb(asking.content.clone());
        ledger.last = Some((asking.request, written));
        ledger.folds |= folded;
    }
}

/// What a message carries that is no content of the client's: the ids a
/// call and its result get (a call made again gets new ones and is the
/// same all the same), the model's part of a unit that pairs its call
/// with the client's result (a Responses `function_call` beside its
/// output): its arguments, reasoning and signatures; and a client's own
/// bookkeeping, any key that names metadata (Codex stamps each tool
/// output with `internal_chat_message_metadata_passthrough`, its time and
/// turn id).
const NOT_CONTENT: [&str; 10] = [
    "id",
    "call_id",
    "tool_call_id",
    "tool_use_id",
    "arguments",
    "args",
    "encrypted_content",
    "signature",
    "thoughtSignature",
    "thought_signature",
];

fn without_ids(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|key, _| !NOT_CONTENT.contains(&key.as_str()) && !key.contains("metadata"));
            map.values_mut().for_each(without_ids);
        }
        Value::Array(items) => items.iter_mut().for_each(without_ids),
        _ => {}
    }
}

fn key(asking: &Asking<'_>) -> (TenantId, ConversationId) {
    (asking.tenant.clone(), *asking.conversation)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn content(entries: &[u64]) -> Content {
        let mut counts = HashMap::new();
        for entry in entries {
            *counts.entry(*entry).or_insert(0) += 1;
        }
        Content(counts)
    }

    fn written(summary: &str) -> Written {
        Written {
            summary: summary.into(),
            used: None,
        }
    }

    struct Conversation {
        progress: Progress,
        tenant: TenantId,
        id: ConversationId,
    }

    impl Conversation {
        fn new() -> Self {
            Self {
                progress: Progress::default(),
                tenant: TenantId::from_credential(b"salt", Some(b"key")),
                id: ConversationId::session(
                    &TenantId::from_credential(b"salt", Some(b"key")),
                    b"s",
                ),
            }
        }

        fn asking<'a>(&'a self, request: u128, content: &'a Content) -> Asking<'a> {
            Asking {
                tenant: &self.tenant,
                conversation: &self.id,
                request,
                content,
            }
        }
    }

    #[test]
    fn a_compaction_with_news_is_always_fresh() {
        let conversation = Conversation::new();
        for turn in 1..=5u64 {
            let sent = content(&(1..=turn).collect::<Vec<_>>());
            let asking = conversation.asking(turn as u128, &sent);
            assert_eq!(
                conversation.progress.verdict(&asking),
                Verdict::Fresh { folds: false }
            );
            conversation
                .progress
                .made(&asking, written("summary"), false);
        }
    }

    #[test]
    fn without_news_one_more_compaction_then_a_loop_reported_once() {
        let conversation = Conversation::new();
        let sent = content(&[1, 2, 3]);
        conversation
            .progress
            .made(&conversation.asking(1, &sent), written("first"), false);
        // The same tool call made again after the compaction dropped it.
        let again = content(&[1, 2, 3]);
        let asking = conversation.asking(2, &again);
        assert_eq!(
            conversation.progress.verdict(&asking),
            Verdict::Repeat {
                summary: "first".into()
            }
        );
        conversation.progress.made(&asking, written("first"), true);
        let asking = conversation.asking(3, &again);
        assert_eq!(conversation.progress.verdict(&asking), Verdict::Loop);
        assert!(conversation.progress.refused(&asking), "logged once");
        assert!(!conversation.progress.refused(&asking));
        // A new user message ends the loop.
        let news = content(&[1, 2, 3, 4]);
        let asking = conversation.asking(4, &news);
        assert_eq!(
            conversation.progress.verdict(&asking),
            Verdict::Fresh { folds: true }
        );
    }

    #[test]
    fn the_identical_request_gets_the_summary_already_written() {
        let conversation = Conversation::new();
        let sent = content(&[1, 2]);
        conversation
            .progress
            .made(&conversation.asking(7, &sent), written("written"), false);
        assert_eq!(
            conversation
                .progress
                .verdict(&conversation.asking(7, &sent)),
            Verdict::Identical {
                written: written("written"),
                folds: false,
                spent: false
            }
        );
    }

    #[test]
    fn a_repeated_message_counts_as_news_only_past_its_count() {
        let twice = content(&[5, 5]);
        assert!(!content(&[5]).has_news_over(&twice));
        assert!(!content(&[5, 5]).has_news_over(&twice));
        assert!(content(&[5, 5, 5]).has_news_over(&twice));
    }
}
