//! Step 3, persist: coordination between instances.
//!
//! What lets several instances share one database without a round trip on
//! the request path or a lost write between them: what is stored, known
//! in memory (`memory`) and kept current across instances (`notify`); one
//! summarizer per prefix (`leases`); keys they share (`keys`); a tenant's writes and deletions taken
//! in turn (`locks`). Nothing here is a conversation's
//! data; it is who may do what, and who knows what, when.

mod keys;
mod leases;
pub(super) mod locks;
mod memory;
pub mod notify;

pub use memory::StoreMemory;
