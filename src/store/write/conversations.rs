//! Step 3, persist: the conversations table, the operator's list.
//!
//! One row per conversation (`conversation::session`): what the list
//! shows and sorts by. [`ConversationRow`] is the table's one row type:
//! written here, read back by the operator's views (`store::read`). Two
//! writes upsert it, both here: a message write opens the row, or marks
//! it active, in the transaction that stores the messages ([`open_on`],
//! from `heads`), so no stored message is unlisted; a batch of request
//! figures rolls into it ([`roll_up_on`], from `requests`).
//!
//! The message write also keeps what the conversation reaches, so no view
//! walks its messages to count them: a new conversation reaches its
//! requests' whole chains; one already listed reaches, beyond what it
//! did, the links its write inserted. A chain that passes through links
//! another conversation stored first (a rewind into a shared opening) is
//! counted short until pruning counts the conversation again
//! (`lifecycle`).

use super::batch_rows::{source_columns, BatchStatement, Column};
use super::messages::{Inserted, MessageBatch};
use super::reach::{reached_on, Reached};
use crate::conversation::{ChainHash, ConversationId, TenantId};
use crate::store::rows::{conversation_column, hash_column};
use crate::store::{Backend, Result};
use serde::{Serialize, Serializer};
use sqlx::any::AnyArguments;
use sqlx::any::AnyRow;
use sqlx::{AnyConnection, FromRow, Row};
use std::collections::{HashMap, HashSet};

/// One conversation as the list shows it: a row of `conversations`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConversationRow {
    #[serde(serialize_with = "tenant_text")]
    pub tenant: TenantId,
    pub conversation: ConversationId,
    /// Its system prompt's link: shared with every conversation of the
    /// tenant that opens with the same system prompt.
    pub root: ChainHash,
    /// The newest request's head.
    pub head: ChainHash,
    pub label: Option<String>,
    /// Messages in its newest request, the system part not counted.
    pub messages: i64,
    pub branches: i64,
    pub requests: i64,
    pub compactions: i64,
    pub tokens: i64,
    pub window_tokens: Option<i64>,
    pub model: String,
    #[serde(rename = "last_activity")]
    pub last_activity_ms: i64,
    #[serde(rename = "created_at")]
    pub created_at_ms: i64,
    /// Messages its heads reach, the roots not counted.
    pub reached_messages: i64,
    /// Bytes of the message bodies its heads reach, the roots counted.
    pub reached_bytes: i64,
}

fn tenant_text<S: Serializer>(tenant: &TenantId, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(tenant.as_str())
}

/// The columns of [`ConversationRow`] as a JSON row source, in the
/// table's order.
const COLUMNS: [Column; 16] = [
    ("tenant", "text"),
    ("conversation", "text"),
    ("root", "text"),
    ("label", "text"),
    ("head", "text"),
    ("messages", "bigint"),
    ("branches", "bigint"),
    ("requests", "bigint"),
    ("compactions", "bigint"),
    ("tokens", "bigint"),
    ("window_tokens", "bigint"),
    ("model", "text"),
    ("last_activity", "bigint"),
    ("created_at", "bigint"),
    ("reached_messages", "bigint"),
    ("reached_bytes", "bigint"),
];

/// The columns a read selects for [`ConversationRow`]'s `FromRow`.
pub(in crate::store) const CONVERSATION_COLUMNS: &str =
    "tenant, conversation, root, head, label, messages, branches, \
     requests, compactions, tokens, window_tokens, model, last_activity, created_at, \
     reached_messages, reached_bytes";

impl<'r> FromRow<'r, AnyRow> for ConversationRow {
    fn from_row(row: &'r AnyRow) -> Result<Self, sqlx::Error> {
        Ok(Self {
            tenant: TenantId::from_stored(row.try_get("tenant")?),
            conversation: conversation_column(row, "conversation")?,
            root: hash_column(row, "root")?,
            head: hash_column(row, "head")?,
            label: row.try_get("label")?,
            messages: row.try_get("messages")?,
            branches: row.try_get("branches")?,
            requests: row.try_get("requests")?,
            compactions: row.try_get("compactions")?,
            tokens: row.try_get("tokens")?,
            window_tokens: row.try_get("window_tokens")?,
            model: row.try_get("model")?,
            last_activity_ms: row.try_get("last_activity")?,
            created_at_ms: row.try_get("created_at")?,
            reached_messages: row.try_get("reached_messages")?,
            reached_bytes: row.try_get("reached_bytes")?,
        })
    }
}

