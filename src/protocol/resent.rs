//! Step 2, identify: a re-sent list, found by its bytes.
//!
//! Agents re-send their whole history on every turn, so a large body
//! usually begins with an earlier body's bytes up to one of its messages.
//! Finding where a list's items are ([`super::request::split`]) scans
//! every string in them, byte by byte for escapes: for an 800 KB history,
//! two thirds of all the instructions the request costs. So the spans of a
//! large body's list are remembered here, under digests of the body's
//! leading bytes, and a later body that begins with the same bytes takes
//! the spans of the items they hold and scans only what follows.
//!
//! Equal bytes scan the same way, so the spans found are those a whole
//! scan would find. What follows the last shared item is read by serde_json
//! as a document of its own, `{"<list>":[0` and the rest of the body, at
//! the same depth as in the body, and the fields before the list as the
//! body's start closed with `[]}`; either failing sends the body to the
//! whole scan. An item is shared only if it ends on a byte that ends a
//! value whatever follows (`}`, `]`, `"`): a number's end depends on the
//! byte after it.
//!
//! The digests are 128-bit XXH3 under a secret drawn at start-up, of the
//! caller's credential ([`as_caller`]), the list's name and the bytes from
//! the body's start (as identity's memo, `conversation::memo`): equal
//! digests are equal bytes of the same caller, and a client cannot craft
//! a collision. Nothing of a body is kept but offsets and digests.
//!
//! A body is found by the digests of its first 16 KB, 32 KB, 64 KB, …
//! (doubling, up to its last item): the longest of them an earlier body
//! was kept under names the earlier body that shares the most with it,
//! even when many conversations begin with the same system prompt.
//!
//! Those digests, and the comparison with the kept body's items, take
//! one pass over the bytes in order, so they are taken as the body
//! arrives ([`Arriving`], fed each chunk as the body is read): by its
//! last byte, the pass a large history costs is behind it, done while
//! the rest was on its way and each chunk still in the cache. A body read
//! whole is fed to the same pass at once.

use bytes::Bytes;
use quick_cache::sync::Cache;
use quick_cache::Weighter;
use serde_json::{Map, Value};
use std::cell::Cell;
use std::ops::Range;
use std::sync::{Arc, OnceLock};
use xxhash_rust::xxh3::Xxh3;

use super::scan::{split_whole, Spans};

/// Bodies shorter than this are scanned whole: their scan costs less than
/// the digests, and they are not kept.
const SHORTEST: usize = 16 * 1024;

/// Bytes of kept spans and digests (40 an item, 16 a level), counted
/// under each level a list is found by: about 650 histories of 200
/// messages and 800 KB (six levels), more of shorter ones.
const KEPT_BYTES: u64 = 32 * 1024 * 1024;

/// The lists of large bodies seen lately, shared by every request.
pub(super) struct Resent {
    /// Each kept list under the digest of each of its levels.
    levels: Cache<u128, Arc<Kept>, KeptBytes>,
    /// A hasher holding the per-process secret, cloned for every body.
    hasher: Xxh3,
}

/// A body read from a kept one: its fields, its items' spans, and what
/// keeping it takes over from the kept one.
pub(super) struct Resumed {
    pub body: Map<String, Value>,
    pub spans: Spans,
    shared: Shared,
}

/// What a body shares with a kept one: the first `items` of its items,
/// and the hasher's state at the end of the last of them when it was
/// left there (`None` when the comparison had gone past it).
struct Shared {
    kept: Arc<Kept>,
    items: usize,
    hasher: Option<Xxh3>,
}

impl Resumed {
    /// Whether the body has items the kept one had not: then it is kept
    /// in its turn, for the body that will grow from it.
    pub(super) fn grew(&self) -> bool {
        self.shared.items < self.spans.len()
    }
}

/// A body's list as kept: where it opens, its items, and the digests of
/// the body's bytes up to each item's end and up to each of its levels.
struct Kept {
    list_start: usize,
    items: Spans,
    digests: Vec<u128>,
    levels: Vec<u128>,
}

/// Where keeping a body's digests starts: from its first byte, or from
/// the end of the items it shares with a kept body.
struct Start {
    hasher: Xxh3,
    at: usize,
    digests: Vec<u128>,
    levels: Vec<u128>,
}

#[derive(Clone)]
struct KeptBytes;

