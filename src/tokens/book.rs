//! Steps 5 to 7, knowing sizes: the book.
//!
//! What Condenser knows of each model's sizes, by (upstream, model): its
//! context window, whether the upstream counts `max_tokens` against it, and
//! how many tokens a byte of its requests makes. Learned from overflow
//! errors and from the `usage` of responses, and read on every request, so
//! it lives in memory; `sizes.rs` loads it from the store on first sight of
//! a model and writes what everyone may share back, so instances share it
//! and a restart keeps it.
//!
//! What is learned is evidence from many tenants, and each tenant sees it
//! through its own eyes: the windows it claimed and the rate its own
//! answers measured, else what tenants agree on (`windows.rs`,
//! `rates.rs`). A learned window never goes below a configured one.

use super::known::documented_window;
use super::rates::Rates;
use super::windows::{Shared, Windows};
use super::Calibration;
use crate::conversation::TenantId;
use crate::protocol::OutputField;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Models remembered at once. Model names come from clients, so the book is
/// bounded: past this, the oldest-looked-at entry is forgotten.
const MAX_MODELS: usize = 4096;

/// The shared calibration changes a little with every response: it is
/// written back when it moved by more than this share since it was last
/// written, or when this long has passed.
const SAVE_CALIBRATION_CHANGE: f64 = 0.05;
const SAVE_CALIBRATION_EVERY: Duration = Duration::from_secs(30);
/// A busy model's calibration moves with every mixed batch of answers; it is
/// written at most this often, so a store write never follows every answer.
const SAVE_CALIBRATION_GAP: Duration = Duration::from_secs(1);

/// Where a known window came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeSource {
    Config,
    /// Learned from this upstream: an overflow that held up as evidence,
    /// this tenant's or agreed by several.
    Learned,
    /// The model's documented window (`known_windows.tsv`): no evidence
    /// from this upstream, so it may make Condenser try, never refuse.
    Documented,
}

/// Everything known about one model's sizes, as one tenant sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ModelSize {
    pub window: Option<(u64, SizeSource)>,
    pub calibration: Option<Calibration>,
    /// The upstream answered a request whose input plus `max_tokens`
    /// exceeded the window, so it leaves the output budget out of the
    /// window (llama.cpp). Until seen, assume it counts, as most APIs do.
    pub ignores_output: bool,
    /// The largest input the upstream counted for a request it answered:
    /// the window is at least this large, whatever a guess says.
    pub answered_tokens: u64,
    /// The output-limit field a summary call's refusal showed the model
    /// takes (kept in memory only: a restart asks once more).
    pub output_field: Option<OutputField>,
    /// The most the model's server gives it, whatever a request asks for
    /// (the trained context length Ollama caps `num_ctx` at).
    pub ceiling: Option<u64>,
}

impl ModelSize {
    pub fn window_tokens(&self) -> Option<u64> {
        self.window.map(|(tokens, _)| tokens)
    }

    /// The window when it rests on evidence (configuration, or what this
    /// upstream stated), not on documentation.
    pub fn evidence_window(&self) -> Option<u64> {
        match self.window {
            Some((_, SizeSource::Documented)) | None => None,
            Some((tokens, _)) => Some(tokens),
        }
    }
}

/// What the store holds of a model: what every tenant may use.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Stored {
    pub window: Option<u64>,
    pub calibration: Option<Calibration>,
    pub ignores_output: bool,
}

/// What an observation changed that the store should hear of.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Changed {
    pub window: Shared,
    /// The shared calibration and output accounting, when due to be saved.
    pub calibration: Option<(Calibration, bool)>,
}

#[derive(Default)]
struct Entry {
    /// The model's configured and documented windows, read once: neither
    /// changes while the process runs.
    configured: Option<u64>,
    documented: Option<u64>,
    windows: Windows,
    rates: Rates,
    ignores_output: bool,
    answered_tokens: u64,
    output_field: Option<OutputField>,
    ceiling: Option<u64>,
    /// The server was asked for the ceiling already.
    ceiling_asked: bool,
    used_at: Option<Instant>,
    /// When the shared calibration was last written back, and what it was.
    saved: Option<(Instant, Calibration)>,
}

impl Entry {
    /// The shared calibration and output accounting, when due to be saved.
    fn calibration_due(&mut self, now: Instant, forced: bool) -> Option<(Calibration, bool)> {
        let current = self.rates.shared()?;
        let due = forced
            || self.saved.is_none_or(|(at, saved)| {
                let since = now.saturating_duration_since(at);
                let moved = (current.rate() - saved.rate()).abs() / saved.rate();
                (moved > SAVE_CALIBRATION_CHANGE && since >= SAVE_CALIBRATION_GAP)
                    || since >= SAVE_CALIBRATION_EVERY
            });
        if !due {
            return None;
        }
        self.saved = Some((now, current));
        Some((current, self.ignores_output))
    }
}

