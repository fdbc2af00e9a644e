//! Steps 5 to 7, knowing sizes: memory and store.
//!
//! The size book as the pipeline uses it: read from memory on the request
//! path, loaded from the store on first sight of a model and written back
//! when something is learned, both in the background so no request waits
//! on the database for it.

use crate::overflow::{OverflowCause, OverflowSignal};
use crate::protocol::OutputField;
use crate::store::Storage;
use crate::store::StoredSize;
use crate::tokens::{Calibration, ModelSize, SizeBook, SizeSource};
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

    /// What is known now. On first sight of a model the store is asked in
    /// the background; this request goes on with what memory knows.
    pub fn get(&self, upstream: &str, model: &str) -> ModelSize {
        let lookup = self.book.lookup(upstream, model);
        if lookup.first_sight {
            self.spawn_load(upstream, model);
        }
        lookup.size
    }

    /// What an overflow error of a `sent_bytes` request says.
    pub fn learn_overflow(
        &self,
        upstream: &str,
        model: &str,
        signal: &OverflowSignal,
        sent_bytes: usize,
    ) {
        let counts_output = signal.cause == OverflowCause::InputPlusOutput;
        let calibration = signal
            .actual
            .map(|actual| Calibration::measured(actual, sent_bytes));
        let size =
            self.book
                .learn_overflow(upstream, model, signal.limit, counts_output, calibration);
        self.spawn_save(upstream, model, size, "overflow_error");
    }

    /// The output-limit field `model` takes, as a summary call's refusal
    /// showed.
    pub fn learn_output_field(&self, upstream: &str, model: &str, field: OutputField) {
        self.book.learn_output_field(upstream, model, field);
    }

    /// The upstream counted a `sent_bytes` request with an output budget
    /// of `requested_output` as `input_tokens`, and answered it.
    pub fn learn_usage(
        &self,
        upstream: &str,
        model: &str,
        sent_bytes: usize,
        input_tokens: u64,
        requested_output: u64,
    ) {
        if input_tokens == 0 || sent_bytes == 0 {
            return;
        }
        if let Some(before) = self.book.lookup(upstream, model).size.calibration {
            // How far the estimate a request was sized by was from the
            // upstream's own count: the accuracy an operator can watch.
            let ratio = before.tokens(sent_bytes) as f64 / input_tokens as f64;
            metrics::histogram!("condenser_token_estimate_ratio").record(ratio);
        }
        let observed = Calibration::measured(input_tokens, sent_bytes);
        let learned = self.book.learn_usage(
            upstream,
            model,
            observed,
            input_tokens,
            requested_output,
            Instant::now(),
        );
        if let Some(size) = learned {
            self.spawn_save(upstream, model, size, "usage");
        }
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

    fn spawn_save(&self, upstream: &str, model: &str, size: ModelSize, source: &'static str) {
        let (storage, upstream, model) = (
            self.storage.clone(),
            upstream.to_string(),
            model.to_string(),
        );
        self.background.spawn(
            async move {
                let (u, m) = (upstream.as_str(), model.as_str());
                if let Some((window, SizeSource::OverflowError)) = size.window {
                    storage
                        .run("record_model_limit", |s| async move {
                            s.record_model_limit(u, m, window, source).await
                        })
                        .await;
                }
                if let Some(calibration) = size.calibration {
                    let ignores = size.ignores_output;
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

fn from_store(stored: StoredSize) -> ModelSize {
    ModelSize {
        window: stored.window.map(|w| (w, SizeSource::Stored)),
        calibration: stored.tokens_per_byte.map(Calibration::from_rate),
        ignores_output: stored.ignores_output,
        answered_tokens: 0,
        output_field: None,
    }
}
