//! Step 3, persist: shared query pieces.
//!
//! Small pieces every query module shares: numbered placeholders for the few
//! dynamic statements left, the clock, and decoding hashes out of rows.

use crate::conversation::ChainHash;
use sqlx::any::AnyRow;
use sqlx::{Any, QueryBuilder, Row};
use std::time::{SystemTime, UNIX_EPOCH};

/// Hashes per `in (…)` list: few enough for any backend's parameter limit,
/// many enough that a long conversation takes one or two queries.
pub(super) const HASH_CHUNK: usize = 500;

/// Appends `$first, $first+1, …` (`count` of them, comma separated).
///
/// `QueryBuilder<Any>::push_bind` writes `?`, which Postgres rejects, so the
/// dynamic statements number their placeholders here and bind the values on
/// the built query, in the same order.
pub(super) fn push_placeholders(builder: &mut QueryBuilder<'_, Any>, first: usize, count: usize) {
    for index in 0..count {
        if index > 0 {
            builder.push(", ");
        }
        builder.push("$");
        builder.push(first + index);
    }
}

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

fn parse_hash(column: &str, text: &str) -> Result<ChainHash, sqlx::Error> {
    ChainHash::from_hex(text).ok_or_else(|| sqlx::Error::ColumnDecode {
        index: column.to_owned(),
        source: format!("not a hex chain hash: {text:?}").into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_numbered_from_the_first_free_parameter() {
        let mut builder = QueryBuilder::<Any>::new("in (");
        push_placeholders(&mut builder, 2, 3);
        builder.push(")");
        assert_eq!(builder.sql(), "in ($2, $3, $4)");
    }
}
