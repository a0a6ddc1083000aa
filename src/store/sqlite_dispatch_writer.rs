//! SQLite's dispatch writes, a pass's claims and a group commit of results, on a thread
//! of their own with a connection of their own (ADR 0034); after a pass's claims, the same
//! thread reads the definitions of the heartbeats they won (ADR 0037).
//!
//! Through sqlx, each such transaction crossed to sqlx's connection thread four times: to
//! begin, to lock the connection for the direct statements, to commit, and the pool's
//! ping when the connection went back; and its statements were prepared again every
//! time, since sqlx panics when it closes a connection that has one still prepared. Here
//! one message carries the whole transaction to a thread that begins, writes with
//! statements it keeps prepared, and commits (its `fsync` included), then answers once.
//!
//! The thread starts with the first write it is given: a process that only reads (the
//! CLI's `heartbeat list`) never opens its connection.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;

use tokio::sync::{oneshot, OnceCell};

use super::sqlite_direct::{Connection, Direct};
use super::sqlite_writes;
use crate::core::breaker::BreakerStep;
use crate::ports::store::{claimed_keys, ClaimOutcome, RunRecord, SlotClaim, StoreError};

/// The thread that writes claims and results, once started, and the way to it.
pub(crate) struct DispatchWriter {
    path: PathBuf,
    /// The store's read of claimed heartbeats' definitions, its list one JSON parameter.
    definitions_sql: String,
    started: OnceCell<Started>,
}

struct Started {
    commands: Option<mpsc::Sender<Command>>,
    thread: Option<JoinHandle<()>>,
}

/// A pass's claim outcomes, and the definitions of the heartbeats it won as the store's
/// definitions read answers them (pages of JSON), or why that read failed.
pub(crate) type ClaimedPages = (Vec<ClaimOutcome>, Result<Vec<String>, StoreError>);

/// One transaction for the writer thread, and where its answer goes.
enum Command {
    /// A pass's claims; with `read_definitions`, then the definitions of those won, read
    /// once they are committed (none otherwise).
    Claim { claims: Vec<SlotClaim>, read_definitions: bool, answer: oneshot::Sender<Result<ClaimedPages, StoreError>> },
    Finish {
        runs: Vec<RunRecord>,
        breaker_failures_max: u32,
        answer: oneshot::Sender<Result<Vec<BreakerStep>, StoreError>>,
    },
    /// Closes the connection, then answers, and the thread ends.
    Close { answer: oneshot::Sender<()> },
}

impl DispatchWriter {
    /// The writer of the database at `path`, which must exist with its tables by the first
    /// write; its thread is not started yet. `definitions_sql` reads the definitions of
    /// the heartbeats whose slots it claims (`sqlite_writes::definitions_pages`).
    pub(crate) fn new(path: &Path, definitions_sql: String) -> Self {
        Self { path: path.to_owned(), definitions_sql, started: OnceCell::new() }
    }

    /// Starts the thread, once; a start that failed is tried again by the next write.
    async fn started(&self) -> Result<&Started, StoreError> {
        self.started.get_or_try_init(|| Started::on(&self.path, &self.definitions_sql)).await
    }

    /// Claims `claims` in one transaction (`sqlite_writes::claim`).
    pub(crate) async fn claim(&self, claims: &[SlotClaim]) -> Result<Vec<ClaimOutcome>, StoreError> {
        let (answer, answered) = oneshot::channel();
        self.started().await?.send(Command::Claim { claims: claims.to_vec(), read_definitions: false, answer })?;
        let (outcomes, _) = answered.await.map_err(|_| thread_gone())??;
        Ok(outcomes)
    }

    /// Claims `claims` in one transaction, then reads the definitions of the heartbeats
    /// whose claims were won, on the same thread: the pass's one round trip (ADR 0037).
    pub(crate) async fn claim_and_read(&self, claims: &[SlotClaim]) -> Result<ClaimedPages, StoreError> {
        let (answer, answered) = oneshot::channel();
        self.started().await?.send(Command::Claim { claims: claims.to_vec(), read_definitions: true, answer })?;
        answered.await.map_err(|_| thread_gone())?
    }

    /// Records `runs` in one transaction (`sqlite_writes::finish`).
    pub(crate) async fn finish(
        &self,
        runs: &[RunRecord],
        breaker_failures_max: u32,
    ) -> Result<Vec<BreakerStep>, StoreError> {
        let (answer, answered) = oneshot::channel();
        self.started().await?.send(Command::Finish { runs: runs.to_vec(), breaker_failures_max, answer })?;
        answered.await.map_err(|_| thread_gone())?
    }

    /// Closes the thread's connection after the transactions sent before, and ends the
    /// thread; a write after it fails. Nothing to do if the thread never started.
    pub(crate) async fn close(&self) {
        let Some(started) = self.started.get() else { return };
        let (answer, answered) = oneshot::channel();
        if started.send(Command::Close { answer }).is_ok() {
            let _ = answered.await;
        }
    }
}

