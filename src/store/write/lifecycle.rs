//! Beside the flow, retention: deleting what is no longer kept.
//!
//! Deleting what the operator no longer wants kept: idle conversations
//! (retention), one conversation, one tenant, and dead-end branches.
//!
//! A conversation goes in one transaction, and takes only what no other
//! conversation still reaches (`store::write::heads`): messages two sessions share
//! (their system prompt, an identical opening) stay for the one that is
//! kept, with the compactions of those prefixes. Its own compactions and
//! leases go first (they name its messages), then its messages, its heads,
//! its request rows and its list row.

use super::batch_rows::{add, hash_rows, BatchStatement, HASH_COLUMN};
use super::heads::{MINE, SHARED};
use super::prune::{dead_ends, leaves, newest_heads, Link};
use crate::conversation::{ChainHash, ConversationId, TenantId};
use crate::store::coordination::locks::{lock_tenant, TenantLock};
use crate::store::rows::{conversation_column, hash_column, now_ms, optional_hash_column};
use crate::store::{Backend, Result, Store};
use sqlx::any::AnyArguments;
use sqlx::{AnyConnection, Row};
use std::collections::{HashMap, HashSet};

const DELETE_TENANT: &[&str] = &[
    "delete from compactions where tenant = $1",
    "delete from leases where tenant = $1",
    "delete from messages where tenant = $1",
    "delete from requests where tenant = $1",
    "delete from conversations where tenant = $1",
    "delete from conversation_heads where tenant = $1",
];

/// Rows removed, by table.
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

/// Hashes deleted per statement: bounded statements for a long history.
const DELETE_CHUNK: usize = 2_000;

/// Deletes tenant `$1`'s rows of `table` whose `column` is among the
/// hashes bound after it.
macro_rules! delete_hashes {
    ($table:literal, $column:literal) => {
        BatchStatement::new(1, &HASH_COLUMN, |source| {
            format!(
                concat!(
                    "delete from ",
                    $table,
                    " where tenant = $1 and ",
                    $column,
                    " in (select r.hash from {})"
                ),
                source
            )
        })
    };
}

static DELETE_COMPACTIONS: BatchStatement = delete_hashes!("compactions", "prefix_hash");
static DELETE_LEASES: BatchStatement = delete_hashes!("leases", "key_hash");
static DELETE_MESSAGES: BatchStatement = delete_hashes!("messages", "hash");
static DELETE_HEADS: BatchStatement = delete_hashes!("conversation_heads", "head");

/// What conversation `$2` of tenant `$1` is the only one to reach.
fn sole_sql() -> String {
    format!("{MINE}{SHARED} select hash from mine where hash not in (select hash from shared)")
}

/// Every message conversation `$2` of tenant `$1` reaches, and whether
/// another conversation reaches it too.
fn links_sql() -> String {
    format!(
        "{MINE}{SHARED} select m.hash, m.parent, m.created_at, m.position, m.bytes, \
         case when m.hash in (select hash from shared) then 1 else 0 end as shared \
         from messages m join mine u on m.tenant = $1 and m.hash = u.hash"
    )
}

fn compaction_prefixes_sql() -> String {
    format!(
        "{MINE} select k.prefix_hash from compactions k join mine u \
         on k.tenant = $1 and k.prefix_hash = u.hash"
    )
}

const IDLE_SQL: &str = "select tenant, conversation from conversations where last_activity < $1 \
     order by last_activity limit $2";

