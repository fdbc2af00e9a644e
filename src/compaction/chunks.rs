//! Step 7, compact: summary calls.
//!
//! Packing a transcript into summary calls (pure): the largest chunks one
//! call can carry, at most `max_calls` of them. A transcript larger than
//! that has its largest entries cut in the middle (head and tail kept, as
//! tool results are trimmed) until it fits; when even that cannot make it
//! fit, the compaction is refused before any call is paid for.

use crate::protocol::elide_middle;

/// Smallest an entry is cut to, in bytes: enough to say what it was.
pub const MIN_ENTRY_BYTES: usize = 160;

/// Rounds of cutting before giving up on a transcript.
const MAX_ROUNDS: usize = 12;

/// One summary call's share of the transcript.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    pub text: String,
    /// How many transcript entries it holds.
    pub entries: usize,
}

/// `entries` in at most `max_calls` chunks of at most `chunk_bytes` each.
pub fn pack(entries: &[String], chunk_bytes: usize, max_calls: usize) -> Option<Vec<Chunk>> {
    if chunk_bytes < 2 * MIN_ENTRY_BYTES || max_calls == 0 {
        return None;
    }
    let mut cap = chunk_bytes / 2;
    for _ in 0..MAX_ROUNDS {
        let chunks = greedy(entries, chunk_bytes, cap);
        if chunks.len() <= max_calls {
            return Some(chunks);
        }
        let target = max_calls * chunk_bytes * 9 / 10;
        let next = water_level(entries, target).min(cap * 4 / 5);
        if next < MIN_ENTRY_BYTES {
            return None;
        }
        cap = next;
    }
    None
}

/// Fills chunks in order, each entry cut to `cap` bytes at most.
fn greedy(entries: &[String], chunk_bytes: usize, cap: usize) -> Vec<Chunk> {
    let mut chunks: Vec<Chunk> = Vec::new();
    for entry in entries {
        let cut = elide_middle(entry, cap);
        let entry = cut.as_deref().unwrap_or(entry);
        match chunks.last_mut() {
            Some(last) if last.text.len() + entry.len() < chunk_bytes => {
                last.text.push_str(entry);
                last.text.push('\n');
                last.entries += 1;
            }
            _ => chunks.push(Chunk {
                text: format!("{entry}\n"),
                entries: 1,
            }),
        }
    }
    chunks
}

/// The largest per-entry cap under which the entries total `target` bytes
/// or less; `0` when even the smallest cap exceeds it.
fn water_level(entries: &[String], target: usize) -> usize {
    let total = |cap: usize| -> usize { entries.iter().map(|e| e.len().min(cap) + 1).sum() };
    let (mut low, mut high) = (0usize, entries.iter().map(String::len).max().unwrap_or(0));
    while low < high {
        let middle = (low + high).div_ceil(2);
        if total(middle) <= target {
            low = middle;
        } else {
            high = middle - 1;
        }
    }
    low
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(count: usize, bytes: usize) -> Vec<String> {
        (0..count)
            .map(|i| format!("{i:04} {}", "x".repeat(bytes - 5)))
            .collect()
    }

    #[test]
    fn a_transcript_that_fits_one_call_takes_one_call() {
        let chunks = pack(&entries(10, 100), 2_000, 4).expect("fits");
        assert_eq!(chunks.len(), 1);
        assert_eq!(chunks[0].entries, 10);
    }

    #[test]
    fn chunks_are_as_large_as_a_call_allows() {
        let chunks = pack(&entries(40, 100), 2_000, 4).expect("fits");
        assert_eq!(chunks.len(), 3);
        assert!(chunks.iter().all(|c| c.text.len() < 2_000));
        assert_eq!(chunks.iter().map(|c| c.entries).sum::<usize>(), 40);
    }

    #[test]
    fn a_transcript_too_large_for_the_calls_has_its_largest_entries_cut() {
        let mut big = entries(6, 100);
        big.push("y".repeat(50_000));
        let chunks = pack(&big, 2_000, 2).expect("fits once cut");
        assert!(chunks.len() <= 2);
        let text: String = chunks.iter().map(|c| c.text.as_str()).collect();
        assert!(text.contains("condenser trimmed"));
        assert!(text.contains("0005 xxx"), "small entries are kept whole");
    }

    #[test]
    fn a_transcript_no_cutting_can_fit_is_refused() {
        assert_eq!(pack(&entries(100_000, 40), 8_000, 4), None);
        assert_eq!(pack(&entries(1, 40), 100, 4), None, "no room for a call");
    }
}
