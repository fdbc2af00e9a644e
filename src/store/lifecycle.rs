//! Beside the flow, retention: deleting what is no longer kept.
//!
//! Deleting what the operator no longer wants kept: idle conversations
//! (retention), one conversation, one tenant, and dead-end branches.
//!
//! A conversation goes as a whole, in one transaction: its compactions and
//! leases first (they name messages of the tree), then its messages, its
//! request rows and its list row.

use super::prune::dead_ends;
use super::rows::{hash_column, now_ms, optional_hash_column, push_placeholders, HASH_CHUNK};
use super::{Backend, Result, Store};
use crate::conversation::{ChainHash, TenantId};
use sqlx::{Any, QueryBuilder, Row};

/// The hashes of the tree under root `$2` of tenant `$1`, as a subquery.
macro_rules! tree_hashes {
    () => {
        "(with recursive tree(hash) as ( \
           select hash from messages where tenant = $1 and hash = $2 \
           union all \
           select m.hash from messages m join tree t on m.tenant = $1 and m.parent = t.hash) \
         select hash from tree)"
    };
}

const DELETE_TREE: &[&str] = &[
    concat!(
        "delete from compactions where tenant = $1 and prefix_hash in ",
        tree_hashes!()
    ),
    concat!(
        "delete from leases where tenant = $1 and key_hash in ",
        tree_hashes!()
    ),
    concat!(
        "delete from messages where tenant = $1 and hash in ",
        tree_hashes!()
    ),
    "delete from requests where tenant = $1 and root = $2",
    "delete from conversations where tenant = $1 and root = $2",
];

const DELETE_TENANT: &[&str] = &[
    "delete from compactions where tenant = $1",
    "delete from leases where tenant = $1",
    "delete from messages where tenant = $1",
    "delete from requests where tenant = $1",
    "delete from conversations where tenant = $1",
];

/// Rows removed, by table, in [`DELETE_TREE`] / [`DELETE_TENANT`] order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Deleted {
    pub compactions: u64,
    pub leases: u64,
    pub messages: u64,
    pub requests: u64,
    pub conversations: u64,
}

impl Deleted {
    fn from_counts(counts: &[u64]) -> Self {
        let at = |index: usize| counts.get(index).copied().unwrap_or(0);
        Self {
            compactions: at(0),
            leases: at(1),
            messages: at(2),
            requests: at(3),
            conversations: at(4),
        }
    }
}

const IDLE_SQL: &str = "select tenant, root from conversations where last_activity < $1 \
     order by last_activity limit $2";

const UNPRUNED_SQL: &str = "select tenant, root from conversations \
     where branches > 1 and coalesce(pruned_at, 0) < $1 order by last_activity limit $2";

