//! Steps 5 to 7, knowing sizes: the book.
//!
//! What Condenser knows of each model's sizes, by (upstream, model): its
//! context window, whether the upstream counts `max_tokens` against it, and
//! how many tokens a byte of its requests makes. Learned from overflow
//! errors and from the `usage` of responses, and read on every request, so
//! it lives in memory; `pipeline::sizes` loads it from the store on first
//! sight of a model and writes what is learned back, so instances share it
//! and a restart keeps it.

use super::known::documented_window;
use super::Calibration;
use crate::protocol::OutputField;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Models remembered at once. Model names come from clients, so the book is
/// bounded: past this, the oldest-looked-at entry is forgotten.
const MAX_MODELS: usize = 4096;

/// A calibration learned from `usage` changes a little with every response:
/// it is written back when it moved by more than this share since it was
/// last written, or when this long has passed.
const SAVE_CALIBRATION_CHANGE: f64 = 0.05;
const SAVE_CALIBRATION_EVERY: Duration = Duration::from_secs(30);
/// A busy model's calibration moves with every mixed batch of answers; it is
/// written at most this often, so a store write never follows every answer.
const SAVE_CALIBRATION_GAP: Duration = Duration::from_secs(1);

/// Where a known window came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeSource {
    Config,
    /// An overflow error stated it: what the upstream enforces.
    OverflowError,
    /// Read from the store: learned earlier, by this or another instance.
    Stored,
    /// The model's documented window (`known_windows.tsv`): no evidence
    /// from this upstream, so it may make Condenser try, never refuse.
    Documented,
}

/// Everything known about one model's sizes.
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

struct Entry {
    size: ModelSize,
    used_at: Instant,
    /// When the calibration was last written back, and what it was.
    saved: Option<(Instant, Calibration)>,
}

impl Entry {
    fn new() -> Self {
        Self {
            size: ModelSize::default(),
            used_at: Instant::now(),
            saved: None,
        }
    }

    fn calibration_due(&self, now: Instant) -> bool {
        let (Some((at, saved)), Some(current)) = (self.saved, self.size.calibration) else {
            return true;
        };
        let since = now.saturating_duration_since(at);
        let moved = (current.rate() - saved.rate()).abs() / saved.rate();
        (moved > SAVE_CALIBRATION_CHANGE && since >= SAVE_CALIBRATION_GAP)
            || since >= SAVE_CALIBRATION_EVERY
    }
}

