//! Beside the flow, the operator's views: per-request figures, read.
//!
//! The chart of one conversation: its stored request rows, as the write
//! path kept them (`store::write::requests`), all of them or a page.

use super::page::Listed;
use crate::conversation::{ConversationId, TenantId};
use crate::store::{Result, Store, REQUESTS_KEPT};
use sqlx::any::AnyRow;
use sqlx::{FromRow, Row};

/// A stored request row, as the chart reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestPoint {
    pub at_ms: i64,
    pub messages: i64,
    pub estimated_tokens: i64,
    pub upstream_input_tokens: Option<i64>,
    pub window_tokens: Option<i64>,
    pub compacted_messages: Option<i64>,
    pub compactions: i64,
    pub overflows: i64,
    pub status: i64,
}

impl<'r> FromRow<'r, AnyRow> for RequestPoint {
    fn from_row(row: &'r AnyRow) -> Result<Self, sqlx::Error> {
        Ok(Self {
            at_ms: row.try_get("created_at")?,
            messages: row.try_get("messages")?,
            estimated_tokens: row.try_get("estimated_tokens")?,
            upstream_input_tokens: row.try_get("upstream_input_tokens")?,
            window_tokens: row.try_get("window_tokens")?,
            compacted_messages: row.try_get("compacted_messages")?,
            compactions: row.try_get("compactions")?,
            overflows: row.try_get("overflows")?,
            status: row.try_get("status")?,
        })
    }
}

impl Store {
    /// The stored requests of one conversation, oldest first.
    pub async fn conversation_requests(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
    ) -> Result<Vec<RequestPoint>> {
        let rows = sqlx::query_as(
            "select created_at, messages, estimated_tokens, upstream_input_tokens, window_tokens, \
             compacted_messages, compactions, overflows, status \
             from requests where tenant = $1 and conversation = $2 order by id limit $3",
        )
        .bind(tenant.as_str())
        .bind(conversation.to_hex())
        .bind(REQUESTS_KEPT)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows)
    }

    /// A page of the stored requests of one conversation, newest first,
    /// with how many are stored.
    pub async fn conversation_requests_page(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
        offset: i64,
        limit: i64,
    ) -> Result<Listed<RequestPoint>> {
        let items = sqlx::query_as(
            "select created_at, messages, estimated_tokens, upstream_input_tokens, window_tokens, \
             compacted_messages, compactions, overflows, status \
             from requests where tenant = $1 and conversation = $2 \
             order by id desc limit $3 offset $4",
        )
        .bind(tenant.as_str())
        .bind(conversation.to_hex())
        .bind(limit)
        .bind(offset)
        .fetch_all(&self.pool)
        .await?;
        let total = sqlx::query_scalar(
            "select count(*) from requests where tenant = $1 and conversation = $2",
        )
        .bind(tenant.as_str())
        .bind(conversation.to_hex())
        .fetch_one(&self.pool)
        .await?;
        Ok(Listed {
            items,
            offset,
            total,
        })
    }
}
