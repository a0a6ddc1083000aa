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
use super::sqlite_writes::{self, Finished};
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

/// What the writer thread is sent.
enum Command {
    Write(Write),
    /// Closes the connection, then answers, and the thread ends.
    Close {
        answer: oneshot::Sender<()>,
    },
}

/// A write for the writer thread, and where its answer goes. Those already waiting when a
/// transaction's statements are done join its commit (ADR 0065).
enum Write {
    /// A pass's claims; with `read_definitions`, then the definitions of those won, read
    /// once they are committed (none otherwise).
    Claim {
        claims: Vec<SlotClaim>,
        read_definitions: bool,
        answer: oneshot::Sender<Result<ClaimedPages, StoreError>>,
    },
    Finish {
        runs: Vec<RunRecord>,
        breaker_failures_max: u32,
        answer: oneshot::Sender<Result<Finished, StoreError>>,
    },
}

/// Most writes one transaction commits: the one the thread took and those waiting when its
/// statements were done. A dispatch sends a pass's claims while a group commit of results
/// is being written; more than a few never wait at once.
const WRITES_A_TRANSACTION_MAX: usize = 4;

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
        self.started().await?.send(Command::Write(Write::Claim {
            claims: claims.to_vec(),
            read_definitions: false,
            answer,
        }))?;
        let (outcomes, _) = answered.await.map_err(|_| thread_gone())??;
        Ok(outcomes)
    }

    /// Claims `claims` in one transaction, then reads the definitions of the heartbeats
    /// whose claims were won, on the same thread: the pass's one round trip (ADR 0037).
    pub(crate) async fn claim_and_read(&self, claims: &[SlotClaim]) -> Result<ClaimedPages, StoreError> {
        let (answer, answered) = oneshot::channel();
        self.started().await?.send(Command::Write(Write::Claim {
            claims: claims.to_vec(),
            read_definitions: true,
            answer,
        }))?;
        answered.await.map_err(|_| thread_gone())?
    }

    /// Records `runs` in one transaction (`sqlite_writes::finish`).
    pub(crate) async fn finish(&self, runs: &[RunRecord], breaker_failures_max: u32) -> Result<Finished, StoreError> {
        let (answer, answered) = oneshot::channel();
        self.started().await?.send(Command::Write(Write::Finish {
            runs: runs.to_vec(),
            breaker_failures_max,
            answer,
        }))?;
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
                let mut taken = None;
                loop {
                    let command = match taken.take() {
                        Some(command) => command,
                        None => match received.recv() {
                            Ok(command) => command,
                            Err(_) => return,
                        },
                    };
                    match command {
                        Command::Close { answer } => {
                            drop(connection);
                            let _ = answer.send(());
                            return;
                        }
                        Command::Write(write) => {
                            taken = write_together(&connection.direct(), &definitions_sql, write, &received);
                        }
                    }
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

/// Writes `first`, and the writes `waiting` holds when its statements are done, in one
/// transaction: one commit, one `fsync`, for a pass's claims and the results written while
/// they were sent. When any of them fails, or the commit does, each is written again alone,
/// so that one write's failure is its own. Answers each; returns a command taken from
/// `waiting` that is not a write (a close), for the thread's loop.
fn write_together(
    direct: &Direct<'_>,
    definitions_sql: &str,
    first: Write,
    waiting: &mpsc::Receiver<Command>,
) -> Option<Command> {
    let mut writes = vec![first];
    let mut taken = None;
    let mut claimed = Vec::new();
    let mut finished = Vec::new();
    let together = in_transaction(direct, |direct| loop {
        if let Some(write) = writes.last() {
            match write {
                Write::Claim { claims, .. } => claimed.push(sqlite_writes::claim(direct, claims)?),
                Write::Finish { runs, breaker_failures_max, .. } => {
                    finished.push(sqlite_writes::finish(direct, runs, *breaker_failures_max)?);
                }
            }
        }
        if writes.len() >= WRITES_A_TRANSACTION_MAX {
            return Ok(());
        }
        match waiting.try_recv() {
            Ok(Command::Write(write)) => writes.push(write),
            Ok(close) => {
                taken = Some(close);
                return Ok(());
            }
            Err(_) => return Ok(()),
        }
    });
    match together {
        Ok(()) => {
            // Each kind's results are in the order of its writes.
            let (mut claimed, mut finished) = (claimed.into_iter(), finished.into_iter());
            for write in writes {
                match write {
                    Write::Claim { claims, read_definitions, answer } => {
                        if let Some(outcomes) = claimed.next() {
                            answer_claim(direct, definitions_sql, &claims, read_definitions, Ok(outcomes), answer);
                        }
                    }
                    Write::Finish { answer, .. } => {
                        if let Some(steps) = finished.next() {
                            let _ = answer.send(Ok(steps));
                        }
                    }
                }
            }
        }
        Err(error) if writes.len() == 1 => writes.into_iter().for_each(|write| answer_failed(write, error.clone())),
        Err(_) => writes.into_iter().for_each(|write| write_alone(direct, definitions_sql, write)),
    }
    taken
}

/// `write` in a transaction of its own, answered.
fn write_alone(direct: &Direct<'_>, definitions_sql: &str, write: Write) {
    match write {
        Write::Claim { claims, read_definitions, answer } => {
            let outcomes = in_transaction(direct, |direct| sqlite_writes::claim(direct, &claims));
            answer_claim(direct, definitions_sql, &claims, read_definitions, outcomes, answer);
        }
        Write::Finish { runs, breaker_failures_max, answer } => {
            let steps = in_transaction(direct, |direct| sqlite_writes::finish(direct, &runs, breaker_failures_max));
            let _ = answer.send(steps);
        }
    }
}

/// Answers committed claims, with the definitions of those won when asked for: read after
/// the commit, so a read that fails leaves the claims made.
fn answer_claim(
    direct: &Direct<'_>,
    definitions_sql: &str,
    claims: &[SlotClaim],
    read_definitions: bool,
    outcomes: Result<Vec<ClaimOutcome>, StoreError>,
    answer: oneshot::Sender<Result<ClaimedPages, StoreError>>,
) {
    let _ = answer.send(outcomes.map(|outcomes| {
        let pages = if read_definitions {
            let won = claimed_keys(claims, &outcomes);
            sqlite_writes::definitions_pages(direct, definitions_sql, &won)
        } else {
            Ok(Vec::new())
        };
        (outcomes, pages)
    }));
}

fn answer_failed(write: Write, error: StoreError) {
    match write {
        Write::Claim { answer, .. } => {
            let _ = answer.send(Err(error));
        }
        Write::Finish { answer, .. } => {
            let _ = answer.send(Err(error));
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
pub(crate) mod tests {
    use jiff::Timestamp;

    use std::time::Duration;

    use super::*;
    use crate::core::heartbeat::test_def;
    use crate::core::ids::{AgentId, HeartbeatId, HeartbeatKey};
    use crate::core::schedule::Schedule;
    use crate::core::usage::RunUsage;
    use crate::ports::store::{DeliveryStatus, ExecutionStatus, NextSlot, StopReason, Store};
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

    pub(crate) fn claim_at(key: &HeartbeatKey, slot_secs: i64) -> SlotClaim {
        let slot = Timestamp::from_second(slot_secs).expect("a time");
        let next = Timestamp::from_second(slot_secs + 60).expect("a time");
        SlotClaim {
            key: key.clone(),
            slot,
            claimed_at: slot,
            next_slot: NextSlot { at: next, schedule: Schedule::Every(Duration::from_secs(60)) },
            triggered: false,
        }
    }

    pub(crate) fn succeeded(key: &HeartbeatKey, slot_secs: i64) -> RunRecord {
        RunRecord {
            key: key.clone(),
            slot: Timestamp::from_second(slot_secs).expect("a time"),
            finished_at: Timestamp::from_second(slot_secs + 1).expect("a time"),
            status: ExecutionStatus::Succeeded,
            delivery: DeliveryStatus::NotNeeded,
            duration: Duration::from_millis(5),
            error: None,
            output_preview: None,
            stop_reason: Some(StopReason::Completed),
            reply: None,
            reply_digest: None,
            consumes: Vec::new(),
            llm_calls: 0,
            usage: RunUsage::default(),
            provider_refused: false,
            transcript: None,
            tool_use: None,
        }
    }

    type ClaimAnswer = oneshot::Receiver<Result<ClaimedPages, StoreError>>;
    type FinishAnswer = oneshot::Receiver<Result<Finished, StoreError>>;

    fn claim_write(claims: Vec<SlotClaim>) -> (Write, ClaimAnswer) {
        let (answer, answered) = oneshot::channel();
        (Write::Claim { claims, read_definitions: true, answer }, answered)
    }

    fn finish_write(runs: Vec<RunRecord>) -> (Write, FinishAnswer) {
        let (answer, answered) = oneshot::channel();
        (Write::Finish { runs, breaker_failures_max: 3, answer }, answered)
    }

    /// The run log as committed: each row's slot (seconds) and status, in slot order. Read
    /// on the writer's own connection (the test dropped a table the store's pool would miss).
    fn logged(connection: &Connection) -> String {
        let direct = connection.direct();
        let mut read = direct
            .prepare(
                "SELECT group_concat(slot, ', ') FROM \
                 (SELECT (slot_ms / 1000) || ' ' || status AS slot FROM executions ORDER BY slot_ms)",
            )
            .expect("prepared");
        read.query_row(&[], |row| row.text(0)).expect("read").flatten().unwrap_or_default()
    }

    /// A store at `path` holding heartbeat `main/h`, and the writer thread's connection to it.
    async fn store_with_a_heartbeat(path: &Path) -> (SqliteStore, Connection, HeartbeatKey) {
        let store = SqliteStore::open(path).await.expect("a new store");
        let def = test_def("main", "h", 60);
        store.put_heartbeat(&def, Timestamp::UNIX_EPOCH).await.expect("stored");
        let connection = Connection::open(path).expect("the writer's connection");
        (store, connection, def.key)
    }

    #[tokio::test]
    async fn writes_waiting_when_a_transactions_statements_are_done_commit_with_it() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (store, connection, key) = store_with_a_heartbeat(&dir.path().join("together.db")).await;
        let (first, first_answer) = claim_write(vec![claim_at(&key, 60)]);
        // The first slot's result and the next slot's claim were sent while it was written,
        // and a close after them.
        let (sender, waiting) = mpsc::channel();
        let (finish, finish_answer) = finish_write(vec![succeeded(&key, 60)]);
        let (second, second_answer) = claim_write(vec![claim_at(&key, 120)]);
        let (close, _closed) = oneshot::channel();
        for command in [Command::Write(finish), Command::Write(second), Command::Close { answer: close }] {
            sender.send(command).expect("queued");
        }
        let definitions_sql = crate::store::sqlite::definitions_sql().expect("its text");
        let taken = write_together(&connection.direct(), &definitions_sql, first, &waiting);
        assert_eq!(
            taken.map(|taken| matches!(taken, Command::Close { .. })),
            Some(true),
            "the close waits for the loop"
        );
        let (outcomes, pages) = first_answer.await.expect("answered").expect("claimed");
        assert_eq!(outcomes, [ClaimOutcome::Claimed]);
        assert!(pages.expect("read").concat().contains("Check the inbox."), "the won definition is read");
        let finished = finish_answer.await.expect("answered").expect("finished");
        assert_eq!((finished.steps.len(), finished.written), (1, vec![true]), "one breaker step, its row found");
        assert_eq!(second_answer.await.expect("answered").expect("claimed").0, [ClaimOutcome::Claimed]);
        assert_eq!(logged(&connection), "60 succeeded, 120 running");
        drop((connection, store));
    }

    #[tokio::test]
    async fn a_joined_write_that_fails_fails_alone_and_the_others_commit() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (store, connection, key) = store_with_a_heartbeat(&dir.path().join("alone.db")).await;
        // A result's write consumes its run's system events: without their table it fails.
        connection.direct().prepare("DROP TABLE system_events").expect("prepared").execute(&[]).expect("dropped");
        let (first, first_answer) = claim_write(vec![claim_at(&key, 60)]);
        let (sender, waiting) = mpsc::channel();
        let (finish, finish_answer) = finish_write(vec![succeeded(&key, 60)]);
        let (second, second_answer) = claim_write(vec![claim_at(&key, 120)]);
        for write in [finish, second] {
            sender.send(Command::Write(write)).expect("queued");
        }
        let definitions_sql = crate::store::sqlite::definitions_sql().expect("its text");
        assert!(write_together(&connection.direct(), &definitions_sql, first, &waiting).is_none());
        assert_eq!(first_answer.await.expect("answered").expect("claimed").0, [ClaimOutcome::Claimed]);
        let failed = finish_answer.await.expect("answered").expect_err("no table for its events");
        assert!(failed.to_string().contains("system_events"), "{failed}");
        // The failure ended the taking: the claim sent after it is the thread's next write.
        let Ok(Command::Write(next)) = waiting.try_recv() else { panic!("the second claim is still queued") };
        assert!(write_together(&connection.direct(), &definitions_sql, next, &waiting).is_none());
        assert_eq!(second_answer.await.expect("answered").expect("claimed").0, [ClaimOutcome::Claimed]);
        assert_eq!(logged(&connection), "60 running, 120 running", "the claims stand, the result is not written");
        drop((connection, store));
    }

    #[tokio::test]
    async fn a_lone_write_that_fails_is_answered_its_error_once() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (_store, connection, key) = store_with_a_heartbeat(&dir.path().join("lone.db")).await;
        connection.direct().prepare("DROP TABLE system_events").expect("prepared").execute(&[]).expect("dropped");
        let (finish, finish_answer) = finish_write(vec![succeeded(&key, 60)]);
        let (_sender, waiting) = mpsc::channel();
        let definitions_sql = crate::store::sqlite::definitions_sql().expect("its text");
        assert!(write_together(&connection.direct(), &definitions_sql, finish, &waiting).is_none());
        let failed = finish_answer.await.expect("answered").expect_err("no table for its events");
        assert!(failed.to_string().contains("system_events"), "{failed}");
    }
}