pub struct SizeBook {
    configured: HashMap<String, u64>,
    entries: Mutex<HashMap<(String, String), Entry>>,
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
            entries: Mutex::new(HashMap::new()),
        }
    }

    pub fn lookup(&self, upstream: &str, model: &str) -> Lookup {
        let mut entries = self.lock();
        let key = (upstream.to_string(), model.to_string());
        let first_sight = !entries.contains_key(&key);
        if first_sight {
            make_room(&mut entries);
        }
        let entry = entries.entry(key).or_insert_with(Entry::new);
        entry.used_at = Instant::now();
        Lookup {
            size: self.with_config(model, entry.size),
            first_sight,
        }
    }

    /// Fills in what the store knows and memory does not yet.
    pub fn merge_stored(&self, upstream: &str, model: &str, stored: ModelSize) {
        self.update(upstream, model, |size| {
            size.window = size.window.or(stored.window);
            size.calibration = size.calibration.or(stored.calibration);
            size.ignores_output |= stored.ignores_output;
        });
    }

    /// An overflow error's numbers: the window it states wins over
    /// configuration, since it is what the upstream enforces. Returns what
    /// to store.
    pub fn learn_overflow(
        &self,
        upstream: &str,
        model: &str,
        window: Option<u64>,
        counted_output: bool,
        calibration: Option<Calibration>,
    ) -> ModelSize {
        self.update(upstream, model, |size| {
            if let Some(window) = window {
                size.window = Some((window, SizeSource::OverflowError));
            }
            size.ignores_output &= !counted_output;
            if let Some(observed) = calibration {
                size.calibration = Some(blend(size.calibration, observed));
            }
        })
    }

    /// The output-limit field `model` takes, as a refusal showed.
    pub fn learn_output_field(&self, upstream: &str, model: &str, field: OutputField) {
        self.update(upstream, model, |size| size.output_field = Some(field));
    }

    /// A response's `usage`: `observed` for a request whose output budget
    /// was `requested_output`, answered at `now`. Returns what to store when
    /// it is due to be written back.
    pub fn learn_usage(
        &self,
        upstream: &str,
        model: &str,
        observed: Calibration,
        input_tokens: u64,
        requested_output: u64,
        now: Instant,
    ) -> Option<ModelSize> {
        let mut entries = self.lock();
        let entry = entries.get_mut(&(upstream.to_string(), model.to_string()))?;
        entry.size.answered_tokens = entry.size.answered_tokens.max(input_tokens);
        let window = self.with_config(model, entry.size).evidence_window();
        let beyond_window = window.is_some_and(|w| input_tokens + requested_output > w);
        let learned_ignoring = requested_output > 0 && beyond_window && !entry.size.ignores_output;
        entry.size.ignores_output |= learned_ignoring;
        let calibration = blend(entry.size.calibration, observed);
        entry.size.calibration = Some(calibration);
        let due = learned_ignoring || entry.calibration_due(now);
        if due {
            entry.saved = Some((now, calibration));
        }
        due.then_some(entry.size)
    }

    fn update(
        &self,
        upstream: &str,
        model: &str,
        change: impl FnOnce(&mut ModelSize),
    ) -> ModelSize {
        let mut entries = self.lock();
        let key = (upstream.to_string(), model.to_string());
        if !entries.contains_key(&key) {
            make_room(&mut entries);
        }
        let entry = entries.entry(key).or_insert_with(Entry::new);
        change(&mut entry.size);
        self.with_config(model, entry.size)
    }

    /// A window learned from the upstream (now or stored earlier) wins over
    /// configuration: it is what the upstream enforces. Configuration wins
    /// over the documented window.
    fn with_config(&self, model: &str, mut size: ModelSize) -> ModelSize {
        if size.window.is_none() {
            let configured = self.configured.get(model).map(|&w| (w, SizeSource::Config));
            let documented = || documented_window(model).map(|w| (w, SizeSource::Documented));
            size.window = configured.or_else(documented);
        }
        size
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Entry>> {
        // A panic while holding this lock leaves plain numbers behind, never
        // a broken invariant: carry on with them.
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn blend(current: Option<Calibration>, observed: Calibration) -> Calibration {
    current.map_or(observed, |current| current.blended(observed))
}

fn make_room(entries: &mut HashMap<(String, String), Entry>) {
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

    #[test]
    fn configuration_gives_a_window_until_the_upstream_states_another() {
        let book = book();
        let first = book.lookup("openai", "gpt-4o");
        assert!(first.first_sight);
        assert_eq!(first.size.window, Some((128_000, SizeSource::Config)));
        book.learn_overflow("openai", "gpt-4o", Some(8_192), false, None);
        let later = book.lookup("openai", "gpt-4o");
        assert!(!later.first_sight);
        assert_eq!(later.size.window, Some((8_192, SizeSource::OverflowError)));
    }

    #[test]
    fn what_memory_knows_is_not_overwritten_by_the_store() {
        let book = book();
        book.lookup("local", "smollm2");
        book.learn_overflow("local", "smollm2", Some(1024), false, None);
        let stored = ModelSize {
            window: Some((4096, SizeSource::Stored)),
            calibration: Some(Calibration::from_rate(0.3)),
            ignores_output: true,
            answered_tokens: 0,
            output_field: None,
        };
        book.merge_stored("local", "smollm2", stored);
        let size = book.lookup("local", "smollm2").size;
        assert_eq!(size.window_tokens(), Some(1024));
        assert_eq!(size.calibration, Some(Calibration::from_rate(0.3)));
        assert!(size.ignores_output);
    }

    #[test]
    fn usage_calibrates_and_is_saved_when_it_moves() {
        let book = book();
        book.lookup("openai", "gpt-4o");
        let rate = Calibration::from_rate(0.3);
        let start = Instant::now();
        let saved = book.learn_usage("openai", "gpt-4o", rate, 1_000, 256, start);
        assert_eq!(saved.and_then(|s| s.calibration), Some(rate));
        let later = start + SAVE_CALIBRATION_GAP;
        let same = book.learn_usage("openai", "gpt-4o", rate, 1_000, 256, later);
        assert!(same.is_none(), "nothing new to write");
        let higher = Calibration::from_rate(0.33);
        let moved = book.learn_usage("openai", "gpt-4o", higher, 1_000, 256, later);
        assert_eq!(moved.and_then(|s| s.calibration), Some(higher));
    }

    #[test]
    fn a_moving_calibration_is_written_at_most_once_per_gap() {
        let book = book();
        book.lookup("openai", "gpt-4o");
        let start = Instant::now();
        let (low, high) = (Calibration::from_rate(0.2), Calibration::from_rate(0.4));
        assert!(book
            .learn_usage("openai", "gpt-4o", low, 1_000, 256, start)
            .is_some());
        let soon = start + SAVE_CALIBRATION_GAP / 2;
        let held = book.learn_usage("openai", "gpt-4o", high, 1_000, 256, soon);
        assert!(held.is_none(), "moved, but written a moment ago");
        let after = start + SAVE_CALIBRATION_GAP;
        let written = book.learn_usage("openai", "gpt-4o", high, 1_000, 256, after);
        let blended = book.lookup("openai", "gpt-4o").size.calibration;
        assert_eq!(written.and_then(|s| s.calibration), blended);
    }

    #[test]
    fn an_answer_past_the_window_with_its_output_shows_the_output_is_not_counted() {
        let book = book();
        book.lookup("local", "smollm2");
        book.learn_overflow("local", "smollm2", Some(1024), false, None);
        let rate = Calibration::from_rate(0.3);
        book.learn_usage("local", "smollm2", rate, 900, 100, Instant::now());
        assert!(!book.lookup("local", "smollm2").size.ignores_output);
        let saved = book.learn_usage("local", "smollm2", rate, 1000, 100, Instant::now());
        assert!(saved.is_some_and(|s| s.ignores_output), "saved at once");
        book.learn_overflow("local", "smollm2", Some(1024), true, None);
        assert!(!book.lookup("local", "smollm2").size.ignores_output);
    }

    #[test]
    fn the_book_stays_bounded_whatever_model_names_clients_send() {
        let book = book();
        for i in 0..MAX_MODELS + 10 {
            book.lookup("openai", &format!("model-{i}"));
        }
        assert_eq!(book.lock().len(), MAX_MODELS);
    }
}
