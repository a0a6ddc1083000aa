//! The PostgreSQL store, through sqlx: what several `systole serve` processes share
//! (ADR 0017). The statements are SQLite's ([`super::sql_store`]); this file holds what
//! only PostgreSQL does: its connection, its migrations, row locks and advisory locks
//! where SQLite's single writer made turns implicit, and the fence on lease terms.

use std::time::Duration;

use jiff::Timestamp;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgPool, Postgres, QueryBuilder, Transaction};

use super::sql_lists::Listed;
use super::sql_store::sql_store;
use crate::cluster::LEASE_LOCK_WAIT_MS_MAX;
use crate::core::breaker::BreakerStep;
use crate::core::heartbeat::HeartbeatDef;
use crate::core::ids::AgentId;
use crate::core::partition::{partition_of, PARTITIONS_COUNT};
use crate::ports::leases::Lease;
use crate::ports::store::{claim_then_read, ClaimOutcome, ClaimedSlots, DedupQuery, RunRecord, SlotClaim, StoreError};

/// Connections one process keeps open to the database.
pub const POSTGRES_CONNECTIONS_MAX: u32 = 8;
/// How long opening a connection may take before the store reports the server unreachable.
pub const POSTGRES_CONNECT_TIMEOUT_SECS: u64 = 10;
/// Connections of the lease loop, apart from the engines' (ADR 0018): a node whose engines
/// wait on the database still renews its leases.
pub const LEASE_CONNECTIONS_MAX: u32 = 2;
/// How long the lease loop waits for one of its connections.
const LEASE_ACQUIRE_TIMEOUT_SECS: u64 = 2;

/// How this process's sessions present themselves and what the database bounds for them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionSettings {
    /// `application_name`, seen in `pg_stat_activity` (a node's id, for a cluster).
    pub application_name: String,
    /// `idle_in_transaction_session_timeout`: the database ends a session that sits inside
    /// a transaction this long without a statement (a node frozen mid-transaction), so its
    /// locks never hold up a takeover longer than this. `None`: no bound.
    pub idle_in_transaction: Option<Duration>,
}

impl Default for SessionSettings {
    fn default() -> Self {
        Self { application_name: "systole".to_owned(), idle_in_transaction: None }
    }
}

/// The advisory lock key daemons hold on their database (`hold_node_lock`): "systole" in ASCII.
const NODE_LOCK_KEY: i64 = 0x0073_7973_746f_6c65;

/// A daemon's hold on its database; the session lock goes with the connection.
pub struct NodeLock {
    _connection: sqlx::PgConnection,
}

#[derive(Clone)]
pub struct PostgresStore {
    pub(super) pool: PgPool,
    /// The lease loop's own connections, each with a bounded lock wait.
    pub(super) lease_pool: PgPool,
    /// Set for a partition's engine (see `ports::leases`): what it loads, and the lease
    /// every write of it carries. `None`: the whole database, unfenced (one node).
    pub(super) fence: Option<Lease>,
}

impl PostgresStore {
    /// Connects to the database at `url` (`postgres://user@host:port/db`), with `password`
    /// when given (it never sits in the URL a config file holds), and applies pending
    /// migrations. sqlx's PostgreSQL migrator holds an advisory lock while it runs, so
    /// nodes starting together take turns.
    ///
    /// # Errors
    /// When the URL does not parse, the server cannot be reached, or a migration fails.
    pub async fn connect(url: &str, password: Option<&str>) -> Result<Self, StoreError> {
        Self::connect_with(url, password, &SessionSettings::default()).await
    }

