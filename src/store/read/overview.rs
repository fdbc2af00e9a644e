//! Beside the flow, the operator's views: the overview.
//!
//! The operator page's overview of a recent period, and the message texts a
//! conversation page shows. Each figure is one aggregate over an index.

use crate::conversation::{ChainHash, TenantId};
use crate::store::rows::{hash_column, optional_hash_column};
use crate::store::{Result, Store};
use sqlx::Row;

/// Summary durations read for percentiles, at most.
const MAX_DURATIONS: i64 = 10_000;

/// What happened since a point in time, across every conversation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overview {
    pub requests: i64,
    pub overflows: i64,
    pub compactions: i64,
    pub degraded_requests: i64,
    /// Minutes in which at least one request was forwarded degraded.
    pub degraded_minutes: i64,
    /// Stored compactions by trigger: (trigger, count, mean ms, max ms).
    pub by_trigger: Vec<(String, i64, i64, i64)>,
    /// Failed compactions by kind: (kind, count).
    pub failures: Vec<(String, i64)>,
    /// Summary durations in milliseconds, ascending.
    pub durations_ms: Vec<i64>,
    pub windows: Vec<LearnedWindow>,
}

/// A model's window and calibration as the store holds them.
#[derive(Debug, Clone, PartialEq)]
pub struct LearnedWindow {
    pub upstream: String,
    pub model: String,
    pub window: i64,
    pub source: String,
    pub tokens_per_mbyte: Option<i64>,
    pub updated_at_ms: i64,
}

/// A message with the start of its body, for reading on the page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageText {
    pub hash: ChainHash,
    pub parent: Option<ChainHash>,
    pub position: i64,
    pub role: String,
    pub preview: String,
}

const TOTALS: &str = "\
select count(*) as requests,
    cast(coalesce(sum(overflows), 0) as bigint) as overflows,
    cast(coalesce(sum(compactions), 0) as bigint) as compactions,
    cast(coalesce(sum(degraded), 0) as bigint) as degraded,
    count(distinct case when degraded = 1 then created_at / 60000 end) as degraded_minutes
from requests where created_at >= $1";

/// The path from `$2` up to the root, newest first, no deeper than `$3`.
const PATH_SQL: &str = "\
with recursive up(hash, parent, position, role, preview) as (
    select hash, parent, position, role, substr(body, 1, cast($4 as integer)) from messages
    where tenant = $1 and hash = $2
    union all
    select m.hash, m.parent, m.position, m.role, substr(m.body, 1, cast($4 as integer))
    from messages m join up u on m.tenant = $1 and m.hash = u.parent
    where m.position >= $3)
select hash, parent, position, role, preview from up order by position";

impl Store {
    /// Figures for everything recorded since `since_ms`.
    pub async fn overview(&self, since_ms: i64) -> Result<Overview> {
        let totals = sqlx::query(TOTALS)
            .bind(since_ms)
            .fetch_one(&self.pool)
            .await?;
        let by_trigger = sqlx::query(
            "select trigger, count(*) as n, cast(avg(duration_ms) as bigint) as mean, \
             max(duration_ms) as longest from compactions where created_at >= $1 \
             group by trigger order by trigger",
        )
        .bind(since_ms)
        .fetch_all(&self.pool)
        .await?;
        let failures = sqlx::query(
            "select compaction_error, count(*) as n from requests \
             where created_at >= $1 and compaction_error is not null \
             group by compaction_error order by compaction_error",
        )
        .bind(since_ms)
        .fetch_all(&self.pool)
        .await?;
        let durations_ms = sqlx::query_scalar(
            "select duration_ms from compactions where created_at >= $1 \
             order by duration_ms limit $2",
        )
        .bind(since_ms)
        .bind(MAX_DURATIONS)
        .fetch_all(&self.pool)
        .await?;
        Ok(Overview {
            requests: totals.try_get("requests")?,
            overflows: totals.try_get("overflows")?,
            compactions: totals.try_get("compactions")?,
            degraded_requests: totals.try_get("degraded")?,
            degraded_minutes: totals.try_get("degraded_minutes")?,
            by_trigger: by_trigger
                .iter()
                .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?)))
                .collect::<Result<_, sqlx::Error>>()?,
            failures: failures
                .iter()
                .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
                .collect::<Result<_, sqlx::Error>>()?,
            durations_ms,
            windows: self.learned_windows().await?,
        })
    }

    async fn learned_windows(&self) -> Result<Vec<LearnedWindow>> {
        let rows = sqlx::query(
            "select l.upstream, l.model, l.context_window, l.source, l.updated_at, \
             c.tokens_per_mbyte from model_limits l left join model_calibrations c \
             on c.upstream = l.upstream and c.model = l.model \
             where l.corroborated = 1 order by l.upstream, l.model limit 500",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(LearnedWindow {
                    upstream: row.try_get("upstream")?,
                    model: row.try_get("model")?,
                    window: row.try_get("context_window")?,
                    source: row.try_get("source")?,
                    tokens_per_mbyte: row.try_get("tokens_per_mbyte")?,
                    updated_at_ms: row.try_get("updated_at")?,
                })
            })
            .collect()
    }

    /// The messages from position `from` up to `head` on `head`'s path,
    /// oldest first, each with the first `preview_chars` of its body.
    pub async fn path_texts(
        &self,
        tenant: &TenantId,
        head: &ChainHash,
        from: i64,
        preview_chars: i64,
    ) -> Result<Vec<MessageText>> {
        let rows = sqlx::query(PATH_SQL)
            .bind(tenant.as_str())
            .bind(head.to_hex())
            .bind(from)
            .bind(preview_chars)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| {
                Ok(MessageText {
                    hash: hash_column(row, "hash")?,
                    parent: optional_hash_column(row, "parent")?,
                    position: row.try_get("position")?,
                    role: row.try_get("role")?,
                    preview: row.try_get("preview")?,
                })
            })
            .collect()
    }
}
