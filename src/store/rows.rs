//! Step 3, persist: shared query pieces.
//!
//! Small pieces every query module shares, whichever part of the store it
//! is in: the clock, and decoding hashes out of rows.

use crate::conversation::{ChainHash, ConversationId};
use sqlx::any::AnyRow;
use sqlx::Row;
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