const UNPRUNED_SQL: &str = "select tenant, conversation from conversations \
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

    /// A write transaction holding `tenant`'s lock exclusively: for a
    /// deletion or a pruning, which choose what no conversation reaches.
    async fn begin_exclusive(
        &self,
        tenant: &TenantId,
    ) -> Result<sqlx::Transaction<'static, sqlx::Any>> {
        let mut tx = self.begin_write().await?;
        lock_tenant(
            &mut tx,
            self.backend,
            tenant.as_str(),
            TenantLock::Exclusive,
        )
        .await?;
        Ok(tx)
    }

    /// Deletes one conversation: what it alone reaches, and everything
    /// that names it.
    pub async fn delete_conversation(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
    ) -> Result<Deleted> {
        // Before choosing what no other conversation reaches: no write may
        // extend it between the choice and the deletion.
        let mut tx = self.begin_exclusive(tenant).await?;
        let sole: Vec<ChainHash> = sqlx::query(&sole_sql())
            .bind(tenant.as_str())
            .bind(conversation.to_hex())
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(|row| hash_column(row, "hash"))
            .collect::<Result<_, _>>()?;
        let mut deleted = Deleted::default();
        for chunk in sole.chunks(DELETE_CHUNK) {
            let by_hash = [&DELETE_COMPACTIONS, &DELETE_LEASES, &DELETE_MESSAGES];
            let counts = delete_by_hash(&mut tx, self.backend, tenant, &by_hash, chunk).await?;
            deleted.compactions += counts[0];
            deleted.leases += counts[1];
            deleted.messages += counts[2];
        }
        let mut counts = Vec::new();
        for sql in [
            "delete from conversation_heads where tenant = $1 and conversation = $2",
            "delete from requests where tenant = $1 and conversation = $2",
            "delete from conversations where tenant = $1 and conversation = $2",
        ] {
            let done = sqlx::query(sql)
                .bind(tenant.as_str())
                .bind(conversation.to_hex())
                .execute(&mut *tx)
                .await?;
            counts.push(done.rows_affected());
        }
        tx.commit().await?;
        deleted.requests = counts[1];
        deleted.conversations = counts[2];
        Ok(deleted)
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
        let mut tx = self.begin_exclusive(tenant).await?;
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
    ) -> Result<Vec<(TenantId, ConversationId)>> {
        self.conversations_by(IDLE_SQL, before_ms, limit).await
    }

    /// Up to `limit` branched conversations not pruned since `before_ms`.
    pub async fn prune_candidates(
        &self,
        before_ms: i64,
        limit: i64,
    ) -> Result<Vec<(TenantId, ConversationId)>> {
        self.conversations_by(UNPRUNED_SQL, before_ms, limit).await
    }

    async fn conversations_by(
        &self,
        sql: &'static str,
        before_ms: i64,
        limit: i64,
    ) -> Result<Vec<(TenantId, ConversationId)>> {
        let rows = sqlx::query(sql)
            .bind(before_ms)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| {
                Ok((
                    TenantId::from_stored(row.try_get("tenant")?),
                    conversation_column(row, "conversation")?,
                ))
            })
            .collect()
    }

    /// Deletes the dead-end branches of one conversation whose messages are
    /// all older than `before_ms` (see [`dead_ends`]), never a message
    /// another conversation reaches; returns how many messages went. Marks
    /// the conversation pruned either way.
    pub async fn prune_conversation(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
        before_ms: i64,
    ) -> Result<u64> {
        let mut tx = self.begin_exclusive(tenant).await?;
        let (nodes, mut keep, sizes) = reach_links(&mut tx, tenant, conversation).await?;
        keep.extend(compaction_prefixes(&mut tx, tenant, conversation).await?);
        let heads = conversation_heads(&mut tx, tenant, conversation).await?;
        keep.extend(newest_heads(&nodes, &heads));
        keep.extend(newest_request_head(&mut tx, tenant, conversation).await?);
        let doomed = dead_ends(&nodes, &keep, before_ms);
        let mut deleted = 0;
        for chunk in doomed.chunks(DELETE_CHUNK) {
            let statements = [&DELETE_MESSAGES, &DELETE_HEADS];
            deleted += delete_by_hash(&mut tx, self.backend, tenant, &statements, chunk).await?[0];
        }
        // What it reaches, counted again: the write path's count is short
        // where a branch passed through another conversation's links.
        let gone: HashSet<&ChainHash> = doomed.iter().collect();
        let kept = nodes.iter().filter(|node| !gone.contains(&node.hash));
        let (messages, bytes) = kept.fold((0_i64, 0_i64), |(messages, bytes), node| {
            let (position, size) = sizes.get(&node.hash).copied().unwrap_or((0, 0));
            (messages + i64::from(position > 0), bytes + size)
        });
        sqlx::query(
            "update conversations set pruned_at = $3, branches = $4, \
             reached_messages = $5, reached_bytes = $6 \
             where tenant = $1 and conversation = $2",
        )
        .bind(tenant.as_str())
        .bind(conversation.to_hex())
        .bind(now_ms())
        .bind(leaves(&nodes, &doomed).max(1) as i64)
        .bind(messages)
        .bind(bytes)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(deleted)
    }
}

