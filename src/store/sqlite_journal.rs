//! A new SQLite file's journal: a rollback journal until its first write, WAL from then on
//! (ADR 0061).
//!
//! In WAL mode every page a transaction writes goes to the WAL first and is copied into
//! the database at the checkpoint: a first seed of a million heartbeats wrote its 500 MB
//! twice. A rollback journal keeps only the pages a transaction changes, and a new file
//! has almost none, so a first seed that is the file's first write writes each page once
//! (SQLite alone, the same rows: 2.1 s against 3.4 s; `docs/performance.md`). Every other
//! write comes after the switch, so readers never wait for a write's commit once a store
//! has more than a seed in it.
//!
//! No connection sets a journal mode when it opens: WAL is the file's own (its header
//! says so), and a connection that opened before the switch finds it at its next read.

use std::sync::atomic::{AtomicBool, Ordering};

use sqlx::SqlitePool;

use super::sqlite::is_busy;
use super::sqlite_busy::busy_sleep;
use crate::ports::store::StoreError;

/// Whether the file still waits for its switch to WAL.
pub(super) struct Journal {
    wal_pending: AtomicBool,
}

impl Journal {
    /// The journal of the file `writer` holds, as the store opens it: a file in WAL stays
    /// there; any other (a new file, made by this open's migrations) switches at its first
    /// write.
    pub(super) async fn at_open(writer: &SqlitePool) -> Result<Self, StoreError> {
        let mode = journal_mode(writer, "PRAGMA journal_mode").await?;
        Ok(Self { wal_pending: AtomicBool::new(!is_wal(&mode)) })
    }

    /// Whether the file still waits for its switch: a seed then writes in the rollback
    /// journal and switches after it (`after_seed`).
    pub(super) fn wal_pending(&self) -> bool {
        self.wal_pending.load(Ordering::Acquire)
    }

    /// Puts the file in WAL before a write, if it is not yet. A switch that SQLite declines
    /// without an error (a file system without the shared memory WAL needs) is not asked
    /// again: the store stays in the rollback journal. A switch that fails (the lock held
    /// past the busy timeout) fails the write, and the next write asks again.
    ///
    /// # Errors
    /// When the switch's statement fails.
    pub(super) async fn wal_before_write(&self, writer: &SqlitePool) -> Result<(), StoreError> {
        if !self.wal_pending() {
            return Ok(());
        }
        let mode = switch_to_wal(writer).await?;
        if !is_wal(&mode) {
            tracing::warn!(mode, "the database could not be put in WAL mode; its readers wait for each write's commit");
        }
        self.wal_pending.store(false, Ordering::Release);
        Ok(())
    }

    /// After a seed's commit: the switch it was written before. Best effort: the seed has
    /// landed, and the next write asks again.
    pub(super) async fn after_seed(&self, writer: &SqlitePool) {
        if let Err(error) = self.wal_before_write(writer).await {
            tracing::warn!(%error, "the database was not put in WAL mode after its first seed; its next write tries again");
        }
    }
}

/// The mode `pragma` answers: the journal mode the file is in after it.
async fn journal_mode(writer: &SqlitePool, pragma: &str) -> Result<String, sqlx::Error> {
    sqlx::query_scalar(pragma).fetch_one(writer).await
}

/// `PRAGMA journal_mode = WAL`, asked again while SQLite refuses it for a lock another
/// connection holds, for as long as a busy write would wait (`sqlite_busy`'s sleeps). When
/// two connections switch one file at once, SQLite refuses one of them at once with
/// "database is locked" and calls no busy handler: each holds its read lock as it asks for
/// the exclusive one, and waiting would deadlock. So two stores' first writes on one new
/// file (a daemon's and a CLI's) failed one of them, in 3 of 30 runs of the conformance
/// suite's concurrent writers.
async fn switch_to_wal(writer: &SqlitePool) -> Result<String, StoreError> {
    let mut tries = 0;
    loop {
        match journal_mode(writer, "PRAGMA journal_mode = WAL").await {
            Err(error) if is_busy(&error) => {
                let Some(sleep) = busy_sleep(tries) else { return Err(error.into()) };
                // A real adapter's wait for the file's lock, as SQLite's own busy handler
                // sleeps on the real clock.
                #[allow(clippy::disallowed_methods)]
                tokio::time::sleep(sleep).await;
                tries += 1;
            }
            answer => return Ok(answer?),
        }
    }
}

fn is_wal(mode: &str) -> bool {
    mode.eq_ignore_ascii_case("wal")
}
