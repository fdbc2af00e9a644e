//! Beside the flow, the operator's views: one conversation read back.
//!
//! Read-only views for the operator CLI (`condenser conversations list/show`).
//!
//! A conversation is one session (`conversation::session`): every message
//! its heads reach (`store::write::heads`), its branches being its rewinds and
//! edits. Messages only link to their parent, so the views walk up from
//! the heads with recursive CTEs, which both backends run. They scan
//! across tenants on purpose: the operator sees everything, but tenants
//! stay opaque digests.

use crate::conversation::{ChainHash, ConversationId, TenantId};
use crate::domain::Compaction;
use crate::store::rows::{conversation_column, hash_column, optional_hash_column};
use crate::store::write::compactions::COMPACTION_COLUMNS;
use crate::store::write::heads::MINE;
use crate::store::{Result, Store, StoreError};
use sqlx::any::AnyRow;
use sqlx::{FromRow, Row};

/// One line of `conversations list`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConversationSummary {
    pub tenant: TenantId,
    pub conversation: ConversationId,
    /// Its system prompt's link, shared with its siblings.
    pub root: ChainHash,
    pub label: Option<String>,
    /// Messages it reaches, the root not counted.
    pub messages: i64,
    /// Its leaves: 1 for a conversation never rewound, edited or
    /// regenerated.
    pub branches: i64,
    /// Sum of the stored message bodies it reaches, root included.
    pub bytes: i64,
    pub compactions: i64,
    pub created_at_ms: i64,
    pub last_activity_ms: i64,
}

/// A conversation for `conversations show`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConversationDetail {
    pub tenant: TenantId,
    pub conversation: ConversationId,
    pub root: ChainHash,
    pub label: Option<String>,
    /// Every message it reaches, ordered by position then creation time.
    pub messages: Vec<MessageNode>,
    /// Compactions of any prefix it reaches, by prefix length.
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

const LIST_SQL: &str = "select tenant, conversation, root, label, last_activity, created_at \
     from conversations order by last_activity desc, conversation limit $1";

/// What conversation `$2` of tenant `$1` reaches, in figures.
fn figures_sql() -> String {
    format!(
        "{MINE} select \
         coalesce(sum(case when m.position > 0 then 1 else 0 end), 0) as messages, \
         coalesce(sum(case when exists (select 1 from messages c join mine x \
             on c.tenant = $1 and c.hash = x.hash where c.parent = m.hash) \
             then 0 else 1 end), 0) as branches, \
         cast(coalesce(sum(m.bytes), 0) as bigint) as bytes, \
         (select count(*) from compactions k join mine x \
             on k.tenant = $1 and k.prefix_hash = x.hash) as compactions \
         from messages m join mine u on m.tenant = $1 and m.hash = u.hash"
    )
}

fn tree_sql() -> String {
    format!(
        "{MINE} select m.hash, m.parent, m.position, m.role, m.bytes, m.token_estimate, \
         m.label, m.created_at from messages m join mine u on m.tenant = $1 and m.hash = u.hash \
         order by m.position, m.created_at, m.hash"
    )
}

fn compactions_sql() -> String {
    format!(
        "{MINE} select {COMPACTION_COLUMNS} from compactions k join mine u \
         on k.tenant = $1 and k.prefix_hash = u.hash order by k.prefix_len, k.created_at"
    )
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
    /// The most recently active conversations, with what each reaches.
    pub async fn list_conversations(&self, limit: i64) -> Result<Vec<ConversationSummary>> {
        let rows = sqlx::query(LIST_SQL)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        let figures = figures_sql();
        let mut listed = Vec::with_capacity(rows.len());
        for row in rows {
            let tenant = TenantId::from_stored(row.try_get("tenant")?);
            let conversation = conversation_column(&row, "conversation")?;
            let counted = sqlx::query(&figures)
                .bind(tenant.as_str())
                .bind(conversation.to_hex())
                .fetch_one(&self.pool)
                .await?;
            listed.push(ConversationSummary {
                root: hash_column(&row, "root")?,
                label: row.try_get("label")?,
                messages: counted.try_get("messages")?,
                branches: counted.try_get("branches")?,
                bytes: counted.try_get("bytes")?,
                compactions: counted.try_get("compactions")?,
                created_at_ms: row.try_get("created_at")?,
                last_activity_ms: row.try_get("last_activity")?,
                tenant,
                conversation,
            });
        }
        Ok(listed)
    }

    /// The conversation whose id starts with `id_prefix` (at least 6 hex
    /// characters), as `conversations list` prints it.
    pub async fn conversation(&self, id_prefix: &str) -> Result<Option<ConversationDetail>> {
        let Some((tenant, conversation)) = self.find_conversation(id_prefix).await? else {
            return Ok(None);
        };
        Ok(Some(self.conversation_tree(tenant, conversation).await?))
    }

    /// Every message `conversation` of `tenant` reaches, with its
    /// compactions.
    pub async fn conversation_tree(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
    ) -> Result<ConversationDetail> {
        let messages: Vec<MessageNode> = sqlx::query_as(&tree_sql())
            .bind(tenant.as_str())
            .bind(conversation.to_hex())
            .fetch_all(&self.pool)
            .await?;
        let compactions = sqlx::query_as(&compactions_sql())
            .bind(tenant.as_str())
            .bind(conversation.to_hex())
            .fetch_all(&self.pool)
            .await?;
        let row = self.conversation_row(&tenant, &conversation).await?;
        let stored_root = messages.iter().find(|m| m.parent.is_none()).map(|m| m.hash);
        let root = stored_root
            .or(row.as_ref().map(|row| row.root))
            .unwrap_or(ChainHash::ZERO);
        Ok(ConversationDetail {
            tenant,
            conversation,
            root,
            label: row.and_then(|row| row.label),
            messages,
            compactions,
        })
    }

    /// The one conversation whose id starts with `id_prefix`.
    pub async fn find_conversation(
        &self,
        id_prefix: &str,
    ) -> Result<Option<(TenantId, ConversationId)>> {
        let prefix = id_prefix.trim().to_ascii_lowercase();
        if prefix.len() < 6 || prefix.len() > 64 || !prefix.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(StoreError::InvalidId(id_prefix.to_owned()));
        }
        // Hex digits only, so the pattern holds no LIKE wildcards but the one
        // appended here.
        let rows = sqlx::query(
            "select tenant, conversation from conversations where conversation like $1 \
             order by conversation limit 2",
        )
        .bind(format!("{prefix}%"))
        .fetch_all(&self.pool)
        .await?;
        match rows.as_slice() {
            [] => Ok(None),
            [row] => Ok(Some((
                TenantId::from_stored(row.try_get("tenant")?),
                conversation_column(row, "conversation")?,
            ))),
            _ => Err(StoreError::AmbiguousId(id_prefix.to_owned())),
        }
    }
}
