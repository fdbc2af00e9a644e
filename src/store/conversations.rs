//! Beside the flow, the operator's views: one conversation read back.
//!
//! Read-only views for the operator CLI (`condenser conversations list/show`).
//!
//! A conversation is the tree under one root (position 0, the system prompt):
//! every branch a client took from it. Messages only link to their parent, so
//! the views walk the tree with recursive CTEs, which both backends run. They
//! scan across tenants on purpose: the operator sees everything, but tenants
//! stay opaque digests.

use super::compactions::COMPACTION_COLUMNS;
use super::rows::{hash_column, optional_hash_column};
use super::{Compaction, Result, Store, StoreError};
use crate::conversation::{ChainHash, TenantId};
use sqlx::any::AnyRow;
use sqlx::{FromRow, Row};

/// One line of `conversations list`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConversationSummary {
    pub tenant: TenantId,
    pub root: ChainHash,
    /// Messages under the root, the root itself not counted.
    pub messages: i64,
    /// Leaves of the tree: 1 for a conversation never edited or regenerated.
    pub branches: i64,
    /// Sum of the stored message bodies, root included.
    pub bytes: i64,
    pub created_at_ms: i64,
    pub last_activity_ms: i64,
    /// The smallest label seen in the tree, if any, and how many distinct
    /// labels there are (aggregating the labels themselves is dialect-specific).
    pub label: Option<String>,
    pub label_count: i64,
    pub compactions: i64,
}

/// A conversation tree for `conversations show`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConversationDetail {
    pub tenant: TenantId,
    pub root: ChainHash,
    /// Every message of the tree, ordered by position then creation time.
    pub messages: Vec<MessageNode>,
    /// Compactions of any prefix in the tree, by prefix length.
    pub compactions: Vec<Compaction>,
}

/// A stored message without its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageNode {
    pub hash: ChainHash,
    pub parent: Option<ChainHash>,
    pub position: i64,
    pub role: String,
    pub bytes: i64,
    pub token_estimate: i64,
    pub label: Option<String>,
    pub created_at_ms: i64,
}

/// The tree under root `$2` of tenant `$1`, as `tree(hash)`.
macro_rules! tree_cte {
    () => {
        "with recursive tree(hash) as ( \
           select hash from messages where tenant = $1 and hash = $2 \
           union all \
           select m.hash from messages m join tree t on m.tenant = $1 and m.parent = t.hash) "
    };
}

const LIST_SQL: &str = "\
with recursive tree(tenant, root, hash) as (
    select tenant, hash, hash from messages where position = 0
    union all
    select m.tenant, t.root, m.hash
    from messages m join tree t on m.tenant = t.tenant and m.parent = t.hash)
select t.tenant, t.root, count(*) - 1 as messages,
    sum(case when exists (select 1 from messages c where c.tenant = t.tenant and c.parent = t.hash)
        then 0 else 1 end) as branches,
    cast(sum(m.bytes) as bigint) as bytes,
    min(m.created_at) as created_at, max(m.created_at) as last_activity,
    min(m.label) as label, count(distinct m.label) as label_count,
    (select count(*)
        from compactions k join tree kt on k.tenant = kt.tenant and k.prefix_hash = kt.hash
        where kt.tenant = t.tenant and kt.root = t.root) as compactions
from tree t join messages m on m.tenant = t.tenant and m.hash = t.hash
group by t.tenant, t.root
order by last_activity desc, t.root
limit $1";

const ROOT_SQL: &str = "\
with recursive up(hash, parent) as (
    select hash, parent from messages where tenant = $1 and hash = $2
    union all
    select m.hash, m.parent from messages m join up u on m.tenant = $1 and m.hash = u.parent)
select hash from up where parent is null";

const TREE_SQL: &str = concat!(
    tree_cte!(),
    "select m.hash, m.parent, m.position, m.role, m.bytes, m.token_estimate, m.label, m.created_at \
     from tree t join messages m on m.tenant = $1 and m.hash = t.hash \
     order by m.position, m.created_at, m.hash"
);

