//! Steps 5 to 7, knowing sizes: memory and store.
//!
//! The size book as the pipeline uses it: read from memory on the request
//! path, loaded from the store on first sight of a model and written back
//! when something everyone may share is learned (an agreed window, the
//! shared calibration), both in the background so no request waits on the
//! database for it.

use super::book::{Changed, Stored};
use super::evidence::{silently_truncated, teaches_window};
use super::windows::Shared;
use crate::conversation::TenantId;
use crate::overflow::{OverflowCause, OverflowSignal};
use crate::protocol::OutputField;
use crate::store::{Storage, StoredSize};
use crate::tokens::{Calibration, ModelSize, SizeBook};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

#[derive(Clone)]
pub struct Sizes {
    book: Arc<SizeBook>,
    storage: Storage,
    background: TaskTracker,
}

impl Sizes {
    pub fn new(
        configured: HashMap<String, u64>,
        storage: Storage,
        background: TaskTracker,
    ) -> Self {
        Self {
            book: Arc::new(SizeBook::new(configured)),
            storage,
            background,
        }
    }

    /// What `tenant` knows now. On first sight of a model the store is
    /// asked in the background; this request goes on with what memory
    /// knows.
    pub fn get(&self, upstream: &str, model: &str, tenant: &TenantId) -> ModelSize {
        let lookup = self.book.lookup(upstream, model, tenant);
        if lookup.first_sight {
            self.spawn_load(upstream, model);
        }
        lookup.size
    }

    /// What `tenant`'s overflow error of the request `sent` says: the
    /// window it states only when that holds up as evidence
    /// (`evidence.rs`), the rate its count measured only then too.
    pub fn learn_overflow(
        &self,
        (upstream, model): (&str, &str),
        tenant: &TenantId,
        signal: &OverflowSignal,
        sent: &[u8],
    ) {
        let known = self.book.lookup(upstream, model, tenant).size;
        let calibration = known.calibration.unwrap_or_default();
        let evidence = teaches_window(signal, sent, calibration);
        if !evidence && signal.limit.is_some() {
            metrics::counter!("condenser_overflow_numbers_ignored_total").increment(1);
            tracing::info!(limit = ?signal.limit, actual = ?signal.actual, "overflow numbers do not match the request: nothing learned");
        }
        let counts_output = signal.cause == OverflowCause::InputPlusOutput;
        let window = signal.limit.filter(|_| evidence);
        let measured = signal
            .actual
            .filter(|_| evidence)
            .map(|actual| Calibration::measured(actual, sent.len()));
        let changed =
            self.book
                .learn_overflow((upstream, model), tenant, window, counts_output, measured);
        self.spawn_save(upstream, model, changed);
    }

    /// True the first time it is called for a model.
    pub fn first_ceiling_ask(&self, upstream: &str, model: &str) -> bool {
        self.book.first_ceiling_ask(upstream, model)
    }

    /// The most the model's server gives it (Ollama's `/api/show`).
    pub fn learn_ceiling(&self, upstream: &str, model: &str, tokens: u64) {
        self.book.learn_ceiling(upstream, model, tokens);
    }

    /// The output-limit field `model` takes, when a refusal showed it.
    pub fn output_field(&self, upstream: &str, model: &str) -> Option<OutputField> {
        self.book.output_field(upstream, model)
    }

    /// The output-limit field `model` takes, as a summary call's refusal
    /// showed.
    pub fn learn_output_field(&self, upstream: &str, model: &str, field: OutputField) {
        self.book.learn_output_field(upstream, model, field);
    }