    /// [`connect`](Self::connect), with the sessions' name and bounds.
    ///
    /// # Errors
    /// As [`connect`](Self::connect).
    pub async fn connect_with(
        url: &str,
        password: Option<&str>,
        session: &SessionSettings,
    ) -> Result<Self, StoreError> {
        let mut options: PgConnectOptions =
            url.parse().map_err(|error| StoreError::Backend(format!("store.url is not a PostgreSQL URL: {error}")))?;
        if let Some(password) = password {
            options = options.password(password);
        }
        options = options.application_name(&session.application_name);
        if let Some(idle) = session.idle_in_transaction {
            let millis = idle.as_millis().max(1).to_string();
            options = options.options([("idle_in_transaction_session_timeout", millis)]);
        }
        let unreachable = |error: sqlx::Error| StoreError::Backend(format!("cannot connect to PostgreSQL: {error}"));
        let pool = PgPoolOptions::new()
            .max_connections(POSTGRES_CONNECTIONS_MAX)
            .acquire_timeout(Duration::from_secs(POSTGRES_CONNECT_TIMEOUT_SECS))
            .connect_with(options.clone())
            .await
            .map_err(unreachable)?;
        let lease_options = options.options([("lock_timeout", LEASE_LOCK_WAIT_MS_MAX.to_string())]);
        let lease_pool = PgPoolOptions::new()
            .max_connections(LEASE_CONNECTIONS_MAX)
            .acquire_timeout(Duration::from_secs(LEASE_ACQUIRE_TIMEOUT_SECS))
            .connect_lazy_with(lease_options);
        sqlx::migrate!("src/store/migrations_postgres").run(&pool).await?;
        Ok(Self { pool, lease_pool, fence: None })
    }

    /// Holds the database for this daemon until dropped: exclusively for a single node, or
    /// shared with the other nodes of a cluster. Two single-node daemons on one database
    /// would run every heartbeat twice over and recover each other's runs; a single node
    /// beside a cluster, too.
    ///
    /// # Errors
    /// `StoreError::Backend` naming what holds the database, or a connection error.
    pub async fn hold_node_lock(&self, cluster: bool) -> Result<NodeLock, StoreError> {
        let mut connection = self.pool.acquire().await?.detach();
        let function = if cluster { "pg_try_advisory_lock_shared" } else { "pg_try_advisory_lock" };
        let held: bool = sqlx::query_scalar(&format!("SELECT {function}($1)"))
            .bind(NODE_LOCK_KEY)
            .fetch_one(&mut connection)
            .await?;
        if held {
            return Ok(NodeLock { _connection: connection });
        }
        let problem = if cluster {
            "a single-node systole daemon (no [cluster] section) runs on this database; stop it first"
        } else {
            "another systole daemon runs on this database; give every node a [cluster] section to share it"
        };
        Err(StoreError::Backend(problem.to_owned()))
    }

    /// A write transaction (READ COMMITTED): a read that a later write depends on locks
    /// its rows (`LOCK_READ_ROWS`) or its scope ([`serialize_on`]).
    async fn write_tx(&self) -> Result<Transaction<'static, Postgres>, StoreError> {
        Ok(self.pool.begin().await?)
    }

    /// A seed writes as any other write.
    async fn seed_tx(&self) -> Result<Transaction<'static, Postgres>, StoreError> {
        self.write_tx().await
    }

    /// Several reads that must agree with each other: one snapshot for all of them.
    async fn snapshot_tx(&self) -> Result<Transaction<'static, Postgres>, StoreError> {
        Ok(self.pool.begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY").await?)
    }

    /// A partition's store refuses a write when its lease's term is no longer the
    /// partition's (another node took it over), or when the write touches a heartbeat of
    /// another partition. The lease row is read `FOR SHARE`: a takeover's `UPDATE` waits
    /// for this transaction, and once it commits, no later write of the old term passes.
    async fn fence<'a>(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        mut agents: impl Iterator<Item = &'a AgentId>,
    ) -> Result<(), StoreError> {
        let Some(lease) = &self.fence else { return Ok(()) };
        let refused = StoreError::Fenced { partition: lease.partition, term: lease.term };
        if agents.any(|agent| !self.owns(agent)) {
            return Err(refused);
        }
        let partition = i32::try_from(lease.partition).unwrap_or(i32::MAX);
        let current: Option<(Option<String>, i64)> =
            sqlx::query_as("SELECT owner, term FROM partition_leases WHERE partition = $1 FOR SHARE")
                .bind(partition)
                .fetch_optional(&mut **tx)
                .await?;
        let term = i64::try_from(lease.term).unwrap_or(i64::MAX);
        match current {
            Some((Some(owner), current_term)) if owner == lease.node && current_term == term => Ok(()),
            _ => Err(refused),
        }
    }

    /// A seed's changed rows: the shared multi-row upserts.
    async fn write_seed_rows(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        defs: &[HeartbeatDef],
        changed: &[usize],
        at: Timestamp,
    ) -> Result<(), StoreError> {
        shared_sql::seed_rows_by_statements(tx, defs, changed, at).await
    }

    /// Nothing to do after a seed: PostgreSQL's checkpoints are its own.
    async fn after_seed_wrote(&self, _rows: usize) {}

    /// Ends this process's sessions (the server logs a session dropped without its
    /// goodbye as an error otherwise), its lease loop's included.
    async fn close_connections(&self) -> Result<(), StoreError> {
        self.pool.close().await;
        self.lease_pool.close().await;
        Ok(())
    }

    fn owns(&self, agent: &AgentId) -> bool {
        self.fence.as_ref().is_none_or(|lease| partition_of(agent, PARTITIONS_COUNT) == lease.partition)
    }

    /// The condition, appended to a `WHERE`, that keeps a partition's store to its rows;
    /// only numbers are formatted in.
    fn owned_rows_sql(&self) -> String {
        match &self.fence {
            Some(lease) => {
                format!(" AND systole_partition(agent_id, {PARTITIONS_COUNT}) = {}", lease.partition)
            }
            None => String::new(),
        }
    }

    /// A pass's claims: the shared multi-row statements.
    async fn write_claims(&self, claims: &[SlotClaim]) -> Result<Vec<ClaimOutcome>, StoreError> {
        self.claim_slots_by_statements(claims).await
    }

    /// A pass's claims, then the definitions of those won: two calls, as any store.
    async fn write_claims_and_read(&self, claims: &[SlotClaim]) -> Result<ClaimedSlots, StoreError> {
        claim_then_read(self, claims).await
    }

    /// Read each time: another node may have delivered for a partition this node runs now.
    async fn delivered_since_indexed(&self, queries: &[DedupQuery]) -> Result<Vec<bool>, StoreError> {
        self.read_delivered_since(queries).await
    }

    /// Keeps no index to forget.
    fn runs_deleting(&self) {}

    /// A group commit of results: the shared multi-row statements.
    async fn write_results(
        &self,
        runs: &[RunRecord],
        breaker_failures_max: u32,
    ) -> Result<Vec<BreakerStep>, StoreError> {
        self.finish_runs_by_statements(runs, breaker_failures_max).await
    }
}