impl Store {
    /// A transaction that will write. SQLite's default deferred one starts
    /// as a reader and fails at once ("database is locked") when it must
    /// become a writer after another connection wrote; taking the write
    /// lock up front waits on the busy timeout instead.
    pub(super) async fn begin_write(&self) -> Result<sqlx::Transaction<'static, sqlx::Any>> {
        Ok(match self.backend {
            Backend::Sqlite => self.pool.begin_with("begin immediate").await?,
            Backend::Postgres => self.pool.begin().await?,
        })
    }

    /// Deletes one conversation tree with everything that names it.
    pub async fn delete_conversation(
        &self,
        tenant: &TenantId,
        root: &ChainHash,
    ) -> Result<Deleted> {
        let mut tx = self.begin_write().await?;
        let mut counts = Vec::with_capacity(DELETE_TREE.len());
        for sql in DELETE_TREE {
            let done = sqlx::query(sql)
                .bind(tenant.as_str())
                .bind(root.to_hex())
                .execute(&mut *tx)
                .await?;
            counts.push(done.rows_affected());
        }
        tx.commit().await?;
        Ok(Deleted::from_counts(&counts))
    }

    /// How many message and compaction rows were ever deleted (SQLite, by
    /// trigger): a change means memory may hold what is gone.
    pub async fn sqlite_deletions(&self) -> Result<i64> {
        let count = sqlx::query_scalar("select deletions from store_deletions where id = 1")
            .fetch_one(&self.pool)
            .await?;
        Ok(count)
    }

    /// Deletes every row stored under `tenant`'s digest.
    pub async fn delete_tenant(&self, tenant: &TenantId) -> Result<Deleted> {
        let mut tx = self.begin_write().await?;
        let mut counts = Vec::with_capacity(DELETE_TENANT.len());
        for sql in DELETE_TENANT {
            let done = sqlx::query(sql)
                .bind(tenant.as_str())
                .execute(&mut *tx)
                .await?;
            counts.push(done.rows_affected());
        }
        tx.commit().await?;
        Ok(Deleted::from_counts(&counts))
    }

    /// Up to `limit` conversations with no activity since `before_ms`,
    /// longest idle first.
    pub async fn idle_conversations(
        &self,
        before_ms: i64,
        limit: i64,
    ) -> Result<Vec<(TenantId, ChainHash)>> {
        self.conversations_by(IDLE_SQL, before_ms, limit).await
    }

    /// Up to `limit` branched conversations not pruned since `before_ms`.
    pub async fn prune_candidates(
        &self,
        before_ms: i64,
        limit: i64,
    ) -> Result<Vec<(TenantId, ChainHash)>> {
        self.conversations_by(UNPRUNED_SQL, before_ms, limit).await
    }

    async fn conversations_by(
        &self,
        sql: &'static str,
        before_ms: i64,
        limit: i64,
    ) -> Result<Vec<(TenantId, ChainHash)>> {
        let rows = sqlx::query(sql)
            .bind(before_ms)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| {
                Ok((
                    TenantId::from_stored(row.try_get("tenant")?),
                    hash_column(row, "root")?,
                ))
            })
            .collect()
    }

    /// Deletes the dead-end branches of one conversation whose messages are
    /// all older than `before_ms` (see [`dead_ends`]); returns how many
    /// messages went. Marks the conversation pruned either way.
    pub async fn prune_conversation(
        &self,
        tenant: &TenantId,
        root: &ChainHash,
        before_ms: i64,
    ) -> Result<u64> {
        let nodes = self.tree_links(tenant, root).await?;
        let mut keep: Vec<ChainHash> = self.tree_compactions_prefixes(tenant, root).await?;
        if let Some(head) = self.conversation_head(tenant, root).await? {
            keep.push(head);
        }
        let doomed = dead_ends(&nodes, &keep, before_ms);
        let mut deleted = 0;
        for chunk in doomed.chunks(HASH_CHUNK) {
            let mut builder =
                QueryBuilder::<Any>::new("delete from messages where tenant = $1 and hash in (");
            push_placeholders(&mut builder, 2, chunk.len());
            builder.push(")");
            let mut query = builder.build().bind(tenant.as_str());
            for hash in chunk {
                query = query.bind(hash.to_hex());
            }
            deleted += query.execute(&self.pool).await?.rows_affected();
        }
        let leaves = super::prune::leaves(&nodes, &doomed);
        sqlx::query(
            "update conversations set pruned_at = $3, branches = $4 where tenant = $1 and root = $2",
        )
        .bind(tenant.as_str())
        .bind(root.to_hex())
        .bind(now_ms())
        .bind(leaves.max(1) as i64)
        .execute(&self.pool)
        .await?;
        Ok(deleted)
    }

    async fn tree_links(
        &self,
        tenant: &TenantId,
        root: &ChainHash,
    ) -> Result<Vec<super::prune::Link>> {
        let rows = sqlx::query(concat!(
            "select hash, parent, created_at from messages where tenant = $1 and hash in ",
            tree_hashes!()
        ))
        .bind(tenant.as_str())
        .bind(root.to_hex())
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(super::prune::Link {
                    hash: hash_column(row, "hash")?,
                    parent: optional_hash_column(row, "parent")?,
                    created_at_ms: row.try_get("created_at")?,
                })
            })
            .collect()
    }

    async fn tree_compactions_prefixes(
        &self,
        tenant: &TenantId,
        root: &ChainHash,
    ) -> Result<Vec<ChainHash>> {
        let rows = sqlx::query(concat!(
            "select prefix_hash from compactions where tenant = $1 and prefix_hash in ",
            tree_hashes!()
        ))
        .bind(tenant.as_str())
        .bind(root.to_hex())
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| Ok(hash_column(row, "prefix_hash")?))
            .collect()
    }

    async fn conversation_head(
        &self,
        tenant: &TenantId,
        root: &ChainHash,
    ) -> Result<Option<ChainHash>> {
        let row = sqlx::query("select head from conversations where tenant = $1 and root = $2")
            .bind(tenant.as_str())
            .bind(root.to_hex())
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(|row| hash_column(&row, "head")).transpose()?)
    }
}