/// Opens the conversations bound, or marks them active: a row that
/// exists keeps its figures, which are the request rollup's, and adds what
/// it reaches now beyond what it reached.
static OPEN: BatchStatement = BatchStatement::new(0, &COLUMNS, |source| {
    format!(
        "insert into conversations ({}) select {} from {source} where true \
         on conflict (tenant, conversation) do update set \
         label = coalesce(excluded.label, conversations.label), \
         reached_messages = conversations.reached_messages + excluded.reached_messages, \
         reached_bytes = conversations.reached_bytes + excluded.reached_bytes, \
         last_activity = case when excluded.last_activity > conversations.last_activity \
         then excluded.last_activity else conversations.last_activity end",
        column_names(),
        source_columns(&COLUMNS),
    )
});

/// Rolls a batch's requests of one conversation, bound as rows, into its
/// row: counts are added, `branches` arrives as one plus the new branches
/// seen.
static ROLL_UP: BatchStatement = BatchStatement::new(0, &COLUMNS, |source| {
    format!(
        "insert into conversations ({}) select {} from {source} where true {ROLL_UP_CONFLICT}",
        column_names(),
        source_columns(&COLUMNS),
    )
});

const ROLL_UP_CONFLICT: &str = "\
on conflict (tenant, conversation) do update set
    label = coalesce(excluded.label, conversations.label),
    branches = conversations.branches + excluded.branches - 1,
    requests = conversations.requests + excluded.requests,
    compactions = conversations.compactions + excluded.compactions,
    window_tokens = coalesce(excluded.window_tokens, conversations.window_tokens),
    -- Records land out of order (each waits for its response's usage):
    -- the newest request, by arrival, sets the current state.
    head = case when excluded.last_activity >= conversations.last_activity
        then excluded.head else conversations.head end,
    messages = case when excluded.last_activity >= conversations.last_activity
        then excluded.messages else conversations.messages end,
    tokens = case when excluded.last_activity >= conversations.last_activity
        then excluded.tokens else conversations.tokens end,
    model = case when excluded.last_activity >= conversations.last_activity
        then excluded.model else conversations.model end,
    last_activity = case when excluded.last_activity >= conversations.last_activity
        then excluded.last_activity else conversations.last_activity end
returning tenant, conversation, requests";

/// The stored head of each conversation bound.
static STORED_HEADS: BatchStatement = BatchStatement::new(0, &KEY_COLUMNS, |source| {
    format!(
        "select tenant, conversation, head, messages from conversations \
         where (tenant, conversation) in (select r.tenant, r.conversation from {source})"
    )
});

/// A conversation's key: the first two of [`COLUMNS`].
const KEY_COLUMNS: [Column; 2] = [COLUMNS[0], COLUMNS[1]];

fn column_names() -> String {
    let names: Vec<&str> = COLUMNS.iter().map(|(name, _)| *name).collect();
    names.join(", ")
}

/// A conversation's key, as [`STORED_HEADS`] reads it.
#[derive(Serialize)]
pub(super) struct ConversationKey<'a> {
    pub(super) tenant: &'a str,
    pub(super) conversation: &'a ConversationId,
}

/// A conversation's head and its messages, as its row holds them.
pub(super) type StoredHeads = HashMap<(String, ConversationId), (ChainHash, i64)>;

