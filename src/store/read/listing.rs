//! Beside the flow, the operator's views: the conversation list.
//!
//! The operator page's conversation list: one indexed, paged read of the
//! `conversations` table, whatever the number of conversations. Its rows
//! are the table's one row type (`store::write::conversations`).

use crate::conversation::{ConversationId, TenantId};
use crate::store::write::conversations::{ConversationRow, CONVERSATION_COLUMNS};
use crate::store::{Result, Store};
use sqlx::{Any, QueryBuilder};

/// Rows per page, at most.
pub const MAX_PAGE: i64 = 200;

/// A column the list can be sorted by; each has its own index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SortBy {
    #[default]
    LastActivity,
    Messages,
    Compactions,
    Tokens,
}

impl SortBy {
    /// From a query parameter; anything unknown sorts by activity.
    pub fn parse(name: &str) -> Self {
        match name {
            "messages" => Self::Messages,
            "compactions" => Self::Compactions,
            "tokens" => Self::Tokens,
            _ => Self::LastActivity,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::LastActivity => "activity",
            Self::Messages => "messages",
            Self::Compactions => "compactions",
            Self::Tokens => "tokens",
        }
    }

    /// A fixed column name: the only text spliced into the statement.
    fn column(self) -> &'static str {
        match self {
            Self::LastActivity => "last_activity",
            Self::Messages => "messages",
            Self::Compactions => "compactions",
            Self::Tokens => "tokens",
        }
    }
}

/// Which page of which rows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListQuery {
    pub sort: SortBy,
    pub ascending: bool,
    /// Keeps rows whose label is this, or whose tenant digest or
    /// conversation id starts with it (when it is hex).
    pub filter: Option<String>,
    pub offset: i64,
    pub limit: i64,
}

/// The bounds of the hashes that start with `prefix`, when it is a hex
/// prefix: every such hash sorts at or after it and before `prefix` + "g"
/// (hex digits sort before "g" in byte order and in common collations), so
/// the filter is an index range, not a scan.
fn hex_range(prefix: &str) -> Option<(String, String)> {
    let prefix = prefix.to_ascii_lowercase();
    let hex =
        !prefix.is_empty() && prefix.len() <= 64 && prefix.bytes().all(|b| b.is_ascii_hexdigit());
    hex.then(|| (prefix.clone(), format!("{prefix}g")))
}

impl Store {
    /// One page of conversations in the order asked for.
    pub async fn list_conversation_rows(&self, query: &ListQuery) -> Result<Vec<ConversationRow>> {
        let mut builder = QueryBuilder::<Any>::new("select ");
        builder.push(CONVERSATION_COLUMNS);
        builder.push(" from conversations");
        let filter = query
            .filter
            .as_deref()
            .map(str::trim)
            .filter(|f| !f.is_empty());
        let range = filter.and_then(hex_range);
        let mut next = 1;
        if filter.is_some() {
            builder.push(" where label = $1");
            next = 2;
        }
        if range.is_some() {
            builder.push(
                " or (tenant >= $2 and tenant < $3) \
                 or (conversation >= $2 and conversation < $3)",
            );
            next = 4;
        }
        let direction = if query.ascending { " asc" } else { " desc" };
        builder.push(" order by ");
        builder.push(query.sort.column());
        builder.push(direction);
        builder.push(", conversation");
        builder.push(direction);
        builder.push(" limit $");
        builder.push(next);
        builder.push(" offset $");
        builder.push(next + 1);
        let mut statement = builder.build_query_as::<ConversationRow>();
        if let Some(filter) = filter {
            statement = statement.bind(filter.to_owned());
        }
        if let Some((low, high)) = range {
            statement = statement.bind(low).bind(high);
        }
        let rows = statement
            .bind(query.limit.clamp(1, MAX_PAGE))
            .bind(query.offset.max(0))
            .fetch_all(&self.pool)
            .await?;
        Ok(rows)
    }

    /// The list row of one conversation.
    pub async fn conversation_row(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
    ) -> Result<Option<ConversationRow>> {
        let mut builder = QueryBuilder::<Any>::new("select ");
        builder.push(CONVERSATION_COLUMNS);
        builder.push(" from conversations where tenant = $1 and conversation = $2");
        let row = builder
            .build_query_as()
            .bind(tenant.as_str())
            .bind(conversation.to_hex())
            .fetch_optional(&self.pool)
            .await?;
        Ok(row)
    }
}

#[cfg(test)]
mod tests {
    use super::hex_range;

    #[test]
    fn only_a_hex_filter_is_a_hash_prefix_range() {
        assert_eq!(
            hex_range("3C7d"),
            Some(("3c7d".to_owned(), "3c7dg".to_owned()))
        );
        assert_eq!(hex_range("session-1"), None);
        assert_eq!(hex_range("a%"), None);
    }
}