pub struct SizeBook {
    configured: HashMap<String, u64>,
    entries: Mutex<Entries>,
}

/// The entries by (upstream, model). The book is read on every request, so
/// it is looked up by borrowed names ([`Names`]), not by a key of two
/// `String`s built for the look-up, and hashed with foldhash (hashbrown's
/// default): model names come from clients, but its seed is the process's
/// own and the book holds at most [`MAX_MODELS`].
type Entries = hashbrown::HashMap<(String, String), Entry>;

/// `(upstream, model)`, borrowed: hashes as the owned key does.
#[derive(Hash)]
struct Names<'a>(&'a str, &'a str);

impl hashbrown::Equivalent<(String, String)> for Names<'_> {
    fn equivalent(&self, (upstream, model): &(String, String)) -> bool {
        self.0 == upstream && self.1 == model
    }
}

/// The outcome of a look-up.
pub struct Lookup {
    pub size: ModelSize,
    /// First time this process sees the model: load what the store knows.
    pub first_sight: bool,
}

impl SizeBook {
    /// `configured`: context windows from configuration, by model name.
    pub fn new(configured: HashMap<String, u64>) -> Self {
        Self {
            configured,
            entries: Mutex::new(Entries::default()),
        }
    }

    /// What `tenant` knows of `model`.
    pub fn lookup(&self, upstream: &str, model: &str, tenant: &TenantId) -> Lookup {
        self.with_entry(upstream, model, |entry, first_sight| {
            entry.used_at = Some(Instant::now());
            Lookup {
                size: view(entry, tenant),
                first_sight,
            }
        })
    }

    /// Fills in what the store knows and memory does not yet.
    pub fn merge_stored(&self, upstream: &str, model: &str, stored: Stored) {
        self.update(upstream, model, |entry| {
            if let Some(window) = stored.window {
                entry.windows.load_agreed(window);
            }
            if let Some(rate) = stored.calibration {
                entry.rates.load_stored(rate);
            }
            entry.ignores_output |= stored.ignores_output;
        });
    }

    /// `tenant`'s overflow error: the window it states, when it held up as
    /// evidence, whether it counted the output budget, and the rate its
    /// count of the request measured.
    pub fn learn_overflow(
        &self,
        (upstream, model): (&str, &str),
        tenant: &TenantId,
        window: Option<u64>,
        counted_output: bool,
        calibration: Option<Calibration>,
    ) -> Changed {
        self.update(upstream, model, |entry| {
            let shared = window.map_or(Shared::Unchanged, |w| entry.windows.claim(tenant, w));
            let was_ignoring = entry.ignores_output;
            entry.ignores_output &= !counted_output;
            if let Some(observed) = calibration {
                entry.rates.observe(tenant, observed);
            }
            let forced = was_ignoring != entry.ignores_output;
            let calibration = entry.calibration_due(Instant::now(), forced);
            Changed {
                window: shared,
                calibration,
            }
        })
    }

    /// True the first time it is called for a model: ask its server for
    /// the ceiling then.
    pub fn first_ceiling_ask(&self, upstream: &str, model: &str) -> bool {
        self.update(upstream, model, |entry| {
            !std::mem::replace(&mut entry.ceiling_asked, true)
        })
    }

    /// The most the model's server gives it.
    pub fn learn_ceiling(&self, upstream: &str, model: &str, tokens: u64) {
        self.update(upstream, model, |entry| entry.ceiling = Some(tokens));
    }

    /// The output-limit field `model` takes, when a refusal showed it.
    pub fn output_field(&self, upstream: &str, model: &str) -> Option<OutputField> {
        self.lock().get(&Names(upstream, model))?.output_field
    }

    /// The output-limit field `model` takes, as a refusal showed.
    pub fn learn_output_field(&self, upstream: &str, model: &str, field: OutputField) {
        self.update(upstream, model, |entry| entry.output_field = Some(field));
    }