impl Weighter<u128, Arc<Kept>> for KeptBytes {
    fn weight(&self, _key: &u128, kept: &Arc<Kept>) -> u64 {
        // Shared by its levels, a kept list is counted under each: the
        // bound is on the worst case.
        (kept.items.len() * 40 + kept.levels.len() * 16 + 64) as u64
    }
}

/// A body's fields and list, as [`split`] reads them.
pub(crate) struct Listed {
    /// The fields, the list's place null.
    pub body: Map<String, Value>,
    /// The spans of the list's items; `None` when the list is absent.
    pub items: Option<Spans>,
    /// The digests of the body's bytes through each item, when it is kept.
    pub prefixes: Option<Prefixes>,
}

/// What [`split_whole`] finds in `text`: a large body that begins with an
/// earlier one's bytes is read from the earlier one's spans up to there.
pub(crate) fn split(text: &[u8], list: &str) -> Option<Listed> {
    let arrived = ARRIVED
        .take()
        .and_then(|arrived| arrived.of(text, list, CALLER.get()));
    resent().split(text, list, arrived)
}

/// A body's pass over its bytes ([`Resent::resume`]), taken chunk by
/// chunk as it arrives: the digests of its levels, each looked up as soon
/// as its bytes are in, and the digests through the items of the kept
/// body the longest level found, compared as they come.
pub struct Arriving {
    list: &'static str,
    caller: Option<u128>,
    /// Boxed: a pass is two hashers' states, over a kilobyte, and an
    /// `Option<Arrived>` is moved through every call from the body's read
    /// to identification, taken or not (a small body takes none).
    pass: Box<Pass>,
}

impl Arriving {
    /// Whether a body of `declared` bytes (`None`: not declared) may be
    /// long enough to be found or kept: a shorter one is scanned whole.
    pub fn may_be_kept(declared: Option<usize>) -> bool {
        declared.is_none_or(|length| length >= SHORTEST)
    }

    /// The pass over a body whose history is listed under `list`, sent
    /// with `credential` (as [`as_caller`] names the caller).
    pub fn new(credential: Option<&[u8]>, list: &'static str) -> Self {
        let memo = resent();
        let caller = caller_digest(memo, credential);
        Self {
            list,
            caller,
            pass: Box::new(memo.pass(caller, list)),
        }
    }

    /// Takes the next `chunk` of the body's bytes.
    pub fn update(&mut self, chunk: &[u8]) {
        self.pass.update(resent(), chunk);
    }

    /// The pass done over `text`, the whole body it took: `None` unless
    /// every byte of it, and nothing else, went through [`Arriving::update`].
    pub fn arrived(self, text: &Bytes) -> Option<Arrived> {
        (self.pass.at == text.len()).then(|| Arrived {
            text: text.clone(),
            arriving: self,
        })
    }
}

/// A body's pass, done as it arrived, and the body it was done over.
pub struct Arrived {
    /// Held so that the bytes a read is given are known to be these: the
    /// same address, which no other buffer can take while this one lives.
    text: Bytes,
    arriving: Arriving,
}

impl Arrived {
    /// The pass, if it was over `text`, read under `list` by `caller`.
    fn of(self, text: &[u8], list: &str, caller: Option<u128>) -> Option<Box<Pass>> {
        let same = std::ptr::eq(self.text.as_ptr(), text.as_ptr()) && self.text.len() == text.len();
        let Arriving {
            list: listed,
            caller: sent_by,
            pass,
        } = self.arriving;
        (same && listed == list && sent_by == caller).then_some(pass)
    }
}

/// The pass itself: the bytes hashed in order, a digest taken at each
/// level and at the end of each kept item compared.
struct Pass {
    hasher: Xxh3,
    /// The bytes taken so far.
    at: usize,
    /// The next level to look up; `None` once one was not found.
    next_level: Option<usize>,
    candidate: Option<Candidate>,
}

/// The kept body the longest level found so far names, and how many of
/// its items the body begins with so far.
struct Candidate {
    kept: Arc<Kept>,
    items: usize,
    /// The hasher's state at the end of the last item compared one by one
    /// and found the same.
    at_end: Option<Xxh3>,
    /// No item compared differed yet.
    comparing: bool,
}

impl Candidate {
    /// The items ending within `level` are the same bytes; those after it
    /// are compared one by one.
    fn at_level(kept: Arc<Kept>, level: usize) -> Self {
        let items = kept.items.partition_point(|item| item.end <= level);
        Self {
            kept,
            items,
            at_end: None,
            comparing: true,
        }
    }

