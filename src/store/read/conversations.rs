//! Beside the flow, the operator's views: one conversation read back.
//!
//! Read-only views for the operator CLI (`condenser conversations list/show`)
//! and the operator page.
//!
//! A conversation is one session (`conversation::session`): every message
//! its heads reach (`store::write::heads`), its branches being its rewinds and
//! edits. A conversation may reach 100,000 messages, and a walk of them
//! takes seconds, so no view walks them: what it reaches is counted on
//! write (`store::write::reach`), its branches and compactions are index
//! ranges, and a view reads the newest part of its tree (a walk up from
//! its heads that stops at a position), and lists compactions and
//! requests a page at a time. They scan across tenants on purpose: the
//! operator sees everything, but tenants stay opaque digests.

use super::page::Listed;
use super::requests::RequestPoint;
use crate::conversation::{ChainHash, ConversationId, TenantId};
use crate::domain::Compaction;
use crate::store::rows::{conversation_column, hash_column, optional_hash_column, HASH_CHUNK};
use crate::store::write::batch_rows::{hash_rows, BatchStatement, HASH_COLUMN};
use crate::store::write::compactions::COMPACTION_COLUMNS;
use crate::store::write::heads::MINE;
use crate::store::{Backend, Result, Store, StoreError};
use sqlx::any::{AnyArguments, AnyRow};
use sqlx::{Arguments, FromRow, Row};
use std::collections::HashSet;

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
    /// Its heads: 1 for a conversation never rewound, edited or
    /// regenerated.
    pub branches: i64,
    /// Sum of the stored message bodies it reaches, root included.
    pub bytes: i64,
    /// Compactions made for its requests.
    pub compactions: i64,
    pub created_at_ms: i64,
    pub last_activity_ms: i64,
}

/// A conversation for `conversations show`: its figures, the newest part
/// of its tree, and the newest page of its compactions and requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConversationDetail {
    pub tenant: TenantId,
    pub conversation: ConversationId,
    pub root: ChainHash,
    pub label: Option<String>,
    /// Its figures, as the list shows them.
    pub figures: Figures,
    /// `messages` holds every message it reaches at this position or later
    /// (all of them from 0).
    pub from_position: i64,
    /// The messages shown, ordered by position then creation time.
    pub messages: Vec<MessageNode>,
    /// Compactions of prefixes among `messages`, by prefix length.
    pub compactions: Vec<Compaction>,
    /// A page of its compactions, newest first.
    pub newest_compactions: Listed<Compaction>,
    /// A page of its stored request rows, newest first.
    pub newest_requests: Listed<RequestPoint>,
}

/// A conversation's figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Figures {
    /// Messages it reaches, the roots not counted.
    pub messages: i64,
    pub branches: i64,
    /// Bytes of the message bodies it reaches, the roots counted.
    pub bytes: i64,
    pub compactions: i64,
    /// Request rows kept for its chart.
    pub requests_kept: i64,
}

/// How much of a conversation `conversations show` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DetailQuery {
    /// The newest positions of its tree to show.
    pub positions: i64,
    /// Compactions and request rows per page.
    pub limit: i64,
    /// Compactions and request rows before the page.
    pub offset: i64,
}

impl Default for DetailQuery {
    fn default() -> Self {
        Self {
            positions: 200,
            limit: 20,
            offset: 0,
        }
    }
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

/// One branch of a conversation: a head its requests ended at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Branch {
    pub head: ChainHash,
    /// The head's position; `None` when its message is no longer stored.
    pub position: Option<i64>,
    pub created_at_ms: i64,
}

/// Each conversation's figures: its list row's, and two counts over
/// indexes. Never a walk of its messages.
const SUMMARY_SQL: &str = "select c.tenant, c.conversation, c.root, c.label, \
     c.reached_messages, c.reached_bytes, c.last_activity, c.created_at, \
     (select count(*) from conversation_heads h \
         where h.tenant = c.tenant and h.conversation = c.conversation) as branches, \
     (select count(*) from compactions k \
         where k.tenant = c.tenant and k.conversation = c.conversation) as compactions \
     from conversations c";

