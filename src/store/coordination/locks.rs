//! Step 3, persist: tenants' advisory locks.
//!
//! A message write and a deletion of the same tenant must not interleave:
//! the write extends messages the deletion may be choosing to delete.
//! Postgres orders them with one advisory lock per tenant, shared by
//! writes and exclusive for deletions; SQLite's one write lock already
//! does.

use crate::store::Backend;
use sqlx::AnyConnection;

/// How a transaction holds its tenant's lock (Postgres).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::store) enum TenantLock {
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
pub(in crate::store) async fn lock_tenant(
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
