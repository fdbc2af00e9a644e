//! Step 3, persist: the write path.
//!
//! What a request stores and reads back on its way, and what deleting it
//! takes: messages and the heads that reach them (`messages`, `heads`),
//! the conversation list's rows (`conversations`, the one file that
//! upserts that table, and `reach`, what a write makes a conversation
//! reach), the compactions that stand for prefixes
//! (`compactions`), the request's figures (`requests`) and learned model
//! sizes (`limits`); written in group commits off the request path
//! (`writer`), one transaction each (`commit`), bound in batches
//! (`batch_rows`, each row's cells made by `cells`).
//!
//! Deleting conversations and pruning dead ends is writing too
//! (`lifecycle`): it deletes rows the writes above insert, under the same
//! tenant lock taken exclusively. Its plan of what goes (`prune`) is pure,
//! a function of rows `lifecycle` read, so it lives beside its one caller
//! rather than with the instance coordination that schedules it.

pub(super) mod batch_rows;
mod cells;
mod commit;
pub(super) mod compactions;
pub(super) mod conversations;
pub(super) mod heads;
mod lifecycle;
mod limits;
mod messages;
pub mod prune;
mod reach;
mod requests;
mod writer;

pub use conversations::ConversationRow;
pub use lifecycle::Deleted;
pub use limits::StoredSize;
pub use messages::{MessageBatch, NewMessage};
pub use requests::{RequestRecord, PRUNE_EVERY, REQUESTS_KEPT};
pub use writer::{Backlog, MessageWrite, QueueFull, RowsFrom, Writer};
