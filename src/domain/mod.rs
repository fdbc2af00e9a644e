//! Beside the flow, the domain: the types every stage names and none owns.
//!
//! The content address of a message (a chain hash), what is recorded of
//! step 7 (a compaction, why it ran, why one could not be made, the tool
//! results it trimmed) and what an upstream reported of a response (its
//! usage). Storage, compaction, the pipeline and the operator's views all
//! name them; they live here, below all of those, so none of them has to
//! import another for its vocabulary. Nothing here does I/O.

mod compaction;
mod hash;
mod outcome;
mod trim;
mod usage;

pub use compaction::Compaction;
pub use hash::{ChainHash, Hex32, SHORT_ID_CHARS};
pub use outcome::{CompactionFailure, Trigger};
pub use trim::TrimRecord;
pub use usage::Usage;
