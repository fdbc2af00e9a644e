//! Step 1, accept: what a chat body will cost in memory, known before it
//! is parsed.
//!
//! Once read, a chat body is parsed, hashed and queued for the store, and
//! what that costs depends on its shape more than on its size
//! (bench/README.md, "The chat body budget"):
//!
//! - every byte is held a few times over: the body, its strings parsed,
//!   its messages' canonical form and rows;
//! - every JSON value is a node of the parsed tree (an object's map, a
//!   key, a slot of an array), some 200 bytes, so many short messages cost
//!   four times what one long string of the same size costs;
//! - a string with escapes is unescaped through a scratch buffer that
//!   grows to twice the longest such string and is kept while the body is
//!   parsed.
//!
//! [`Scale`] counts these as the body arrives, chunk by chunk: the values
//! are the `{`, `[` and `,` outside strings (each value but the first
//! follows one), the strings are followed past their escapes. One pass of
//! `memchr` over the bytes, far cheaper than the parse it prices.
//!
//! A weight is in bytes of the costliest shape measured, short messages,
//! where each weighs [`BODY_EXPANSION`] bytes of memory: a body of short
//! messages weighs about its size, an image about a quarter of it. So
//! `server.max_inflight_body_bytes` keeps the meaning it had when every
//! body was counted at that cost.

use crate::config::BODY_EXPANSION;

// Each cost is the highest peak measured (bench/README.md, "The chat
// body budget": 200 bodies of 1 MiB and 40 of 30 MiB, each shape, all in
// flight at once) plus a fifth, in tenths of a byte of memory.

/// Memory per byte of body, whatever its shape: measured 3.6 for base64
/// images (2.9 at 1 MiB), where nearly every byte is one string's.
const BYTE_COST: usize = 43;
/// Memory per JSON value beyond its bytes: measured 16.8 to 17.8 bytes per
/// byte for short messages, 0.068 values a byte, so 209 a value once the
/// bytes' 3.6 are taken.
const VALUE_COST: usize = 2_500;
/// Memory per byte of the longest string with escapes, beyond its bytes:
/// measured 1.4 for one 1 MiB tool result over an image of the same size.
const SCRATCH_COST: usize = 17;
/// What one unit of weight is in these tenths: [`BODY_EXPANSION`] bytes.
const WEIGHT: usize = 10 * BODY_EXPANSION as usize;

/// A body's weight so far, fed its chunks in order.
#[derive(Debug, Default)]
pub struct Scale {
    /// Inside a string, and how far into it.
    string: Option<OpenString>,
    longest_escaped: usize,
}

#[derive(Debug, Default, Clone, Copy)]
struct OpenString {
    length: usize,
    escapes: bool,
    /// A part was not looked at for escapes (see [`Scale::note_escapes`]).
    unread: bool,
    /// The last chunk ended on an odd run of backslashes: the next byte is
    /// escaped.
    escaping: bool,
}

impl Scale {
    /// What `chunk`, the body's next bytes, adds to its weight, without
    /// its bytes' own (see [`weigh_bytes`]).
    pub fn add(&mut self, chunk: &[u8]) -> usize {
        let longest_before = self.longest_escaped;
        let values = self.scan(chunk);
        let scratch = (self.longest_escaped - longest_before) * SCRATCH_COST;
        (values * VALUE_COST + scratch).div_ceil(WEIGHT)
    }

    /// Values started in `chunk`; the longest escaped string updated.
    fn scan(&mut self, mut chunk: &[u8]) -> usize {
        let mut values = 0;
        while !chunk.is_empty() {
            match self.string.take() {
                Some(open) => chunk = self.in_string(open, chunk),
                None => match memchr::memchr(b'"', chunk) {
                    Some(quote) => {
                        values += separators(&chunk[..quote]);
                        self.string = Some(OpenString::default());
                        chunk = &chunk[quote + 1..];
                    }
                    None => {
                        values += separators(chunk);
                        chunk = &[];
                    }
                },
            }
        }
        values
    }

