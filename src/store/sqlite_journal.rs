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
        let mode = journal_mode(writer, "PRAGMA journal_mode = WAL").await?;
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
async fn journal_mode(writer: &SqlitePool, pragma: &str) -> Result<String, StoreError> {
    Ok(sqlx::query_scalar(pragma).fetch_one(writer).await?)
}

fn is_wal(mode: &str) -> bool {
    mode.eq_ignore_ascii_case("wal")
}
