//! Step 3, persist: which conversation reaches which messages.
//!
//! Messages are content-addressed and shared: two conversations that open
//! with the same system prompt share its row, and any identical prefix. A
//! conversation (`conversation::session`) is what operators list, keep and
//! delete, so it is recorded apart from the tree: as the heads its requests
//! ended at (`conversation_heads`). Its messages are every message those
//! heads reach by parent links.
//!
//! Each message write records its request's head, and opens or touches
//! the conversation's list row, in the transaction that stores its
//! messages: no message is ever stored that no conversation reaches,
//! whatever becomes of the request's figures. A head the new one extends
//! is dropped then, so a conversation keeps about one head per branch.
//!
//! Deleting a conversation deletes what it alone reaches: [`MINE`] minus
//! [`SHARED`], the messages another conversation also reaches (a member
//! with a child outside the conversation, or another conversation's head,
//! and every ancestor of those).

use super::json_rows::{json_rows, rows_source, BatchStatement, Column};
use super::messages::MessageBatch;
use crate::conversation::{ChainHash, ConversationId};
use crate::store::{Backend, Result};
use serde::Serialize;
use sqlx::AnyConnection;

/// `mine(hash)`: every message conversation `$2` of tenant `$1` reaches,
/// its heads and all their ancestors. Opens a `with recursive`.
pub(in crate::store) const MINE: &str = "with recursive mine(hash) as ( \
    select head from conversation_heads where tenant = $1 and conversation = $2 \
    union \
    select m.parent from messages m join mine u on m.tenant = $1 and m.hash = u.hash \
    where m.parent is not null)";

/// `shared(hash)`: the part of [`MINE`] other conversations reach too. To
/// follow [`MINE`].
pub(super) const SHARED: &str = ", shared(hash) as ( \
    select c.parent from messages c join mine u on c.tenant = $1 and c.parent = u.hash \
    where c.hash not in (select hash from mine) \
    union \
    select h.head from conversation_heads h join mine u on h.tenant = $1 and h.head = u.hash \
    where h.conversation <> $2 \
    union \
    select m.parent from messages m join shared s on m.tenant = $1 and m.hash = s.hash \
    where m.parent is not null)";

/// A conversation's head, as the statements below read it.
#[derive(Serialize)]
struct HeadRow<'a> {
    tenant: &'a str,
    conversation: &'a ConversationId,
    head: &'a ChainHash,
}

const HEAD_COLUMNS: [Column; 3] = [
    ("tenant", "text"),
    ("conversation", "text"),
    ("head", "text"),
];

/// Records the heads bound as `$1`, created at `$2`.
static INSERT_HEADS: BatchStatement = BatchStatement::new(|backend| {
    format!(
        "insert into conversation_heads (tenant, conversation, head, created_at) \
         select r.tenant, r.conversation, r.head, $2 from {} where true \
         on conflict (tenant, conversation, head) do nothing",
        rows_source(backend, 1, &HEAD_COLUMNS),
    )
});

/// Drops the heads bound as `$1`: each one extended by a head recorded in
/// the same transaction, which reaches it.
static DROP_HEADS: BatchStatement = BatchStatement::new(|backend| {
    format!(
        "delete from conversation_heads where (tenant, conversation, head) in \
         (select r.tenant, r.conversation, r.head from {})",
        rows_source(backend, 1, &HEAD_COLUMNS),
    )
});

/// A conversation's list row as a message write opens it: the figures
/// are the request rollup's (`store::requests`).
#[derive(Serialize)]
struct OpenedRow<'a> {
    tenant: &'a str,
    conversation: &'a ConversationId,
    root: &'a ChainHash,
    label: Option<&'a str>,
    head: &'a ChainHash,
    messages: i64,
    at_ms: i64,
}

const OPENED_COLUMNS: [Column; 7] = [
    ("tenant", "text"),
    ("conversation", "text"),
    ("root", "text"),
    ("label", "text"),
    ("head", "text"),
    ("messages", "bigint"),
    ("at_ms", "bigint"),
];

