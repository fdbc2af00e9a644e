//! Facts through compactions. Every summary the fake writes carries
//! `FACT-…` markers, spread through its text: every marker the summary
//! call was sent (the previous summary's, or one a test put in a message),
//! newest last, as a summarizer keeps the facts it was given, and one of
//! its own at the end of what it writes. A proxy that cuts a summary short,
//! or leaves the previous summary out of the next summary call, loses some;
//! [`lost`] finds them in the request log.

use crate::config::FakeConfig;
use crate::state::RecordedRequest;
use serde_json::Value;

/// What every fact marker starts with.
pub const PREFIX: &str = "FACT-";

/// What every summary the fake writes starts with, then 12 hex digits of
/// its call's digest: the summary's name in the log.
const HEAD: &str = "Summary of conversation ";
const NAME_LEN: usize = HEAD.len() + 12;

/// The summary the fake writes for the summary call `request` (whose body
/// has `digest`): `config.summary_reply_tokens` of the fake's tokens (4
/// bytes each), its facts within the first `limit` of them (the output
/// limit that will stop it). In prose (`config.summary_prose`) it runs
/// until `limit` stops it.
pub fn summary(digest: &str, request: &Value, config: &FakeConfig, limit: u64) -> String {
    let name = format!("{HEAD}{}", &digest[..12]);
    let fresh = format!("{PREFIX}{}", &digest[12..20]);
    let bytes = |tokens: u64| usize::try_from(tokens.saturating_mul(4)).unwrap_or(usize::MAX);
    let carried = markers(&request.to_string());
    if config.summary_prose {
        // Issue 52's summary from Kilo Code's summarizer against a
        // 32,000-token window: one short sentence, then prose without a
        // full stop until the output limit stopped it (8,000 characters,
        // 2,000 tokens by the upstream's count, `finish_reason: length`).
        let total = match limit {
            u64::MAX => bytes(config.summary_reply_tokens),
            limit => bytes(limit).saturating_add(64),
        };
        let opening = format!("{name}. The user and the assistant worked through the task");
        let parts = Parts {
            filler: ", then they went on with the work",
            fact: |fact: &str| format!(", and the assistant noted {fact}"),
        };
        return parts.weave(opening, &carried, fresh, bytes(limit).min(total), total);
    }
    let total = bytes(config.summary_reply_tokens);
    let parts = Parts {
        filler: "the user and the assistant worked through the task. ",
        fact: |fact: &str| format!("the assistant noted {fact}. "),
    };
    let placed = bytes(config.summary_reply_tokens.min(limit));
    parts.weave(format!("{name}: "), &carried, fresh, placed, total)
}

/// The sentences (or clauses) a summary is woven of.
struct Parts<F: Fn(&str) -> String> {
    filler: &'static str,
    fact: F,
}

impl<F: Fn(&str) -> String> Parts<F> {
    /// `opening`, then the facts (the newest of `carried` that fit half of
    /// `placed`, then `fresh`) spread over the first `placed` bytes, the
    /// last ending close to it, then filler to `total` bytes.
    fn weave(
        &self,
        opening: String,
        carried: &[String],
        fresh: String,
        placed: usize,
        total: usize,
    ) -> String {
        let mut text = opening;
        let start = text.len();
        let span = placed.saturating_sub(start);
        let each = (self.fact)(&fresh).len();
        let room = (span / 2 / each).saturating_sub(1);
        let mut facts: Vec<&str> = carried
            .iter()
            .skip(carried.len().saturating_sub(room))
            .map(String::as_str)
            .collect();
        facts.push(&fresh);
        for (k, fact) in facts.iter().enumerate() {
            let part = (self.fact)(fact);
            let end = start + span * (k + 1) / facts.len();
            while text.len() + self.filler.len() + part.len() <= end {
                text.push_str(self.filler);
            }
            text.push_str(&part);
        }
        while text.len() < total {
            text.push_str(self.filler);
        }
        let mut end = total.max(start).min(text.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text
    }
}

/// The fact markers in `text`, each once, in order.
pub fn markers(text: &str) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    for (at, _) in text.match_indices(PREFIX) {
        let rest = &text[at + PREFIX.len()..];
        let len = rest
            .find(|c: char| !is_marker_char(c))
            .unwrap_or(rest.len());
        let marker = &text[at..at + PREFIX.len() + len];
        if len > 0 && !found.iter().any(|f| f == marker) {
            found.push(marker.to_string());
        }
    }
    found
}