    /// Where the next item to compare ends.
    fn next_end(&self) -> Option<usize> {
        let next = self.kept.items.get(self.items);
        next.filter(|_| self.comparing).map(|item| item.end)
    }
}

impl Pass {
    fn update(&mut self, memo: &Resent, chunk: &[u8]) {
        let start = self.at;
        let end = start + chunk.len();
        while let Some(next) = self.next_checkpoint().filter(|&next| next <= end) {
            self.hasher.update(&chunk[self.at - start..next - start]);
            self.at = next;
            self.checkpoint(memo);
        }
        // Past the last digest to take, the rest is not hashed.
        if self.next_checkpoint().is_some() {
            self.hasher.update(&chunk[self.at - start..]);
        }
        self.at = end;
    }

    /// The next offset a digest is taken at: a level's, or the end of the
    /// next item compared.
    fn next_checkpoint(&self) -> Option<usize> {
        let item = self.candidate.as_ref().and_then(Candidate::next_end);
        match (self.next_level, item) {
            (Some(level), Some(item)) => Some(level.min(item)),
            (level, item) => level.or(item),
        }
    }

    fn checkpoint(&mut self, memo: &Resent) {
        let (at, digest) = (self.at, self.hasher.digest128());
        if self.next_level == Some(at) {
            match memo.levels.get(&digest) {
                Some(kept) => {
                    self.candidate = Some(Candidate::at_level(kept, at));
                    self.next_level = at.checked_mul(2);
                }
                None => self.next_level = None,
            }
        }
        let Some(candidate) = self.candidate.as_mut() else {
            return;
        };
        if candidate.next_end() == Some(at) {
            if candidate.kept.digests[candidate.items] == digest {
                candidate.items += 1;
                candidate.at_end = Some(self.hasher.clone());
            } else {
                candidate.comparing = false;
            }
        }
    }

    /// What `text`, all of whose bytes were taken, shares with the kept
    /// body found.
    fn shared(self, text: &[u8]) -> Option<Shared> {
        let Candidate {
            kept,
            mut items,
            mut at_end,
            ..
        } = self.candidate?;
        // An item ending at the body's last byte is not one the body
        // continues after: not shared.
        if items > 0 && kept.items[items - 1].end >= text.len() {
            items -= 1;
            at_end = None;
        }
        let delimited = |items: usize| ends_a_value(text[kept.items[items - 1].end - 1]);
        if items > 0 && !delimited(items) {
            at_end = None;
            while items > 0 && !delimited(items) {
                items -= 1;
            }
        }
        (items > 0).then_some(Shared {
            kept,
            items,
            hasher: at_end,
        })
    }
}

/// The digests naming a body's bytes from its start through the end of
/// each of its list's items (with its caller and the list's name), as the
/// memo keeps them: equal digests, equal bytes. Identity's memo finds a
/// re-sent history's chain by them without hashing its messages again.
#[derive(Clone)]
pub struct Prefixes {
    kept: Arc<Kept>,
    /// How many of the kept items are the body's.
    items: usize,
}

impl std::fmt::Debug for Prefixes {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Prefixes")
            .field("items", &self.items)
            .finish_non_exhaustive()
    }
}

impl Prefixes {
    fn of(kept: Arc<Kept>, items: usize) -> Self {
        Self { kept, items }
    }

    /// The digest of the body's bytes through offset `end`, if an item of
    /// its list ends there.
    pub fn through(&self, end: usize) -> Option<u128> {
        let items = &self.kept.items[..self.items];
        let index = items.partition_point(|item| item.end < end);
        let item = items.get(index)?;
        (item.end == end).then(|| self.kept.digests[index])
    }
}

thread_local! {
    /// The digest of the credential of the request being read on this
    /// thread, while [`as_caller`] reads it.
    static CALLER: Cell<Option<u128>> = const { Cell::new(None) };
    /// The pass over the body being read on this thread, done as it
    /// arrived, until [`split`] takes it.
    static ARRIVED: Cell<Option<Arrived>> = const { Cell::new(None) };
}