/// What conversation `$2` of tenant `$1` reaches at position `$3` or
/// later: its heads there (by their recorded position; a head an older
/// build recorded without one, by its message's), walked up no further
/// than `$3`. Each step reads its parent by a subquery, not a join: on a
/// join with the walk, SQLite builds a Bloom filter of every message
/// (0.1 s of a 100,000-message conversation, for a window of 200).
const WINDOW_SQL: &str = "with recursive win(hash) as ( \
    select h.head from conversation_heads h \
    where h.tenant = $1 and h.conversation = $2 and (h.position >= $3 \
        or (h.position is null and (select m.position from messages m \
            where m.tenant = h.tenant and m.hash = h.head) >= $3)) \
    union \
    select (select m.parent from messages m \
        where m.tenant = $1 and m.hash = w.hash and m.position > $3) \
    from win w where w.hash is not null) \
    select hash from win where hash is not null";

/// Tenant `$1`'s messages among the hashes bound after it, without their
/// bodies.
static NODES: BatchStatement = BatchStatement::new(1, &HASH_COLUMN, |source| {
    format!(
        "select hash, parent, position, role, bytes, token_estimate, label, created_at \
         from messages where tenant = $1 and hash in (select r.hash from {source})"
    )
});

/// Every message conversation `$2` of tenant `$1` reaches: a walk of all
/// of them, for checks, never for a view.
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

/// Tenant `$1`'s compactions of the prefixes bound after it.
static COMPACTIONS_AT: BatchStatement = BatchStatement::new(1, &HASH_COLUMN, |source| {
    format!(
        "select {COMPACTION_COLUMNS} from compactions where tenant = $1 \
         and prefix_hash in (select r.hash from {source}) order by prefix_len, created_at"
    )
});

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

fn summary_of(row: &AnyRow) -> Result<ConversationSummary, sqlx::Error> {
    Ok(ConversationSummary {
        tenant: TenantId::from_stored(row.try_get("tenant")?),
        conversation: conversation_column(row, "conversation")?,
        root: hash_column(row, "root")?,
        label: row.try_get("label")?,
        messages: row.try_get("reached_messages")?,
        branches: row.try_get("branches")?,
        bytes: row.try_get("reached_bytes")?,
        compactions: row.try_get("compactions")?,
        created_at_ms: row.try_get("created_at")?,
        last_activity_ms: row.try_get("last_activity")?,
    })
}

