//! Step 3, persist: the write path.
//!
//! What a request stores and reads back on its way, and what deleting it
//! takes: messages and the heads that reach them (`messages`, `heads`),
//! the compactions that stand for their prefixes (`compactions`), the
//! request's figures (`requests`), learned model sizes (`limits`), written
//! in group commits off the request path (`writer`) and bound in batches
//! (`json_rows`). Deleting conversations and pruning dead ends is writing
//! too (`lifecycle`): it takes the tenant's lock exclusively against the
//! writes above, and its plan of what goes (`prune`) is pure, so it stays
//! beside the one caller that runs it in a transaction.

pub(super) mod compactions;
pub(super) mod heads;
mod json_rows;
mod lifecycle;
mod limits;
mod messages;
pub mod prune;
mod requests;
mod writer;

pub use lifecycle::Deleted;
pub use limits::StoredSize;
pub use messages::{MessageBatch, NewMessage};
pub use requests::{RequestPoint, RequestRecord, PRUNE_EVERY, REQUESTS_KEPT};
pub use writer::{Backlog, MessageWrite, QueueFull, RowsFrom, Writer};
