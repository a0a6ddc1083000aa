//! Statements run straight on the SQLite writer's connection, from the calling thread,
//! inside a transaction sqlx began and commits (ADR 0033).
//!
//! sqlx runs every SQLite statement on the connection's own thread: each statement, and
//! each row it returns, crosses between threads (a futex wake and a context switch a time).
//! On the dispatch path that crossing was a third of the writer's CPU. Here the connection
//! is locked once (`lock_handle`), one prepared statement per kind of write is stepped
//! once per row, and the lock is handed back before the commit, which sqlx still runs on
//! its own thread (its `fsync` included).
//!
//! Nothing here awaits: a `Direct` lives inside one synchronous call, so no future holds
//! the raw connection across a suspension point.

use std::ffi::{c_char, c_int, CStr};
use std::marker::PhantomData;
use std::ptr::{self, NonNull};

use libsqlite3_sys as ffi;
use sqlx::sqlite::LockedSqliteHandle;

use crate::ports::store::StoreError;

/// The locked writer connection, for the length of one synchronous call.
pub(crate) struct Direct<'h> {
    db: NonNull<ffi::sqlite3>,
    _locked: PhantomData<&'h mut ()>,
}

/// A value bound to a statement's parameter.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Value<'a> {
    Int(i64),
    Text(&'a str),
    Null,
}

impl From<i64> for Value<'_> {
    fn from(value: i64) -> Self {
        Value::Int(value)
    }
}

impl<'a> From<&'a str> for Value<'a> {
    fn from(value: &'a str) -> Self {
        Value::Text(value)
    }
}

impl<'a, T: Into<Value<'a>>> From<Option<T>> for Value<'a> {
    fn from(value: Option<T>) -> Self {
        value.map_or(Value::Null, Into::into)
    }
}

impl<'h> Direct<'h> {
    /// The connection behind `handle`, which stays locked while this lives.
    pub(crate) fn new(handle: &'h mut LockedSqliteHandle<'_>) -> Self {
        Self { db: handle.as_raw_handle(), _locked: PhantomData }
    }

    /// Prepares `sql` (one statement, parameters `?1`, `?2`...).
    pub(crate) fn prepare(&self, sql: &str) -> Result<Statement<'_>, StoreError> {
        let length = c_int::try_from(sql.len()).map_err(|_| backend(sql, "statement too long".to_owned()))?;
        let mut stmt = ptr::null_mut();
        // SAFETY: `db` is a live connection this thread holds locked for `'h`; `sql` is
        // valid for `length` bytes, which SQLite reads without needing a NUL.
        let rc = unsafe {
            ffi::sqlite3_prepare_v2(self.db.as_ptr(), sql.as_ptr().cast::<c_char>(), length, &mut stmt, ptr::null_mut())
        };
        if rc != ffi::SQLITE_OK {
            return Err(backend(sql, self.error_message()));
        }
        let stmt = NonNull::new(stmt).ok_or_else(|| backend(sql, "no statement in the text".to_owned()))?;
        Ok(Statement { stmt, direct: self, sql_head: head(sql) })
    }

    /// Rows the last finished `INSERT`, `UPDATE` or `DELETE` changed.
    fn changes(&self) -> i64 {
        // SAFETY: a live, locked connection.
        i64::from(unsafe { ffi::sqlite3_changes(self.db.as_ptr()) })
    }

    fn error_message(&self) -> String {
        // SAFETY: a live, locked connection; SQLite returns a NUL-terminated UTF-8 text it
        // owns until the next call on the connection, copied here at once.
        unsafe { CStr::from_ptr(ffi::sqlite3_errmsg(self.db.as_ptr())) }.to_string_lossy().into_owned()
    }
}

/// A prepared statement, stepped once per row of a batch; finalized when dropped.
pub(crate) struct Statement<'d> {
    stmt: NonNull<ffi::sqlite3_stmt>,
    direct: &'d Direct<'d>,
    /// The statement's start, for errors.
    sql_head: String,
}

