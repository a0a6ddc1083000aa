//! SQLite alone: the rows a SQLite case stores, written by SQLite with no engine around
//! them, on one thread, in the same run as systole's row. What a SQLite row's target can
//! come to on this machine is bounded by these figures: SQLite has one writer at a time,
//! so a dispatch cannot pass the runs a second its statements allow one thread, and a seed
//! cannot store its rows faster than a plain `INSERT` of each.
//!
//! The same build of SQLite as the store's (`libsqlite3-sys`, bundled by sqlx), the same
//! journal (WAL, but for a new file's first seed) and `synchronous = FULL`, the same schema
//! (copied from the file systole wrote) and, for a dispatch, the very statements the store
//! steps (`systole::store::sqlite_statements`).

use std::ffi::{c_char, c_int, CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr::{self, NonNull};
use std::time::Instant;

use libsqlite3_sys as ffi;
use systole::store::sqlite_statements::{BREAKER_READ_SQL, CLAIMED_ROW_SQL, CLAIM_SQL, RESULT_SQL};

use crate::measure::{cpu_time, Figures};

/// A seed's floor: every heartbeats row of `from` (a file `prepare` seeded), held in memory
/// first, then stored into a fresh file at `path` by one prepared `INSERT` a row in one
/// transaction, written as the store writes a new file's first seed: in the rollback
/// journal, the file put in WAL after its commit (ADR 0061). The seed's own work (hashing
/// each definition, the upsert's conflict clause) is left out: what is left is SQLite's.
pub fn seed(from: &Path, path: &Path) -> Figures {
    let source = Db::open(from);
    let schema = source.texts("SELECT sql FROM sqlite_master WHERE name = 'heartbeats'");
    let mut read = source.prepare("SELECT * FROM heartbeats");
    let columns = read.column_count();
    let mut rows: Vec<Cell> = Vec::new();
    while read.step() {
        rows.extend((0..columns).map(|column| read.column(column)));
    }
    drop(read);
    let count = rows.len() / columns.max(1);

    let db = Db::create_new(path);
    for sql in &schema {
        db.exec(sql);
    }
    let placeholders = vec!["?"; columns].join(", ");
    let started = Instant::now();
    let cpu_before = cpu_time();
    db.exec("BEGIN IMMEDIATE");
    let mut insert = db.prepare(&format!("INSERT INTO heartbeats VALUES ({placeholders})"));
    for row in rows.chunks(columns) {
        insert.run(row);
    }
    drop(insert);
    db.exec("COMMIT");
    db.exec("PRAGMA journal_mode = WAL");
    let secs = started.elapsed().as_secs_f64();
    let cpu = cpu_time().saturating_sub(cpu_before).as_secs_f64();
    Figures::from([
        ("floor_seed_secs".to_owned(), secs),
        ("floor_seed_cpu_secs".to_owned(), cpu),
        ("rows".to_owned(), count as f64),
    ])
}

/// A dispatch's floor: every run of `from` (a file a SQLite dispatch case left, its runs
/// finished) written again into a fresh file at `path` holding the same heartbeats, by the
/// statements the store's writer steps for each run: its claim and the claimed row's next
/// slot (one transaction for `batch` runs, as a pass's claims), then its result and its
/// breaker's read (one transaction for the same runs, as a group commit). The reads the
/// store makes beside them (the definitions, the duplicate check) are left out.
pub fn dispatch(from: &Path, path: &Path, batch: usize) -> Figures {
    let source = Db::open(from);
    let schema = source.texts(
        "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' \
         AND name NOT LIKE '_sqlx%' ORDER BY type = 'index', rowid",
    );
    let runs = finished_runs(&source);
    drop(source);

    let db = Db::create(path);
    for sql in &schema {
        db.exec(sql);
    }
    let from_name = from.to_str().expect("a UTF-8 path").replace('\'', "''");
    db.exec(&format!("ATTACH '{from_name}' AS source"));
    db.exec("INSERT INTO heartbeats SELECT * FROM source.heartbeats");
    db.exec("UPDATE heartbeats SET latest_slot_ms = NULL, next_slot_ms = NULL");
    db.exec("DETACH source");

    let mut claim = db.prepare(CLAIM_SQL);
    let mut claimed_row = db.prepare(CLAIMED_ROW_SQL);
    let mut result = db.prepare(RESULT_SQL);
    let mut breaker = db.prepare(BREAKER_READ_SQL);
    let started = Instant::now();
    let cpu_before = cpu_time();
    for part in runs.chunks(batch.max(1)) {
        db.exec("BEGIN IMMEDIATE");
        for run in part {
            claim.run(&run.claim);
            claimed_row.run(&run.claimed_row);
        }
        db.exec("COMMIT");
        db.exec("BEGIN IMMEDIATE");
        for run in part {
            result.run(&run.result);
            breaker.run(&run.claim[..2]);
        }
        db.exec("COMMIT");
    }
    let secs = started.elapsed().as_secs_f64();
    let cpu = cpu_time().saturating_sub(cpu_before).as_secs_f64();
    let count = runs.len() as f64;
    Figures::from([
        ("floor_runs_per_sec".to_owned(), count / secs),
        ("floor_cpu_ms_per_run".to_owned(), cpu * 1000.0 / count),
        ("runs".to_owned(), count),
    ])
}

/// One run's parameters for each statement, as the store binds them.
struct Run {
    claim: Vec<Cell>,
    claimed_row: Vec<Cell>,
    result: Vec<Cell>,
}

/// The finished runs of `source`, in the order they were claimed, with the schedule of
/// each one's heartbeat for its claimed row's next slot.
fn finished_runs(source: &Db) -> Vec<Run> {
    let mut read = source.prepare(
        "SELECT e.agent_id, e.heartbeat_id, e.slot_ms, e.started_at_ms, e.triggered, \
         h.schedule_kind, h.every_ms, h.cron_expr, h.cron_timezone, h.at_ms, \
         e.finished_at_ms, e.status, e.delivery, e.duration_ms, e.error, e.output_preview, e.stop_reason, \
         e.reply, e.reply_digest, e.llm_calls, e.tool_use, e.input_tokens, e.cached_tokens, \
         e.output_tokens, e.reasoning_tokens, e.cost_micros, e.unpriced_calls, e.transcript \
         FROM executions e JOIN heartbeats h USING (agent_id, heartbeat_id) \
         WHERE e.finished_at_ms IS NOT NULL ORDER BY e.id",
    );
    let mut runs = Vec::new();
    while read.step() {
        let cell = |column: usize| read.column(column);
        let (agent, heartbeat, slot) = (cell(0), cell(1), cell(2));
        let next_slot = match (&slot, cell(6)) {
            (Cell::Int(slot), Cell::Int(every)) => Cell::Int(slot + every),
            _ => Cell::Null,
        };
        runs.push(Run {
            claim: vec![agent.clone(), heartbeat.clone(), slot.clone(), cell(3), Cell::Text("running".into()), cell(4)],
            claimed_row: vec![
                agent.clone(),
                heartbeat.clone(),
                next_slot,
                cell(5),
                cell(6),
                cell(7),
                cell(8),
                cell(9),
                slot.clone(),
            ],
            result: [agent, heartbeat, slot].into_iter().chain((10..28).map(cell)).collect(),
        });
    }
    runs
}

/// A value as SQLite gave it, to bind again.
#[derive(Clone)]
enum Cell {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
}

/// A connection of this thread's own.
struct Db(NonNull<ffi::sqlite3>);

impl Db {
    fn open(path: &Path) -> Self {
        Self::open_with(path, ffi::SQLITE_OPEN_READWRITE | ffi::SQLITE_OPEN_NOMUTEX)
    }

    /// A fresh file, in WAL with `synchronous = FULL`, as the store's file is once written.
    fn create(path: &Path) -> Self {
        let db = Self::create_new(path);
        db.exec("PRAGMA journal_mode = WAL");
        db
    }

    /// A fresh file in its rollback journal with `synchronous = FULL`, as the store opens
    /// a new file: WAL comes with its first write (ADR 0061).
    fn create_new(path: &Path) -> Self {
        crate::remove_database(path);
        let db = Self::open_with(path, ffi::SQLITE_OPEN_READWRITE | ffi::SQLITE_OPEN_CREATE | ffi::SQLITE_OPEN_NOMUTEX);
        db.exec("PRAGMA synchronous = FULL");
        db
    }

    fn open_with(path: &Path, flags: c_int) -> Self {
        let name = CString::new(path.as_os_str().as_bytes()).expect("a path without NUL");
        let mut db = ptr::null_mut();
        // SAFETY: `name` is NUL-terminated; SQLite sets `db` even when the open fails.
        let rc = unsafe { ffi::sqlite3_open_v2(name.as_ptr(), &mut db, flags, ptr::null()) };
        let db = Self(NonNull::new(db).expect("SQLite allocates a connection"));
        assert_eq!(rc, ffi::SQLITE_OK, "{} opens: {}", path.display(), db.error());
        db
    }

    /// Runs `sql` (statements without parameters) to its end.
    fn exec(&self, sql: &str) {
        let text = CString::new(sql).expect("SQL without NUL");
        // SAFETY: a live connection; no callback.
        let rc = unsafe { ffi::sqlite3_exec(self.0.as_ptr(), text.as_ptr(), None, ptr::null_mut(), ptr::null_mut()) };
        assert_eq!(rc, ffi::SQLITE_OK, "{sql}: {}", self.error());
    }

    /// The first column of every row of `sql`, as text.
    fn texts(&self, sql: &str) -> Vec<String> {
        let mut read = self.prepare(sql);
        let mut texts = Vec::new();
        while read.step() {
            if let Cell::Text(text) = read.column(0) {
                texts.push(text);
            }
        }
        texts
    }

    fn prepare(&self, sql: &str) -> Stmt<'_> {
        let mut stmt = ptr::null_mut();
        let length = c_int::try_from(sql.len()).expect("a short statement");
        // SAFETY: a live connection; SQLite reads `length` bytes of `sql`.
        let rc = unsafe {
            ffi::sqlite3_prepare_v2(self.0.as_ptr(), sql.as_ptr().cast::<c_char>(), length, &mut stmt, ptr::null_mut())
        };
        assert_eq!(rc, ffi::SQLITE_OK, "{sql}: {}", self.error());
        Stmt { stmt: NonNull::new(stmt).expect("a statement"), db: self }
    }

    fn error(&self) -> String {
        // SAFETY: a live connection; the message is NUL-terminated and copied at once.
        unsafe { CStr::from_ptr(ffi::sqlite3_errmsg(self.0.as_ptr())) }.to_string_lossy().into_owned()
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        // SAFETY: every statement borrowed the connection and is finalized.
        unsafe {
            ffi::sqlite3_close(self.0.as_ptr());
        }
    }
}

