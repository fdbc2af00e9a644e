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
//! the conversation's list row (`conversations`), in the transaction that
//! stores its messages: no message is ever stored that no conversation reaches,
//! whatever becomes of the request's figures. A head the new one extends
//! is dropped then, so a conversation keeps about one head per branch.
//!
//! Deleting a conversation deletes what it alone reaches: [`MINE`] minus
//! [`SHARED`], the messages another conversation also reaches (a member
//! with a child outside the conversation, or another conversation's head,
//! and every ancestor of those).

use super::batch_rows::{add, BatchStatement, Column};
use super::conversations::open_on;
use super::messages::{Inserted, MessageBatch};
use crate::conversation::{ChainHash, ConversationId};
use crate::store::{Backend, Result};
use serde::Serialize;
use sqlx::any::AnyArguments;
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
    /// The head's position: a view starts the newest part of a tree from
    /// the heads there without reading their messages.
    position: i64,
}

const HEAD_COLUMNS: [Column; 4] = [
    ("tenant", "text"),
    ("conversation", "text"),
    ("head", "text"),
    ("position", "bigint"),
];

/// Records the heads bound after `$1`, created at `$1`.
static INSERT_HEADS: BatchStatement = BatchStatement::new(1, &HEAD_COLUMNS, |source| {
    format!(
        "insert into conversation_heads (tenant, conversation, head, created_at, position) \
         select r.tenant, r.conversation, r.head, $1, r.position from {source} where true \
         on conflict (tenant, conversation, head) do nothing"
    )
});

/// Drops the heads bound: each one extended by a head recorded in the
/// same transaction, which reaches it.
static DROP_HEADS: BatchStatement = BatchStatement::new(0, &HEAD_COLUMNS, |source| {
    format!(
        "delete from conversation_heads where (tenant, conversation, head) in \
         (select r.tenant, r.conversation, r.head from {source})"
    )
});

/// Records the head of every batch and opens or touches its
/// conversation's row, on the transaction writing the batches' messages
/// (`inserted`: the links it stored). Rows go in key order, as every
/// writer locks them.
pub(super) async fn record_heads_on(
    connection: &mut AnyConnection,
    backend: Backend,
    batches: &[MessageBatch<'_>],
    created_at: i64,
    inserted: &Inserted,
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
    let mut heads: Vec<HeadRow<'_>> = batches
        .iter()
        .map(|b| head_row(b, b.head(), b.chain.len() as i64 - 1))
        .collect();
    heads.sort_by(|a, b| {
        (a.tenant, a.conversation, a.head).cmp(&(b.tenant, b.conversation, b.head))
    });
    heads.dedup_by(|a, b| (a.tenant, a.conversation, a.head) == (b.tenant, b.conversation, b.head));
    let mut fixed = AnyArguments::default();
    add(&mut fixed, created_at)?;
    let (text, arguments) = INSERT_HEADS.bound(backend, fixed, &heads)?;
    sqlx::query_with(text, arguments)
        .execute(&mut *connection)
        .await?;
    let mut extended: Vec<HeadRow<'_>> = batches
        .iter()
        .filter_map(|b| {
            let first = b.messages.first()?;
            Some(head_row(b, first.parent.as_ref()?, first.position - 1))
        })
        .collect();
    extended.sort_by(|a, b| {
        (a.tenant, a.conversation, a.head).cmp(&(b.tenant, b.conversation, b.head))
    });
    if !extended.is_empty() {
        let (text, arguments) = DROP_HEADS.bound(backend, AnyArguments::default(), &extended)?;
        sqlx::query_with(text, arguments)
            .execute(&mut *connection)
            .await?;
    }
    open_on(connection, backend, &batches, inserted).await
}

fn head_row<'a>(batch: &MessageBatch<'a>, head: &'a ChainHash, position: i64) -> HeadRow<'a> {
    HeadRow {
        position,
        tenant: batch.tenant.as_str(),
        conversation: batch.conversation,
        head,
    }
}