impl Started {
    /// Starts the thread on the database at `path` and waits for its connection; the
    /// thread reads definitions with `definitions_sql`.
    ///
    /// # Errors
    /// When the thread cannot start or the database cannot be opened.
    async fn on(path: &Path, definitions_sql: &str) -> Result<Self, StoreError> {
        let (commands, received) = mpsc::channel::<Command>();
        let (opened, open_answer) = oneshot::channel();
        let path = path.to_owned();
        let definitions_sql = definitions_sql.to_owned();
        let thread = std::thread::Builder::new()
            .name("systole-sqlite-writer".to_owned())
            .spawn(move || {
                let connection = match Connection::open(&path) {
                    Ok(connection) => {
                        let _ = opened.send(Ok(()));
                        connection
                    }
                    Err(error) => {
                        let _ = opened.send(Err(error));
                        return;
                    }
                };
                // Ends when the store closes it or drops its sender.
                for command in received {
                    if let Command::Close { answer } = command {
                        drop(connection);
                        let _ = answer.send(());
                        return;
                    }
                    run(&connection, &definitions_sql, command);
                }
            })
            .map_err(|error| StoreError::Backend(format!("cannot start the SQLite writer thread: {error}")))?;
        // Dropped on a failed open below, it joins the thread that already ended.
        let started = Self { commands: Some(commands), thread: Some(thread) };
        open_answer.await.map_err(|_| thread_gone())??;
        Ok(started)
    }

    fn send(&self, command: Command) -> Result<(), StoreError> {
        self.commands.as_ref().ok_or_else(thread_gone)?.send(command).map_err(|_| thread_gone())
    }
}

impl Drop for Started {
    /// Waits for the transaction under way, so that the database is closed when the store
    /// is (a test or the CLI may open the file again at once).
    fn drop(&mut self) {
        drop(self.commands.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run(connection: &Connection, definitions_sql: &str, command: Command) {
    let direct = connection.direct();
    match command {
        Command::Claim { claims, read_definitions, answer } => {
            let claimed = in_transaction(&direct, |direct| sqlite_writes::claim(direct, &claims));
            // Read after the commit: a read that fails leaves the claims made.
            let _ = answer.send(claimed.map(|outcomes| {
                let pages = if read_definitions {
                    let won = claimed_keys(&claims, &outcomes);
                    sqlite_writes::definitions_pages(&direct, definitions_sql, &won)
                } else {
                    Ok(Vec::new())
                };
                (outcomes, pages)
            }));
        }
        Command::Finish { runs, breaker_failures_max, answer } => {
            let written = in_transaction(&direct, |direct| sqlite_writes::finish(direct, &runs, breaker_failures_max));
            let _ = answer.send(written);
        }
        // The thread's loop closes the connection itself: this one only writes on it.
        Command::Close { answer } => {
            let _ = answer.send(());
        }
    }
}

/// `write` between `BEGIN IMMEDIATE` and `COMMIT`; rolled back when it or the commit fails.
fn in_transaction<T>(
    direct: &Direct<'_>,
    write: impl FnOnce(&Direct<'_>) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    direct.prepare("BEGIN IMMEDIATE")?.execute(&[])?;
    let written = write(direct).and_then(|value| {
        direct.prepare("COMMIT")?.execute(&[])?;
        Ok(value)
    });
    if written.is_err() {
        // Nothing to roll back when the failure already ended the transaction.
        let _ = direct.prepare("ROLLBACK").and_then(|mut rollback| rollback.execute(&[]));
    }
    written
}

fn thread_gone() -> StoreError {
    StoreError::Backend("the SQLite writer thread has stopped".to_owned())
}

#[cfg(test)]
mod tests {
    use jiff::Timestamp;

    use super::*;
    use crate::core::ids::{AgentId, HeartbeatId, HeartbeatKey};
    use crate::core::schedule::Schedule;
    use crate::ports::store::NextSlot;
    use crate::store::sqlite::SqliteStore;

    fn claim_of_nothing() -> SlotClaim {
        let key = HeartbeatKey {
            agent: AgentId::new("main").expect("an id"),
            heartbeat: HeartbeatId::new("gone").expect("an id"),
        };
        let at = Timestamp::UNIX_EPOCH;
        let next_slot = NextSlot { at, schedule: Schedule::At(at) };
        SlotClaim { key, slot: at, claimed_at: at, next_slot, triggered: false }
    }

    #[tokio::test]
    async fn the_thread_starts_with_the_first_write_and_a_failed_start_is_tried_again() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("later.db");
        let writer = DispatchWriter::new(&path, crate::store::sqlite::definitions_sql().expect("its text"));
        assert!(!writer.started.initialized(), "no thread before a write");
        let missing = writer.claim(&[claim_of_nothing()]).await.expect_err("no database yet");
        assert!(missing.to_string().contains("later.db"), "{missing}");
        assert!(!writer.started.initialized(), "a failed start leaves nothing started");
        let store = SqliteStore::open(&path).await.expect("the database, now");
        let outcomes = writer.claim(&[claim_of_nothing()]).await.expect("written once the database is there");
        assert_eq!(outcomes, [ClaimOutcome::Gone]);
        assert!(writer.started.initialized());
        drop((writer, store));
    }
}
