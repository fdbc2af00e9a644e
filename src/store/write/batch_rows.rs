//! Step 3, persist: rows in batches.
//!
//! A batch of rows bound to one statement whose text does not change with
//! every row count: a multi-row `values (…), (…)` list of the exact count
//! is a new statement for every count, so each batch made the database
//! parse and plan it afresh (pg_stat_statements, growing conversations:
//! planning alone cost more than executing the conversation lookups, and
//! 0.45 ms per 100-message insert).
//!
//! - **Postgres** takes the rows as one JSON array of objects, opened with
//!   `json_to_recordset`: one text, prepared once per connection, and no
//!   row count runs into the parameter limit.
//! - **SQLite** takes them as a `values` list of bound cells, its row count
//!   rounded up to a power of two with rows of nulls that the row source
//!   filters out: at most a dozen texts per statement, each prepared once
//!   per connection. JSON cost SQLite more than the rows' own writes: with
//!   `json_each`, every `->>` parsed its row's object again (its JSON
//!   functions were 28 % of all instructions of a small request,
//!   `bench/callgrind.sh`), and the bundled SQLite (3.46) has no
//!   `jsonb_each` that would parse each row once.
//!
//! Either way the row source is named `r`, with the same columns on both
//! backends, and its parameters come after the statement's own.

use super::cells::{row_cells, Cell};
use crate::conversation::ChainHash;
use crate::store::Backend;
use serde::{Serialize, Serializer};
use sqlx::any::AnyArguments;
use sqlx::Arguments;
use std::sync::OnceLock;

/// A column of a row source: its name (the row's field) and, for
/// Postgres, its SQL type. The first column of every source is never
/// null: SQLite's padding rows are told apart by it.
pub(in crate::store) type Column = (&'static str, &'static str);

/// Row counts SQLite's texts are written for: 1, 2, 4, … 4,096. A batch is
/// at most 2,000 rows (the largest chunk), and 4,096 rows of the widest
/// source (19 columns) would pass SQLite's 32,766 parameters.
const SQLITE_SIZES: usize = 13;

/// Rows per statement that SQLite's parameter limit (32,766) allows for
/// `columns` columns.
const SQLITE_PARAMETERS: usize = 32_766;

/// A statement over a row source `r`: its text for each backend (and, on
/// SQLite, each padded row count), written on first use and the same ever
/// after, so each connection prepares it once.
pub(in crate::store) struct BatchStatement {
    /// Writes the statement around the row source's text.
    write: fn(&str) -> String,
    /// The statement's own parameters, `$1` to `$fixed`, bound before the
    /// rows.
    fixed: usize,
    columns: &'static [Column],
    postgres: OnceLock<String>,
    sqlite: [OnceLock<String>; SQLITE_SIZES],
}

impl BatchStatement {
    /// A statement with `fixed` parameters of its own, whose rows have
    /// `columns`; `write` puts the row source's text where the statement
    /// reads it.
    pub(in crate::store) const fn new(
        fixed: usize,
        columns: &'static [Column],
        write: fn(&str) -> String,
    ) -> Self {
        Self {
            write,
            fixed,
            columns,
            postgres: OnceLock::new(),
            sqlite: [const { OnceLock::new() }; SQLITE_SIZES],
        }
    }

    /// The text for `rows` rows.
    pub(in crate::store) fn text(&'static self, backend: Backend, rows: usize) -> &'static str {
        match backend {
            Backend::Postgres => self
                .postgres
                .get_or_init(|| (self.write)(&postgres_source(self.fixed + 1, self.columns))),
            Backend::Sqlite => {
                let size = sqlite_size(rows);
                self.sqlite[size].get_or_init(|| {
                    let text = (self.write)(&sqlite_source(self.columns, 1 << size));
                    anonymous(text, self.fixed)
                })
            }
        }
    }

    /// The text for `rows` and its arguments: the statement's own,
    /// already in `arguments`, then the rows.
    pub(in crate::store) fn bound<'q, T: Serialize>(
        &'static self,
        backend: Backend,
        mut arguments: AnyArguments<'q>,
        rows: &[T],
    ) -> Result<(&'static str, AnyArguments<'q>), sqlx::Error> {
        self.bind(&mut arguments, backend, rows)?;
        Ok((self.text(backend, rows.len()), arguments))
    }

    fn bind<T: Serialize>(
        &self,
        arguments: &mut AnyArguments<'_>,
        backend: Backend,
        rows: &[T],
    ) -> Result<(), sqlx::Error> {
        debug_assert_eq!(
            arguments.len(),
            self.fixed,
            "the statement's own parameters first"
        );
        match backend {
            Backend::Postgres => add(arguments, json_rows(rows)?),
            Backend::Sqlite => bind_cells(arguments, self.columns, rows),
        }
    }
}

