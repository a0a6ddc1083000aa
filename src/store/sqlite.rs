//! The SQLite store, through sqlx: WAL (from a new file's first write, ADR 0061), embedded
//! migrations, a busy timeout, and multi-row statements for batch writes, shared with
//! PostgreSQL ([`super::sql_store`]);
//! this file holds what only SQLite does, among it the dispatch path's claims and results,
//! which run on a writer thread of their own (`sqlite_dispatch_writer.rs`, ADR 0034).

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use jiff::Timestamp;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{QueryBuilder, Sqlite, SqlitePool, Transaction};

use super::delivered_index::DeliveredIndex;
use super::sql_lists::{json_list, json_list_sql, Listed};
use super::sql_rows::{corrupt, key_from_parts};
use super::sql_store::sql_store;
use super::sqlite_busy::wait_briefly_when_busy;
use super::sqlite_dispatch_writer::DispatchWriter;
use super::sqlite_journal::Journal;
use super::sqlite_seed;
use crate::core::breaker::BreakerStep;
use crate::core::heartbeat::HeartbeatDef;
use crate::core::ids::AgentId;
use crate::core::recent_deliveries::Fill;
use crate::limits::{
    DEDUP_INDEX_ENTRIES_MAX, SQLITE_BUSY_TIMEOUT_MS, SQLITE_OPEN_BUSY_ATTEMPTS_MAX, SQLITE_OPEN_BUSY_RETRY_MS,
    SQLITE_WRITE_QUEUE_TIMEOUT_MS,
};
use crate::ports::store::{ClaimOutcome, ClaimedSlots, DedupQuery, RunRecord, SlotClaim, StoreError};

/// Connections that read beside the writer (WAL: readers never wait for it).
const READ_CONNECTIONS_MAX: u32 = 4;

/// Rows a seed must write before it empties the WAL (`after_seed_wrote`): an autocheckpoint
/// (1,000 pages) keeps the WAL of smaller writes short.
pub const SQLITE_SEED_ROWS_CHECKPOINT_MIN: usize = 10_000;

