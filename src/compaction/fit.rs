//! Step 7, compact: a summary cut to size.
//!
//! Cutting a summary to size (pure): whole sentences or lines only, so what
//! remains reads as written.

/// The longest start of `text` that ends a sentence or a line and takes at
/// most `max_bytes`, without trailing whitespace; `None` when not even its
/// first sentence fits.
pub fn cut_to_sentences(text: &str, max_bytes: usize) -> Option<&str> {
    let end = text
        .char_indices()
        .map(|(at, c)| (at + c.len_utf8(), c))
        .take_while(|&(end, _)| end <= max_bytes)
        .filter(|&(end, c)| ends_sentence(text, end, c))
        .map(|(end, _)| end)
        .last()?;
    let kept = text[..end].trim_end();
    (!kept.is_empty()).then_some(kept)
}

/// `text` within `max_bytes`: whole when it fits, else cut to its last
/// whole sentence that does, else (a single endless sentence) cut at a
/// character boundary.
pub fn within(text: String, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text;
    }
    if let Some(kept) = cut_to_sentences(&text, max_bytes) {
        return kept.to_owned();
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// Whether `c`, ending at byte `end`, closes a sentence or a line.
fn ends_sentence(text: &str, end: usize, c: char) -> bool {
    // Full-width stops need no space after them.
    let before_space = text[end..].chars().next().is_none_or(char::is_whitespace);
    matches!(c, '\n' | '。' | '！' | '？') || (matches!(c, '.' | '!' | '?') && before_space)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_whole_sentences_that_fit() {
        let text = "Goal: read the log. State: done! Next: the tests? More text";
        assert_eq!(
            cut_to_sentences(text, text.len()),
            Some("Goal: read the log. State: done! Next: the tests?")
        );
        assert_eq!(cut_to_sentences(text, 25), Some("Goal: read the log."));
        assert_eq!(cut_to_sentences(text, 10), None);
    }

    #[test]
    fn a_line_ends_where_a_list_item_ends() {
        let text = "- src/main.rs edited\n- tests pass\n- open: the README";
        assert_eq!(
            cut_to_sentences(text, 40),
            Some("- src/main.rs edited\n- tests pass")
        );
    }

    #[test]
    fn a_dot_inside_a_word_is_no_sentence_end() {
        let text = "Edited src/main.rs and config.toml";
        assert_eq!(cut_to_sentences(text, text.len()), None);
    }

    #[test]
    fn a_text_over_its_bytes_keeps_its_whole_sentences_or_else_its_start() {
        assert_eq!(within("Short.".into(), 100), "Short.");
        assert_eq!(within("One. Two. Three.".into(), 10), "One. Two.");
        assert_eq!(within("ééééé".into(), 5), "éé");
    }

    #[test]
    fn multibyte_text_is_cut_on_character_boundaries() {
        let text = "日志已读。测试通过。";
        assert_eq!(cut_to_sentences(text, 20), Some("日志已读。"));
    }
}
