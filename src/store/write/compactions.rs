//! Step 7, compact: compactions as stored.
//!
//! Compactions: which prefix of a chain a summary stands for, and for
//! which conversation it was made (the operator's views list a
//! conversation's compactions by it).

use super::batch_rows::{add, hash_rows, BatchStatement, HASH_COLUMN};
use crate::conversation::{ChainHash, ConversationId, TenantId};
use crate::domain::{Compaction, Trigger, TrimRecord};
use crate::store::rows::{hash_column, HASH_CHUNK};
use crate::store::{Result, Store};
use futures_util::TryStreamExt;
use sqlx::any::AnyArguments;
use sqlx::any::AnyRow;
use sqlx::{FromRow, Row};

/// The deepest compaction of tenant `$1` among the prefixes bound after it.
static DEEPEST_COMPACTION: BatchStatement = BatchStatement::new(1, &HASH_COLUMN, |source| {
    format!(
        "select {COMPACTION_COLUMNS} from compactions where tenant = $1 \
         and prefix_hash in (select r.hash from {source}) order by prefix_len desc limit 1"
    )
});

/// Columns in the order [`Compaction`]'s `FromRow` reads them by name.
pub(in crate::store) const COMPACTION_COLUMNS: &str =
    "prefix_hash, base_hash, prefix_len, summary, \
     summary_tokens, messages_compacted, tokens_before, tokens_after, model, trigger, trims, \
     duration_ms, created_at";

impl<'r> FromRow<'r, AnyRow> for Compaction {
    fn from_row(row: &'r AnyRow) -> Result<Self, sqlx::Error> {
        Ok(Self {
            prefix_hash: hash_column(row, "prefix_hash")?,
            base_hash: hash_column(row, "base_hash")?,
            prefix_len: row.try_get("prefix_len")?,
            summary: row.try_get("summary")?,
            summary_tokens: row.try_get("summary_tokens")?,
            messages_compacted: row.try_get("messages_compacted")?,
            tokens_before: row.try_get("tokens_before")?,
            tokens_after: row.try_get("tokens_after")?,
            model: row.try_get("model")?,
            trigger: trigger_column(row)?,
            trims: trims_column(row)?,
            duration_ms: row.try_get("duration_ms")?,
            created_at_ms: row.try_get("created_at")?,
        })
    }
}

/// A trigger this build does not know is an error, not a guess.
fn trigger_column(row: &AnyRow) -> Result<Trigger, sqlx::Error> {
    let text: String = row.try_get("trigger")?;
    Trigger::parse(&text).ok_or_else(|| sqlx::Error::ColumnDecode {
        index: "trigger".into(),
        source: format!("unknown compaction trigger {text:?}").into(),
    })
}

/// A row whose trims do not parse is an error, not a compaction without
/// trims: applying it would send the untrimmed tool results again.
fn trims_column(row: &AnyRow) -> Result<Vec<TrimRecord>, sqlx::Error> {
    let json: String = row.try_get("trims")?;
    serde_json::from_str(&json).map_err(|error| sqlx::Error::ColumnDecode {
        index: "trims".into(),
        source: Box::new(error),
    })
}

impl Store {
    /// The compaction of this tenant whose prefix is in `chain` and covers the
    /// most messages. One query per chunk of up to 500 hashes.
    #[tracing::instrument(
        name = "store.latest_compaction",
        level = "debug",
        skip_all,
        fields(chain = chain.len()),
    )]
    pub async fn latest_compaction(
        &self,
        tenant: &TenantId,
        chain: &[ChainHash],
    ) -> Result<Option<Compaction>> {
        let mut deepest: Option<Compaction> = None;
        for chunk in chain.chunks(HASH_CHUNK) {
            let Some(found) = self.deepest_in(tenant, chunk).await? else {
                continue;
            };
            if deepest
                .as_ref()
                .is_none_or(|best| found.prefix_len > best.prefix_len)
            {
                deepest = Some(found);
            }
        }
        Ok(deepest)
    }

    async fn deepest_in(
        &self,
        tenant: &TenantId,
        hashes: &[ChainHash],
    ) -> Result<Option<Compaction>> {
        let mut fixed = AnyArguments::default();
        add(&mut fixed, tenant.as_str())?;
        let (text, arguments) =
            DEEPEST_COMPACTION.bound(self.backend, fixed, &hash_rows(hashes))?;
        let deepest = sqlx::query_as_with::<_, Compaction, _>(text, arguments)
            .fetch_optional(&self.pool)
            .await?;
        Ok(deepest)
    }

    /// Stores `compaction`, made for a request of `conversation`, in one
    /// statement, so a crash leaves either no row or a complete one.
    /// Returns false, not an error, when a compaction of that prefix
    /// already exists (another instance got there first).
    #[tracing::instrument(
        name = "store.insert_compaction",
        level = "debug",
        skip_all,
        fields(prefix_len = compaction.prefix_len),
    )]
    pub async fn insert_compaction(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
        compaction: &Compaction,
    ) -> Result<bool> {
        let result = sqlx::query(
            "insert into compactions (tenant, prefix_hash, base_hash, prefix_len, summary, \
             summary_tokens, messages_compacted, tokens_before, tokens_after, model, trigger, \
             trims, duration_ms, created_at, conversation) \
             values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) \
             on conflict (tenant, prefix_hash) do nothing",
        )
        .bind(tenant.as_str())
        .bind(compaction.prefix_hash.to_hex())
        .bind(compaction.base_hash.to_hex())
        .bind(compaction.prefix_len)
        .bind(compaction.summary.as_str())
        .bind(compaction.summary_tokens)
        .bind(compaction.messages_compacted)
        .bind(compaction.tokens_before)
        .bind(compaction.tokens_after)
        .bind(compaction.model.as_str())
        .bind(compaction.trigger.as_str())
        .bind(
            serde_json::to_string(&compaction.trims)
                .map_err(|e| sqlx::Error::Encode(Box::new(e)))?,
        )
        .bind(compaction.duration_ms)
        .bind(compaction.created_at_ms)
        .bind(conversation.to_hex())
        .execute(&self.pool)
        .await?;
        Ok(result.rows_affected() == 1)
    }
}

impl Store {
    /// The compaction of `tenant` whose prefix ends at `prefix`, if stored.
    pub async fn compaction_at(
        &self,
        tenant: &TenantId,
        prefix: &ChainHash,
    ) -> Result<Option<Compaction>> {
        let query = format!(
            "select {COMPACTION_COLUMNS} from compactions where tenant = $1 and prefix_hash = $2"
        );
        Ok(sqlx::query_as(&query)
            .bind(tenant.as_str())
            .bind(prefix.to_hex())
            .fetch_optional(&self.pool)
            .await?)
    }

    /// The newest compactions, newest first, up to `max_bytes` of summaries:
    /// what an instance remembers when it starts.
    pub async fn recent_compactions(
        &self,
        created_since_ms: i64,
        max_bytes: u64,
    ) -> Result<Vec<(TenantId, Compaction)>> {
        let query = format!(
            "select tenant, {COMPACTION_COLUMNS} from compactions \
             where created_at >= $1 order by created_at desc"
        );
        let mut rows = sqlx::query(&query).bind(created_since_ms).fetch(&self.pool);
        let mut found = Vec::new();
        let mut bytes = 0u64;
        while let Some(row) = rows.try_next().await? {
            let compaction = Compaction::from_row(&row)?;
            bytes += compaction.summary.len() as u64;
            if bytes > max_bytes {
                break;
            }
            let tenant = TenantId::from_stored(row.try_get("tenant")?);
            found.push((tenant, compaction));
        }
        Ok(found)
    }
}