impl Statement<'_> {
    /// Runs the statement with `values` to its end; returns the rows it changed.
    pub(crate) fn execute(&mut self, values: &[Value<'_>]) -> Result<i64, StoreError> {
        self.bind(values)?;
        while self.step()? {}
        Ok(self.direct.changes())
    }

    /// Runs the statement with `values` and reads its first row with `read`, if it has one.
    pub(crate) fn query_row<T>(
        &mut self,
        values: &[Value<'_>],
        read: impl FnOnce(&Row<'_>) -> Result<T, StoreError>,
    ) -> Result<Option<T>, StoreError> {
        self.bind(values)?;
        if !self.step()? {
            return Ok(None);
        }
        let row = read(&Row { stmt: self.stmt, _statement: PhantomData })?;
        while self.step()? {}
        Ok(Some(row))
    }

    fn bind(&mut self, values: &[Value<'_>]) -> Result<(), StoreError> {
        let stmt = self.stmt.as_ptr();
        // SAFETY: `stmt` is this statement, not finalized; reset ends its last run.
        unsafe {
            ffi::sqlite3_reset(stmt);
            ffi::sqlite3_clear_bindings(stmt);
        }
        for (index, value) in values.iter().enumerate() {
            let index = c_int::try_from(index + 1).map_err(|_| self.error("too many parameters".to_owned()))?;
            // SAFETY: `stmt` is live; a text is copied by SQLite (`SQLITE_TRANSIENT`)
            // before the call returns, so its borrow need not outlive the call.
            let rc = unsafe {
                match value {
                    Value::Int(int) => ffi::sqlite3_bind_int64(stmt, index, *int),
                    Value::Null => ffi::sqlite3_bind_null(stmt, index),
                    Value::Text(text) => {
                        let length =
                            c_int::try_from(text.len()).map_err(|_| self.error("a text over 2 GB".to_owned()))?;
                        ffi::sqlite3_bind_text(
                            stmt,
                            index,
                            text.as_ptr().cast::<c_char>(),
                            length,
                            ffi::SQLITE_TRANSIENT(),
                        )
                    }
                }
            };
            if rc != ffi::SQLITE_OK {
                return Err(self.error(self.direct.error_message()));
            }
        }
        Ok(())
    }

    /// One step: `true` when it produced a row.
    fn step(&mut self) -> Result<bool, StoreError> {
        // SAFETY: `stmt` is live and its connection locked by this thread.
        match unsafe { ffi::sqlite3_step(self.stmt.as_ptr()) } {
            ffi::SQLITE_ROW => Ok(true),
            ffi::SQLITE_DONE => Ok(false),
            _ => Err(self.error(self.direct.error_message())),
        }
    }

    fn error(&self, problem: String) -> StoreError {
        StoreError::Backend(format!("{}: {problem}", self.sql_head))
    }
}

impl Drop for Statement<'_> {
    fn drop(&mut self) {
        // SAFETY: finalized exactly once, here; its connection is still locked.
        unsafe {
            ffi::sqlite3_finalize(self.stmt.as_ptr());
        }
    }
}

/// The current row of a statement, read while it is there.
pub(crate) struct Row<'s> {
    stmt: NonNull<ffi::sqlite3_stmt>,
    _statement: PhantomData<&'s ()>,
}

impl Row<'_> {
    /// Column `column` as an integer (0 for NULL, as SQLite reads it).
    pub(crate) fn int(&self, column: c_int) -> i64 {
        // SAFETY: the statement is live and on a row for as long as this `Row` lives.
        unsafe { ffi::sqlite3_column_int64(self.stmt.as_ptr(), column) }
    }

    /// Column `column` as text, `None` for NULL.
    pub(crate) fn text(&self, column: c_int) -> Result<Option<String>, StoreError> {
        let stmt = self.stmt.as_ptr();
        // SAFETY: as above; the pointer SQLite returns is valid for the length it then
        // gives, until the next step, and is copied at once.
        unsafe {
            if ffi::sqlite3_column_type(stmt, column) == ffi::SQLITE_NULL {
                return Ok(None);
            }
            let text = ffi::sqlite3_column_text(stmt, column);
            let length = usize::try_from(ffi::sqlite3_column_bytes(stmt, column)).unwrap_or(0);
            if text.is_null() {
                return Ok(Some(String::new()));
            }
            let bytes = std::slice::from_raw_parts(text, length);
            String::from_utf8(bytes.to_vec())
                .map(Some)
                .map_err(|_| StoreError::Backend(format!("column {column} holds text that is not UTF-8")))
        }
    }
}

fn head(sql: &str) -> String {
    sql.chars().take(60).collect()
}

fn backend(sql: &str, problem: String) -> StoreError {
    StoreError::Backend(format!("{}: {problem}", head(sql)))
}

#[cfg(test)]
mod tests {
    use sqlx::{Connection, SqliteConnection};

    use super::*;

    #[tokio::test]
    async fn values_round_trip_and_a_failing_statement_names_itself() {
        let mut connection = SqliteConnection::connect("sqlite::memory:").await.expect("an in-memory database opens");
        let mut handle = connection.lock_handle().await.expect("the connection locks");
        let direct = Direct::new(&mut handle);
        direct
            .prepare("CREATE TABLE t (n INTEGER NOT NULL, s TEXT, UNIQUE (n))")
            .and_then(|mut create| create.execute(&[]))
            .expect("the table is created");
        let mut insert =
            direct.prepare("INSERT INTO t (n, s) VALUES (?1, ?2) ON CONFLICT (n) DO NOTHING").expect("it prepares");
        // A text with a NUL and one beyond ASCII keep every byte (bound with their length).
        assert_eq!(insert.execute(&[Value::Int(1), Value::Text("a\0b ✓")]).expect("inserted"), 1);
        assert_eq!(insert.execute(&[Value::Int(2), Value::Null]).expect("inserted"), 1);
        // Stepped again with the same parameters: the conflict changes nothing.
        assert_eq!(insert.execute(&[Value::Int(1), Value::Text("other")]).expect("no row"), 0);
        let mut select = direct.prepare("SELECT n, s FROM t WHERE n = ?1").expect("it prepares");
        let read = |row: &Row<'_>| Ok((row.int(0), row.text(1)?));
        assert_eq!(select.query_row(&[Value::Int(1)], read).expect("read"), Some((1, Some("a\0b ✓".to_owned()))));
        assert_eq!(select.query_row(&[Value::Int(2)], read).expect("read"), Some((2, None)));
        assert_eq!(select.query_row(&[Value::Int(3)], read).expect("read"), None);

        let Err(StoreError::Backend(message)) = insert.execute(&[Value::Null, Value::Null]) else {
            panic!("a NULL into a NOT NULL column fails");
        };
        assert!(message.starts_with("INSERT INTO t (n, s)"), "{message}");
        assert!(message.contains("NOT NULL"), "{message}");
        let Err(StoreError::Backend(message)) = direct.prepare("SELECT x FROM nowhere") else {
            panic!("a statement on a missing table does not prepare");
        };
        assert!(message.contains("no such table: nowhere"), "{message}");
    }
}