    /// `tenant`'s `sent_bytes` request with an output budget of
    /// `requested_output` was answered, its input counted as
    /// `input_tokens` (`cached_tokens` reported apart). A request whose
    /// inputs are not all text (`text_only` false) calibrates nothing:
    /// images and files count many tokens for few bytes. Returns whether
    /// the count shows the upstream cut the prompt without saying so
    /// (`evidence::silently_truncated`): then the count is the window it
    /// kept, learned for this tenant, and calibrates nothing.
    pub fn learn_usage(
        &self,
        (upstream, model): (&str, &str),
        tenant: &TenantId,
        (sent_bytes, text_only): (usize, bool),
        (input_tokens, cached_tokens, requested_output): (u64, u64, u64),
    ) -> bool {
        if input_tokens == 0 || sent_bytes == 0 {
            return false;
        }
        let size = self.book.lookup(upstream, model, tenant).size;
        let before = size.calibration;
        let estimate = before.unwrap_or_default().tokens(sent_bytes);
        if text_only && silently_truncated(estimate, input_tokens, cached_tokens) {
            let known = size.evidence_window() == Some(input_tokens);
            self.note_truncation((upstream, model), tenant, (estimate, input_tokens), known);
            return true;
        }
        if let Some(before) = before {
            // How far the estimate a request was sized by was from the
            // upstream's own count: the accuracy an operator can watch.
            let ratio = before.tokens(sent_bytes) as f64 / input_tokens as f64;
            metrics::histogram!("condenser_token_estimate_ratio").record(ratio);
        }
        let observed = text_only.then(|| Calibration::measured(input_tokens, sent_bytes));
        let counts = (input_tokens, requested_output);
        let learned =
            self.book
                .learn_usage((upstream, model), tenant, observed, counts, Instant::now());
        if let Some(changed) = learned {
            self.spawn_save(upstream, model, changed);
        }
        false
    }

    /// The upstream kept `kept` of an estimated `estimate` tokens and
    /// answered as if nothing happened (Ollama, llama.cpp with context
    /// shift): what it kept is its window for this tenant from now on.
    /// Told once (`known`: the window already is what it kept), counted
    /// every time.
    fn note_truncation(
        &self,
        key: (&str, &str),
        tenant: &TenantId,
        (estimate, kept): (u64, u64),
        known: bool,
    ) {
        metrics::counter!("condenser_silent_truncations_total").increment(1);
        if known {
            tracing::debug!(estimate, kept, "the upstream cut the prompt again");
        } else {
            tracing::warn!(
                upstream = key.0,
                model = key.1,
                estimate,
                kept,
                "the upstream cut the prompt without saying so: compacting before sending from now on"
            );
        }
        let changed = self
            .book
            .learn_overflow(key, tenant, Some(kept), false, None);
        self.spawn_save(key.0, key.1, changed);
    }

    fn spawn_load(&self, upstream: &str, model: &str) {
        let (this, upstream, model) = (self.clone(), upstream.to_string(), model.to_string());
        self.background.spawn(
            async move {
                let (u, m) = (upstream.as_str(), model.as_str());
                let stored = this
                    .storage
                    .run("model_size", |s| async move { s.model_size(u, m).await })
                    .await;
                if let Some(stored) = stored {
                    this.book.merge_stored(u, m, from_store(stored));
                }
            }
            .in_current_span(),
        );
    }

    /// Writes what everyone may share: an agreed window (or forgets one an
    /// answer showed wrong), and the shared calibration when due.
    fn spawn_save(&self, upstream: &str, model: &str, changed: Changed) {
        if changed
            == (Changed {
                window: Shared::Unchanged,
                calibration: None,
            })
        {
            return;
        }
        let (storage, upstream, model) = (
            self.storage.clone(),
            upstream.to_string(),
            model.to_string(),
        );
        self.background.spawn(
            async move {
                let (u, m) = (upstream.as_str(), model.as_str());
                match changed.window {
                    Shared::Agreed(window) => {
                        storage
                            .run("record_model_limit", |s| async move {
                                s.record_model_limit(u, m, window, "overflow_error").await
                            })
                            .await;
                    }
                    Shared::Dropped => {
                        storage
                            .run("forget_model_limit", |s| async move {
                                s.forget_model_limit(u, m).await
                            })
                            .await;
                    }
                    Shared::Unchanged => {}
                }
                if let Some((calibration, ignores)) = changed.calibration {
                    storage
                        .run("record_calibration", |s| async move {
                            s.record_calibration(u, m, calibration.rate(), ignores)
                                .await
                        })
                        .await;
                }
            }
            .in_current_span(),
        );
    }
}

fn from_store(stored: StoredSize) -> Stored {
    Stored {
        window: stored.window,
        calibration: stored.tokens_per_byte.map(Calibration::from_rate),
        ignores_output: stored.ignores_output,
    }
}