impl<'r> FromRow<'r, AnyRow> for ConversationSummary {
    fn from_row(row: &'r AnyRow) -> Result<Self, sqlx::Error> {
        Ok(Self {
            tenant: TenantId::from_stored(row.try_get("tenant")?),
            root: hash_column(row, "root")?,
            messages: row.try_get("messages")?,
            branches: row.try_get("branches")?,
            bytes: row.try_get("bytes")?,
            created_at_ms: row.try_get("created_at")?,
            last_activity_ms: row.try_get("last_activity")?,
            label: row.try_get("label")?,
            label_count: row.try_get("label_count")?,
            compactions: row.try_get("compactions")?,
        })
    }
}

impl<'r> FromRow<'r, AnyRow> for MessageNode {
    fn from_row(row: &'r AnyRow) -> Result<Self, sqlx::Error> {
        Ok(Self {
            hash: hash_column(row, "hash")?,
            parent: optional_hash_column(row, "parent")?,
            position: row.try_get("position")?,
            role: row.try_get("role")?,
            bytes: row.try_get("bytes")?,
            token_estimate: row.try_get("token_estimate")?,
            label: row.try_get("label")?,
            created_at_ms: row.try_get("created_at")?,
        })
    }
}

impl Store {
    /// Conversation roots with their sizes, most recently active first.
    pub async fn list_conversations(&self, limit: i64) -> Result<Vec<ConversationSummary>> {
        let rows = sqlx::query_as(LIST_SQL)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows)
    }

    /// The conversation containing the message whose hash starts with
    /// `id_prefix` (at least 6 hex characters): usually a root, but any
    /// message of the tree leads to its root.
    pub async fn conversation(&self, id_prefix: &str) -> Result<Option<ConversationDetail>> {
        let Some((tenant, hash)) = self.find_message(id_prefix).await? else {
            return Ok(None);
        };
        let root_row = sqlx::query(ROOT_SQL)
            .bind(tenant.as_str())
            .bind(hash.to_hex())
            .fetch_optional(&self.pool)
            .await?;
        // A missing ancestor (never stored) leaves the tree rootless: show
        // from the highest message that is stored instead.
        let root = match root_row {
            Some(row) => hash_column(&row, "hash")?,
            None => hash,
        };
        Ok(Some(self.conversation_tree(tenant, root).await?))
    }

    /// The tree under `root` of `tenant`, with its compactions.
    pub async fn conversation_tree(
        &self,
        tenant: TenantId,
        root: ChainHash,
    ) -> Result<ConversationDetail> {
        let messages = sqlx::query_as(TREE_SQL)
            .bind(tenant.as_str())
            .bind(root.to_hex())
            .fetch_all(&self.pool)
            .await?;
        let compactions = self.tree_compactions(&tenant, &root).await?;
        Ok(ConversationDetail {
            tenant,
            root,
            messages,
            compactions,
        })
    }

    async fn find_message(&self, id_prefix: &str) -> Result<Option<(TenantId, ChainHash)>> {
        let prefix = id_prefix.trim().to_ascii_lowercase();
        if prefix.len() < 6 || prefix.len() > 64 || !prefix.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(StoreError::InvalidId(id_prefix.to_owned()));
        }
        // Hex digits only, so the pattern holds no LIKE wildcards but the one
        // appended here.
        let rows = sqlx::query(
            "select tenant, hash from messages where hash like $1 order by hash limit 2",
        )
        .bind(format!("{prefix}%"))
        .fetch_all(&self.pool)
        .await?;
        match rows.as_slice() {
            [] => Ok(None),
            [row] => Ok(Some((
                TenantId::from_stored(row.try_get("tenant")?),
                hash_column(row, "hash")?,
            ))),
            _ => Err(StoreError::AmbiguousId(id_prefix.to_owned())),
        }
    }

    async fn tree_compactions(
        &self,
        tenant: &TenantId,
        root: &ChainHash,
    ) -> Result<Vec<Compaction>> {
        let mut builder = sqlx::QueryBuilder::<sqlx::Any>::new(tree_cte!());
        builder.push("select ");
        builder.push(COMPACTION_COLUMNS);
        builder.push(
            " from compactions k join tree t on k.tenant = $1 and k.prefix_hash = t.hash \
             order by k.prefix_len, k.created_at",
        );
        let rows = builder
            .build_query_as()
            .bind(tenant.as_str())
            .bind(root.to_hex())
            .fetch_all(&self.pool)
            .await?;
        Ok(rows)
    }
}