    /// `tenant`'s request was answered, its input counted as `input_tokens`
    /// with an output budget of `requested_output`, at `now`; `observed`
    /// is the rate it measured, when its inputs were all text.
    pub fn learn_usage(
        &self,
        (upstream, model): (&str, &str),
        tenant: &TenantId,
        observed: Option<Calibration>,
        (input_tokens, requested_output): (u64, u64),
        now: Instant,
    ) -> Option<Changed> {
        let mut entries = self.lock();
        let entry = entries.get_mut(&Names(upstream, model))?;
        entry.answered_tokens = entry.answered_tokens.max(input_tokens);
        let window = view(entry, tenant).evidence_window();
        let beyond_window =
            window.is_some_and(|w| input_tokens.saturating_add(requested_output) > w);
        let learned_ignoring = requested_output > 0 && beyond_window && !entry.ignores_output;
        entry.ignores_output |= learned_ignoring;
        let shared = entry.windows.answered(tenant, input_tokens);
        if let Some(observed) = observed {
            entry.rates.observe(tenant, observed);
        }
        let calibration = entry.calibration_due(now, learned_ignoring);
        Some(Changed {
            window: shared,
            calibration,
        })
    }

    fn update<T>(&self, upstream: &str, model: &str, change: impl FnOnce(&mut Entry) -> T) -> T {
        self.with_entry(upstream, model, |entry, _| change(entry))
    }