/// `$parameter`, a JSON array of objects, as the row source `r`.
fn postgres_source(parameter: usize, columns: &[Column]) -> String {
    let typed: Vec<String> = columns
        .iter()
        .map(|(name, sql_type)| format!("{name} {sql_type}"))
        .collect();
    format!(
        "json_to_recordset(${parameter}::json) as r({})",
        typed.join(", ")
    )
}

/// `rows` rows of bound cells, as the row source `r` without the padding
/// rows. The cells are anonymous (`?`): sqlx asks SQLite the name of every
/// parameter it binds, and for named ones SQLite walks its list of names
/// each time, quadratic in a statement of hundreds of cells (12 % of all
/// instructions of a small request, `bench/callgrind.sh`).
fn sqlite_source(columns: &[Column], rows: usize) -> String {
    let fields: Vec<String> = columns
        .iter()
        .enumerate()
        .map(|(index, (name, _))| format!("column{} as {name}", index + 1))
        .collect();
    let row = format!("({})", vec!["?"; columns.len()].join(", "));
    format!(
        "(select {} from (values {}) where column1 is not null) as r",
        fields.join(", "),
        vec![row; rows].join(", ")
    )
}

/// `text` with its own parameters `$1` to `$fixed` made anonymous too,
/// which binds them in the order they appear: each must appear once, in
/// order, before the row source's cells.
fn anonymous(mut text: String, fixed: usize) -> String {
    let rows_at = text.find('?').unwrap_or(text.len());
    let places: Vec<(usize, usize)> = (1..=fixed)
        .map(|parameter| {
            let name = format!("${parameter}");
            let found: Vec<usize> = text
                .match_indices(&name)
                .map(|(at, _)| at)
                .filter(|at| !text[at + name.len()..].starts_with(|c: char| c.is_ascii_digit()))
                .collect();
            assert_eq!(found.len(), 1, "{name} must appear once: {text}");
            (found[0], name.len())
        })
        .collect();
    let in_order = places.windows(2).all(|pair| pair[0].0 < pair[1].0);
    let before_rows = places.iter().all(|(at, _)| *at < rows_at);
    assert!(
        in_order && before_rows,
        "the statement's own parameters must come in order, before the rows: {text}"
    );
    for (at, length) in places.into_iter().rev() {
        text.replace_range(at..at + length, "?");
    }
    text
}

/// The index of the smallest size in [`SQLITE_SIZES`] that holds `rows`.
fn sqlite_size(rows: usize) -> usize {
    let size = rows.max(1).next_power_of_two().trailing_zeros() as usize;
    assert!(size < SQLITE_SIZES, "{rows} rows in one statement");
    size
}

/// Each row's cells in column order, then rows of nulls up to the padded
/// count.
fn bind_cells<T: Serialize>(
    arguments: &mut AnyArguments<'_>,
    columns: &[Column],
    rows: &[T],
) -> Result<(), sqlx::Error> {
    let padded = 1 << sqlite_size(rows.len());
    assert!(
        padded * columns.len() <= SQLITE_PARAMETERS,
        "{} rows of {} columns pass SQLite's parameter limit",
        rows.len(),
        columns.len()
    );
    let mut cells = Vec::with_capacity(columns.len());
    for row in rows {
        row_cells(row, columns, &mut cells).map_err(encode_error)?;
        for cell in cells.drain(..) {
            add_cell(arguments, cell)?;
        }
    }
    for _ in 0..(padded - rows.len()) * columns.len() {
        add(arguments, None::<i64>)?;
    }
    Ok(())
}

fn add_cell(arguments: &mut AnyArguments<'_>, cell: Cell) -> Result<(), sqlx::Error> {
    match cell {
        Cell::Null => add(arguments, None::<i64>),
        Cell::Integer(integer) => add(arguments, integer),
        Cell::Real(real) => add(arguments, real),
        Cell::Text(text) => add(arguments, text),
    }
}

/// Adds `value` to `arguments`, for a statement's own parameters.
pub(in crate::store) fn add<'q, T>(
    arguments: &mut AnyArguments<'q>,
    value: T,
) -> Result<(), sqlx::Error>
where
    T: sqlx::Encode<'q, sqlx::Any> + sqlx::Type<sqlx::Any> + 'q,
{
    arguments.add(value).map_err(sqlx::Error::Encode)
}

