//! Learned context windows, per upstream and model (DESIGN.md "Knowing
//! sizes"). Stored so every instance, and the next start, knows them.

use super::rows::now_ms;
use super::{Result, Store};
use sqlx::Row;

impl Store {
    /// The context window last recorded for `model` behind `upstream`.
    pub async fn model_limit(&self, upstream: &str, model: &str) -> Result<Option<u64>> {
        let row = sqlx::query(
            "select context_window from model_limits where upstream = $1 and model = $2",
        )
        .bind(upstream)
        .bind(model)
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let window: i64 = row.try_get("context_window")?;
        // A negative window cannot come from `record_model_limit`; treat a
        // hand-edited one as unknown rather than failing the request.
        Ok(u64::try_from(window).ok())
    }

    /// Records (or replaces) the context window of `model` behind
    /// `upstream`, and where the number came from (`source`: config,
    /// overflow error, usage, …). The newest observation wins.
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
             (upstream, model, context_window, source, updated_at, created_at) \
             values ($1, $2, $3, $4, $5, $5) \
             on conflict (upstream, model) do update set context_window = excluded.context_window, \
             source = excluded.source, updated_at = excluded.updated_at",
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
}
