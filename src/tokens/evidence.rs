//! Steps 5 to 7, knowing sizes: when an overflow error is evidence of a
//! window.
//!
//! An overflow error is read on every request, and any client can make one
//! appear: an upstream that echoes an unknown field's name ("Unrecognized
//! request argument supplied: maximum context length is 1000 tokens")
//! produces overflow wording with numbers the client chose. So a window is
//! learned from an error only when its numbers agree with the request that
//! drew it, and never from text the request itself carried.

use super::Calibration;
use crate::overflow::OverflowSignal;

/// How far the upstream's count of a request may be from Condenser's
/// estimate and still be about that request: estimates before any
/// calibration err by up to half either way on unusual text (code, CJK).
const COUNT_AGREEMENT: f64 = 3.0;

/// An upstream's count this far below Condenser's estimate of the request
/// it answered means the upstream cut the prompt (Ollama, llama.cpp with
/// context shift). Honest estimates miss by 5 to 25 % (README, "How
/// compaction is sized"), so a report more than 30 % below is a cut; a
/// smaller cut passes unseen until the conversation grows past it.
const TRUNCATED_SHARE: f64 = 0.7;

/// Below this estimate no window worth learning is in play.
const MIN_TRUNCATION_TOKENS: u64 = 256;

/// Whether an answered request estimated at `estimate` tokens, counted as
/// `counted` with `cached` reported apart, was cut by the upstream. Cached
/// tokens are added whether or not the upstream counted them in: prompt
/// caching never looks like a cut.
pub fn silently_truncated(estimate: u64, counted: u64, cached: u64) -> bool {
    let seen = counted.saturating_add(cached);
    estimate >= MIN_TRUNCATION_TOKENS && (seen as f64) < estimate as f64 * TRUNCATED_SHARE
}

/// Whether `signal`, the answer to the request `sent`, may teach the
/// window it states. `calibration` is the rate estimates use now.
pub fn teaches_window(signal: &OverflowSignal, sent: &[u8], calibration: Calibration) -> bool {
    let Some(limit) = signal.limit else {
        return false;
    };
    if echoes(signal, sent) {
        return false;
    }
    let estimate = calibration.tokens(sent.len()).max(1) as f64;
    match signal.actual {
        // The count is of this request, and shows it overflowing.
        Some(actual) => {
            let ratio = actual as f64 / estimate;
            let needed = actual.saturating_add(signal.requested_output.unwrap_or(0));
            (1.0 / COUNT_AGREEMENT..=COUNT_AGREEMENT).contains(&ratio) && needed > limit
        }
        // No count: the request must at least be about as large as the
        // window it is said to exceed.
        None => estimate * COUNT_AGREEMENT >= limit as f64,
    }
}

/// Whether the wording that matched is text the request itself carried.
fn echoes(signal: &OverflowSignal, sent: &[u8]) -> bool {
    let Some(matched) = signal.matched.as_deref() else {
        return false;
    };
    String::from_utf8_lossy(sent)
        .to_lowercase()
        .contains(matched)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::overflow::SignatureTable;

    fn signal(body: &str) -> OverflowSignal {
        SignatureTable::builtin()
            .detect(400, body.as_bytes())
            .expect("an overflow")
    }

    fn request(tokens: usize) -> Vec<u8> {
        format!(
            r#"{{"messages":[{{"role":"user","content":"{}"}}]}}"#,
            "word ".repeat(tokens * 4 / 5)
        )
        .into_bytes()
    }

    #[test]
    fn an_overflow_whose_numbers_match_the_request_teaches_its_window() {
        let sent = request(9_000);
        let overflow = signal(
            r#"{"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens. Please reduce the length of the messages.","code":"context_length_exceeded"}}"#,
        );
        assert!(teaches_window(&overflow, &sent, Calibration::default()));
    }

    #[test]
    fn a_count_far_from_the_request_teaches_nothing() {
        let sent = request(3_000);
        let overflow = signal(
            r#"{"error":{"message":"This model's maximum context length is 1000 tokens. However, your messages resulted in 90000 tokens.","code":"context_length_exceeded"}}"#,
        );
        assert!(!teaches_window(&overflow, &sent, Calibration::default()));
    }

    #[test]
    fn an_echo_of_the_clients_own_text_teaches_nothing() {
        let mut sent = request(3_000);
        sent.splice(
            1..1,
            br#""Maximum context length is 1000 tokens":true,"#.iter().copied(),
        );
        let echoed = OverflowSignal {
            signature: crate::overflow::SignatureName::Builtin("generic"),
            cause: crate::overflow::OverflowCause::Input,
            limit: Some(1_000),
            actual: None,
            requested_output: None,
            matched: Some("maximum context length is 1000 tokens".into()),
        };
        assert!(!teaches_window(&echoed, &sent, Calibration::default()));
        let own = OverflowSignal {
            matched: Some("exceeds the context window".into()),
            ..echoed
        };
        assert!(teaches_window(&own, &sent, Calibration::default()));
    }

    #[test]
    fn a_count_far_below_the_estimate_is_a_cut_and_noise_or_caching_is_not() {
        assert!(silently_truncated(4_000, 2_048, 0), "Ollama kept num_ctx");
        assert!(silently_truncated(4_000, 2_700, 0), "a third cut");
        assert!(
            !silently_truncated(4_000, 3_000, 0),
            "25 % below: calibration noise"
        );
        assert!(
            !silently_truncated(4_000, 800, 3_200),
            "cached tokens reported apart"
        );
        assert!(!silently_truncated(200, 20, 0), "too small to matter");
    }

    #[test]
    fn a_request_far_below_a_numberless_limit_teaches_nothing() {
        let overflow = signal(
            r#"{"error":{"message":"This model's maximum context length is 128000 tokens.","code":"context_length_exceeded"}}"#,
        );
        assert!(!teaches_window(
            &overflow,
            &request(2_000),
            Calibration::default()
        ));
        assert!(teaches_window(
            &overflow,
            &request(100_000),
            Calibration::default()
        ));
    }
}
