//! Statements run straight on a SQLite connection from the calling thread, with none of
//! sqlx's thread crossings (ADR 0033, ADR 0034).
//!
//! sqlx runs every SQLite statement on the connection's own thread: each statement, and
//! each row it returns, crosses between threads (a futex wake and a context switch a time).
//! On the dispatch path that crossing was a third of the writer's CPU. The dispatch writer
//! (`sqlite_dispatch_writer.rs`) owns a [`Connection`] on a thread of its own, and steps
//! one prepared statement per kind of write once per row; its statements stay prepared
//! from one transaction to the next.
//!
//! Nothing here awaits, and a `Connection` never leaves the thread that opened it.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};
use std::marker::PhantomData;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr::{self, NonNull};

use libsqlite3_sys as ffi;

use super::sqlite_busy::wait_briefly_when_busy;
use crate::ports::store::StoreError;

/// Prepared statements a connection keeps between transactions: the dispatch writer uses
/// about eight kinds; more than this at once are finalized after use instead.
const STATEMENTS_CACHED_MAX: usize = 32;

/// A SQLite connection of this process's own (not sqlx's), used by the thread that opened
/// it. Its statements stay prepared; they are finalized, and the connection closed, when it
/// drops.
pub(crate) struct Connection {
    db: NonNull<ffi::sqlite3>,
    cached: StatementCache,
}

/// Prepared statements not in use, by their text.
type StatementCache = RefCell<Vec<(String, NonNull<ffi::sqlite3_stmt>)>>;

impl Connection {
    /// Opens the existing database at `path` for reading and writing; a locked database
    /// is waited for as `sqlite_busy` says. Foreign keys on, `synchronous = FULL`, as the
    /// store's sqlx connections (the journal mode, WAL, is the file's own).
    pub(crate) fn open(path: &Path) -> Result<Self, StoreError> {
        let name = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| StoreError::Backend(format!("the database path {} holds a NUL", path.display())))?;
        let mut db = ptr::null_mut();
        // SAFETY: `name` is NUL-terminated; SQLite sets `db` even when the open fails.
        // NOMUTEX: the connection is only ever used by one thread at a time.
        let rc = unsafe {
            ffi::sqlite3_open_v2(
                name.as_ptr(),
                &mut db,
                ffi::SQLITE_OPEN_READWRITE | ffi::SQLITE_OPEN_NOMUTEX,
                ptr::null(),
            )
        };
        let db =
            NonNull::new(db).ok_or_else(|| StoreError::Backend("SQLite could not allocate a connection".to_owned()))?;
        // From here `connection` closes the handle on every path out.
        let connection = Self { db, cached: RefCell::new(Vec::new()) };
        if rc != ffi::SQLITE_OK {
            let problem = connection.direct().error_message();
            return Err(StoreError::Backend(format!("cannot open the database {}: {problem}", path.display())));
        }
        // SAFETY: a live connection this thread owns.
        unsafe {
            ffi::sqlite3_extended_result_codes(db.as_ptr(), 1);
            wait_briefly_when_busy(db);
        }
        let direct = connection.direct();
        direct.prepare("PRAGMA foreign_keys = ON")?.execute(&[])?;
        direct.prepare("PRAGMA synchronous = FULL")?.execute(&[])?;
        Ok(connection)
    }

    /// Statements on this connection, kept prepared after use.
    pub(crate) fn direct(&self) -> Direct<'_> {
        Direct { db: self.db, cached: &self.cached }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        finalize_cached(&mut self.cached);
        // SAFETY: every statement of the connection is finalized; it closes with nothing
        // left open.
        unsafe {
            ffi::sqlite3_close(self.db.as_ptr());
        }
    }
}

/// Statements on a connection this module does not own (sqlx's, held through its lock
/// handle) for one synchronous stretch: they are finalized when it drops, and the
/// connection stays open, as its owner left it.
pub(crate) struct Borrowed {
    db: NonNull<ffi::sqlite3>,
    cached: StatementCache,
}

impl Borrowed {
    /// # Safety
    /// `db` is a live connection that this thread alone uses until the `Borrowed` drops.
    pub(crate) unsafe fn new(db: NonNull<ffi::sqlite3>) -> Self {
        Self { db, cached: RefCell::new(Vec::new()) }
    }

    pub(crate) fn direct(&self) -> Direct<'_> {
        Direct { db: self.db, cached: &self.cached }
    }
}

impl Drop for Borrowed {
    fn drop(&mut self) {
        finalize_cached(&mut self.cached);
    }
}

/// Finalizes a connection's cached statements, once each. Called as their holder drops:
/// every `Statement` borrowed it and is gone, and the holder is on the connection's thread.
fn finalize_cached(cached: &mut StatementCache) {
    for (_, stmt) in cached.get_mut().drain(..) {
        // SAFETY: a prepared statement no one else holds, finalized exactly once.
        unsafe {
            ffi::sqlite3_finalize(stmt.as_ptr());
        }
    }
}