/// Runs `read` (an adapter reading a body, which never awaits) with the
/// memo partitioned by `credential`: one caller's bodies are never found
/// from another's, not even how long reading them took. No credential is
/// kept: only a digest under the process's secret, for as long as `read`
/// runs. `arrived`, the body's pass done as it arrived, is taken by the
/// read if it reads those bytes for that caller, and dropped after.
pub fn as_caller<T>(
    credential: Option<&[u8]>,
    arrived: Option<Arrived>,
    read: impl FnOnce() -> T,
) -> T {
    struct Restore(Option<u128>, Option<Arrived>);
    impl Drop for Restore {
        fn drop(&mut self) {
            CALLER.set(self.0);
            ARRIVED.set(self.1.take());
        }
    }
    let digest = caller_digest(resent(), credential);
    let _restore = Restore(CALLER.replace(digest), ARRIVED.replace(arrived));
    read()
}

/// The caller's credential under the process's secret.
fn caller_digest(memo: &Resent, credential: Option<&[u8]>) -> Option<u128> {
    credential.map(|credential| {
        let mut hasher = memo.hasher.clone();
        hasher.update(credential);
        hasher.digest128()
    })
}

/// The process's memo.
pub(super) fn resent() -> &'static Resent {
    static RESENT: OnceLock<Resent> = OnceLock::new();
    RESENT.get_or_init(|| Resent::new(KEPT_BYTES))
}

impl Resent {
    fn new(bytes: u64) -> Self {
        let mut secret = [0u8; 192];
        getrandom::fill(&mut secret).expect("the operating system's random source is available");
        // Estimated items only size the table up front; weight bounds it.
        let estimated = (bytes / 8192).max(16) as usize;
        Self {
            levels: Cache::with_weighter(estimated, bytes.max(1), KeptBytes),
            hasher: Xxh3::with_secret(secret),
        }
    }

    /// [`split`], with this memo; `arrived`, the pass over `text` done as
    /// it arrived.
    fn split(&self, text: &[u8], list: &str, arrived: Option<Box<Pass>>) -> Option<Listed> {
        if let Some(resumed) = self.resume(text, list, arrived) {
            let prefixes = match resumed.grew() {
                true => self.remember_resumed(text, list, &resumed),
                false => Some(Prefixes::of(
                    resumed.shared.kept.clone(),
                    resumed.shared.items,
                )),
            };
            return Some(Listed {
                body: resumed.body,
                items: Some(resumed.spans),
                prefixes,
            });
        }
        let (body, items) = split_whole(text, list)?;
        let prefixes = items
            .as_ref()
            .and_then(|items| self.remember(text, list, items));
        Some(Listed {
            body,
            items,
            prefixes,
        })
    }

    /// `text`'s fields (the list's place null) and the spans of the list's
    /// items, as [`super::request::split`] finds them, from a kept body
    /// that begins with the same bytes. `None` when none does, or what
    /// follows does not read as the rest of the body: the caller then
    /// scans it whole. `arrived`: the pass over `text` done as it arrived,
    /// else it is done here.
    fn resume(&self, text: &[u8], list: &str, arrived: Option<Box<Pass>>) -> Option<Resumed> {
        if text.len() < SHORTEST {
            return None;
        }
        let shared = self.shared_items(text, list, arrived)?;
        let kept = &shared.kept;
        let end = kept.items[shared.items - 1].end;
        let (mut body, tail) = split_rest(&text[end..], end, list)?;
        let before = [&text[..kept.list_start], b"[]}"].concat();
        let (fields, items) = split_whole(&before, list)?;
        if items.is_none_or(|items| !items.is_empty()) {
            return None;
        }
        // The fields before the list keep their places; one repeated after
        // it takes its last value, as a whole scan does.
        let after = std::mem::replace(&mut body, fields);
        for (key, value) in after {
            if key != list {
                body.insert(key, value);
            }
        }
        let mut spans = kept.items[..shared.items].to_vec();
        spans.extend(tail);
        Some(Resumed {
            body,
            spans,
            shared,
        })
    }

    /// Keeps `items`, the spans of `text`'s list under `list`, for the
    /// bodies that will begin with the same bytes; `None` when `text` is
    /// not kept (too short, or no list opens before its first item).
    fn remember(&self, text: &[u8], list: &str, items: &[Range<usize>]) -> Option<Prefixes> {
        let start = Start {
            hasher: self.hasher_for(CALLER.get(), list),
            at: 0,
            digests: Vec::with_capacity(items.len()),
            levels: Vec::new(),
        };
        self.keep(text, items, start)
    }

