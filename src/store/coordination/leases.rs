//! Step 7, compact: leases across instances.
//!
//! Leases: one summarizer per prefix across instances (ARCHITECTURE.md "Several
//! instances").
//!
//! A lease is a row with an expiry, taken by one conditional upsert: it is
//! granted when the row is missing, expired, or already ours. Expiry is
//! measured by the database's clock, not each instance's, so clock skew
//! between instances cannot hand one lease to two holders.

use crate::conversation::{ChainHash, TenantId};
use crate::store::{Backend, Result, Store};
use std::time::Duration;

/// The acquire statement, around a backend's "now in unix milliseconds".
/// `$4` is the time to live in milliseconds. The `where` of `do update` makes
/// the upsert touch no row, so report zero rows, while another holder's
/// lease is still running.
macro_rules! acquire_sql {
    ($now:literal) => {
        concat!(
            "insert into leases (tenant, key_hash, holder, expires_at, created_at) ",
            "values ($1, $2, $3, ",
            $now,
            " + $4, ",
            $now,
            ") on conflict (tenant, key_hash) do update ",
            "set holder = excluded.holder, expires_at = excluded.expires_at ",
            "where leases.expires_at <= ",
            $now,
            " or leases.holder = excluded.holder"
        )
    };
}

const ACQUIRE_POSTGRES: &str =
    acquire_sql!("cast(extract(epoch from clock_timestamp()) * 1000 as bigint)");

// julianday is SQLite's only sub-second clock that needs no recent version.
const ACQUIRE_SQLITE: &str =
    acquire_sql!("cast((julianday('now') - 2440587.5) * 86400000.0 as integer)");

/// Longer than any summary call; a caller asking for more gets this.
const MAX_TTL: Duration = Duration::from_secs(24 * 60 * 60);

impl Store {
    /// True when `holder` now owns the lease on `key` for `ttl`: it was free,
    /// expired, or already held by `holder` (which renews it).
    #[tracing::instrument(
        name = "store.try_acquire_lease",
        level = "debug",
        skip_all,
        fields(holder = holder)
    )]
    pub async fn try_acquire_lease(
        &self,
        tenant: &TenantId,
        key: &ChainHash,
        holder: &str,
        ttl: Duration,
    ) -> Result<bool> {
        let sql = match self.backend {
            Backend::Postgres => ACQUIRE_POSTGRES,
            Backend::Sqlite => ACQUIRE_SQLITE,
        };
        // Clamped so `now + ttl` cannot overflow a bigint.
        let ttl_ms = i64::try_from(ttl.min(MAX_TTL).as_millis()).unwrap_or(i64::MAX);
        let result = sqlx::query(sql)
            .bind(tenant.as_str())
            .bind(key.to_hex())
            .bind(holder)
            .bind(ttl_ms)
            .execute(&self.pool)
            .await?;
        Ok(result.rows_affected() == 1)
    }

    /// Gives the lease up early so a waiting instance need not sit out the
    /// expiry. Only `holder`'s own lease is removed.
    pub async fn release_lease(
        &self,
        tenant: &TenantId,
        key: &ChainHash,
        holder: &str,
    ) -> Result<()> {
        sqlx::query("delete from leases where tenant = $1 and key_hash = $2 and holder = $3")
            .bind(tenant.as_str())
            .bind(key.to_hex())
            .bind(holder)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// An SQLite file has one Condenser process: at its start, every lease
    /// in the file was held by a run that is gone (killed mid-summary, say),
    /// and its conversations need not wait out the expiry. Postgres leases
    /// may belong to live instances; they expire on their own within a TTL
    /// once nobody renews them.
    pub async fn forget_leases_of_a_previous_run(&self) -> Result<()> {
        if self.backend == Backend::Sqlite {
            sqlx::query("delete from leases")
                .execute(&self.pool)
                .await?;
        }
        Ok(())
    }
}