/// The head and message count stored for each conversation of `keys`.
pub(super) async fn stored_heads_on(
    connection: &mut AnyConnection,
    backend: Backend,
    keys: &[ConversationKey<'_>],
) -> Result<StoredHeads> {
    let (text, arguments) = STORED_HEADS.bound(backend, AnyArguments::default(), keys)?;
    let rows = sqlx::query_with(text, arguments)
        .fetch_all(&mut *connection)
        .await?;
    let mut stored = HashMap::new();
    for row in rows {
        let tenant: String = row.try_get("tenant")?;
        let conversation = conversation_column(&row, "conversation")?;
        let head = hash_column(&row, "head")?;
        let messages: i64 = row.try_get("messages")?;
        stored.insert((tenant, conversation), (head, messages));
    }
    Ok(stored)
}

/// Which of the conversations bound have a row.
static LISTED: BatchStatement = BatchStatement::new(0, &KEY_COLUMNS, |source| {
    format!(
        "select tenant, conversation from conversations \
         where (tenant, conversation) in (select r.tenant, r.conversation from {source})"
    )
});

/// Opens or touches the row of every batch's conversation, adding what
/// the commit made it reach (`inserted`: the links it stored). `batches`
/// are in key order, oldest first within a conversation, none without a
/// chain.
pub(super) async fn open_on(
    connection: &mut AnyConnection,
    backend: Backend,
    batches: &[&MessageBatch<'_>],
    inserted: &Inserted,
) -> Result<()> {
    let groups: Vec<&[&MessageBatch<'_>]> = batches
        .chunk_by(|a, b| (a.tenant, a.conversation) == (b.tenant, b.conversation))
        .collect();
    let keys: Vec<ConversationKey<'_>> = groups
        .iter()
        .map(|group| ConversationKey {
            tenant: group[0].tenant.as_str(),
            conversation: group[0].conversation,
        })
        .collect();
    let (text, arguments) = LISTED.bound(backend, AnyArguments::default(), &keys)?;
    let mut listed = HashSet::new();
    for row in sqlx::query_with(text, arguments)
        .fetch_all(&mut *connection)
        .await?
    {
        let tenant: String = row.try_get("tenant")?;
        listed.insert((tenant, conversation_column(&row, "conversation")?));
    }
    let new: Vec<bool> = keys
        .iter()
        .map(|key| !listed.contains(&(key.tenant.to_owned(), *key.conversation)))
        .collect();
    let reached = reached_on(connection, backend, &groups, &new, inserted).await?;
    let rows: Vec<ConversationRow> = groups
        .iter()
        .zip(reached)
        .map(|(group, reached)| opened_row(group, reached))
        .collect();
    let (text, arguments) = OPEN.bound(backend, AnyArguments::default(), &rows)?;
    sqlx::query_with(text, arguments)
        .execute(&mut *connection)
        .await?;
    Ok(())
}

/// One conversation's row (an upsert may touch a row once): its newest
/// request's, with the newest label any of them carried. The figures are
/// a new row's; an existing row keeps its own and adds `reached`.
fn opened_row(group: &[&MessageBatch<'_>], reached: Reached) -> ConversationRow {
    let newest = group[group.len() - 1];
    ConversationRow {
        tenant: newest.tenant.clone(),
        conversation: *newest.conversation,
        root: newest.chain[0],
        head: *newest.head(),
        label: group
            .iter()
            .rev()
            .find_map(|batch| batch.label)
            .map(str::to_owned),
        messages: newest.chain.len() as i64 - 1,
        branches: 1,
        requests: 0,
        compactions: 0,
        tokens: 0,
        window_tokens: None,
        model: String::new(),
        last_activity_ms: newest.at_ms,
        created_at_ms: newest.at_ms,
        reached_messages: reached.messages,
        reached_bytes: reached.bytes,
    }
}

/// Rolls `rows`, one per conversation in key order, into the table.
/// Returns each conversation's request count after the update.
pub(super) async fn roll_up_on(
    connection: &mut AnyConnection,
    backend: Backend,
    rows: &[ConversationRow],
) -> Result<HashMap<(String, ConversationId), i64>> {
    let (text, arguments) = ROLL_UP.bound(backend, AnyArguments::default(), rows)?;
    let updated = sqlx::query_with(text, arguments)
        .fetch_all(&mut *connection)
        .await?;
    let mut totals = HashMap::new();
    for row in updated {
        let tenant: String = row.try_get("tenant")?;
        let conversation = conversation_column(&row, "conversation")?;
        totals.insert((tenant, conversation), row.try_get::<i64, _>("requests")?);
    }
    Ok(totals)
}