/// Makes the writers of `scope` take turns until the transaction ends: a transaction-level
/// advisory lock on the scope's 64-bit hash (PostgreSQL's own `hashtextextended`).
async fn serialize_on(tx: &mut Transaction<'_, Postgres>, scope: &str) -> Result<(), StoreError> {
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))").bind(scope).execute(&mut **tx).await?;
    Ok(())
}

/// A read whose rows the same transaction rewrites locks them, so a concurrent writer
/// (an operator's enable on another node) waits instead of being overwritten.
const LOCK_READ_ROWS: &str = " FOR UPDATE";

/// Writes `rows` as the source of a batched read: a `VALUES` list, whose rows the planner
/// counts. A JSON list it took for a hundred rows, and hashed the whole of `executions` to
/// join them (ADR 0036).
fn push_listed<'a, const N: usize>(
    query: &mut QueryBuilder<'a, Postgres>,
    rows: &[[Listed<'a>; N]],
) -> Result<(), StoreError> {
    query.push("(");
    query.push_values(rows, |mut row, fields| {
        for field in fields {
            match *field {
                Listed::Text(text) => row.push_bind(text),
                Listed::Integer(number) => row.push_bind(number),
            };
        }
    });
    query.push(")");
    Ok(())
}

/// A page in key order, and its last row's key (the next page starts after it).
fn load_page_sql(columns: &str, selected: &str, owned: &str) -> String {
    format!(
        "SELECT COALESCE(json_agg(json_build_array({columns}))::text, '[]'), count(*), \
         (array_agg(agent_id ORDER BY agent_id DESC, heartbeat_id DESC))[1], \
         (array_agg(heartbeat_id ORDER BY agent_id DESC, heartbeat_id DESC))[1] FROM (SELECT {selected} \
         FROM heartbeats WHERE (agent_id, heartbeat_id) > ($1, $2){owned} ORDER BY agent_id, heartbeat_id \
         LIMIT $3) AS page"
    )
}

/// The text around a query whose rows (`columns` of them) come back as one JSON array of
/// arrays, as a load's page does.
fn json_rows_sql(columns: &str) -> (String, &'static str) {
    (format!("SELECT COALESCE(json_agg(json_build_array({columns}))::text, '[]') FROM ("), ") AS page")
}

sql_store!(PostgresStore, sqlx::Postgres);
