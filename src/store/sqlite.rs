//! The SQLite store, through sqlx: WAL, embedded migrations, a busy timeout, and
//! multi-row statements for every batch write. The statements themselves are shared with
//! PostgreSQL ([`super::sql_store`]); this file holds what only SQLite does.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Sqlite, SqlitePool, Transaction};

use super::sql_store::sql_store;
use crate::core::ids::AgentId;
use crate::limits::SQLITE_BUSY_TIMEOUT_MS;
use crate::ports::store::StoreError;

const CONNECTIONS_MAX: u32 = 4;

pub struct SqliteStore {
    pool: SqlitePool,
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
            .journal_mode(SqliteJournalMode::Wal)
            // FULL: a write the engine acknowledged survives power loss, not only a crash.
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_millis(SQLITE_BUSY_TIMEOUT_MS))
            .foreign_keys(true);
        let pool =
            SqlitePoolOptions::new().max_connections(CONNECTIONS_MAX).connect_with(options).await.map_err(|error| {
                StoreError::Backend(format!("cannot open the database {}: {error}", path.display()))
            })?;
        // sqlx takes no lock for SQLite migrations, so two processes opening a new or old
        // database at once (the daemon and `heartbeat list`) could both apply one; a lock
        // file next to the database makes them take turns.
        let lock = migration_lock(path).await?;
        sqlx::migrate!("src/store/migrations").run(&pool).await?;
        drop(lock);
        Ok(Self { pool })
    }

    /// A transaction that holds the write lock from its first statement.
    ///
    /// A deferred `BEGIN` that reads and then writes must upgrade its read lock; in WAL
    /// mode that upgrade fails at once with "database is locked" (no busy wait) when another
    /// connection committed in between. `BEGIN IMMEDIATE` waits for the lock up front,
    /// within the busy timeout, so concurrent writers take turns instead of failing.
    async fn write_tx(&self) -> Result<Transaction<'static, Sqlite>, StoreError> {
        Ok(self.pool.begin_with("BEGIN IMMEDIATE").await?)
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

    fn owned_rows_sql(&self) -> String {
        String::new()
    }
}

/// `BEGIN IMMEDIATE` already makes every writer take its turn.
async fn serialize_on(_tx: &mut Transaction<'_, Sqlite>, _scope: &str) -> Result<(), StoreError> {
    Ok(())
}

/// SQLite has no row locks; the write transaction holds the whole database.
const LOCK_READ_ROWS: &str = "";

fn load_page_sql(columns: &str, owned: &str) -> String {
    format!(
        "SELECT json_group_array(json_array({columns})), count(*) FROM (SELECT {columns} FROM heartbeats \
         WHERE (agent_id, heartbeat_id) > ($1, $2){owned} ORDER BY agent_id, heartbeat_id LIMIT $3)"
    )
}

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
