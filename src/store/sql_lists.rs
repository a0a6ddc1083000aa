//! A batched read's list of rows, bound as one JSON text instead of a `VALUES` list of
//! parameters. The statement's text is then the same whatever the list's length, so a
//! backend prepares it once and keeps it (sqlx caches statements by their text). A
//! `VALUES` list of n rows was a new text for every n: in a dispatch of 10,000 on SQLite,
//! parsing and planning those texts took 29 % of the read connection's thread
//! (performance.md, "Batched reads prepared once").

use serde::Serialize;

use crate::ports::store::StoreError;

/// The type a listed field is read as.
#[derive(Debug, Clone, Copy)]
pub(super) enum Field {
    Text,
    Integer,
}

/// A subquery of the rows of the JSON array of arrays bound as `$1`, its fields named
/// `column1`, `column2`, .. as a `VALUES` list's are, each cast to its type. `elements` is
/// the backend's function that yields an array's elements as rows of one column, `value`.
pub(super) fn listed_rows_sql(elements: &str, fields: &[Field]) -> String {
    let columns: Vec<String> = fields
        .iter()
        .enumerate()
        .map(|(index, field)| {
            let kind = match field {
                Field::Text => "TEXT",
                Field::Integer => "BIGINT",
            };
            format!("CAST(v.value ->> {index} AS {kind}) AS column{}", index + 1)
        })
        .collect();
    format!("(SELECT {} FROM {elements} AS v)", columns.join(", "))
}

/// The JSON text of `rows`, each a tuple (written as an array of its fields).
///
/// # Errors
/// Never for texts and integers; a field that JSON cannot hold would be a backend error.
pub(super) fn listed_rows<T: Serialize>(rows: &[T]) -> Result<String, StoreError> {
    serde_json::to_string(rows)
        .map_err(|error| StoreError::Backend(format!("cannot list a batched read's rows: {error}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_casts_each_field_by_its_position() {
        let sql = listed_rows_sql("json_each($1)", &[Field::Text, Field::Integer]);
        assert_eq!(
            sql,
            "(SELECT CAST(v.value ->> 0 AS TEXT) AS column1, CAST(v.value ->> 1 AS BIGINT) AS column2 \
             FROM json_each($1) AS v)"
        );
    }

    #[test]
    fn lists_tuples_as_arrays_with_texts_escaped() {
        let rows = [("agent \"a\"", 7_i64), ("b\\c", -1)];
        assert_eq!(listed_rows(&rows).expect("texts and integers list"), r#"[["agent \"a\"",7],["b\\c",-1]]"#);
    }
}
