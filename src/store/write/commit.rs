//! Step 3, persist: one group commit.
//!
//! The messages of several requests, the heads of their conversations
//! (`heads`, which opens or touches their list rows) and their figures
//! (`requests`), in one transaction under their tenants' shared locks:
//! no message is ever stored that no conversation reaches. `messages`,
//! `heads` and `requests` each write their own rows; this file only
//! orders them, so none of them imports another's transaction.

use super::heads::record_heads_on;
use super::messages::{
    insert_rows, parents_stored, rows_in_lock_order, Inserted, MessageBatch, INSERT_CHUNK,
};
use super::requests::{record_requests_on, RequestRecord};
use crate::store::coordination::locks::{lock_tenant, TenantLock};
use crate::store::rows::now_ms;
use crate::store::{Result, Store, StoreError};

impl Store {
    /// Writes the rows of `batch` in one transaction, idempotently: rows
    /// that already exist (a replay, another instance, a shared branch)
    /// are left as they are, `label` included; its chain's head is
    /// recorded for its conversation. Returns how many rows were new.
    pub async fn insert_messages(&self, batch: MessageBatch<'_>) -> Result<u64> {
        self.write_batch(&[batch], &[]).await
    }

    /// One group commit: the messages of several requests (any tenants),
    /// the heads of their conversations, and their request records, in one
    /// transaction. Returns how many message rows were new.
    ///
    /// Fails with [`StoreError::ParentMissing`], writing nothing, when a
    /// batch's first message extends one the store does not have: the
    /// writer found it stored before the transaction, and a deletion of
    /// another conversation that reached it may have taken it since.
    #[tracing::instrument(
        name = "store.write_batch",
        level = "debug",
        skip_all,
        fields(batches = messages.len(), records = records.len()),
    )]
    pub async fn write_batch(
        &self,
        messages: &[MessageBatch<'_>],
        records: &[RequestRecord],
    ) -> Result<u64> {
        if messages.is_empty() && records.is_empty() {
            return Ok(0);
        }
        let rows = rows_in_lock_order(messages);
        let created_at = now_ms();
        let mut tx = self.begin_write().await?;
        let mut tenants: Vec<&str> = messages.iter().map(|b| b.tenant.as_str()).collect();
        tenants.sort_unstable();
        tenants.dedup();
        for tenant in tenants {
            lock_tenant(&mut tx, self.backend, tenant, TenantLock::Shared).await?;
        }
        let mut inserted = Inserted::new();
        for chunk in rows.chunks(INSERT_CHUNK) {
            insert_rows(&mut tx, self.backend, chunk, created_at, &mut inserted).await?;
        }
        if !parents_stored(&mut tx, self.backend, messages).await? {
            return Err(StoreError::ParentMissing);
        }
        record_heads_on(&mut tx, self.backend, messages, created_at, &inserted).await?;
        record_requests_on(&mut tx, self.backend, records).await?;
        tx.commit().await?;
        Ok(inserted.len() as u64)
    }
}