    /// Follows an open string through `chunk`; what is left after it. Its
    /// end is the first quote after an even run of backslashes; an escape
    /// is any backslash, looked for once per string and chunk, and only in
    /// a string that would be the longest with escapes.
    fn in_string<'a>(&mut self, mut open: OpenString, chunk: &'a [u8]) -> &'a [u8] {
        let mut from = 0;
        while let Some(found) = memchr::memchr(b'"', &chunk[from..]) {
            let quote = from + found;
            if escaped(&chunk[..quote], open.escaping) {
                from = quote + 1;
                continue;
            }
            self.note_escapes(&mut open, &chunk[..quote]);
            open.length += quote;
            self.closed(open);
            return &chunk[quote + 1..];
        }
        self.note_escapes(&mut open, chunk);
        open.escaping = escaped(chunk, open.escaping);
        open.length += chunk.len();
        self.still_open(open, &[])
    }

    /// Notes whether `open`, going on with `more`, has escapes, where it
    /// matters: a string no longer than the longest with escapes so far
    /// changes nothing, and most strings of a body are not, so most are
    /// not read twice. A part left unread counts as escaped once the string
    /// grows past the longest: the scratch is over-weighed, never under.
    fn note_escapes(&self, open: &mut OpenString, more: &[u8]) {
        if open.escapes {
            return;
        }
        if open.length + more.len() <= self.longest_escaped {
            open.unread = true;
            return;
        }
        open.escapes = open.unread || memchr::memchr(b'\\', more).is_some();
    }

    /// A string that goes on in the next chunk: weighed as far as it came.
    fn still_open<'a>(&mut self, open: OpenString, rest: &'a [u8]) -> &'a [u8] {
        self.closed(open);
        self.string = Some(open);
        rest
    }

    /// The string so far counts toward the longest with escapes.
    fn closed(&mut self, open: OpenString) {
        if open.escapes {
            self.longest_escaped = self.longest_escaped.max(open.length);
        }
    }
}

/// Whether the byte after `before` is escaped: an odd run of backslashes
/// ends `before` (counted on from the last chunk's, `escaping`, when the
/// run fills it).
fn escaped(before: &[u8], escaping: bool) -> bool {
    let run = before
        .iter()
        .rev()
        .take_while(|&&byte| byte == b'\\')
        .count();
    let odd = run % 2 == 1;
    if run == before.len() {
        odd != escaping
    } else {
        odd
    }
}

/// `{`, `[` and `,`: a plain count the compiler vectorizes.
fn separators(structure: &[u8]) -> usize {
    structure
        .iter()
        .filter(|&&byte| byte == b'{' || byte == b'[' || byte == b',')
        .count()
}

/// What `bytes` of a body weigh before their values are counted.
pub fn weigh_bytes(bytes: usize) -> usize {
    (bytes * BYTE_COST).div_ceil(WEIGHT)
}

/// What a whole body weighs.
pub fn weigh(body: &[u8]) -> usize {
    weigh_bytes(body.len()) + Scale::default().add(body)
}

/// The most any `bytes` can weigh, whatever their shape: a value at every
/// byte, and all of them one string with escapes. A body leased this much
/// need not be weighed as it comes (`http/budget.rs`).
pub fn most(bytes: usize) -> usize {
    weigh_bytes(bytes) + (bytes * (VALUE_COST + SCRATCH_COST)).div_ceil(WEIGHT)
}