/// A connection this thread holds, for the length of one synchronous call.
pub(crate) struct Direct<'h> {
    db: NonNull<ffi::sqlite3>,
    /// Where a statement goes back after use.
    cached: &'h StatementCache,
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
    /// Prepares `sql` (one statement, parameters `?1`, `?2`...), or takes it from the
    /// connection's cache.
    pub(crate) fn prepare(&self, sql: &str) -> Result<Statement<'_>, StoreError> {
        {
            let mut cached = self.cached.borrow_mut();
            if let Some(index) = cached.iter().position(|(text, _)| text == sql) {
                let (text, stmt) = cached.swap_remove(index);
                return Ok(Statement { stmt, direct: self, sql: text });
            }
        }
        let length = c_int::try_from(sql.len()).map_err(|_| backend(sql, "statement too long".to_owned()))?;
        let mut stmt = ptr::null_mut();
        // SAFETY: `db` is a live connection only this thread uses, for `'h`; `sql` is
        // valid for `length` bytes, which SQLite reads without needing a NUL.
        // PERSISTENT: a statement kept for many uses, which SQLite allocates accordingly.
        let rc = unsafe {
            ffi::sqlite3_prepare_v3(
                self.db.as_ptr(),
                sql.as_ptr().cast::<c_char>(),
                length,
                ffi::SQLITE_PREPARE_PERSISTENT,
                &mut stmt,
                ptr::null_mut(),
            )
        };
        if rc != ffi::SQLITE_OK {
            return Err(backend(sql, self.error_message()));
        }
        let stmt = NonNull::new(stmt).ok_or_else(|| backend(sql, "no statement in the text".to_owned()))?;
        Ok(Statement { stmt, direct: self, sql: sql.to_owned() })
    }

    /// Rows the last finished `INSERT`, `UPDATE` or `DELETE` changed.
    fn changes(&self) -> i64 {
        // SAFETY: a live connection only this thread uses.
        i64::from(unsafe { ffi::sqlite3_changes(self.db.as_ptr()) })
    }

    fn error_message(&self) -> String {
        // SAFETY: a live connection only this thread uses; SQLite returns a NUL-terminated
        // UTF-8 text it owns until the next call on the connection, copied here at once.
        unsafe { CStr::from_ptr(ffi::sqlite3_errmsg(self.db.as_ptr())) }.to_string_lossy().into_owned()
    }
}

/// A prepared statement, stepped once per row of a batch; when dropped, back to its
/// connection's cache or finalized.
pub(crate) struct Statement<'d> {
    stmt: NonNull<ffi::sqlite3_stmt>,
    direct: &'d Direct<'d>,
    /// Its text: the cache's key, and named in its errors.
    sql: String,
}