pub struct SqliteStore {
    /// Reads: snapshots and single statements.
    pool: SqlitePool,
    /// Every write transaction of this process, on one connection: writers queue for it
    /// here instead of colliding at `BEGIN IMMEDIATE`, where SQLite's busy handler makes
    /// the loser sleep a millisecond or more for a lock held a fraction of that (dispatch:
    /// over 400 such sleeps in 10,000 runs; performance.md). Another process's writes
    /// (the CLI's) still take turns through the busy timeout.
    writer: SqlitePool,
    /// The dispatch path's claims and results, on a connection and thread of their own
    /// (ADR 0034). They meet `writer` only at the rarer writes beside dispatch (a skip, a
    /// pause, an edit), where either waits for the other in short sleeps (`sqlite_busy`).
    dispatch: DispatchWriter,
    /// A new file's rollback journal until its first write, WAL after (ADR 0061).
    journal: Journal,
    /// The replies delivered lately, so a duplicate check is answered without a read: one
    /// process writes every run of the file (ADR 0066).
    deliveries: DeliveredIndex,
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` and applies pending migrations.
    ///
    /// # Errors
    /// When the file cannot be opened or a migration fails.
    pub async fn open(path: &Path) -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::from_str("sqlite:")?
            .filename(path)
            .create_if_missing(true)
            // No journal mode: WAL is the file's own, set at its first write (`journal`).
            // FULL: a write the engine acknowledged survives power loss, not only a crash.
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_millis(SQLITE_BUSY_TIMEOUT_MS))
            .foreign_keys(true);
        // A write waits for the writer's connection behind the writes queued before it.
        let writer_options = SqlitePoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_millis(SQLITE_WRITE_QUEUE_TIMEOUT_MS))
            // It meets the dispatch writer at the write lock: short waits (ADR 0034).
            .after_connect(|connection, _| {
                Box::pin(async move {
                    let mut handle = connection.lock_handle().await?;
                    // SAFETY: the connection is locked to this task while the handle lives.
                    unsafe { wait_briefly_when_busy(handle.as_raw_handle()) };
                    Ok(())
                })
            });
        let writer = connect_pool(path, &options, writer_options).await?;
        // sqlx takes no lock for SQLite migrations, so two processes opening a new or old
        // database at once (the daemon and `heartbeat list`) could both apply one; a lock
        // file next to the database makes them take turns.
        let lock = migration_lock(path).await?;
        sqlx::migrate!("src/store/migrations").run(&writer).await?;
        drop(lock);
        let journal = Journal::at_open(&writer).await?;
        let pool = connect_pool(path, &options, SqlitePoolOptions::new().max_connections(READ_CONNECTIONS_MAX)).await?;
        let dispatch = DispatchWriter::new(path, definitions_sql()?);
        Ok(Self { pool, writer, dispatch, journal, deliveries: DeliveredIndex::new(DEDUP_INDEX_ENTRIES_MAX) })
    }

    /// A transaction that holds the write lock from its first statement.
    ///
    /// A deferred `BEGIN` that reads and then writes must upgrade its read lock; in WAL
    /// mode that upgrade fails at once with "database is locked" (no busy wait) when another
    /// connection committed in between. `BEGIN IMMEDIATE` waits for the lock up front,
    /// within the busy timeout, so concurrent writers take turns instead of failing.
    async fn write_tx(&self) -> Result<Transaction<'static, Sqlite>, StoreError> {
        self.journal.wal_before_write(&self.writer).await?;
        self.seed_tx().await
    }

    /// A seed's write transaction: as `write_tx`, but a new file's first seed is written
    /// in its rollback journal, each page once, and switches to WAL after
    /// (`after_seed_wrote`, ADR 0061).
    async fn seed_tx(&self) -> Result<Transaction<'static, Sqlite>, StoreError> {
        Ok(self.writer.begin_with("BEGIN IMMEDIATE").await?)
    }

    /// A read transaction: SQLite reads one snapshot from its first read to its end.
    async fn snapshot_tx(&self) -> Result<Transaction<'static, Sqlite>, StoreError> {
        Ok(self.pool.begin().await?)
    }

    /// One process owns every heartbeat of a SQLite file (the daemon's lock file sees to
    /// it), so no write is fenced.
    async fn fence<'a>(
        &self,
        _tx: &mut Transaction<'_, Sqlite>,
        _agents: impl Iterator<Item = &'a AgentId>,
    ) -> Result<(), StoreError> {
        Ok(())
    }

    fn owns(&self, _agent: &AgentId) -> bool {
        true
    }

    /// Empties the WAL after a seed that wrote `rows`, when they were many: a first seed of
    /// a million heartbeats leaves them all in a WAL of 500 MB besides the database. Left
    /// there until a later write starts the WAL over, every start-up before then rebuilt
    /// its index from the whole file and read every page through it, and the first write
    /// after such a start copied it all again (2026-12-02, `docs/performance.md`). The
    /// seed's commit has already copied the pages into the database, so this only
    /// truncates the file. Best effort: a reader that holds an older snapshot keeps the
    /// WAL as it is, and the seed has landed either way.
    async fn after_seed_wrote(&self, rows: usize) {
        // Written in the rollback journal: there is no WAL to empty.
        if self.journal.wal_pending() {
            self.journal.after_seed(&self.writer).await;
            return;
        }
        if rows < SQLITE_SEED_ROWS_CHECKPOINT_MIN {
            return;
        }
        if let Err(error) = sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)").execute(&self.writer).await {
            tracing::warn!(%error, rows, "the WAL was not emptied after a large seed; the next start-ups read through it");
        }
    }

    /// Copies the WAL into the database file and ends every connection. The dispatch
    /// writer's goes first, so that the checkpoint sees every commit; the last connection
    /// to close removes the WAL. A reader of another process (the CLI's) may keep the
    /// checkpoint from finishing: then the WAL stays, as after a crash, and the next open
    /// reads through it.
    async fn close_connections(&self) -> Result<(), StoreError> {
        self.dispatch.close().await;
        let checkpoint = sqlx::query_as::<_, (i64, i64, i64)>("PRAGMA wal_checkpoint(TRUNCATE)");
        match checkpoint.fetch_one(&self.writer).await {
            Ok((0, _, _)) => {}
            Ok(_) => tracing::warn!("another connection kept the WAL from being copied into the database file"),
            Err(error) => tracing::warn!(%error, "the WAL was not copied into the database file"),
        }
        // The connections close either way: the last one copies what it can.
        self.writer.close().await;
        self.pool.close().await;
        Ok(())
    }

    fn owned_rows_sql(&self) -> String {
        String::new()
    }

    /// A seed's changed rows: one prepared upsert stepped a row on the seed's connection
    /// (`sqlite_seed`).
    async fn write_seed_rows(
        &self,
        tx: &mut Transaction<'_, Sqlite>,
        defs: &[HeartbeatDef],
        changed: &[usize],
        at: Timestamp,
    ) -> Result<(), StoreError> {
        sqlite_seed::write_rows(tx, defs, changed, at).await
    }

    /// A pass's claims, one transaction on the dispatch writer's thread (ADR 0034).
    async fn write_claims(&self, claims: &[SlotClaim]) -> Result<Vec<ClaimOutcome>, StoreError> {
        self.journal.wal_before_write(&self.writer).await?;
        self.dispatch.claim(claims).await
    }

    /// A pass's claims and the definitions of those won, on the dispatch writer's thread
    /// (ADR 0037); the definitions are decoded here, off that thread.
    async fn write_claims_and_read(&self, claims: &[SlotClaim]) -> Result<ClaimedSlots, StoreError> {
        self.journal.wal_before_write(&self.writer).await?;
        let (outcomes, pages) = self.dispatch.claim_and_read(claims).await?;
        let definitions = pages.and_then(|pages| shared_sql::definitions_of_pages(&pages));
        Ok(ClaimedSlots { outcomes, definitions })
    }

    /// A group commit of results, one transaction on the dispatch writer's thread; the
    /// replies it delivered are recorded in the index before the driver hears.
    async fn write_results(
        &self,
        runs: &[RunRecord],
        breaker_failures_max: u32,
    ) -> Result<Vec<BreakerStep>, StoreError> {
        let generation = self.deliveries.generation();
        self.journal.wal_before_write(&self.writer).await?;
        let finished = self.dispatch.finish(runs, breaker_failures_max).await?;
        self.deliveries.committed(runs, &finished.written, finished.rewrote, generation);
        Ok(finished.steps)
    }

    /// Answered from the index of recent deliveries where it can say (ADR 0066).
    async fn delivered_since_indexed(&self, queries: &[DedupQuery]) -> Result<Vec<bool>, StoreError> {
        let read = |queries: Vec<DedupQuery>| async move { self.read_delivered_since(&queries).await };
        let read_fill = |from_ms, entries_max| self.read_recent_deliveries(from_ms, entries_max);
        self.deliveries.delivered_since(queries, read, read_fill).await
    }

    fn runs_deleting(&self) {
        self.deliveries.forget();
    }

    /// The latest finish of each reply delivered at or after `from_ms`, newest first, at
    /// most `entries_max`: one JSON value, not a row each (sqlx hands rows over one at a
    /// time between threads).
    async fn read_recent_deliveries(&self, from_ms: i64, entries_max: usize) -> Result<Fill, StoreError> {
        let limit = i64::try_from(entries_max).unwrap_or(i64::MAX).saturating_add(1);
        let (head, tail) = json_rows_sql("agent_id, heartbeat_id, reply_digest, finished");
        let sql = format!("{head}{RECENT_DELIVERIES_SQL}{tail}");
        let text: String = sqlx::query_scalar(&sql).bind(from_ms).bind(limit).fetch_one(&self.pool).await?;
        let rows: Vec<(String, String, String, i64)> =
            serde_json::from_str(&text).map_err(|error| corrupt("recent deliveries", error.to_string()))?;
        let mut delivered = Vec::with_capacity(rows.len());
        for (agent, heartbeat, digest, finished) in rows {
            delivered.push((key_from_parts(agent, heartbeat)?, digest, finished));
        }
        Ok(Fill::newest(from_ms, delivered, entries_max))
    }
}

/// The replies delivered since `$1`, the latest finish of each, the newest `$2` of them.
const RECENT_DELIVERIES_SQL: &str = "SELECT agent_id, heartbeat_id, reply_digest, MAX(finished_at_ms) AS finished \
     FROM executions WHERE reply_digest IS NOT NULL AND finished_at_ms >= $1 \
     GROUP BY agent_id, heartbeat_id, reply_digest ORDER BY finished DESC LIMIT $2";

/// The batched definitions read's text, for the dispatch writer's own connection.
pub(crate) fn definitions_sql() -> Result<String, StoreError> {
    Ok(shared_sql::definitions_read(&[])?.sql().to_owned())
}

/// A pool on the database at `path`; a database another process holds locked while it
/// opens is tried again for a while.
async fn connect_pool(
    path: &Path,
    options: &SqliteConnectOptions,
    pool_options: SqlitePoolOptions,
) -> Result<SqlitePool, StoreError> {
    // A local file's connection does not go stale: no ping before each use (a round trip
    // to the connection's thread per transaction).
    let pool_options = pool_options.test_before_acquire(false);
    let mut attempt = 1;
    loop {
        match pool_options.clone().connect_with(options.clone()).await {
            Ok(pool) => return Ok(pool),
            Err(error) if is_busy(&error) && attempt < SQLITE_OPEN_BUSY_ATTEMPTS_MAX => {
                attempt += 1;
                // A real adapter's own wait, before any engine runs on this store.
                #[allow(clippy::disallowed_methods)]
                tokio::time::sleep(Duration::from_millis(SQLITE_OPEN_BUSY_RETRY_MS)).await;
            }
            Err(error) => {
                return Err(StoreError::Backend(format!("cannot open the database {}: {error}", path.display())))
            }
        }
    }
}

/// `BEGIN IMMEDIATE` already makes every writer take its turn.
async fn serialize_on(_tx: &mut Transaction<'_, Sqlite>, _scope: &str) -> Result<(), StoreError> {
    Ok(())
}

/// SQLite has no row locks; the write transaction holds the whole database.
const LOCK_READ_ROWS: &str = "";

/// Writes `rows` as the source of a batched read: one JSON text, so the statement is one
/// text whatever the list's length and is prepared once (ADR 0036).
fn push_listed<'a, const N: usize>(
    query: &mut QueryBuilder<'a, Sqlite>,
    rows: &[[Listed<'a>; N]],
) -> Result<(), StoreError> {
    // The fields' types from the first row: the rows of one list have the same shape.
    let fields = rows.first().copied().unwrap_or([Listed::Text(""); N]);
    let (head, tail) = json_list_sql(&fields);
    query.push(head).push_bind(json_list(rows)?).push(tail);
    Ok(())
}

/// Pages in rowid order, the table's own: key order walked the primary key's index and read
/// each row from wherever the table held it (1,000,000 rows: 5.6 s of SQLite's time against
/// 2.2 s). A page is a range of rowids: it resumes after the previous page's last rowid
/// (`$1`, as text: the loop carries a backend's cursor as two texts; `$2` is unused here)
/// and ends at the rowid `$3` rows on, found on the table's own b-tree. A `LIMIT` in the
/// page's subquery kept SQLite from flattening it into the aggregate, and a resume by key
/// sought the primary key's index first: read alone, a million whole rows took 1.4 s in
/// the range form against 2.0 s (a restart: 7 % less CPU; performance.md).
fn load_page_sql(columns: &str, selected: &str, owned: &str) -> String {
    format!(
        "SELECT json_group_array(json_array({columns})), count(*), CAST(max(page_rowid) AS TEXT), '' \
         FROM (SELECT rowid AS page_rowid, {selected} FROM heartbeats \
         WHERE rowid > CAST($1 AS INTEGER) AND rowid <= COALESCE((SELECT rowid FROM heartbeats \
         WHERE rowid > CAST($1 AS INTEGER){owned} ORDER BY rowid LIMIT 1 OFFSET $3 - 1), {ROWID_MAX}){owned})"
    )
}

/// The largest rowid SQLite gives: a page's range ends here when fewer rows remain.
const ROWID_MAX: i64 = i64::MAX;

/// The text around a query whose rows (`columns` of them) come back as one JSON array of
/// arrays, as a load's page does.
fn json_rows_sql(columns: &str) -> (String, &'static str) {
    (format!("SELECT json_group_array(json_array({columns})) FROM ("), ")")
}

/// SQLite's `SQLITE_BUSY` ("database is locked"), primary or extended code.
pub(super) fn is_busy(error: &sqlx::Error) -> bool {
    let code = error.as_database_error().and_then(|error| error.code()).and_then(|code| code.parse::<i32>().ok());
    code.is_some_and(|code| code & 0xff == SQLITE_BUSY_CODE)
}

/// SQLite's primary result code for a lock another connection holds.
const SQLITE_BUSY_CODE: i32 = 5;

/// An exclusive lock on `<database>.migrate-lock`, held while migrations run.
async fn migration_lock(path: &Path) -> Result<std::fs::File, StoreError> {
    let mut name = path.as_os_str().to_owned();
    name.push(".migrate-lock");
    let lock_path = std::path::PathBuf::from(name);
    let locked = tokio::task::spawn_blocking(move || {
        let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&lock_path)?;
        file.lock()?;
        Ok::<_, std::io::Error>(file)
    })
    .await
    .map_err(|error| StoreError::Backend(format!("migration lock task failed: {error}")))?;
    locked.map_err(|error| StoreError::Backend(format!("cannot lock the database for migrations: {error}")))
}

sql_store!(SqliteStore, sqlx::Sqlite);

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::{Connection, Executor};

    #[tokio::test]
    async fn a_locked_database_is_told_from_other_errors() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("busy.db");
        let options = |wait_ms| {
            SqliteConnectOptions::new()
                .filename(&path)
                .create_if_missing(true)
                .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
                .busy_timeout(Duration::from_millis(wait_ms))
        };
        let mut holder = sqlx::SqliteConnection::connect_with(&options(0)).await.expect("connect");
        holder.execute("CREATE TABLE t (x INTEGER)").await.expect("create");
        holder.execute("BEGIN IMMEDIATE").await.expect("take the write lock");
        let mut other = sqlx::SqliteConnection::connect_with(&options(0)).await.expect("connect");
        let locked = other.execute("INSERT INTO t VALUES (1)").await.expect_err("the write lock is held");
        assert!(is_busy(&locked), "{locked}");
        let missing = other.execute("SELECT * FROM no_such_table").await.expect_err("no such table");
        assert!(!is_busy(&missing), "{missing}");
    }

    /// Once filled, the index answers the duplicate checks from its floor on with the run
    /// log's table gone; a check from before its floor is read (and fails without the
    /// table). A prune and a result written over a finished row make it forget.
    #[tokio::test]
    async fn duplicate_checks_are_answered_from_memory_and_read_again_after_runs_go() {
        use crate::core::heartbeat::test_def;
        use crate::core::retention::RunRetention;
        use crate::ports::store::{DeliveryStatus, Store};
        use crate::store::sqlite_dispatch_writer::tests::{claim_at, succeeded};

        let dir = tempfile::tempdir().expect("temp dir");
        let (store, pool) = store_and_reader(&dir.path().join("index.db")).await;
        let def = test_def("main", "h", 60);
        store.put_heartbeat(&def, Timestamp::UNIX_EPOCH).await.expect("stored");
        let delivered = |slot_secs, digest: &str| {
            let mut run = succeeded(&def.key, slot_secs);
            run.delivery = DeliveryStatus::Delivered;
            run.reply_digest = Some(digest.to_owned());
            run
        };
        store.claim_slots(&[claim_at(&def.key, 60), claim_at(&def.key, 120)]).await.expect("claimed");
        store.finish_runs(&[delivered(60, "d1"), delivered(120, "d2")], 3).await.expect("finished");
        let check = |digest: &str, since_ms: i64| {
            let query = DedupQuery {
                key: def.key.clone(),
                digest: digest.to_owned(),
                since: Timestamp::from_millisecond(since_ms).expect("a time"),
            };
            let store = &store;
            async move { store.delivered_since(&[query]).await.map(|found| found[0]) }
        };
        assert_eq!(check("d1", 0).await, Ok(true), "the first check fills the index from its since");

        sqlx::query("ALTER TABLE executions RENAME TO executions_away").execute(&pool).await.expect("renamed");
        assert_eq!(check("d1", 0).await, Ok(true));
        assert_eq!(check("d2", 121_000).await, Ok(true), "finished at 121 s");
        assert_eq!(check("d2", 121_001).await, Ok(false));
        assert_eq!(check("d3", 0).await, Ok(false));
        assert!(check("d1", -1).await.is_err(), "before the floor: read, and the table is gone");
        sqlx::query("ALTER TABLE executions_away RENAME TO executions").execute(&pool).await.expect("renamed back");

        let long_after = Timestamp::from_second(60 * 86_400).expect("a time");
        let pruned = store.prune_runs(long_after, RunRetention { kept_days: 1, kept_per_heartbeat: 1 }).await;
        assert_eq!(pruned, Ok(1), "the older delivery went");
        assert_eq!((check("d1", 0).await, check("d2", 0).await), (Ok(false), Ok(true)));

        let mut rewritten = succeeded(&def.key, 120);
        rewritten.reply_digest = None;
        store.finish_runs(&[rewritten], 3).await.expect("finished again");
        assert_eq!(check("d2", 0).await, Ok(false), "its reply was written over");
    }

    /// A new store at `path`, and a reader of its file beside it.
    async fn store_and_reader(path: &Path) -> (SqliteStore, sqlx::SqlitePool) {
        let store = SqliteStore::open(path).await.expect("a new store");
        let pool = sqlx::SqlitePool::connect_with(SqliteConnectOptions::new().filename(path)).await.expect("a reader");
        (store, pool)
    }

    /// SQLite's plan for `sql`, each step's text, with `first` bound to its first parameter.
    async fn query_plan(pool: &sqlx::SqlitePool, sql: &str, first: &str) -> Vec<String> {
        sqlx::query(&format!("EXPLAIN QUERY PLAN {sql}"))
            .bind(first)
            .fetch_all(pool)
            .await
            .unwrap_or_else(|error| panic!("{sql}: {error}"))
            .iter()
            .map(|row| sqlx::Row::get::<String, _>(row, "detail"))
            .collect()
    }

    /// The agents' counts read the primary key's index alone, and their agent heartbeats
    /// the partial index: no read of the table's rows, which hold every prompt.
    #[tokio::test]
    async fn the_agents_counts_read_indexes_not_rows() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (_store, pool) = store_and_reader(&dir.path().join("counts.db")).await;
        for one_agent in [false, true] {
            let sql = shared_sql::jobs_of_agents_read(one_agent, "");
            let plan = query_plan(&pool, &sql, "a").await;
            let reads: Vec<&String> = plan.iter().filter(|step| step.contains("heartbeats")).collect();
            assert_eq!(reads.len(), 2, "{plan:?}");
            assert!(reads.iter().any(|step| step.contains("COVERING INDEX sqlite_autoindex_heartbeats_1")), "{plan:?}");
            assert!(reads.iter().any(|step| step.contains("INDEX heartbeats_agent_heartbeats")), "{plan:?}");
        }
    }

    /// The batched reads find their rows through an index, whatever their list holds: a
    /// scan of `heartbeats` or `executions` would read every row on every dispatch pass.
    /// Their text does not change with the list's length (ADR 0036), and the duplicate
    /// check, read for every delivery, builds no temporary table.
    #[tokio::test]
    async fn batched_reads_search_an_index_in_one_text_and_the_duplicate_check_builds_no_table() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (store, pool) = store_and_reader(&dir.path().join("plans.db")).await;
        let key = || [Listed::Text("a"), Listed::Text("h")];
        let reads = [
            shared_sql::each_day_spent_read(&[[Listed::Text("a"), Listed::Integer(0)]]),
            shared_sql::each_day_runs_share_read(&[[
                Listed::Text("a"),
                Listed::Text("h"),
                Listed::Integer(0),
                Listed::Integer(0),
            ]]),
            shared_sql::latest_slots_read(&[key()]),
            shared_sql::definitions_read(&[key()]),
            shared_sql::delivered_since_read(&[[
                Listed::Text("a"),
                Listed::Text("h"),
                Listed::Text("digest"),
                Listed::Integer(0),
                Listed::Integer(0),
            ]]),
            shared_sql::runs_share_read(&[[Listed::Text("a"), Listed::Text("h"), Listed::Integer(0)]], 0, Some("a")),
        ];
        for read in reads {
            let sql = read.expect("a read").into_sql();
            // Its list as a one-row list's text; the other parameters unbound (NULL).
            let plan = query_plan(&pool, &sql, r#"[["a","h",0]]"#).await;
            assert!(plan.iter().any(|step| step.contains("USING") && step.contains("INDEX")), "{sql}: {plan:?}");
            assert!(
                !plan.iter().any(|step| step.starts_with("SCAN ") && !step.contains("VIRTUAL TABLE")),
                "{sql}: {plan:?}"
            );
        }
        // The same text for a list of any length: prepared once.
        let one = shared_sql::definitions_read(&[key()]).expect("a read").into_sql();
        let three = shared_sql::definitions_read(&[key(), key(), key()]).expect("a read").into_sql();
        assert_eq!(one, three);
        let delivered = shared_sql::delivered_since_read(&[[
            Listed::Text("a"),
            Listed::Text("h"),
            Listed::Text("digest"),
            Listed::Integer(0),
            Listed::Integer(0),
        ]])
        .expect("a read")
        .into_sql();
        let program = sqlx::query(&format!("EXPLAIN {delivered}")).fetch_all(&pool).await.expect("explained");
        let opcodes: Vec<String> = program.iter().map(|row| sqlx::Row::get::<String, _>(row, "opcode")).collect();
        assert!(opcodes.iter().any(|opcode| opcode == "Halt"), "a whole program: {opcodes:?}");
        assert!(!opcodes.iter().any(|opcode| opcode == "OpenEphemeral"), "{opcodes:?}");
        drop(store);
    }
}