struct Stmt<'d> {
    stmt: NonNull<ffi::sqlite3_stmt>,
    db: &'d Db,
}

impl Stmt<'_> {
    /// Binds `values`, steps to the end, and lets the values go, as the store's own
    /// statements do (`sqlite_direct`).
    fn run(&mut self, values: &[Cell]) {
        self.bind_all(values);
        while self.step() {}
        self.reset();
    }

    /// Binds `values` by position; `reset` must come before any of them drops.
    fn bind_all(&mut self, values: &[Cell]) {
        let stmt = self.stmt.as_ptr();
        for (index, value) in values.iter().enumerate() {
            let index = c_int::try_from(index + 1).expect("a parameter's index");
            // SAFETY: a live statement. A text is bound without a copy (`SQLITE_STATIC`), as
            // the store binds it: `reset` lets every binding go before its value can drop.
            let rc = unsafe {
                match value {
                    Cell::Null => ffi::sqlite3_bind_null(stmt, index),
                    Cell::Int(int) => ffi::sqlite3_bind_int64(stmt, index, *int),
                    Cell::Real(real) => ffi::sqlite3_bind_double(stmt, index, *real),
                    Cell::Text(text) => ffi::sqlite3_bind_text(
                        stmt,
                        index,
                        text.as_ptr().cast::<c_char>(),
                        c_int::try_from(text.len()).expect("a text under 2 GB"),
                        ffi::SQLITE_STATIC(),
                    ),
                }
            };
            assert_eq!(rc, ffi::SQLITE_OK, "bind: {}", self.db.error());
        }
    }

    /// One step: `true` when it produced a row.
    fn step(&mut self) -> bool {
        // SAFETY: a live statement on this thread's connection.
        match unsafe { ffi::sqlite3_step(self.stmt.as_ptr()) } {
            ffi::SQLITE_ROW => true,
            ffi::SQLITE_DONE => false,
            _ => panic!("step: {}", self.db.error()),
        }
    }

    /// Ends the run and unbinds its values.
    fn reset(&mut self) {
        // SAFETY: a live statement.
        unsafe {
            ffi::sqlite3_reset(self.stmt.as_ptr());
            ffi::sqlite3_clear_bindings(self.stmt.as_ptr());
        }
    }

    fn column_count(&self) -> usize {
        // SAFETY: a live statement.
        usize::try_from(unsafe { ffi::sqlite3_column_count(self.stmt.as_ptr()) }).unwrap_or(0)
    }

    /// Column `column` of the current row.
    fn column(&self, column: usize) -> Cell {
        let stmt = self.stmt.as_ptr();
        let column = c_int::try_from(column).expect("a column's index");
        // SAFETY: a live statement on a row; a text is copied before the next call on it.
        unsafe {
            match ffi::sqlite3_column_type(stmt, column) {
                ffi::SQLITE_INTEGER => Cell::Int(ffi::sqlite3_column_int64(stmt, column)),
                ffi::SQLITE_FLOAT => Cell::Real(ffi::sqlite3_column_double(stmt, column)),
                ffi::SQLITE_NULL => Cell::Null,
                _ => {
                    let text = ffi::sqlite3_column_text(stmt, column);
                    let length = usize::try_from(ffi::sqlite3_column_bytes(stmt, column)).unwrap_or(0);
                    let bytes = if text.is_null() { &[][..] } else { std::slice::from_raw_parts(text, length) };
                    Cell::Text(String::from_utf8_lossy(bytes).into_owned())
                }
            }
        }
    }
}

impl Drop for Stmt<'_> {
    fn drop(&mut self) {
        // SAFETY: finalized once, on the thread of its connection.
        unsafe {
            ffi::sqlite3_finalize(self.stmt.as_ptr());
        }
    }
}
