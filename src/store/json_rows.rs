//! Step 3, persist: rows in batches.
//!
//! Batches of rows bound as one JSON parameter.
//!
//! A multi-row `values (…), (…)` list or an `in ($2, $3, …)` list is a new
//! statement text for every row count, so each batch made the database parse
//! and plan it afresh (pg_stat_statements, growing conversations: planning
//! alone cost more than executing the conversation lookups, and 0.45 ms per
//! 100-message insert). Bound as one JSON array of objects instead, every
//! batch statement has one text per backend, prepared once per connection,
//! and no row count runs into a backend's parameter limit.
//!
//! Postgres opens the array with `json_to_recordset`, SQLite with
//! `json_each`; [`rows_source`] writes either as a row source named `r`
//! whose columns the rest of the statement names alike on both backends.

use super::Backend;
use crate::conversation::ChainHash;
use serde::{Serialize, Serializer};
use std::sync::OnceLock;

/// A column of a JSON row source: its name (the object key) and, for
/// Postgres, its SQL type.
pub(super) type Column = (&'static str, &'static str);

/// `$parameter`, a JSON array of objects, as a row source `r` with
/// `columns`.
pub(super) fn rows_source(backend: Backend, parameter: usize, columns: &[Column]) -> String {
    match backend {
        Backend::Postgres => {
            let typed: Vec<String> = columns
                .iter()
                .map(|(name, sql_type)| format!("{name} {sql_type}"))
                .collect();
            format!(
                "json_to_recordset(${parameter}::json) as r({})",
                typed.join(", ")
            )
        }
        Backend::Sqlite => {
            let fields: Vec<String> = columns
                .iter()
                .map(|(name, _)| format!("value ->> '{name}' as {name}"))
                .collect();
            format!(
                "(select {} from json_each(${parameter})) as r",
                fields.join(", ")
            )
        }
    }
}

/// `r.a, r.b, …`: the source's columns, in order.
pub(super) fn source_columns(columns: &[Column]) -> String {
    let names: Vec<String> = columns
        .iter()
        .map(|(name, _)| format!("r.{name}"))
        .collect();
    names.join(", ")
}

/// The JSON text bound for `rows`.
pub(super) fn json_rows<T: Serialize>(rows: &[T]) -> Result<String, sqlx::Error> {
    serde_json::to_string(rows).map_err(|error| sqlx::Error::Encode(Box::new(error)))
}

/// A statement whose text depends on the backend alone, written on first
/// use and the same text ever after, so each connection prepares it once.
pub(super) struct BatchStatement {
    write: fn(Backend) -> String,
    postgres: OnceLock<String>,
    sqlite: OnceLock<String>,
}

impl BatchStatement {
    pub(super) const fn new(write: fn(Backend) -> String) -> Self {
        Self {
            write,
            postgres: OnceLock::new(),
            sqlite: OnceLock::new(),
        }
    }

    pub(super) fn text(&'static self, backend: Backend) -> &'static str {
        let cell = match backend {
            Backend::Postgres => &self.postgres,
            Backend::Sqlite => &self.sqlite,
        };
        cell.get_or_init(|| (self.write)(backend))
    }
}

/// Serializes a chain hash as the hex text the hash columns hold.
pub(super) fn hex<S: Serializer>(hash: &ChainHash, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&hash.to_hex())
}

/// [`hex`] for a hash that may be absent.
pub(super) fn optional_hex<S: Serializer>(
    hash: &Option<ChainHash>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match hash {
        Some(hash) => hex(hash, serializer),
        None => serializer.serialize_none(),
    }
}

/// One hash, as the object [`hash_rows`] makes of it.
#[derive(Serialize)]
struct HashRow<'a> {
    #[serde(serialize_with = "hex")]
    hash: &'a ChainHash,
}

/// The hashes as a JSON row source's rows, one `hash` column each.
pub(super) fn hash_rows(hashes: &[ChainHash]) -> Result<String, sqlx::Error> {
    let rows: Vec<HashRow<'_>> = hashes.iter().map(|hash| HashRow { hash }).collect();
    json_rows(&rows)
}

/// The one column of [`hash_rows`].
pub(super) const HASH_COLUMN: [Column; 1] = [("hash", "text")];

#[cfg(test)]
mod tests {
    use super::*;

    const COLUMNS: [Column; 2] = [("hash", "text"), ("position", "bigint")];

    #[test]
    fn postgres_types_the_record_set_and_sqlite_reads_each_key() {
        assert_eq!(
            rows_source(Backend::Postgres, 2, &COLUMNS),
            "json_to_recordset($2::json) as r(hash text, position bigint)"
        );
        assert_eq!(
            rows_source(Backend::Sqlite, 2, &COLUMNS),
            "(select value ->> 'hash' as hash, value ->> 'position' as position \
             from json_each($2)) as r"
        );
        assert_eq!(source_columns(&COLUMNS), "r.hash, r.position");
    }

    #[test]
    fn hashes_are_bound_as_the_hex_the_columns_hold() {
        let hash = ChainHash::from_hex(&"ab".repeat(32)).expect("hex");
        let text = hash_rows(&[hash]).expect("serializes");
        assert_eq!(text, format!(r#"[{{"hash":"{}"}}]"#, "ab".repeat(32)));
    }
}
