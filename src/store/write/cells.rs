//! Step 3, persist: a batch row's cells, as SQLite binds them.
//!
//! Serializes a row, a struct, straight into the cells of its row source,
//! in the source's column order. Through a JSON value every row cost a
//! map, a key string per field and a lookup per column: a quarter of the
//! writer's instructions for a small request's figures
//! (`bench/callgrind.sh`). The cells are what SQLite's `->>` read from the
//! row's JSON when rows went as JSON (`batch_rows`): numbers as numbers,
//! text as text, anything nested as its JSON text.

use serde::ser::{self, Impossible, Serialize, SerializeStruct, Serializer};
use std::fmt;

/// A column of a row source, its name first (`batch_rows::Column`).
type Column = (&'static str, &'static str);

/// One bound cell.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Cell {
    Null,
    Integer(i64),
    Real(f64),
    Text(String),
}

/// Writes `row`'s fields into `cells`, one per column of `columns` (a
/// field no column names is left out, a column no field fills is null).
pub(super) fn row_cells<T: Serialize>(
    row: &T,
    columns: &[Column],
    cells: &mut Vec<Cell>,
) -> Result<(), CellError> {
    cells.clear();
    cells.resize(columns.len(), Cell::Null);
    row.serialize(RowSerializer { columns, cells })
}

/// Why a row could not be made cells.
#[derive(Debug)]
pub(super) enum CellError {
    /// The value is a sequence, a map or a struct: it goes as JSON text.
    Nested,
    /// The row is not a struct.
    NotARow,
    Custom(String),
}

impl fmt::Display for CellError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CellError::Nested => f.write_str("a nested value where a cell was expected"),
            CellError::NotARow => f.write_str("a batch row is a struct"),
            CellError::Custom(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for CellError {}

impl ser::Error for CellError {
    fn custom<T: fmt::Display>(message: T) -> Self {
        CellError::Custom(message.to_string())
    }
}

/// One field's cell; a nested value becomes its JSON text.
fn cell<T: ?Sized + Serialize>(value: &T) -> Result<Cell, CellError> {
    match value.serialize(CellSerializer) {
        Err(CellError::Nested) => serde_json::to_string(value)
            .map(Cell::Text)
            .map_err(|error| CellError::Custom(error.to_string())),
        made => made,
    }
}

struct RowSerializer<'c> {
    columns: &'c [Column],
    cells: &'c mut [Cell],
}

impl SerializeStruct for RowSerializer<'_> {
    type Ok = ();
    type Error = CellError;

    fn serialize_field<T: ?Sized + Serialize>(
        &mut self,
        name: &'static str,
        value: &T,
    ) -> Result<(), CellError> {
        if let Some(at) = self.columns.iter().position(|(column, _)| *column == name) {
            self.cells[at] = cell(value)?;
        }
        Ok(())
    }

    fn end(self) -> Result<(), CellError> {
        Ok(())
    }
}

/// Refuses everything but a struct, whose fields [`SerializeStruct`] takes.
macro_rules! not_a_row {
    ($($method:ident($($argument:ty),*)),* $(,)?) => {
        $(fn $method(self, $(_: $argument),*) -> Result<Self::Ok, CellError> {
            Err(CellError::NotARow)
        })*
    };
}