    /// `use_entry` on the model's entry, made on first sight (told by its
    /// second argument).
    fn with_entry<T>(
        &self,
        upstream: &str,
        model: &str,
        use_entry: impl FnOnce(&mut Entry, bool) -> T,
    ) -> T {
        let mut entries = self.lock();
        if let Some(entry) = entries.get_mut(&Names(upstream, model)) {
            return use_entry(entry, false);
        }
        make_room(&mut entries);
        let entry = Entry {
            configured: self.configured.get(model).copied(),
            documented: documented_window(model),
            ..Entry::default()
        };
        let key = (upstream.to_owned(), model.to_owned());
        use_entry(entries.entry(key).insert(entry).into_mut(), true)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        // A panic while holding this lock leaves plain numbers behind, never
        // a broken invariant: carry on with them.
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// What `tenant` knows of the model: a learned window never goes below a
/// configured one; configuration wins over the documented window.
fn view(entry: &Entry, tenant: &TenantId) -> ModelSize {
    let learned = entry.windows.for_tenant(tenant);
    let configured = entry.configured;
    let window = match (learned, configured) {
        (Some(learned), Some(configured)) if learned > configured => {
            Some((learned, SizeSource::Learned))
        }
        (_, Some(configured)) => Some((configured, SizeSource::Config)),
        (Some(learned), None) => Some((learned, SizeSource::Learned)),
        (None, None) => entry.documented.map(|w| (w, SizeSource::Documented)),
    };
    ModelSize {
        window,
        calibration: entry.rates.for_tenant(tenant),
        ignores_output: entry.ignores_output,
        answered_tokens: entry.answered_tokens,
        output_field: entry.output_field,
        ceiling: entry.ceiling,
    }
}

fn make_room(entries: &mut Entries) {
    if entries.len() < MAX_MODELS {
        return;
    }
    let oldest = entries
        .iter()
        .min_by_key(|(_, entry)| entry.used_at)
        .map(|(key, _)| key.clone());
    if let Some(key) = oldest {
        entries.remove(&key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn book() -> SizeBook {
        SizeBook::new(HashMap::from([("gpt-4o".to_string(), 128_000)]))
    }

    fn tenant(name: &str) -> TenantId {
        TenantId::from_credential(b"", Some(name.as_bytes()))
    }

    const OPENAI: (&str, &str) = ("openai", "gpt-4o");
    const LOCAL: (&str, &str) = ("local", "smollm2");

    #[test]
    fn configuration_gives_a_window_no_learned_one_goes_below() {
        let (book, a) = (book(), tenant("a"));
        let first = book.lookup("openai", "gpt-4o", &a);
        assert!(first.first_sight);
        assert_eq!(first.size.window, Some((128_000, SizeSource::Config)));
        book.learn_overflow(OPENAI, &a, Some(8_192), false, None);
        let later = book.lookup("openai", "gpt-4o", &a);
        assert!(!later.first_sight);
        assert_eq!(later.size.window, Some((128_000, SizeSource::Config)));
        book.learn_overflow(OPENAI, &a, Some(200_000), false, None);
        let raised = book.lookup("openai", "gpt-4o", &a).size.window;
        assert_eq!(raised, Some((200_000, SizeSource::Learned)));
    }

    #[test]
    fn a_window_one_tenant_taught_reaches_another_once_a_second_agrees() {
        let (book, a, b) = (book(), tenant("a"), tenant("b"));
        let taught = book.learn_overflow(LOCAL, &a, Some(1024), false, None);
        assert_eq!(taught.window, Shared::Unchanged);
        assert_eq!(
            book.lookup("local", "smollm2", &a).size.window_tokens(),
            Some(1024)
        );
        assert_eq!(
            book.lookup("local", "smollm2", &b).size.window_tokens(),
            None
        );
        let agreed = book.learn_overflow(LOCAL, &b, Some(1024), false, None);
        assert_eq!(agreed.window, Shared::Agreed(1024));
        assert_eq!(
            book.lookup("local", "smollm2", &tenant("c"))
                .size
                .window_tokens(),
            Some(1024)
        );
    }

    #[test]
    fn what_memory_knows_is_not_overwritten_by_the_store() {
        let (book, a) = (book(), tenant("a"));
        book.lookup("local", "smollm2", &a);
        book.learn_overflow(LOCAL, &a, Some(1024), false, None);
        let stored = Stored {
            window: Some(4096),
            calibration: Some(Calibration::from_rate(0.3)),
            ignores_output: true,
        };
        book.merge_stored("local", "smollm2", stored);
        let size = book.lookup("local", "smollm2", &a).size;
        assert_eq!(size.window_tokens(), Some(1024), "a's own claim");
        assert_eq!(size.calibration, Some(Calibration::from_rate(0.3)));
        assert!(size.ignores_output);
        let others = book.lookup("local", "smollm2", &tenant("b")).size;
        assert_eq!(others.window_tokens(), Some(4096), "the stored, agreed one");
    }

    #[test]
    fn usage_calibrates_and_is_saved_when_it_moves() {
        let (book, a) = (book(), tenant("a"));
        book.lookup("openai", "gpt-4o", &a);
        let rate = Calibration::from_rate(0.3);
        let start = Instant::now();
        let saved = book.learn_usage(OPENAI, &a, Some(rate), (1_000, 256), start);
        assert_eq!(saved.and_then(|s| s.calibration), Some((rate, false)));
        let later = start + SAVE_CALIBRATION_GAP;
        let same = book.learn_usage(OPENAI, &a, Some(rate), (1_000, 256), later);
        assert_eq!(
            same.and_then(|s| s.calibration),
            None,
            "nothing new to write"
        );
        let higher = Calibration::from_rate(0.33);
        let moved = book.learn_usage(OPENAI, &a, Some(higher), (1_000, 256), later);
        assert_eq!(moved.and_then(|s| s.calibration), Some((higher, false)));
    }

    #[test]
    fn a_moving_calibration_is_written_at_most_once_per_gap() {
        let (book, a) = (book(), tenant("a"));
        book.lookup("openai", "gpt-4o", &a);
        let start = Instant::now();
        let (low, high) = (Calibration::from_rate(0.2), Calibration::from_rate(0.4));
        assert!(book
            .learn_usage(OPENAI, &a, Some(low), (1_000, 256), start)
            .is_some_and(|c| c.calibration.is_some()));
        let soon = start + SAVE_CALIBRATION_GAP / 2;
        let held = book.learn_usage(OPENAI, &a, Some(high), (1_000, 256), soon);
        assert_eq!(
            held.and_then(|c| c.calibration),
            None,
            "moved, but written a moment ago"
        );
        let after = start + SAVE_CALIBRATION_GAP;
        let written = book.learn_usage(OPENAI, &a, Some(high), (1_000, 256), after);
        let blended = book.lookup("openai", "gpt-4o", &a).size.calibration;
        assert_eq!(written.and_then(|c| c.calibration).map(|c| c.0), blended);
    }

    #[test]
    fn an_answer_past_the_window_with_its_output_shows_the_output_is_not_counted() {
        let (book, a, b) = (book(), tenant("a"), tenant("b"));
        book.lookup("local", "smollm2", &a);
        book.learn_overflow(LOCAL, &a, Some(1024), false, None);
        book.learn_overflow(LOCAL, &b, Some(1024), false, None);
        let rate = Some(Calibration::from_rate(0.3));
        book.learn_usage(LOCAL, &a, rate, (900, 100), Instant::now());
        assert!(!book.lookup("local", "smollm2", &a).size.ignores_output);
        let saved = book.learn_usage(LOCAL, &a, rate, (1000, 100), Instant::now());
        assert!(
            saved
                .and_then(|s| s.calibration)
                .is_some_and(|(_, ignores)| ignores),
            "saved at once"
        );
        book.learn_overflow(LOCAL, &a, Some(1024), true, None);
        assert!(!book.lookup("local", "smollm2", &a).size.ignores_output);
    }

    #[test]
    fn the_book_stays_bounded_whatever_model_names_clients_send() {
        let (book, a) = (book(), tenant("a"));
        for i in 0..MAX_MODELS + 10 {
            book.lookup("openai", &format!("model-{i}"), &a);
        }
        assert_eq!(book.lock().len(), MAX_MODELS);
    }
}
