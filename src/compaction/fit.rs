//! Step 7, compact: a summary cut to size.
//!
//! Cutting a summary to size (pure). Only what is over the size goes: the
//! cut falls at a line end close to it, else at a word end, else (a word
//! longer than the reach, or a script written without spaces) at a
//! character, so what remains reads as written and keeps everything before
//! the cut. Never back to a sentence far before the size: a model that
//! writes long sentences, or none, would lose most of what it wrote.

/// How far before the size a cut may fall to end a line or a word: a
/// tenth of the size, and at least [`MIN_REACH`] bytes (one long word).
const REACH_SHARE: usize = 10;
const MIN_REACH: usize = 32;

/// The start of `text` that takes at most `max_bytes`, without trailing
/// whitespace: all of it when it fits, else cut at the last line end
/// within reach of `max_bytes`, else the last word end, else the last
/// character boundary.
pub fn cut(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut floor = end.saturating_sub((max_bytes / REACH_SHARE).max(MIN_REACH));
    while !text.is_char_boundary(floor) {
        floor += 1;
    }
    // Byte offsets in `floor..=end` before which the text may end: `at`
    // with the next character a line break or a space.
    let before = |wanted: fn(char) -> bool| {
        text[floor..]
            .char_indices()
            .map(|(at, c)| (floor + at, c))
            .take_while(|&(at, _)| at <= end)
            .filter(|&(_, c)| wanted(c))
            .map(|(at, _)| at)
            .last()
    };
    let at = before(|c| c == '\n')
        .or_else(|| before(char::is_whitespace))
        .unwrap_or(end);
    text[..at].trim_end()
}

/// `text` within `max_bytes`: whole when it fits, else [`cut`]. For a
/// summary whose tokens no upstream counted: `max_bytes` is an estimate.
pub fn within(text: String, max_bytes: usize) -> String {
    match text.len() <= max_bytes {
        true => text,
        false => cut(&text, max_bytes).to_owned(),
    }
}

/// `text`, which the upstream counted at `tokens`, within `max_tokens` of
/// that count: whole when it is, else about `max_tokens / tokens` of it,
/// [`cut`] where it reads well. What goes is what is over, no more.
pub fn to_tokens(text: String, tokens: u64, max_tokens: u64) -> String {
    if tokens <= max_tokens {
        return text;
    }
    let keep = text.len() as u128 * u128::from(max_tokens) / u128::from(tokens);
    cut(&text, usize::try_from(keep).unwrap_or(usize::MAX)).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The summary Kilo Code's summarizer wrote against a 32,000-token
    /// window (issue 52): one short sentence, then prose that the output
    /// limit stopped mid-sentence, 8,000 bytes for 2,000 tokens.
    fn kilo_summary() -> String {
        let first = "The user is building a CLI tool for log analysis in Rust.";
        let clause = ", then the assistant read src/parse.rs and FACT-0042 held";
        let mut text = first.to_string();
        while text.len() < 8_000 {
            text.push_str(clause);
        }
        text.truncate(8_000);
        text
    }

    #[test]
    fn a_summary_at_its_counted_budget_is_kept_whole_whatever_its_bytes() {
        let text = kilo_summary();
        assert_eq!(to_tokens(text.clone(), 2_000, 2_000), text);
        assert_eq!(to_tokens(text.clone(), 1_990, 2_000), text);
    }

    #[test]
    fn a_summary_over_its_budget_keeps_about_its_share_never_only_its_first_sentence() {
        // A reasoning model's limit covered its reasoning and its text: it
        // wrote 2,000 tokens for a budget of 1,500.
        let text = kilo_summary();
        let kept = to_tokens(text.clone(), 2_000, 1_500);
        assert!(text.starts_with(&kept));
        assert!(kept.len() <= 6_000, "{} bytes", kept.len());
        assert!(kept.len() >= 6_000 - 32, "{} bytes", kept.len());
        assert!(kept.ends_with(|c: char| !c.is_whitespace()));
        // At a word end: what follows the cut starts a new word.
        let next = &text[kept.len()..];
        assert!(next.starts_with(char::is_whitespace), "{next:.20}");
    }

    #[test]
    fn a_line_end_close_to_the_size_is_preferred_to_a_word_end() {
        let text = "- src/main.rs edited\n- tests pass\n- open: the README and the docs";
        // 40 bytes end inside the third line; the second line ends at 33.
        assert_eq!(cut(text, 40), "- src/main.rs edited\n- tests pass");
        // A line end further back than the reach is not taken.
        let long = format!("{}\n{}", "a ".repeat(100), "word ".repeat(200));
        let kept = cut(&long, 900);
        assert!(kept.len() > 850 && kept.ends_with("word"), "{}", kept.len());
    }

    #[test]
    fn prose_without_line_ends_is_cut_at_a_word() {
        let text = "Goal: read the log. State: done! Next: the tests? More text";
        assert_eq!(
            cut(text, 55),
            "Goal: read the log. State: done! Next: the tests? More"
        );
        assert_eq!(cut(text, 10), "Goal: read");
        assert_eq!(cut(text, text.len()), text);
    }

    #[test]
    fn a_text_without_spaces_is_cut_at_a_character() {
        assert_eq!(within("Short.".into(), 100), "Short.");
        assert_eq!(within("ééééé".into(), 5), "éé");
        let text = "日志已读测试通过";
        assert_eq!(cut(text, 10), "日志已");
        let path = format!("/srv/{}", "x".repeat(200));
        assert_eq!(cut(&path, 100).len(), 100);
    }

    #[test]
    fn an_uncounted_summary_over_its_estimate_is_cut_by_words_not_sentences() {
        let text = kilo_summary();
        let kept = within(text.clone(), 7_959);
        assert!(kept.len() > 7_900, "{} bytes", kept.len());
        assert!(text.starts_with(&kept));
    }
}