impl Store {
    /// The most recently active conversations, with what each reaches:
    /// one read of the list, whatever their size.
    pub async fn list_conversations(&self, limit: i64) -> Result<Vec<ConversationSummary>> {
        let rows = sqlx::query(&format!(
            "{SUMMARY_SQL} order by c.last_activity desc, c.conversation limit $1"
        ))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(summary_of).collect::<Result<_, _>>()?)
    }

    /// One conversation's line of the list.
    pub async fn conversation_summary(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
    ) -> Result<Option<ConversationSummary>> {
        let row = sqlx::query(&format!(
            "{SUMMARY_SQL} where c.tenant = $1 and c.conversation = $2"
        ))
        .bind(tenant.as_str())
        .bind(conversation.to_hex())
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.as_ref().map(summary_of).transpose()?)
    }

    /// The conversation whose id starts with `id_prefix` (at least 6 hex
    /// characters), as `conversations list` prints it, read as `show`
    /// reads it by default.
    pub async fn conversation(&self, id_prefix: &str) -> Result<Option<ConversationDetail>> {
        self.conversation_page(id_prefix, &DetailQuery::default())
            .await
    }

    /// The conversation whose id starts with `id_prefix`, as much of it
    /// as `query` asks: a few bounded reads, whatever its size.
    pub async fn conversation_page(
        &self,
        id_prefix: &str,
        query: &DetailQuery,
    ) -> Result<Option<ConversationDetail>> {
        let Some((tenant, conversation)) = self.find_conversation(id_prefix).await? else {
            return Ok(None);
        };
        let Some(row) = self.conversation_row(&tenant, &conversation).await? else {
            return Ok(None);
        };
        let Some(summary) = self.conversation_summary(&tenant, &conversation).await? else {
            return Ok(None);
        };
        let from_position = (row.messages - query.positions.max(1) + 1).max(0);
        let messages = self
            .conversation_window(&tenant, &conversation, from_position)
            .await?;
        let hashes: Vec<ChainHash> = messages.iter().map(|m| m.hash).collect();
        let compactions = self.compactions_among(&tenant, &hashes).await?;
        let (limit, offset) = (query.limit.max(1), query.offset.max(0));
        let newest_compactions = Listed {
            items: self
                .conversation_compactions(&tenant, &conversation, offset, limit)
                .await?,
            offset,
            total: summary.compactions,
        };
        let newest_requests = self
            .conversation_requests_page(&tenant, &conversation, offset, limit)
            .await?;
        let stored_root = messages.iter().find(|m| m.parent.is_none()).map(|m| m.hash);
        Ok(Some(ConversationDetail {
            figures: Figures {
                messages: summary.messages,
                branches: summary.branches,
                bytes: summary.bytes,
                compactions: summary.compactions,
                requests_kept: newest_requests.total,
            },
            root: stored_root.unwrap_or(row.root),
            label: row.label,
            from_position,
            messages,
            compactions,
            newest_compactions,
            newest_requests: Listed {
                items: newest_requests.items.into_iter().rev().collect(),
                ..newest_requests
            },
            tenant,
            conversation,
        }))
    }

    /// Every message `conversation` reaches at position `from` or later,
    /// by position then time: a walk of those alone, then their rows.
    pub async fn conversation_window(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
        from: i64,
    ) -> Result<Vec<MessageNode>> {
        let walk = sqlx::query(WINDOW_SQL)
            .bind(tenant.as_str())
            .bind(conversation.to_hex())
            .bind(from);
        let rows = match self.backend {
            // Postgres estimates a walk at far more rows than it reads, and
            // past its JIT threshold compiled the query for 0.9 s to run it
            // in 20 ms.
            Backend::Postgres => {
                let mut tx = self.pool.begin().await?;
                sqlx::query("set local jit = off").execute(&mut *tx).await?;
                let rows = walk.fetch_all(&mut *tx).await?;
                tx.commit().await?;
                rows
            }
            Backend::Sqlite => walk.fetch_all(&self.pool).await?,
        };
        let hashes: Vec<ChainHash> = rows
            .iter()
            .map(|row| hash_column(row, "hash"))
            .collect::<Result<_, _>>()?;
        let mut nodes: Vec<MessageNode> = Vec::with_capacity(hashes.len());
        for chunk in hashes.chunks(HASH_CHUNK) {
            let mut fixed = AnyArguments::default();
            fixed.add(tenant.as_str()).map_err(sqlx::Error::Encode)?;
            let (text, arguments) = NODES.bound(self.backend, fixed, &hash_rows(chunk))?;
            let rows: Vec<MessageNode> = sqlx::query_as_with(text, arguments)
                .fetch_all(&self.pool)
                .await?;
            nodes.extend(rows);
        }
        nodes.sort_by(|a, b| {
            (a.position, a.created_at_ms, a.hash).cmp(&(b.position, b.created_at_ms, b.hash))
        });
        Ok(nodes)
    }

    /// The compactions of `tenant` whose prefix is one of `prefixes`, by
    /// prefix length.
    pub async fn compactions_among(
        &self,
        tenant: &TenantId,
        prefixes: &[ChainHash],
    ) -> Result<Vec<Compaction>> {
        let mut found = Vec::new();
        for chunk in prefixes.chunks(HASH_CHUNK) {
            let mut fixed = AnyArguments::default();
            fixed.add(tenant.as_str()).map_err(sqlx::Error::Encode)?;
            let (text, arguments) = COMPACTIONS_AT.bound(self.backend, fixed, &hash_rows(chunk))?;
            let rows: Vec<Compaction> = sqlx::query_as_with(text, arguments)
                .fetch_all(&self.pool)
                .await?;
            found.extend(rows);
        }
        found.sort_by_key(|c| (c.prefix_len, c.created_at_ms));
        Ok(found)
    }

    /// A page of the compactions made for `conversation`, newest first.
    pub async fn conversation_compactions(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
        offset: i64,
        limit: i64,
    ) -> Result<Vec<Compaction>> {
        let query = format!(
            "select {COMPACTION_COLUMNS} from compactions where tenant = $1 and conversation = $2 \
             order by created_at desc, prefix_len desc limit $3 offset $4"
        );
        Ok(sqlx::query_as(&query)
            .bind(tenant.as_str())
            .bind(conversation.to_hex())
            .bind(limit)
            .bind(offset)
            .fetch_all(&self.pool)
            .await?)
    }

    /// Compactions made for `conversation` from `from_ms` on, before
    /// `until_ms` when given, oldest first, at most `limit`.
    pub async fn compactions_between(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
        from_ms: i64,
        until_ms: Option<i64>,
        limit: i64,
    ) -> Result<Vec<Compaction>> {
        let query = format!(
            "select {COMPACTION_COLUMNS} from compactions where tenant = $1 and conversation = $2 \
             and created_at >= $3 and created_at < $4 order by created_at limit $5"
        );
        Ok(sqlx::query_as(&query)
            .bind(tenant.as_str())
            .bind(conversation.to_hex())
            .bind(from_ms)
            .bind(until_ms.unwrap_or(i64::MAX))
            .bind(limit)
            .fetch_all(&self.pool)
            .await?)
    }

    /// The newest `limit` branches of `conversation`, newest first.
    pub async fn conversation_branches(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
        limit: i64,
    ) -> Result<Vec<Branch>> {
        let rows = sqlx::query(
            "select h.head, h.created_at, coalesce(h.position, m.position) as position \
             from (select tenant, head, created_at, position from conversation_heads \
                 where tenant = $1 and conversation = $2 \
                 order by created_at desc, head limit $3) h \
             left join messages m on m.tenant = h.tenant and m.hash = h.head \
             order by h.created_at desc, h.head",
        )
        .bind(tenant.as_str())
        .bind(conversation.to_hex())
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(Branch {
                    head: hash_column(row, "head")?,
                    position: row.try_get("position")?,
                    created_at_ms: row.try_get("created_at")?,
                })
            })
            .collect()
    }

    /// Every message `conversation` of `tenant` reaches, with the
    /// compactions of their prefixes: a walk of the whole conversation,
    /// for checks and tests. The operator's views read
    /// [`Store::conversation_page`] instead.
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
        let compactions: Vec<Compaction> = sqlx::query_as(&compactions_sql())
            .bind(tenant.as_str())
            .bind(conversation.to_hex())
            .fetch_all(&self.pool)
            .await?;
        let row = self.conversation_row(&tenant, &conversation).await?;
        let stored_root = messages.iter().find(|m| m.parent.is_none()).map(|m| m.hash);
        let root = stored_root
            .or(row.as_ref().map(|row| row.root))
            .unwrap_or(ChainHash::ZERO);
        let parents: HashSet<ChainHash> = messages.iter().filter_map(|m| m.parent).collect();
        let figures = Figures {
            messages: messages.iter().filter(|m| m.position > 0).count() as i64,
            branches: messages
                .iter()
                .filter(|m| !parents.contains(&m.hash))
                .count() as i64,
            bytes: messages.iter().map(|m| m.bytes).sum(),
            compactions: compactions.len() as i64,
            requests_kept: 0,
        };
        Ok(ConversationDetail {
            tenant,
            conversation,
            root,
            label: row.and_then(|row| row.label),
            figures,
            from_position: 0,
            messages,
            compactions,
            newest_compactions: Listed::default(),
            newest_requests: Listed::default(),
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