fn is_marker_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Whether `body` holds `marker` whole (not the start of a longer one).
fn holds(body: &str, marker: &str) -> bool {
    body.match_indices(marker)
        .any(|(at, _)| !body[at + marker.len()..].starts_with(is_marker_char))
}

/// Every fact a summary the fake wrote carried that did not reach the
/// request the summary stands for: the first later request that carries
/// the summary (by its name), which is the request retried with it, or a
/// later summary call that folds it in and so carries its facts on. A
/// summary no later request carries lost all its facts. One line each.
pub fn lost(log: &[RecordedRequest]) -> Vec<String> {
    let mut lost = Vec::new();
    for (at, call) in log.iter().enumerate() {
        let Some(written) = &call.written else {
            continue;
        };
        let facts = markers(written);
        let Some(name) = written.get(..NAME_LEN).filter(|n| n.starts_with(HEAD)) else {
            continue;
        };
        if facts.is_empty() {
            continue;
        }
        let next = log[at + 1..]
            .iter()
            .map(|request| (request, String::from_utf8_lossy(&request.body)))
            .find(|(_, body)| body.contains(name));
        let Some((request, body)) = next else {
            lost.push(format!(
                "{name}: no later request carries it, nor its facts {facts:?}"
            ));
            continue;
        };
        let missing: Vec<&String> = facts.iter().filter(|f| !holds(&body, f)).collect();
        if !missing.is_empty() {
            lost.push(format!(
                "{name}: {missing:?} of its facts {facts:?} did not reach the next request that carries it ({:?} {} {})",
                request.kind, request.method, request.path
            ));
        }
    }
    lost
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{RequestKind, Transport};
    use serde_json::json;

    const DIGEST: &str = "0123456789abcdef0123456789abcdef";

    fn record(kind: RequestKind, body: &str, written: Option<String>) -> RecordedRequest {
        RecordedRequest {
            method: "POST".into(),
            path: "/v1/chat/completions".into(),
            query: None,
            headers: Vec::new(),
            body: body.to_string().into(),
            json: None,
            kind,
            protocol: None,
            status: 200,
            input_tokens: None,
            truncated: false,
            transport: Transport::Http,
            continued: false,
            written,
        }
    }

    #[test]
    fn a_summary_carries_the_facts_it_was_sent_and_one_of_its_own_last() {
        let request = json!({"messages": [{"content": "<previous_summary>FACT-aaaa1111 and FACT-bbbb2222</previous_summary>"}]});
        let config = FakeConfig::default();
        let text = summary(DIGEST, &request, &config, 300);
        assert_eq!(text.len(), 800, "the fake's 200 tokens");
        assert!(text.starts_with("Summary of conversation 0123456789ab: "));
        assert_eq!(
            markers(&text),
            ["FACT-aaaa1111", "FACT-bbbb2222", "FACT-cdef0123"]
        );
        // The facts are spread: the last one ends close to the end.
        let last = text.find("FACT-cdef0123").expect("fresh fact");
        assert!(last > 700, "at {last}");
        // Within a tighter limit, the facts are within it.
        let text = summary(DIGEST, &request, &config, 100);
        assert!(text[..400].contains("FACT-cdef0123"), "{text}");
    }

    #[test]
    fn prose_runs_past_its_limit_with_one_full_stop() {
        let config = FakeConfig {
            summary_prose: true,
            ..FakeConfig::default()
        };
        let text = summary(DIGEST, &json!({}), &config, 500);
        assert_eq!(text.len(), 2_064);
        assert_eq!(text.matches(". ").count(), 1, "{text}");
        assert!(text[..2_000].contains("FACT-cdef0123"));
    }

    #[test]
    fn a_summary_cut_short_or_left_out_loses_its_facts() {
        let config = FakeConfig::default();
        let written = summary(DIGEST, &json!({}), &config, 300);
        let whole = record(
            RequestKind::Chat,
            &format!("{{\"summary\":\"{written}\"}}"),
            None,
        );
        let call = record(RequestKind::Summary, "{}", Some(written.clone()));
        assert!(lost(&[call.clone(), whole.clone()]).is_empty());
        let cut = record(RequestKind::Chat, &written[..100], None);
        let found = lost(&[call.clone(), cut, whole]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("FACT-cdef0123"), "{found:?}");
        let found = lost(&[call.clone(), record(RequestKind::Chat, "{}", None)]);
        assert!(found[0].contains("no later request"), "{found:?}");
        // A marker held only as the start of a longer one is not held.
        let longer = written.replace("FACT-cdef0123", "FACT-cdef01234");
        let found = lost(&[call, record(RequestKind::Chat, &longer, None)]);
        assert_eq!(found.len(), 1, "{found:?}");
    }
}