/// The most `bytes` of a chat body weigh where its values are no denser
/// than one every 8 bytes: the shortest message
/// (`{"role":"user","content":""},`) starts three values in 29 bytes.
pub fn heaviest(bytes: usize) -> usize {
    weigh_bytes(bytes) + (bytes / 8 * VALUE_COST).div_ceil(WEIGHT)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    /// A chat body of about `size` bytes of `message`s.
    fn messages(size: usize, message: &str) -> Vec<u8> {
        let count = (size / (message.len() + 1)).max(1);
        let messages = vec![message; count].join(",");
        format!(r#"{{"model":"m","messages":[{messages}]}}"#).into_bytes()
    }

    fn per_byte(body: &[u8]) -> f64 {
        weigh(body) as f64 / body.len() as f64
    }

    #[test]
    fn short_messages_weigh_about_their_size_and_one_long_string_far_less() {
        let short = messages(MIB, r#"{"role":"user","content":"r1 m52 ok"}"#);
        assert!(
            (0.9..1.3).contains(&per_byte(&short)),
            "{}",
            per_byte(&short)
        );
        let image = messages(
            MIB,
            &format!(r#"{{"role":"user","content":"{}"}}"#, "A".repeat(MIB)),
        );
        assert!(per_byte(&image) < 0.25, "{}", per_byte(&image));
    }

    #[test]
    fn separators_inside_strings_are_not_values() {
        let code = "let (a, b) = f(x, [y, z], {w});\\n".repeat(1000);
        let body = messages(0, &format!(r#"{{"role":"tool","content":"{code}"}}"#));
        let mut scale = Scale::default();
        scale.scan(&body);
        assert_eq!(scale.longest_escaped, code.len());
        let values = Scale::default().scan(&body);
        assert_eq!(
            values, 5,
            "the body, its second member, the array, the message, its second member"
        );
    }

    #[test]
    fn a_string_with_escapes_weighs_its_scratch_buffer_once() {
        let plain = messages(
            0,
            &format!(r#"{{"role":"tool","content":"{}"}}"#, "a".repeat(MIB)),
        );
        let escaped = messages(
            0,
            &format!(
                r#"{{"role":"tool","content":"{}"}}"#,
                "a\\n".repeat(MIB / 3)
            ),
        );
        assert!(weigh(&escaped) > weigh(&plain) + MIB * SCRATCH_COST / WEIGHT * 9 / 10);
    }

    #[test]
    fn chunks_weigh_what_the_whole_body_weighs_wherever_they_are_cut() {
        let body = messages(
            64 * 1024,
            r#"{"role":"assistant","content":"say \"fine\", thanks\\"},{"role":"user","content":"[a, {b}]"}"#,
        );
        let whole = Scale::default().add(&body);
        for size in [1, 2, 3, 7, 64, 4096] {
            let mut scale = Scale::default();
            let chunked: usize = body.chunks(size).map(|chunk| scale.scan(chunk)).sum();
            assert_eq!(chunked, Scale::default().scan(&body), "chunks of {size}");
            assert_eq!(scale.longest_escaped, Scale::default().longest(&body));
        }
        assert!(whole > 0);
    }

    #[test]
    fn an_escape_in_a_part_skipped_still_counts_once_the_string_is_longest() {
        let long = format!(r#"\n{}"#, "a".repeat(100));
        let body = format!(r#"{{"messages":["\"short\"","{long}"]}}"#).into_bytes();
        let whole = Scale::default().longest(&body);
        assert_eq!(whole, long.len());
        for size in [1, 2, 3, 7, 16, 64] {
            let mut scale = Scale::default();
            body.chunks(size).for_each(|chunk| {
                scale.scan(chunk);
            });
            assert_eq!(scale.longest_escaped, whole, "chunks of {size}");
        }
    }

    #[test]
    fn no_chat_body_weighs_more_than_the_heaviest_and_a_bare_array_does() {
        let shortest = messages(MIB, r#"{"role":"user","content":""}"#);
        assert!(weigh(&shortest) <= heaviest(shortest.len()));
        // Values in the bytes they take: a parsed tree far larger than 20
        // bytes a byte, weighed as such rather than at a fixed rate.
        let numbers = format!("[{}0]", "0,".repeat(MIB / 2)).into_bytes();
        assert!(weigh(&numbers) > 4 * numbers.len());
    }

    #[test]
    fn no_body_weighs_more_than_the_most_its_size_can() {
        let bodies = [
            format!("[{}0]", "0,".repeat(MIB / 2)),
            format!("{}{}", "[".repeat(MIB / 2), "]".repeat(MIB / 2)),
            format!("[{}[]]", "[],".repeat(MIB / 3)),
            format!(r#"["{}"]"#, "\\n".repeat(MIB / 2)),
            String::from_utf8(messages(MIB, r#"{"role":"user","content":""}"#)).expect("ASCII"),
        ];
        for body in bodies {
            assert!(weigh(body.as_bytes()) <= most(body.len()), "{}", &body[..8]);
        }
        assert_eq!(most(0), 0);
    }

    impl Scale {
        fn longest(mut self, body: &[u8]) -> usize {
            self.scan(body);
            self.longest_escaped
        }
    }
}