impl Serializer for RowSerializer<'_> {
    type Ok = ();
    type Error = CellError;
    type SerializeSeq = Impossible<(), CellError>;
    type SerializeTuple = Impossible<(), CellError>;
    type SerializeTupleStruct = Impossible<(), CellError>;
    type SerializeTupleVariant = Impossible<(), CellError>;
    type SerializeMap = Impossible<(), CellError>;
    type SerializeStruct = Self;
    type SerializeStructVariant = Impossible<(), CellError>;

    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self, CellError> {
        Ok(self)
    }

    not_a_row!(
        serialize_bool(bool),
        serialize_i8(i8),
        serialize_i16(i16),
        serialize_i32(i32),
        serialize_i64(i64),
        serialize_u8(u8),
        serialize_u16(u16),
        serialize_u32(u32),
        serialize_u64(u64),
        serialize_f32(f32),
        serialize_f64(f64),
        serialize_char(char),
        serialize_str(&str),
        serialize_bytes(&[u8]),
        serialize_none(),
        serialize_unit(),
        serialize_unit_struct(&'static str),
        serialize_unit_variant(&'static str, u32, &'static str),
    );

    fn serialize_some<T: ?Sized + Serialize>(self, _: &T) -> Result<(), CellError> {
        Err(CellError::NotARow)
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: &T,
    ) -> Result<(), CellError> {
        Err(CellError::NotARow)
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<(), CellError> {
        Err(CellError::NotARow)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, CellError> {
        Err(CellError::NotARow)
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, CellError> {
        Err(CellError::NotARow)
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, CellError> {
        Err(CellError::NotARow)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, CellError> {
        Err(CellError::NotARow)
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, CellError> {
        Err(CellError::NotARow)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, CellError> {
        Err(CellError::NotARow)
    }
}

/// One value as a cell, the way serde_json would have written it: a
/// float that is not finite is null, an integer past `i64` a real.
struct CellSerializer;

/// A compound value, which [`cell`] writes as JSON text instead.
macro_rules! nested {
    ($($method:ident($($argument:ty),*) -> $output:ty),* $(,)?) => {
        $(fn $method(self, $(_: $argument),*) -> Result<$output, CellError> {
            Err(CellError::Nested)
        })*
    };
}

impl Serializer for CellSerializer {
    type Ok = Cell;
    type Error = CellError;
    type SerializeSeq = Impossible<Cell, CellError>;
    type SerializeTuple = Impossible<Cell, CellError>;
    type SerializeTupleStruct = Impossible<Cell, CellError>;
    type SerializeTupleVariant = Impossible<Cell, CellError>;
    type SerializeMap = Impossible<Cell, CellError>;
    type SerializeStruct = Impossible<Cell, CellError>;
    type SerializeStructVariant = Impossible<Cell, CellError>;

    fn serialize_bool(self, value: bool) -> Result<Cell, CellError> {
        Ok(Cell::Integer(i64::from(value)))
    }
    fn serialize_i8(self, value: i8) -> Result<Cell, CellError> {
        Ok(Cell::Integer(value.into()))
    }
    fn serialize_i16(self, value: i16) -> Result<Cell, CellError> {
        Ok(Cell::Integer(value.into()))
    }
    fn serialize_i32(self, value: i32) -> Result<Cell, CellError> {
        Ok(Cell::Integer(value.into()))
    }
    fn serialize_i64(self, value: i64) -> Result<Cell, CellError> {
        Ok(Cell::Integer(value))
    }
    fn serialize_u8(self, value: u8) -> Result<Cell, CellError> {
        Ok(Cell::Integer(value.into()))
    }
    fn serialize_u16(self, value: u16) -> Result<Cell, CellError> {
        Ok(Cell::Integer(value.into()))
    }
    fn serialize_u32(self, value: u32) -> Result<Cell, CellError> {
        Ok(Cell::Integer(value.into()))
    }
    fn serialize_u64(self, value: u64) -> Result<Cell, CellError> {
        Ok(i64::try_from(value).map_or(Cell::Real(value as f64), Cell::Integer))
    }
    fn serialize_f32(self, value: f32) -> Result<Cell, CellError> {
        self.serialize_f64(value.into())
    }
    fn serialize_f64(self, value: f64) -> Result<Cell, CellError> {
        Ok(if value.is_finite() {
            Cell::Real(value)
        } else {
            Cell::Null
        })
    }
    fn serialize_char(self, value: char) -> Result<Cell, CellError> {
        Ok(Cell::Text(value.to_string()))
    }
    fn serialize_str(self, value: &str) -> Result<Cell, CellError> {
        Ok(Cell::Text(value.to_owned()))
    }
    fn serialize_none(self) -> Result<Cell, CellError> {
        Ok(Cell::Null)
    }
    fn serialize_some<T: ?Sized + Serialize>(self, value: &T) -> Result<Cell, CellError> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<Cell, CellError> {
        Ok(Cell::Null)
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<Cell, CellError> {
        Ok(Cell::Null)
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<Cell, CellError> {
        Ok(Cell::Text(variant.to_owned()))
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<Cell, CellError> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<Cell, CellError> {
        Err(CellError::Nested)
    }

    nested!(
        serialize_bytes(&[u8]) -> Cell,
        serialize_seq(Option<usize>) -> Self::SerializeSeq,
        serialize_tuple(usize) -> Self::SerializeTuple,
        serialize_tuple_struct(&'static str, usize) -> Self::SerializeTupleStruct,
        serialize_tuple_variant(&'static str, u32, &'static str, usize) -> Self::SerializeTupleVariant,
        serialize_map(Option<usize>) -> Self::SerializeMap,
        serialize_struct(&'static str, usize) -> Self::SerializeStruct,
        serialize_struct_variant(&'static str, u32, &'static str, usize) -> Self::SerializeStructVariant,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Serialize;

    const COLUMNS: [Column; 6] = [
        ("name", "text"),
        ("count", "bigint"),
        ("missing", "text"),
        ("ratio", "double precision"),
        ("flag", "bigint"),
        ("tags", "text"),
    ];

    #[derive(Serialize)]
    struct Row<'a> {
        // Declared in another order than the columns, with a field no
        // column names.
        flag: bool,
        tags: Vec<&'a str>,
        unlisted: i64,
        ratio: f64,
        count: Option<u64>,
        name: &'a str,
    }

    fn cells_of<T: Serialize>(row: &T) -> Vec<Cell> {
        let mut cells = Vec::new();
        row_cells(row, &COLUMNS, &mut cells).expect("a row");
        cells
    }

    #[test]
    fn cells_come_in_column_order_as_json_would_read_them() {
        let row = Row {
            flag: true,
            tags: vec!["a", "b"],
            unlisted: 9,
            ratio: 0.5,
            count: Some(3),
            name: "x",
        };
        assert_eq!(
            cells_of(&row),
            [
                Cell::Text("x".into()),
                Cell::Integer(3),
                Cell::Null,
                Cell::Real(0.5),
                Cell::Integer(1),
                Cell::Text(r#"["a","b"]"#.into()),
            ]
        );
    }

    #[test]
    fn absent_and_unrepresentable_numbers_are_what_json_made_of_them() {
        let row = Row {
            flag: false,
            tags: Vec::new(),
            unlisted: 0,
            ratio: f64::NAN,
            count: Some(u64::MAX),
            name: "",
        };
        let cells = cells_of(&row);
        assert_eq!(cells[1], Cell::Real(u64::MAX as f64));
        assert_eq!(cells[3], Cell::Null, "JSON has no NaN");
        let row = Row { count: None, ..row };
        assert_eq!(cells_of(&row)[1], Cell::Null);
    }

    #[test]
    fn a_row_that_is_not_a_struct_is_refused() {
        let mut cells = Vec::new();
        let refused = row_cells(&7_i64, &COLUMNS, &mut cells);
        assert!(matches!(refused, Err(CellError::NotARow)));
    }
}