impl Statement<'_> {
    /// Runs the statement with `values` to its end; returns the rows it changed.
    pub(crate) fn execute(&mut self, values: &[Value<'_>]) -> Result<i64, StoreError> {
        self.bind(values)?;
        let stepped = self.step_to_end();
        self.unbind();
        stepped?;
        Ok(self.direct.changes())
    }

    /// Runs the statement with `values` and reads its first row with `read`, if it has one.
    pub(crate) fn query_row<T>(
        &mut self,
        values: &[Value<'_>],
        read: impl FnOnce(&Row<'_>) -> Result<T, StoreError>,
    ) -> Result<Option<T>, StoreError> {
        self.bind(values)?;
        let row = self.first_row(read);
        self.unbind();
        row
    }

    fn first_row<T>(&mut self, read: impl FnOnce(&Row<'_>) -> Result<T, StoreError>) -> Result<Option<T>, StoreError> {
        if !self.step()? {
            return Ok(None);
        }
        let row = read(&Row { stmt: self.stmt, _statement: PhantomData })?;
        self.step_to_end()?;
        Ok(Some(row))
    }

    fn step_to_end(&mut self) -> Result<(), StoreError> {
        while self.step()? {}
        Ok(())
    }

    /// Ends the run and lets go of the values bound to it: texts are bound without a copy
    /// (`bind`), so none may stay bound once the call that lent them returns.
    fn unbind(&mut self) {
        let stmt = self.stmt.as_ptr();
        // SAFETY: `stmt` is this statement, not finalized.
        unsafe {
            ffi::sqlite3_reset(stmt);
            ffi::sqlite3_clear_bindings(stmt);
        }
    }

    /// Binds `values` to a fresh run; none stays bound when one fails.
    fn bind(&mut self, values: &[Value<'_>]) -> Result<(), StoreError> {
        self.unbind();
        let bound = self.bind_each(values);
        if bound.is_err() {
            self.unbind();
        }
        bound
    }

    fn bind_each(&mut self, values: &[Value<'_>]) -> Result<(), StoreError> {
        let stmt = self.stmt.as_ptr();
        for (index, value) in values.iter().enumerate() {
            let index = c_int::try_from(index + 1).map_err(|_| self.error("too many parameters".to_owned()))?;
            // SAFETY: `stmt` is live. A text is bound without a copy (`SQLITE_STATIC`):
            // `execute` and `query_row` unbind every value before they return, on every
            // path, so SQLite never holds a pointer past the borrow of `values`.
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
                            ffi::SQLITE_STATIC(),
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
        // SAFETY: `stmt` is live and its connection used by this thread alone.
        match unsafe { ffi::sqlite3_step(self.stmt.as_ptr()) } {
            ffi::SQLITE_ROW => Ok(true),
            ffi::SQLITE_DONE => Ok(false),
            _ => Err(self.error(self.direct.error_message())),
        }
    }

    fn error(&self, problem: String) -> StoreError {
        StoreError::Backend(format!("{}: {problem}", head(&self.sql)))
    }
}

impl Drop for Statement<'_> {
    fn drop(&mut self) {
        let stmt = self.stmt.as_ptr();
        let mut cached = self.direct.cached.borrow_mut();
        if cached.len() < STATEMENTS_CACHED_MAX {
            // SAFETY: a live statement; reset ends its run (and any read it holds open),
            // and its parameters are let go before it waits in the cache.
            unsafe {
                ffi::sqlite3_reset(stmt);
                ffi::sqlite3_clear_bindings(stmt);
            }
            cached.push((std::mem::take(&mut self.sql), self.stmt));
            return;
        }
        // SAFETY: finalized exactly once, here, on the thread that holds its connection.
        unsafe {
            ffi::sqlite3_finalize(stmt);
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
    use super::*;

    #[test]
    fn values_round_trip_and_a_failing_statement_names_itself() {
        let connection = Connection::open(Path::new(":memory:")).expect("an in-memory database opens");
        let direct = connection.direct();
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

    #[test]
    fn a_statement_is_kept_prepared_and_comes_back_reset() {
        let connection = Connection::open(Path::new(":memory:")).expect("an in-memory database opens");
        let direct = connection.direct();
        direct.prepare("CREATE TABLE t (n INTEGER)").and_then(|mut create| create.execute(&[])).expect("created");
        for n in 1..=3 {
            direct.prepare("INSERT INTO t (n) VALUES (?1)").and_then(|mut s| s.execute(&[Value::Int(n)])).expect("in");
        }
        let select = "SELECT n FROM t ORDER BY n";
        let first = {
            let mut statement = direct.prepare(select).expect("it prepares");
            // Left on its first row: the cache must reset it before it is used again.
            assert_eq!(statement.query_row(&[], |row| Ok(row.int(0))).expect("read"), Some(1));
            statement.stmt
        };
        let mut again = direct.prepare(select).expect("from the cache");
        assert_eq!(again.stmt, first, "the same prepared statement, not a new one");
        assert_eq!(again.query_row(&[], |row| Ok(row.int(0))).expect("read"), Some(1));
        // While one is in use, the same text prepares another; both go back to the cache.
        let other = direct.prepare(select).expect("a second one");
        assert_ne!(other.stmt, first);
        drop((again, other));
        let cached = connection.cached.borrow();
        assert_eq!(cached.iter().filter(|(text, _)| text == select).count(), 2, "both selects wait in the cache");
        assert_eq!(cached.iter().filter(|(text, _)| text.starts_with("INSERT")).count(), 1, "one insert, used thrice");
    }

    /// Texts are bound without a copy, so none may stay bound after the call that lent it:
    /// not after a run, a read, or a run that failed.
    #[test]
    fn no_value_stays_bound_after_a_call() {
        let connection = Connection::open(Path::new(":memory:")).expect("an in-memory database opens");
        let direct = connection.direct();
        direct
            .prepare("CREATE TABLE t (s TEXT NOT NULL CHECK (s <> 'refused'))")
            .and_then(|mut create| create.execute(&[]))
            .expect("created");
        let bound = |statement: &Statement<'_>| {
            // SAFETY: a live statement; SQLite returns a text it allocated, freed here.
            unsafe {
                let text = ffi::sqlite3_expanded_sql(statement.stmt.as_ptr());
                let owned = CStr::from_ptr(text).to_string_lossy().into_owned();
                ffi::sqlite3_free(text.cast());
                owned
            }
        };
        let mut insert = direct.prepare("INSERT INTO t (s) VALUES (?1)").expect("it prepares");
        let text = String::from("lent");
        insert.execute(&[Value::Text(&text)]).expect("inserted");
        assert_eq!(bound(&insert), "INSERT INTO t (s) VALUES (NULL)");
        let refused = String::from("refused");
        insert.execute(&[Value::Text(&refused)]).expect_err("the check refuses it");
        assert_eq!(bound(&insert), "INSERT INTO t (s) VALUES (NULL)");
        let mut select = direct.prepare("SELECT s FROM t WHERE s = ?1").expect("it prepares");
        let read = select.query_row(&[Value::Text(&text)], |row| row.text(0)).expect("read");
        assert_eq!(read, Some(Some("lent".to_owned())));
        assert_eq!(bound(&select), "SELECT s FROM t WHERE s = NULL");
    }

    #[test]
    fn a_missing_database_is_not_created() {
        let dir = tempfile::tempdir().expect("temp dir");
        let Err(StoreError::Backend(message)) = Connection::open(&dir.path().join("missing.db")) else {
            panic!("a database that does not exist does not open");
        };
        assert!(message.contains("missing.db"), "{message}");
    }
}
