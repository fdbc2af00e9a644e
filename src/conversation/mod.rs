//! Step 2 of the data flow, "identify": who is calling (a tenant derived from
//! the credential) and which conversation this is (a content-addressed chain).

pub mod chain;
pub mod tenant;
pub mod trim;

pub use chain::{canonical_json, ChainHash};
pub use tenant::TenantId;
pub use trim::TrimRecord;