    /// Keeps a body read from a kept one, hashing only what follows the
    /// items they share (when the comparison left the hasher there), as
    /// [`Resent::remember`] does.
    fn remember_resumed(&self, text: &[u8], list: &str, resumed: &Resumed) -> Option<Prefixes> {
        let Shared {
            kept,
            items,
            hasher,
        } = &resumed.shared;
        let Some(hasher) = hasher.clone() else {
            return self.remember(text, list, &resumed.spans);
        };
        let at = kept.items[*items - 1].end;
        let start = Start {
            hasher,
            at,
            digests: kept.digests[..*items].to_vec(),
            levels: kept.levels[..levels(at).len()].to_vec(),
        };
        self.keep(text, &resumed.spans, start)
    }

    fn keep(&self, text: &[u8], items: &[Range<usize>], start: Start) -> Option<Prefixes> {
        let last = items.last()?;
        if text.len() < SHORTEST {
            return None;
        }
        let list_start = list_start(text, items[0].start)?;
        let Start {
            mut hasher,
            mut at,
            mut digests,
            levels: mut level_digests,
        } = start;
        let mut digest_at = |offset: usize, hasher: &mut Xxh3| {
            hasher.update(&text[at..offset]);
            at = offset;
            hasher.digest128()
        };
        let levels = levels(last.end);
        let mut next_level = levels[level_digests.len()..].iter().peekable();
        for item in &items[digests.len()..] {
            while let Some(&&level) = next_level.peek().filter(|&&&level| level <= item.end) {
                level_digests.push(digest_at(level, &mut hasher));
                next_level.next();
            }
            digests.push(digest_at(item.end, &mut hasher));
        }
        let kept = Arc::new(Kept {
            list_start,
            items: items.to_vec(),
            digests,
            levels: level_digests,
        });
        for digest in &kept.levels {
            self.levels.insert(*digest, Arc::clone(&kept));
        }
        Some(Prefixes::of(kept, items.len()))
    }

    /// The kept body that shares the most with `text`, and how many of its
    /// items `text` begins with: from the pass done as it arrived, or one
    /// over it now.
    fn shared_items(&self, text: &[u8], list: &str, arrived: Option<Box<Pass>>) -> Option<Shared> {
        let pass = arrived.unwrap_or_else(|| {
            let mut pass = Box::new(self.pass(CALLER.get(), list));
            pass.update(self, text);
            pass
        });
        pass.shared(text)
    }

    /// The pass over a body listed under `list`, sent by `caller`.
    fn pass(&self, caller: Option<u128>, list: &str) -> Pass {
        Pass {
            hasher: self.hasher_for(caller, list),
            at: 0,
            next_level: Some(SHORTEST),
            candidate: None,
        }
    }

    /// The hasher of a body's digests: the caller's and the list's name
    /// first, so that only the same caller's bodies are found.
    fn hasher_for(&self, caller: Option<u128>, list: &str) -> Xxh3 {
        let mut hasher = self.hasher.clone();
        hasher.update(&[u8::from(caller.is_some())]);
        hasher.update(&caller.unwrap_or_default().to_le_bytes());
        hasher.update(&(list.len() as u64).to_le_bytes());
        hasher.update(list.as_bytes());
        hasher
    }
}

/// The offsets a body of `len` bytes is kept and looked for under.
fn levels(len: usize) -> Vec<usize> {
    std::iter::successors(Some(SHORTEST), |level| level.checked_mul(2))
        .take_while(|&level| level <= len)
        .collect()
}

/// Where the list whose first item starts at `first` opens: its `[`.
fn list_start(text: &[u8], first: usize) -> Option<usize> {
    let before = text[..first].trim_ascii_end();
    (before.last() == Some(&b'[')).then(|| before.len() - 1)
}

/// Whether a value ending on `byte` ends there whatever follows.
fn ends_a_value(byte: u8) -> bool {
    matches!(byte, b'}' | b']' | b'"')
}

