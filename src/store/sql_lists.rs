//! A batched read's list of rows (keys, with what each asks), as the two SQL stores take it
//! (ADR 0036). Each store's `push_listed` writes the list as the source `v` of a read, its
//! fields named `column1`, `column2`, .. as a `VALUES` list's are:
//! - SQLite binds it as one JSON text read through `json_each`, so the statement's text is
//!   the same whatever the list's length and is prepared once (sqlx caches statements by
//!   their text). A `VALUES` list of n rows was a new text for every n: in a dispatch of
//!   10,000, parsing and planning them took 29 % of the read connection's thread.
//! - PostgreSQL keeps a `VALUES` list: its planner counts the rows of one, and took a JSON
//!   list for a hundred rows and read all of `executions` to hash it.

use serde::Serialize;

use crate::core::ids::HeartbeatKey;
use crate::ports::store::StoreError;

/// One field of a listed row.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(untagged)]
pub(super) enum Listed<'a> {
    Text(&'a str),
    Integer(i64),
}

/// The text around a JSON list's parameter: `(SELECT CAST(v.value ->> 0 AS TEXT) AS
/// column1, .. FROM json_each(` and `) AS v)`, each field cast to the type of the same
/// field of `fields`.
pub(super) fn json_list_sql(fields: &[Listed<'_>]) -> (String, &'static str) {
    let columns: Vec<String> = fields
        .iter()
        .enumerate()
        .map(|(index, field)| {
            let kind = match field {
                Listed::Text(_) => "TEXT",
                Listed::Integer(_) => "INTEGER",
            };
            format!("CAST(v.value ->> {index} AS {kind}) AS column{}", index + 1)
        })
        .collect();
    (format!("(SELECT {} FROM json_each(", columns.join(", ")), ") AS v)")
}

/// Keys as listed rows (agent, heartbeat).
pub(super) fn listed_keys(keys: &[HeartbeatKey]) -> Vec<[Listed<'_>; 2]> {
    keys.iter().map(|key| [Listed::Text(key.agent.as_str()), Listed::Text(key.heartbeat.as_str())]).collect()
}

/// The JSON text of `rows`, each an array of its fields.
///
/// # Errors
/// Never for texts and integers; a field that JSON cannot hold would be a backend error.
pub(super) fn json_list<const N: usize>(rows: &[[Listed<'_>; N]]) -> Result<String, StoreError> {
    let rows: Vec<&[Listed<'_>]> = rows.iter().map(|row| &row[..]).collect();
    serde_json::to_string(&rows)
        .map_err(|error| StoreError::Backend(format!("cannot list a batched read's rows: {error}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_casts_each_field_by_its_position() {
        let (head, tail) = json_list_sql(&[Listed::Text("a"), Listed::Integer(1)]);
        assert_eq!(
            format!("{head}?{tail}"),
            "(SELECT CAST(v.value ->> 0 AS TEXT) AS column1, CAST(v.value ->> 1 AS INTEGER) AS column2 \
             FROM json_each(?) AS v)"
        );
    }

    #[test]
    fn lists_rows_as_arrays_with_texts_escaped() {
        let rows = [[Listed::Text("agent \"a\""), Listed::Integer(7)], [Listed::Text("b\\c"), Listed::Integer(-1)]];
        assert_eq!(json_list(&rows).expect("texts and integers list"), r#"[["agent \"a\"",7],["b\\c",-1]]"#);
    }
}