/// Runs each of `statements` over tenant `$1` and `hashes`; rows each
/// deleted.
async fn delete_by_hash(
    connection: &mut AnyConnection,
    backend: Backend,
    tenant: &TenantId,
    statements: &[&'static BatchStatement],
    hashes: &[ChainHash],
) -> Result<Vec<u64>> {
    let rows = hash_rows(hashes);
    let mut counts = Vec::with_capacity(statements.len());
    for statement in statements {
        let mut fixed = AnyArguments::default();
        add(&mut fixed, tenant.as_str())?;
        let (text, arguments) = statement.bound(backend, fixed, &rows)?;
        let done = sqlx::query_with(text, arguments)
            .execute(&mut *connection)
            .await?;
        counts.push(done.rows_affected());
    }
    Ok(counts)
}

/// Each message's position and bytes.
type Sizes = HashMap<ChainHash, (i64, i64)>;

/// The messages a conversation reaches, as the pruning rule reads them,
/// those another conversation reaches too (kept, with their paths), and
/// each one's position and bytes.
async fn reach_links(
    connection: &mut AnyConnection,
    tenant: &TenantId,
    conversation: &ConversationId,
) -> Result<(Vec<Link>, Vec<ChainHash>, Sizes)> {
    let rows = sqlx::query(&links_sql())
        .bind(tenant.as_str())
        .bind(conversation.to_hex())
        .fetch_all(&mut *connection)
        .await?;
    let mut links = Vec::with_capacity(rows.len());
    let mut shared = Vec::new();
    let mut sizes = Sizes::with_capacity(rows.len());
    for row in &rows {
        let link = Link {
            hash: hash_column(row, "hash")?,
            parent: optional_hash_column(row, "parent")?,
            created_at_ms: row.try_get("created_at")?,
        };
        if row.try_get::<i64, _>("shared")? == 1 {
            shared.push(link.hash);
        }
        sizes.insert(link.hash, (row.try_get("position")?, row.try_get("bytes")?));
        links.push(link);
    }
    Ok((links, shared, sizes))
}

/// The heads a conversation's requests ended at, with when each was
/// recorded.
async fn conversation_heads(
    connection: &mut AnyConnection,
    tenant: &TenantId,
    conversation: &ConversationId,
) -> Result<Vec<(ChainHash, i64)>> {
    let rows = sqlx::query(
        "select head, created_at from conversation_heads where tenant = $1 and conversation = $2",
    )
    .bind(tenant.as_str())
    .bind(conversation.to_hex())
    .fetch_all(&mut *connection)
    .await?;
    rows.iter()
        .map(|row| Ok((hash_column(row, "head")?, row.try_get("created_at")?)))
        .collect()
}

/// The head of the conversation's newest request, as its list row
/// records it: the live branch even when heads were recorded in the same
/// millisecond.
async fn newest_request_head(
    connection: &mut AnyConnection,
    tenant: &TenantId,
    conversation: &ConversationId,
) -> Result<Option<ChainHash>> {
    let row = sqlx::query("select head from conversations where tenant = $1 and conversation = $2")
        .bind(tenant.as_str())
        .bind(conversation.to_hex())
        .fetch_optional(&mut *connection)
        .await?;
    Ok(row.map(|row| hash_column(&row, "head")).transpose()?)
}

async fn compaction_prefixes(
    connection: &mut AnyConnection,
    tenant: &TenantId,
    conversation: &ConversationId,
) -> Result<Vec<ChainHash>> {
    let rows = sqlx::query(&compaction_prefixes_sql())
        .bind(tenant.as_str())
        .bind(conversation.to_hex())
        .fetch_all(&mut *connection)
        .await?;
    rows.iter()
        .map(|row| Ok(hash_column(row, "prefix_hash")?))
        .collect()
}