/// The fields and the list's items in `rest`, what follows an item that
/// ends at `offset` of the body: read as `{"<list>":[0` followed by
/// `rest`, so that its items are as deep as in the body. The spans are
/// the body's; `None` unless the list is still the one `rest` continues
/// (a repeated list key after it would replace it).
fn split_rest(rest: &[u8], offset: usize, list: &str) -> Option<(Map<String, Value>, Spans)> {
    let name = serde_json::to_string(list).ok()?;
    let opening = [b"{", name.as_bytes(), b":[0"].concat();
    let document = [opening.as_slice(), rest].concat();
    let (body, items) = split_whole(&document, list)?;
    let mut items = items?.into_iter();
    let placeholder = opening.len() - 1..opening.len();
    if items.next()? != placeholder {
        return None;
    }
    let shift = |at: usize| at - opening.len() + offset;
    let spans = items
        .map(|item| shift(item.start)..shift(item.end))
        .collect();
    Some((body, spans))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(messages: &[String], after: &str) -> Vec<u8> {
        format!(
            r#"{{"model":"m","temperature":0.5,"messages":[{}]{after}}}"#,
            messages.join(", ")
        )
        .into_bytes()
    }

    fn message(index: usize) -> String {
        let content = format!("line {index}\\n\\\"quoted\\\" ").repeat(300);
        format!(r#"{{"role":"user","content":"{content}"}}"#)
    }

    fn history(count: usize) -> Vec<String> {
        (0..count).map(message).collect()
    }

    /// Remembers `first`, then reads `second` from it, and checks the
    /// result is what a whole scan finds.
    fn resumed(first: &[u8], second: &[u8]) -> Option<(Map<String, Value>, Spans)> {
        let resent = Resent::new(KEPT_BYTES);
        let (_, items) = split_whole(first, "messages").expect("a JSON object");
        resent.remember(first, "messages", &items.expect("a list"));
        let found = resent
            .resume(second, "messages", None)
            .map(|resumed| (resumed.body, resumed.spans));
        if let Some((fields, spans)) = &found {
            let (whole_fields, whole_spans) =
                split_whole(second, "messages").expect("a JSON object");
            assert_eq!(Some(spans), whole_spans.as_ref());
            assert_eq!(
                serde_json::to_string(fields).expect("a map"),
                serde_json::to_string(&whole_fields).expect("a map")
            );
        }
        found
    }

    #[test]
    fn a_history_sent_again_is_read_from_the_kept_spans() {
        let text = body(&history(40), r#","stream":true"#);
        let (_, spans) = resumed(&text, &text).expect("the same bytes are found");
        assert_eq!(spans.len(), 40);
    }

    #[test]
    fn a_grown_history_scans_only_its_new_items() {
        let first = body(&history(40), "");
        let second = body(&history(43), r#","tools":[{"name":"x"}],"messages_seen":1"#);
        let (fields, spans) = resumed(&first, &second).expect("the shared items are found");
        assert_eq!(spans.len(), 43);
        let keys: Vec<&String> = fields.keys().collect();
        assert_eq!(
            keys,
            ["model", "temperature", "messages", "tools", "messages_seen"]
        );
        assert_eq!(fields["messages"], Value::Null);
    }

    #[test]
    fn a_grown_history_is_kept_for_the_next_turn() {
        let resent = Resent::new(KEPT_BYTES);
        let turns: Vec<Vec<u8>> = [40, 43, 46].map(|count| body(&history(count), "")).into();
        let (_, items) = split_whole(&turns[0], "messages").expect("a JSON object");
        resent.remember(&turns[0], "messages", &items.expect("a list"));
        let second = resent.resume(&turns[1], "messages", None).expect("found");
        assert_eq!(second.shared.items, 40);
        assert!(second.shared.hasher.is_some(), "hashed on from item 40");
        assert!(second.grew());
        resent.remember_resumed(&turns[1], "messages", &second);
        let third = resent.resume(&turns[2], "messages", None).expect("found");
        assert_eq!(
            third.shared.items, 43,
            "found as the second turn, not the first"
        );
        // Kept from the first turn's digests on, the second turn's are
        // those of keeping it whole.
        let whole = Resent {
            levels: Cache::with_weighter(16, KEPT_BYTES, KeptBytes),
            hasher: resent.hasher.clone(),
        };
        whole.remember(&turns[1], "messages", &second.spans);
        let kept = whole
            .shared_items(&turns[2], "messages", None)
            .expect("found")
            .kept;
        assert_eq!(kept.digests, third.shared.kept.digests);
        assert_eq!(kept.levels, third.shared.kept.levels);
    }

    #[test]
    fn a_changed_item_ends_what_is_shared() {
        let first = body(&history(40), "");
        let mut messages = history(41);
        messages[30] = message(1000);
        let (_, spans) = resumed(&first, &body(&messages, "")).expect("30 items are shared");
        assert_eq!(spans.len(), 41);
    }

    #[test]
    fn a_body_that_begins_otherwise_is_not_found() {
        let first = body(&history(40), "");
        let mut messages = history(40);
        messages[0] = message(1000);
        assert!(resumed(&first, &body(&messages, "")).is_none());
        let other = String::from_utf8(body(&history(40), "")).expect("UTF-8");
        let other = other.replacen(r#""model":"m""#, r#""model":"n""#, 1);
        assert!(resumed(&first, other.as_bytes()).is_none());
    }

    /// The digests through each item of `text`, read by `resent`, and as
    /// a memo with the same secret that never saw a body before names them.
    fn prefixes_both_ways(resent: &Resent, text: &[u8]) -> (Vec<u128>, Vec<u128>) {
        let read = resent.split(text, "messages", None).expect("a JSON object");
        let items = read.items.expect("a list");
        let fresh = Resent {
            levels: Cache::with_weighter(16, KEPT_BYTES, KeptBytes),
            hasher: resent.hasher.clone(),
        };
        let whole = fresh.remember(text, "messages", &items).expect("kept");
        let through = |prefixes: &Prefixes| {
            let named = items.iter().map(|item| prefixes.through(item.end));
            named
                .collect::<Option<Vec<u128>>>()
                .expect("every item named")
        };
        (through(&read.prefixes.expect("named")), through(&whole))
    }

    #[test]
    fn a_body_read_any_way_names_its_bytes_through_each_item_alike() {
        let resent = Resent::new(KEPT_BYTES);
        let turns: Vec<Vec<u8>> = [40, 43, 43, 38]
            .map(|count| body(&history(count), r#","stream":true"#))
            .into();
        // Scanned whole, grown, re-sent, cut short.
        for text in &turns {
            let (read, whole) = prefixes_both_ways(&resent, text);
            assert_eq!(read, whole);
        }
        let read = resent.split(&turns[1], "messages", None).expect("read");
        let prefixes = read.prefixes.expect("named");
        let first = read.items.expect("a list")[0].clone();
        assert_eq!(prefixes.through(first.end - 1), None, "not an item's end");
        assert_eq!(prefixes.through(turns[1].len()), None);
    }

    #[test]
    fn a_small_body_names_no_bytes() {
        let text = body(&history(1), "");
        let read = Resent::new(KEPT_BYTES).split(&text, "messages", None);
        assert!(read.expect("a JSON object").prefixes.is_none());
    }

    #[test]
    fn another_list_name_is_not_found() {
        let text = body(&history(40), "");
        let resent = Resent::new(KEPT_BYTES);
        let (_, items) = split_whole(&text, "messages").expect("a JSON object");
        resent.remember(&text, "messages", &items.expect("a list"));
        assert!(resent.resume(&text, "input", None).is_none());
    }

    #[test]
    fn another_callers_body_is_not_found() {
        let text = body(&history(40), "");
        let resent = Resent::new(KEPT_BYTES);
        let (_, items) = split_whole(&text, "messages").expect("a JSON object");
        let items = items.expect("a list");
        as_caller(Some(b"sk-one"), None, || {
            resent.remember(&text, "messages", &items)
        });
        let found = |credential: Option<&[u8]>| {
            as_caller(credential, None, || {
                resent.resume(&text, "messages", None).is_some()
            })
        };
        assert!(found(Some(b"sk-one")));
        assert!(!found(Some(b"sk-two")));
        assert!(!found(None));
        assert_eq!(CALLER.get(), None, "the caller is forgotten after reading");
    }

    #[test]
    fn a_repeated_list_key_after_the_list_is_scanned_whole() {
        let first = body(&history(40), "");
        let second = body(
            &history(40),
            r#","messages":[{"role":"user","content":"x"}]"#,
        );
        assert!(resumed(&first, &second).is_none());
        let third = body(&history(40), r#","messages":7"#);
        assert!(resumed(&first, &third).is_none());
    }

    #[test]
    fn a_field_repeated_after_the_list_keeps_its_place_and_last_value() {
        let first = body(&history(40), "");
        let second = body(&history(40), r#","model":"later""#);
        let (fields, _) = resumed(&first, &second).expect("found");
        assert_eq!(fields.keys().next().map(String::as_str), Some("model"));
        assert_eq!(fields["model"], "later");
    }

    #[test]
    fn a_number_item_is_not_shared_at_its_end() {
        let padding = "x".repeat(SHORTEST * 2);
        let first = format!(r#"{{"model":"m","messages":["{padding}",12,{{"a":1}}]}}"#);
        let second = format!(r#"{{"model":"m","messages":["{padding}",123,{{"a":1}}]}}"#);
        let (_, spans) = resumed(first.as_bytes(), second.as_bytes()).expect("the string is");
        assert_eq!(spans.len(), 3);
    }

    #[test]
    fn what_follows_must_still_be_json() {
        let first = body(&history(40), "");
        let mut second = body(&history(41), "");
        second.truncate(second.len() - 3);
        assert!(resumed(&first, &second).is_none());
        let mut third = body(&history(40), "");
        third.extend_from_slice(b" trailing");
        assert!(resumed(&first, &third).is_none());
    }

    /// What `text` shares with what `resent` keeps, its pass taken in
    /// chunks of `size` bytes: the kept body, its items and the hasher's
    /// digest at the end of the last, if it was left there.
    fn shared_in_chunks(
        resent: &Resent,
        text: &[u8],
        size: usize,
    ) -> Option<(usize, usize, Option<u128>)> {
        let mut pass = resent.pass(None, "messages");
        for chunk in text.chunks(size) {
            pass.update(resent, chunk);
        }
        let shared = pass.shared(text)?;
        let kept = Arc::as_ptr(&shared.kept) as usize;
        Some((
            kept,
            shared.items,
            shared.hasher.map(|hasher| hasher.digest128()),
        ))
    }

    #[test]
    fn a_pass_taken_as_the_body_arrives_finds_what_one_over_it_whole_finds() {
        let resent = Resent::new(KEPT_BYTES);
        let first = body(&history(40), "");
        let (_, items) = split_whole(&first, "messages").expect("a JSON object");
        resent.remember(&first, "messages", &items.expect("a list"));
        let mut changed = history(41);
        changed[30] = message(1000);
        let mut other_start = history(40);
        other_start[0] = message(1000);
        let bodies = [
            first.clone(),
            body(&history(43), r#","stream":true"#),
            body(&changed, ""),
            body(&other_start, ""),
            body(&history(25), ""),
        ];
        for text in &bodies {
            let whole = shared_in_chunks(&resent, text, text.len());
            for size in [7, 1000, 4096, SHORTEST, 65536] {
                assert_eq!(
                    shared_in_chunks(&resent, text, size),
                    whole,
                    "chunks of {size}"
                );
            }
        }
        let found = |text: &[u8]| shared_in_chunks(&resent, text, 4096).map(|(_, items, _)| items);
        assert_eq!(found(&bodies[0]), Some(40));
        assert_eq!(found(&bodies[1]), Some(40));
        assert_eq!(found(&bodies[2]), Some(30));
        assert_eq!(found(&bodies[3]), None);
    }

    #[test]
    fn a_pass_done_as_the_body_arrived_is_taken_only_for_those_bytes() {
        let text = Bytes::from(body(&history(40), ""));
        let list = |caller: &[u8]| {
            let mut arriving = Arriving::new(Some(caller), "messages");
            for chunk in text.chunks(4096) {
                arriving.update(chunk);
            }
            arriving.arrived(&text).expect("every byte taken")
        };
        let caller = caller_digest(resent(), Some(b"sk-one"));
        let copy = text.to_vec();
        assert!(list(b"sk-one").of(&text, "messages", caller).is_some());
        assert!(
            list(b"sk-one").of(&copy, "messages", caller).is_none(),
            "another buffer"
        );
        assert!(list(b"sk-one")
            .of(&text[..text.len() - 1], "messages", caller)
            .is_none());
        assert!(list(b"sk-one").of(&text, "input", caller).is_none());
        assert!(list(b"sk-two").of(&text, "messages", caller).is_none());
        let mut short = Arriving::new(None, "messages");
        short.update(&text[..100]);
        assert!(
            short.arrived(&text).is_none(),
            "not every byte went through it"
        );
        // Read with the pass, a body is split as a whole scan splits it.
        as_caller(Some(b"sk-one"), None, || split(&text, "messages"));
        let read = as_caller(Some(b"sk-one"), Some(list(b"sk-one")), || {
            split(&text, "messages")
        });
        let (_, whole) = split_whole(&text, "messages").expect("a JSON object");
        assert_eq!(read.expect("a JSON object").items, whole);
        assert!(
            ARRIVED.take().is_none(),
            "the pass is dropped after the read"
        );
    }

    #[test]
    fn a_small_body_is_neither_kept_nor_found() {
        let text = body(&history(1), "");
        assert!(text.len() < SHORTEST);
        assert!(resumed(&text, &text).is_none());
    }
}
