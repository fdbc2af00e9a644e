//! Step 3, persist: shared query pieces.
//!
//! Small pieces every query module shares: the clock, and decoding hashes
//! out of rows.

use super::Backend;
use crate::conversation::{ChainHash, ConversationId};
use sqlx::any::AnyRow;
use sqlx::{AnyConnection, Row};
use std::time::{SystemTime, UNIX_EPOCH};

/// Hashes per `in (…)` list: few enough for any backend's parameter limit,
/// many enough that a long conversation takes one or two queries.
pub(super) const HASH_CHUNK: usize = 500;

/// Wall-clock unix milliseconds, for `created_at` columns.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| {
            i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX)
        })
}

/// Reads a hex chain hash column, reporting a malformed one as a decode
/// error of that column rather than panicking.
pub(super) fn hash_column(row: &AnyRow, column: &str) -> Result<ChainHash, sqlx::Error> {
    let text: String = row.try_get(column)?;
    parse_hash(column, &text)
}

/// Like [`hash_column`] for a nullable column.
pub(super) fn optional_hash_column(
    row: &AnyRow,
    column: &str,
) -> Result<Option<ChainHash>, sqlx::Error> {
    let text: Option<String> = row.try_get(column)?;
    text.map(|text| parse_hash(column, &text)).transpose()
}

/// Reads a hex conversation id column, like [`hash_column`].
pub(super) fn conversation_column(
    row: &AnyRow,
    column: &str,
) -> Result<ConversationId, sqlx::Error> {
    let text: String = row.try_get(column)?;
    ConversationId::from_hex(&text).ok_or_else(|| sqlx::Error::ColumnDecode {
        index: column.to_owned(),
        source: format!("not a hex conversation id: {text:?}").into(),
    })
}

fn parse_hash(column: &str, text: &str) -> Result<ChainHash, sqlx::Error> {
    ChainHash::from_hex(text).ok_or_else(|| sqlx::Error::ColumnDecode {
        index: column.to_owned(),
        source: format!("not a hex chain hash: {text:?}").into(),
    })
}

/// How a transaction holds its tenant's lock (Postgres).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TenantLock {
    /// A message write: writes of one tenant run side by side.
    Shared,
    /// A deletion or a pruning: it chooses what no conversation reaches
    /// and deletes it, with no write extending those messages meanwhile.
    Exclusive,
}

/// Postgres' advisory lock class of tenants' lock (its second key is the
/// tenant's hash): "CoND".
const TENANT_LOCK_CLASS: i32 = 0x436f_4e44;

/// Takes `tenant`'s lock until the transaction ends. A write reads what is
/// stored before its transaction, then inserts rows whose parent another
/// conversation stored; a deletion that chose that parent before the
/// write committed would delete it after, leaving the write's rows
/// parentless. The lock orders the two. SQLite needs none: a write
/// transaction holds the database's only write lock from its start.
pub(super) async fn lock_tenant(
    connection: &mut AnyConnection,
    backend: Backend,
    tenant: &str,
    lock: TenantLock,
) -> Result<(), sqlx::Error> {
    if backend != Backend::Postgres {
        return Ok(());
    }
    let sql = match lock {
        TenantLock::Shared => {
            "select 1 from (select pg_advisory_xact_lock_shared($1, hashtext($2))) as locked"
        }
        TenantLock::Exclusive => {
            "select 1 from (select pg_advisory_xact_lock($1, hashtext($2))) as locked"
        }
    };
    sqlx::query(sql)
        .bind(TENANT_LOCK_CLASS)
        .bind(tenant)
        .execute(connection)
        .await?;
    Ok(())
}
