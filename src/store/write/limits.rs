//! Steps 5 to 7, knowing sizes: learned sizes as stored.
//!
//! Learned model sizes, per upstream and model (ARCHITECTURE.md "Knowing sizes"):
//! context windows from overflow errors, bytes-to-tokens rates from usage.
//! Stored so every instance, and the next start, knows them.

use crate::store::rows::now_ms;
use crate::store::{Result, Store};
use sqlx::Row;

/// What the store knows of one model's sizes.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StoredSize {
    pub window: Option<u64>,
    pub tokens_per_byte: Option<f64>,
    pub ignores_output: bool,
}

impl Store {
    /// The context window last recorded for `model` behind `upstream`.
    pub async fn model_limit(&self, upstream: &str, model: &str) -> Result<Option<u64>> {
        Ok(self.model_size(upstream, model).await?.window)
    }

    /// Window, calibration and output accounting of `model` behind `upstream`.
    pub async fn model_size(&self, upstream: &str, model: &str) -> Result<StoredSize> {
        // Only agreed windows are shared; rows from before agreement was
        // required (corroborated 0) may have been taught by one tenant.
        let limit = sqlx::query(
            "select context_window from model_limits \
             where upstream = $1 and model = $2 and corroborated = 1",
        )
        .bind(upstream)
        .bind(model)
        .fetch_optional(&self.pool)
        .await?;
        let rate = sqlx::query(
            "select tokens_per_mbyte, ignores_output from model_calibrations \
             where upstream = $1 and model = $2",
        )
        .bind(upstream)
        .bind(model)
        .fetch_optional(&self.pool)
        .await?;
        let mut size = StoredSize::default();
        if let Some(row) = limit {
            // A negative window cannot come from `record_model_limit`; treat
            // a hand-edited one as unknown rather than failing the request.
            size.window = u64::try_from(row.try_get::<i64, _>("context_window")?).ok();
        }
        if let Some(row) = rate {
            let per_mbyte: i64 = row.try_get("tokens_per_mbyte")?;
            size.tokens_per_byte = (per_mbyte > 0).then(|| per_mbyte as f64 / 1e6);
            size.ignores_output = row.try_get::<i64, _>("ignores_output")? != 0;
        }
        Ok(size)
    }

    /// Records (or replaces) the agreed context window of `model` behind
    /// `upstream`, and where the number came from (`source`: overflow
    /// error, …). The newest agreement wins.
    pub async fn record_model_limit(
        &self,
        upstream: &str,
        model: &str,
        context_window: u64,
        source: &str,
    ) -> Result<()> {
        let now = now_ms();
        sqlx::query(
            "insert into model_limits \
             (upstream, model, context_window, source, corroborated, updated_at, created_at) \
             values ($1, $2, $3, $4, 1, $5, $5) \
             on conflict (upstream, model) do update set context_window = excluded.context_window, \
             source = excluded.source, corroborated = 1, updated_at = excluded.updated_at",
        )
        .bind(upstream)
        .bind(model)
        .bind(i64::try_from(context_window).unwrap_or(i64::MAX))
        .bind(source)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Forgets the window of `model` behind `upstream`: an answered request
    /// larger than it showed it wrong.
    pub async fn forget_model_limit(&self, upstream: &str, model: &str) -> Result<()> {
        sqlx::query("delete from model_limits where upstream = $1 and model = $2")
            .bind(upstream)
            .bind(model)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Records (or replaces) the bytes-to-tokens rate of `model`'s requests,
    /// and whether its upstream leaves the output budget out of the window.
    pub async fn record_calibration(
        &self,
        upstream: &str,
        model: &str,
        tokens_per_byte: f64,
        ignores_output: bool,
    ) -> Result<()> {
        let per_mbyte = (tokens_per_byte * 1e6).round() as i64;
        sqlx::query(
            "insert into model_calibrations \
             (upstream, model, tokens_per_mbyte, ignores_output, updated_at, created_at) \
             values ($1, $2, $3, $4, $5, $5) \
             on conflict (upstream, model) do update set \
             tokens_per_mbyte = excluded.tokens_per_mbyte, \
             ignores_output = excluded.ignores_output, updated_at = excluded.updated_at",
        )
        .bind(upstream)
        .bind(model)
        .bind(per_mbyte)
        .bind(i64::from(ignores_output))
        .bind(now_ms())
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}