fn encode_error(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> sqlx::Error {
    sqlx::Error::Encode(error.into())
}

/// `r.a, r.b, …`: the source's columns, in order.
pub(in crate::store) fn source_columns(columns: &[Column]) -> String {
    let names: Vec<String> = columns
        .iter()
        .map(|(name, _)| format!("r.{name}"))
        .collect();
    names.join(", ")
}

/// The JSON text Postgres reads `rows` from.
fn json_rows<T: Serialize>(rows: &[T]) -> Result<String, sqlx::Error> {
    serde_json::to_string(rows).map_err(encode_error)
}
/// Serializes a chain hash as the hex text the hash columns hold.
pub(in crate::store) fn hex<S: Serializer>(
    hash: &ChainHash,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(hash.hex().as_str())
}

/// [`hex`] for a hash that may be absent.
pub(in crate::store) fn optional_hex<S: Serializer>(
    hash: &Option<ChainHash>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match hash {
        Some(hash) => hex(hash, serializer),
        None => serializer.serialize_none(),
    }
}

/// One hash, as the rows [`hash_rows`] makes hold it.
#[derive(Serialize)]
pub(in crate::store) struct HashRow<'a> {
    #[serde(serialize_with = "hex")]
    hash: &'a ChainHash,
}

/// The hashes as a row source's rows, one [`HASH_COLUMN`] each.
pub(in crate::store) fn hash_rows(hashes: &[ChainHash]) -> Vec<HashRow<'_>> {
    hashes.iter().map(|hash| HashRow { hash }).collect()
}

/// The one column of [`hash_rows`].
pub(in crate::store) const HASH_COLUMN: [Column; 1] = [("hash", "text")];

#[cfg(test)]
mod tests {
    use super::*;

    const COLUMNS: [Column; 2] = [("hash", "text"), ("position", "bigint")];

    static SELECT: BatchStatement = BatchStatement::new(1, &COLUMNS, |source| {
        format!("select r.hash from {source} where r.position > $1")
    });

    #[test]
    fn postgres_types_the_record_set_after_the_statements_own_parameters() {
        assert_eq!(
            SELECT.text(Backend::Postgres, 3),
            "select r.hash from json_to_recordset($2::json) as r(hash text, position bigint) \
             where r.position > $1"
        );
        assert_eq!(source_columns(&COLUMNS), "r.hash, r.position");
    }

    static OWN_FIRST: BatchStatement = BatchStatement::new(1, &COLUMNS, |source| {
        format!("select r.hash, $1 from {source}")
    });

    #[test]
    fn sqlite_pads_the_row_count_to_a_power_of_two_and_filters_the_padding() {
        assert_eq!(
            OWN_FIRST.text(Backend::Sqlite, 3),
            "select r.hash, ? from (select column1 as hash, column2 as position from \
             (values (?, ?), (?, ?), (?, ?), (?, ?)) where column1 is not null) as r"
        );
        assert_eq!(
            OWN_FIRST.text(Backend::Sqlite, 4),
            OWN_FIRST.text(Backend::Sqlite, 3),
            "one text for every count up to the same power of two"
        );
        assert_ne!(
            OWN_FIRST.text(Backend::Sqlite, 5),
            OWN_FIRST.text(Backend::Sqlite, 4)
        );
    }

    #[test]
    #[should_panic(expected = "before the rows")]
    fn on_sqlite_a_statement_naming_its_own_parameter_after_the_rows_is_refused() {
        // Anonymous parameters bind in the order they appear.
        let _ = SELECT.text(Backend::Sqlite, 1);
    }

    #[derive(Serialize)]
    struct Row {
        position: i64,
        #[serde(serialize_with = "hex")]
        hash: ChainHash,
    }

    #[test]
    fn sqlite_binds_each_cell_in_column_order_then_the_padding() {
        let hash = ChainHash::from_hex(&"ab".repeat(32)).expect("hex");
        let rows = [
            Row { position: 7, hash },
            Row { position: 8, hash },
            Row { position: 9, hash },
        ];
        let mut own = AnyArguments::default();
        add(&mut own, 1_i64).expect("binds");
        let (_, arguments) = OWN_FIRST.bound(Backend::Sqlite, own, &rows).expect("binds");
        assert_eq!(
            arguments.len(),
            1 + 4 * 2,
            "the statement's own parameter, 3 rows and a padding row"
        );
    }

    #[test]
    fn postgres_binds_the_rows_as_one_json_text() {
        let hash = ChainHash::from_hex(&"ab".repeat(32)).expect("hex");
        let mut own = AnyArguments::default();
        add(&mut own, 1_i64).expect("binds");
        let (_, arguments) = SELECT
            .bound(Backend::Postgres, own, &hash_rows(&[hash]))
            .expect("binds");
        assert_eq!(arguments.len(), 2);
        let json = json_rows(&hash_rows(&[hash])).expect("serializes");
        assert_eq!(json, format!(r#"[{{"hash":"{}"}}]"#, "ab".repeat(32)));
    }
}