/// Opens the conversations bound as `$1`, or marks them active.
static OPEN_CONVERSATIONS: BatchStatement = BatchStatement::new(|backend| {
    format!(
        "insert into conversations (tenant, conversation, root, label, head, messages, \
         branches, requests, compactions, tokens, window_tokens, model, last_activity, \
         created_at) \
         select r.tenant, r.conversation, r.root, r.label, r.head, r.messages, \
         1, 0, 0, 0, null, '', r.at_ms, r.at_ms from {} where true \
         on conflict (tenant, conversation) do update set \
         label = coalesce(excluded.label, conversations.label), \
         last_activity = case when excluded.last_activity > conversations.last_activity \
         then excluded.last_activity else conversations.last_activity end",
        rows_source(backend, 1, &OPENED_COLUMNS),
    )
});

/// Records the head of every batch and opens or touches its
/// conversation's row, on the transaction writing the batches' messages.
/// Rows go in key order, as every writer locks them.
pub(super) async fn record_heads_on(
    connection: &mut AnyConnection,
    backend: Backend,
    batches: &[MessageBatch<'_>],
    created_at: i64,
) -> Result<()> {
    let mut batches: Vec<&MessageBatch<'_>> =
        batches.iter().filter(|b| !b.chain.is_empty()).collect();
    if batches.is_empty() {
        return Ok(());
    }
    batches.sort_by(|a, b| {
        let key = |x: &MessageBatch<'_>| (x.tenant.as_str().to_owned(), *x.conversation, x.at_ms);
        key(a).cmp(&key(b))
    });
    let mut heads: Vec<HeadRow<'_>> = batches.iter().map(|b| head_row(b, b.head())).collect();
    heads.sort_by(|a, b| {
        (a.tenant, a.conversation, a.head).cmp(&(b.tenant, b.conversation, b.head))
    });
    heads.dedup_by(|a, b| (a.tenant, a.conversation, a.head) == (b.tenant, b.conversation, b.head));
    sqlx::query(INSERT_HEADS.text(backend))
        .bind(json_rows(&heads)?)
        .bind(created_at)
        .execute(&mut *connection)
        .await?;
    let mut extended: Vec<HeadRow<'_>> = batches
        .iter()
        .filter_map(|b| Some(head_row(b, b.messages.first()?.parent.as_ref()?)))
        .collect();
    extended.sort_by(|a, b| {
        (a.tenant, a.conversation, a.head).cmp(&(b.tenant, b.conversation, b.head))
    });
    if !extended.is_empty() {
        sqlx::query(DROP_HEADS.text(backend))
            .bind(json_rows(&extended)?)
            .execute(&mut *connection)
            .await?;
    }
    sqlx::query(OPEN_CONVERSATIONS.text(backend))
        .bind(json_rows(&opened_rows(&batches))?)
        .execute(&mut *connection)
        .await?;
    Ok(())
}

fn head_row<'a>(batch: &MessageBatch<'a>, head: &'a ChainHash) -> HeadRow<'a> {
    HeadRow {
        tenant: batch.tenant.as_str(),
        conversation: batch.conversation,
        head,
    }
}

/// One row per conversation (an upsert may touch a row once): its newest
/// request's, with the newest label any of them carried. `batches` are in
/// key order, oldest first within a conversation.
fn opened_rows<'a>(batches: &[&MessageBatch<'a>]) -> Vec<OpenedRow<'a>> {
    let mut rows: Vec<OpenedRow<'a>> = Vec::new();
    for batch in batches {
        let row = OpenedRow {
            tenant: batch.tenant.as_str(),
            conversation: batch.conversation,
            root: &batch.chain[0],
            label: batch.label,
            head: batch.head(),
            messages: batch.chain.len() as i64 - 1,
            at_ms: batch.at_ms,
        };
        match rows.last_mut() {
            Some(last) if (last.tenant, last.conversation) == (row.tenant, row.conversation) => {
                let label = row.label.or(last.label);
                *last = OpenedRow { label, ..row };
            }
            _ => rows.push(row),
        }
    }
    rows
}
