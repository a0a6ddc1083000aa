//! The SQLite store, through sqlx: WAL, embedded migrations, a busy timeout, and
//! multi-row statements for every batch write.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use jiff::Timestamp;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow, SqliteSynchronous};
use sqlx::{QueryBuilder, Row, Sqlite, SqlitePool, Transaction};

use crate::core::active_hours::ActiveHours;
use crate::core::breaker::{self, BreakerStep, DISABLED_BY_BREAKER};
use crate::core::cron::CronSchedule;
use crate::core::delivery_target::DeliveryTarget;
use crate::core::guard::SkipReason;
use crate::core::heartbeat::{Heartbeat, HeartbeatDef, HeartbeatState, JobKind, Origin};
use crate::core::ids::{AgentId, HeartbeatId, HeartbeatKey};
use crate::core::pause::PauseRecord;
use crate::core::policy::{CatchUp, Overlap, RunPolicy};
use crate::core::reply::ReplyKind;
use crate::core::retention::RunRetention;
use crate::core::schedule::Schedule;
use crate::core::system_events::{self, SystemEvent};
use crate::limits::{SQLITE_BUSY_TIMEOUT_MS, STORE_BATCH_ROWS_MAX};
use crate::ports::store::{
    ClaimOutcome, DeliveryStatus, Execution, ExecutionStatus, Queued, RunRecord, SeedReport, SkipRecord, SlotClaim,
    StopReason, Store, StoreError, INTERRUPTED_ERROR_TEXT,
};

const CONNECTIONS_MAX: u32 = 4;

pub struct SqliteStore {
    pool: SqlitePool,
}

impl From<sqlx::Error> for StoreError {
    fn from(error: sqlx::Error) -> Self {
        StoreError::Backend(error.to_string())
    }
}

impl From<sqlx::migrate::MigrateError> for StoreError {
    fn from(error: sqlx::migrate::MigrateError) -> Self {
        StoreError::Backend(format!("migration failed: {error}"))
    }
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

#[async_trait]
impl Store for SqliteStore {
    async fn load_heartbeats(&self) -> Result<Vec<Heartbeat>, StoreError> {
        // sqlx hands SQLite rows over one at a time between threads (~30 µs each here); a
        // page of rows as one JSON array is one value, so a million load in seconds.
        let columns = HEARTBEAT_COLUMNS.join(", ");
        let page_sql = format!(
            "SELECT json_group_array(json_array({columns})), count(*) FROM (SELECT {columns} FROM heartbeats \
             WHERE (agent_id, heartbeat_id) > (?1, ?2) ORDER BY agent_id, heartbeat_id LIMIT ?3)"
        );
        let mut heartbeats = Vec::new();
        let mut after = (String::new(), String::new());
        loop {
            let (page, count): (String, i64) = sqlx::query_as(&page_sql)
                .bind(&after.0)
                .bind(&after.1)
                .bind(i64::try_from(LOAD_PAGE_ROWS).unwrap_or(i64::MAX))
                .fetch_one(&self.pool)
                .await?;
            let rows: Vec<Vec<serde_json::Value>> =
                serde_json::from_str(&page).map_err(|e| corrupt("a page of heartbeats", e))?;
            for values in rows {
                let heartbeat = heartbeat_from_row(&JsonRow(values))?;
                after = (heartbeat.def.key.agent.to_string(), heartbeat.def.key.heartbeat.to_string());
                heartbeats.push(heartbeat);
            }
            if usize::try_from(count).unwrap_or(0) < LOAD_PAGE_ROWS {
                return Ok(heartbeats);
            }
        }
    }

    async fn seed_config(&self, defs: &[HeartbeatDef], at: Timestamp) -> Result<SeedReport, StoreError> {
        let mut tx = self.write_tx().await?;
        let existing: BTreeMap<(String, String), (String, Option<String>)> =
            sqlx::query("SELECT agent_id, heartbeat_id, origin, config_fingerprint FROM heartbeats")
                .fetch_all(&mut *tx)
                .await?
                .into_iter()
                .map(|row| Ok(((row.try_get(0)?, row.try_get(1)?), (row.try_get(2)?, row.try_get(3)?))))
                .collect::<Result<_, sqlx::Error>>()?;
        let mut report = SeedReport::default();
        let mut changed = Vec::new();
        for def in defs {
            let fingerprint = def.fingerprint();
            let id = (def.key.agent.to_string(), def.key.heartbeat.to_string());
            match existing.get(&id) {
                Some((_, stored)) if stored.as_deref() == Some(fingerprint.as_str()) => {
                    report.unchanged.push(def.key.clone());
                    continue;
                }
                Some(_) => report.updated.push(def.key.clone()),
                None => report.inserted.push(def.key.clone()),
            }
            changed.push((HeartbeatDef { origin: Origin::Config, ..def.clone() }, Some(fingerprint)));
        }
        // One statement may not upsert a key twice: a key the config names twice keeps its last.
        let mut seen = BTreeSet::new();
        changed.reverse();
        changed.retain(|(def, _)| seen.insert(def.key.clone()));
        changed.reverse();
        for chunk in changed.chunks(UPSERT_ROWS_MAX) {
            upsert(&mut tx, chunk, at).await?;
        }
        let in_config: BTreeSet<(&str, &str)> =
            defs.iter().map(|def| (def.key.agent.as_str(), def.key.heartbeat.as_str())).collect();
        for ((agent, heartbeat), (origin, _)) in &existing {
            let in_config = in_config.contains(&(agent.as_str(), heartbeat.as_str()));
            if origin == Origin::Config.as_str() && !in_config {
                sqlx::query("DELETE FROM heartbeats WHERE agent_id = ? AND heartbeat_id = ?")
                    .bind(agent)
                    .bind(heartbeat)
                    .execute(&mut *tx)
                    .await?;
                report.removed.push(key_from_parts(agent.clone(), heartbeat.clone())?);
            }
        }
        tx.commit().await?;
        Ok(report)
    }

    async fn put_heartbeat(&self, def: &HeartbeatDef, at: Timestamp) -> Result<(), StoreError> {
        let mut tx = self.write_tx().await?;
        upsert(&mut tx, &[(def.clone(), None)], at).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn consecutive_failures(&self, key: &HeartbeatKey) -> Result<Option<u32>, StoreError> {
        let row = sqlx::query("SELECT consecutive_failures FROM heartbeats WHERE agent_id = ? AND heartbeat_id = ?")
            .bind(key.agent.as_str())
            .bind(key.heartbeat.as_str())
            .fetch_optional(&self.pool)
            .await?;
        let Some(row) = row else { return Ok(None) };
        let count: i64 = row.try_get(0)?;
        u32::try_from(count).map(Some).map_err(|_| corrupt("consecutive_failures", format!("{count} is out of range")))
    }

    async fn delete_heartbeat(&self, key: &HeartbeatKey) -> Result<bool, StoreError> {
        let result = sqlx::query("DELETE FROM heartbeats WHERE agent_id = ? AND heartbeat_id = ?")
            .bind(key.agent.as_str())
            .bind(key.heartbeat.as_str())
            .execute(&self.pool)
            .await?;
        Ok(result.rows_affected() > 0)
    }

    async fn set_enabled(&self, key: &HeartbeatKey, enabled: bool, reason: Option<&str>) -> Result<bool, StoreError> {
        let result = sqlx::query(
            "UPDATE heartbeats SET enabled = ?1, disabled_reason = CASE WHEN ?1 = 1 THEN NULL ELSE ?2 END, \
             consecutive_failures = CASE WHEN ?1 = 1 THEN 0 ELSE consecutive_failures END, \
             breaker_opened_at_ms = CASE WHEN ?1 = 1 THEN NULL ELSE breaker_opened_at_ms END \
             WHERE agent_id = ?3 AND heartbeat_id = ?4",
        )
        .bind(i64::from(enabled))
        .bind(reason)
        .bind(key.agent.as_str())
        .bind(key.heartbeat.as_str())
        .execute(&self.pool)
        .await?;
        Ok(result.rows_affected() > 0)
    }

    async fn half_open_breaker(&self, key: &HeartbeatKey) -> Result<bool, StoreError> {
        let result = sqlx::query(
            "UPDATE heartbeats SET enabled = 1, disabled_reason = NULL \
             WHERE agent_id = ? AND heartbeat_id = ? AND enabled = 0 AND disabled_reason = ?",
        )
        .bind(key.agent.as_str())
        .bind(key.heartbeat.as_str())
        .bind(DISABLED_BY_BREAKER)
        .execute(&self.pool)
        .await?;
        Ok(result.rows_affected() > 0)
    }

    async fn set_next_slots(&self, slots: &[(HeartbeatKey, Timestamp)]) -> Result<(), StoreError> {
        let mut tx = self.write_tx().await?;
        update_next_slots(&mut tx, slots).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn claim_slots(&self, claims: &[SlotClaim]) -> Result<Vec<ClaimOutcome>, StoreError> {
        let mut tx = self.write_tx().await?;
        // Rows the INSERT really added; each can answer one claim, so a slot twice in one
        // batch is won once.
        let mut won: BTreeSet<(String, String, i64)> = BTreeSet::new();
        for chunk in claims.chunks(STORE_BATCH_ROWS_MAX) {
            // Only a heartbeat the store still has can claim: one deleted while its timer
            // fired never runs again.
            let mut insert = QueryBuilder::<Sqlite>::new(
                "INSERT INTO executions (agent_id, heartbeat_id, slot_ms, started_at_ms, status) \
                 SELECT v.column1, v.column2, v.column3, v.column4, v.column5 FROM (",
            );
            insert.push_values(chunk, |mut row, claim| {
                row.push_bind(claim.key.agent.as_str())
                    .push_bind(claim.key.heartbeat.as_str())
                    .push_bind(claim.slot.as_millisecond())
                    .push_bind(claim.claimed_at.as_millisecond())
                    .push_bind(ExecutionStatus::Running.as_str());
            });
            insert.push(
                ") AS v JOIN heartbeats h ON h.agent_id = v.column1 AND h.heartbeat_id = v.column2 WHERE true \
                 ON CONFLICT (agent_id, heartbeat_id, slot_ms) DO NOTHING RETURNING agent_id, heartbeat_id, slot_ms",
            );
            for row in insert.build().fetch_all(&mut *tx).await? {
                won.insert((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?));
            }
        }
        let mut outcomes = Vec::with_capacity(claims.len());
        for claim in claims {
            let id = (claim.key.agent.to_string(), claim.key.heartbeat.to_string(), claim.slot.as_millisecond());
            let outcome = if won.remove(&id) {
                ClaimOutcome::Claimed
            } else if heartbeat_exists(&mut tx, &claim.key).await? {
                ClaimOutcome::AlreadyClaimed
            } else {
                ClaimOutcome::Gone
            };
            outcomes.push(outcome);
        }
        let next_slots: Vec<(HeartbeatKey, Timestamp)> = claims
            .iter()
            .zip(&outcomes)
            .filter(|(_, outcome)| **outcome == ClaimOutcome::Claimed)
            .map(|(claim, _)| (claim.key.clone(), claim.next_slot))
            .collect();
        update_next_slots(&mut tx, &next_slots).await?;
        tx.commit().await?;
        Ok(outcomes)
    }

    async fn record_skips(&self, skips: &[SkipRecord]) -> Result<(), StoreError> {
        let mut tx = self.write_tx().await?;
        for chunk in skips.chunks(STORE_BATCH_ROWS_MAX) {
            let mut insert = QueryBuilder::<Sqlite>::new(
                "INSERT INTO executions (agent_id, heartbeat_id, slot_ms, started_at_ms, finished_at_ms, status, skip_reason) ",
            );
            insert.push_values(chunk, |mut row, skip| {
                row.push_bind(skip.key.agent.as_str())
                    .push_bind(skip.key.heartbeat.as_str())
                    .push_bind(skip.slot.as_millisecond())
                    .push_bind(skip.at.as_millisecond())
                    .push_bind(skip.at.as_millisecond())
                    .push_bind(ExecutionStatus::Skipped.as_str())
                    .push_bind(skip.reason.as_str());
            });
            insert.push(" ON CONFLICT (agent_id, heartbeat_id, slot_ms) DO NOTHING");
            insert.build().execute(&mut *tx).await?;
        }
        let next_slots: Vec<(HeartbeatKey, Timestamp)> =
            skips.iter().map(|skip| (skip.key.clone(), skip.next_slot)).collect();
        update_next_slots(&mut tx, &next_slots).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn finish_runs(&self, runs: &[RunRecord], breaker_failures_max: u32) -> Result<Vec<BreakerStep>, StoreError> {
        let mut tx = self.write_tx().await?;
        for chunk in runs.chunks(STORE_BATCH_ROWS_MAX) {
            let mut update = QueryBuilder::<Sqlite>::new(
                "UPDATE executions SET finished_at_ms = v.column4, status = v.column5, delivery = v.column6, \
                 duration_ms = v.column7, error = v.column8, output_preview = v.column9, stop_reason = v.column10, \
                 reply = v.column11, reply_digest = v.column12, llm_calls = v.column13 FROM (",
            );
            update.push_values(chunk, |mut row, run| {
                row.push_bind(run.key.agent.as_str())
                    .push_bind(run.key.heartbeat.as_str())
                    .push_bind(run.slot.as_millisecond())
                    .push_bind(run.finished_at.as_millisecond())
                    .push_bind(run.status.as_str())
                    .push_bind(run.delivery.as_str())
                    .push_bind(i64::try_from(run.duration.as_millis()).unwrap_or(i64::MAX))
                    .push_bind(run.error.as_deref())
                    .push_bind(run.output_preview.as_deref())
                    .push_bind(run.stop_reason.map(StopReason::as_str))
                    .push_bind(run.reply.map(ReplyKind::as_str))
                    .push_bind(run.reply_digest.as_deref())
                    .push_bind(i64::from(run.llm_calls));
            });
            update.push(
                ") AS v WHERE executions.agent_id = v.column1 AND executions.heartbeat_id = v.column2 \
                 AND executions.slot_ms = v.column3",
            );
            update.build().execute(&mut *tx).await?;
        }
        let (steps, latest) = breaker_steps(&mut tx, runs, breaker_failures_max).await?;
        for chunk in latest.chunks(STORE_BATCH_ROWS_MAX) {
            let mut update = QueryBuilder::<Sqlite>::new("UPDATE heartbeats SET consecutive_failures = v.column3, ");
            update.push("enabled = CASE WHEN v.column4 = 1 THEN 0 ELSE enabled END, ");
            update.push("disabled_reason = CASE WHEN v.column4 = 1 THEN ");
            update.push_bind(DISABLED_BY_BREAKER);
            update.push(" ELSE disabled_reason END, ");
            update.push(
                "breaker_opened_at_ms = CASE WHEN v.column6 = 1 THEN v.column5 ELSE breaker_opened_at_ms END FROM (",
            );
            update.push_values(chunk, |mut row, (key, step, opened_at)| {
                row.push_bind(key.agent.as_str())
                    .push_bind(key.heartbeat.as_str())
                    .push_bind(i64::from(step.consecutive_failures))
                    .push_bind(i64::from(step.tripped))
                    .push_bind(opened_at.flatten().map(Timestamp::as_millisecond))
                    .push_bind(i64::from(opened_at.is_some()));
            });
            update.push(") AS v WHERE heartbeats.agent_id = v.column1 AND heartbeats.heartbeat_id = v.column2");
            update.build().execute(&mut *tx).await?;
        }
        consume_system_events(&mut tx, runs).await?;
        tx.commit().await?;
        Ok(steps)
    }

    async fn recover_interrupted(&self, at: Timestamp) -> Result<u64, StoreError> {
        let result = sqlx::query(
            "UPDATE executions SET status = ?, finished_at_ms = ?, delivery = ?, error = ? WHERE status = ?",
        )
        .bind(ExecutionStatus::Interrupted.as_str())
        .bind(at.as_millisecond())
        .bind(DeliveryStatus::NotNeeded.as_str())
        .bind(INTERRUPTED_ERROR_TEXT)
        .bind(ExecutionStatus::Running.as_str())
        .execute(&self.pool)
        .await?;
        Ok(result.rows_affected())
    }

    async fn set_pause(&self, agent: &AgentId, pause: &PauseRecord) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO agent_pauses (agent_id, until_ms, minutes, set_at_ms) VALUES (?, ?, ?, ?) \
             ON CONFLICT (agent_id) DO UPDATE SET until_ms = excluded.until_ms, minutes = excluded.minutes, \
             set_at_ms = excluded.set_at_ms",
        )
        .bind(agent.as_str())
        .bind(pause.until.as_millisecond())
        .bind(i64::from(pause.minutes))
        .bind(pause.set_at.as_millisecond())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn clear_pause(&self, agent: &AgentId) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM agent_pauses WHERE agent_id = ?").bind(agent.as_str()).execute(&self.pool).await?;
        Ok(())
    }

    async fn load_pauses(&self) -> Result<Vec<(AgentId, PauseRecord)>, StoreError> {
        let rows = sqlx::query("SELECT agent_id, until_ms, minutes, set_at_ms FROM agent_pauses ORDER BY agent_id")
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| {
                let agent: String = row.try_get("agent_id")?;
                let what = format!("pause of agent {agent}");
                let agent = AgentId::new(agent).map_err(|e| corrupt(&what, e))?;
                let minutes: i64 = row.try_get("minutes")?;
                let record = PauseRecord {
                    until: timestamp(row.try_get("until_ms")?, &what)?,
                    minutes: u32::try_from(minutes).map_err(|_| corrupt(&what, "minutes out of range"))?,
                    set_at: timestamp(row.try_get("set_at_ms")?, &what)?,
                };
                Ok((agent, record))
            })
            .collect()
    }

    async fn prune_runs(&self, now: Timestamp, retention: RunRetention) -> Result<u64, StoreError> {
        // The rule of `core::retention::PruneCutoffs::prunes`, in SQL over each heartbeat's
        // rows ranked newest first (0 = newest); the conformance suite holds them equal.
        let cutoffs = retention.cutoffs(now);
        let mut tx = self.write_tx().await?;
        let result = sqlx::query(
            "DELETE FROM executions WHERE id IN (SELECT id FROM (SELECT id, status, finished_at_ms, \
             ROW_NUMBER() OVER (PARTITION BY agent_id, heartbeat_id ORDER BY slot_ms DESC) - 1 AS rank \
             FROM executions) WHERE rank > 0 AND status <> 'running' AND finished_at_ms IS NOT NULL \
             AND (finished_at_ms < ?1 OR (rank >= ?2 AND (status = 'skipped' OR finished_at_ms < ?3))))",
        )
        .bind(cutoffs.aged_before.as_millisecond())
        .bind(i64::from(cutoffs.kept_per_heartbeat))
        .bind(cutoffs.protected_from.as_millisecond())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(result.rows_affected())
    }

    async fn latest_slots(&self, keys: &[HeartbeatKey]) -> Result<BTreeMap<HeartbeatKey, Timestamp>, StoreError> {
        let mut latest = BTreeMap::new();
        for chunk in keys.chunks(STORE_BATCH_ROWS_MAX) {
            let mut select = QueryBuilder::<Sqlite>::new(
                "SELECT v.column1, v.column2, (SELECT MAX(e.slot_ms) FROM executions e \
                 WHERE e.agent_id = v.column1 AND e.heartbeat_id = v.column2) FROM (",
            );
            select.push_values(chunk, |mut row, key| {
                row.push_bind(key.agent.as_str()).push_bind(key.heartbeat.as_str());
            });
            select.push(") AS v");
            for row in select.build().fetch_all(&self.pool).await? {
                let Some(slot_ms) = row.try_get::<Option<i64>, _>(2)? else { continue };
                let key = key_from_parts(row.try_get(0)?, row.try_get(1)?)?;
                let slot = timestamp(slot_ms, &format!("latest slot of {key}"))?;
                latest.insert(key, slot);
            }
        }
        Ok(latest)
    }

    async fn executions_page(
        &self,
        key: &HeartbeatKey,
        before: Option<Timestamp>,
        limit: usize,
    ) -> Result<Vec<Execution>, StoreError> {
        let rows = sqlx::query(
            "SELECT agent_id, heartbeat_id, slot_ms, started_at_ms, finished_at_ms, status, skip_reason, delivery, \
             duration_ms, error, output_preview, stop_reason, reply FROM executions WHERE agent_id = ? \
             AND heartbeat_id = ? AND slot_ms < ? ORDER BY slot_ms DESC LIMIT ?",
        )
        .bind(key.agent.as_str())
        .bind(key.heartbeat.as_str())
        .bind(before.map_or(i64::MAX, |before| before.as_millisecond()))
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(execution_from_row).collect()
    }

    async fn delivered_since(&self, key: &HeartbeatKey, digest: &str, since: Timestamp) -> Result<bool, StoreError> {
        let found: Option<i64> = sqlx::query_scalar(
            "SELECT 1 FROM executions WHERE agent_id = ? AND heartbeat_id = ? AND reply_digest = ? \
             AND finished_at_ms >= ? LIMIT 1",
        )
        .bind(key.agent.as_str())
        .bind(key.heartbeat.as_str())
        .bind(digest)
        .bind(since.as_millisecond())
        .fetch_optional(&self.pool)
        .await?;
        Ok(found.is_some())
    }

    async fn queue_system_event(&self, agent: &AgentId, text: &str, at: Timestamp) -> Result<Queued, StoreError> {
        let mut tx = self.write_tx().await?;
        let newest: Option<String> = sqlx::query_scalar(
            "SELECT text FROM system_events WHERE agent_id = ? AND state = 'pending' ORDER BY id DESC LIMIT 1",
        )
        .bind(agent.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        if !system_events::admits(newest.as_deref(), text) {
            return Ok(Queued::Duplicate);
        }
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO system_events (agent_id, text, queued_at_ms) VALUES (?, ?, ?) RETURNING id",
        )
        .bind(agent.as_str())
        .bind(text)
        .bind(at.as_millisecond())
        .fetch_one(&mut *tx)
        .await?;
        let pending: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM system_events WHERE agent_id = ? AND state = 'pending'")
                .bind(agent.as_str())
                .fetch_one(&mut *tx)
                .await?;
        let dropped = system_events::overflow(usize::try_from(pending).unwrap_or(0));
        if dropped > 0 {
            sqlx::query(
                "UPDATE system_events SET state = 'dropped', left_at_ms = ? WHERE id IN (SELECT id FROM system_events \
                 WHERE agent_id = ? AND state = 'pending' ORDER BY id LIMIT ?)",
            )
            .bind(at.as_millisecond())
            .bind(agent.as_str())
            .bind(i64::try_from(dropped).unwrap_or(i64::MAX))
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        let id = u64::try_from(id).map_err(|_| corrupt("system event", format!("negative id {id}")))?;
        Ok(Queued::Added { id, dropped })
    }

    async fn llm_calls_since(
        &self,
        agent: &AgentId,
        since: Timestamp,
        excluding: &[(HeartbeatKey, Timestamp)],
    ) -> Result<u64, StoreError> {
        // One read transaction: the total and the excluded runs' share come from the same
        // snapshot, so a run recorded in between is either in both or in neither.
        let mut tx = self.pool.begin().await?;
        let total: i64 = sqlx::query_scalar(
            "SELECT COALESCE(SUM(llm_calls), 0) FROM executions WHERE agent_id = ? AND finished_at_ms >= ? \
             AND llm_calls > 0",
        )
        .bind(agent.as_str())
        .bind(since.as_millisecond())
        .fetch_one(&mut *tx)
        .await?;
        let mut excluded: i64 = 0;
        for chunk in excluding.chunks(STORE_BATCH_ROWS_MAX) {
            let mut select =
                QueryBuilder::<Sqlite>::new("SELECT COALESCE(SUM(e.llm_calls), 0) FROM executions e JOIN (");
            select.push_values(chunk, |mut row, (key, slot)| {
                row.push_bind(key.agent.as_str()).push_bind(key.heartbeat.as_str()).push_bind(slot.as_millisecond());
            });
            select.push(
                ") AS v ON e.agent_id = v.column1 AND e.heartbeat_id = v.column2 AND e.slot_ms = v.column3 \
                 WHERE e.agent_id = ",
            );
            select.push_bind(agent.as_str());
            select.push(" AND e.finished_at_ms >= ");
            select.push_bind(since.as_millisecond());
            let share: i64 = select.build_query_scalar().fetch_one(&mut *tx).await?;
            excluded = excluded.saturating_add(share);
        }
        tx.commit().await?;
        Ok(u64::try_from(total.saturating_sub(excluded)).unwrap_or(0))
    }

    async fn pending_system_events(&self, agent: &AgentId, now: Timestamp) -> Result<Vec<SystemEvent>, StoreError> {
        let rows: Vec<(i64, String, i64)> = sqlx::query_as(
            "SELECT id, text, queued_at_ms FROM system_events WHERE agent_id = ? AND state = 'pending' ORDER BY id",
        )
        .bind(agent.as_str())
        .fetch_all(&self.pool)
        .await?;
        let mut events = Vec::with_capacity(rows.len());
        for (id, text, queued_at_ms) in rows {
            let what = format!("system event {id}");
            let event = SystemEvent {
                id: u64::try_from(id).map_err(|_| corrupt(&what, "negative id".to_owned()))?,
                text,
                queued_at: Timestamp::from_millisecond(queued_at_ms)
                    .map_err(|error| corrupt(&what, error.to_string()))?,
            };
            if system_events::is_live(&event, now) {
                events.push(event);
            }
        }
        Ok(events)
    }
}

/// Consumes the system events that succeeded runs listed, in the transaction that records
/// the runs: an event leaves the queue exactly when a run that processed it is recorded.
async fn consume_system_events(tx: &mut Transaction<'_, Sqlite>, runs: &[RunRecord]) -> Result<(), StoreError> {
    for run in runs.iter().filter(|run| run.status == ExecutionStatus::Succeeded) {
        for id in &run.consumes {
            sqlx::query(
                "UPDATE system_events SET state = 'consumed', left_at_ms = ? \
                 WHERE id = ? AND agent_id = ? AND state = 'pending'",
            )
            .bind(run.finished_at.as_millisecond())
            .bind(i64::try_from(*id).unwrap_or(i64::MAX))
            .bind(run.key.agent.as_str())
            .execute(&mut **tx)
            .await?;
        }
    }
    Ok(())
}

/// Per heartbeat of a batch: its final count, whether any of its runs tripped, and when
/// the breaker opened if the batch opened (`Some(Some)`) or closed (`Some(None)`) it.
type BreakerUpdate = (HeartbeatKey, BreakerStep, Option<Option<Timestamp>>);

/// Reads the failure counts of the batch's heartbeats and steps the breaker through the
/// batch's runs in order. Returns each run's step, and the update of each heartbeat.
async fn breaker_steps(
    tx: &mut Transaction<'_, Sqlite>,
    runs: &[RunRecord],
    breaker_failures_max: u32,
) -> Result<(Vec<BreakerStep>, Vec<BreakerUpdate>), StoreError> {
    let mut counts: BTreeMap<HeartbeatKey, BreakerStep> = BTreeMap::new();
    let mut opened: BTreeMap<HeartbeatKey, Option<Timestamp>> = BTreeMap::new();
    // Heartbeats whose breaker is open (stored, or tripped earlier in this batch).
    let mut open: BTreeSet<HeartbeatKey> = BTreeSet::new();
    for run in runs {
        if counts.contains_key(&run.key) {
            continue;
        }
        let row: Option<(i64, i64, Option<String>)> = sqlx::query_as(
            "SELECT consecutive_failures, enabled, disabled_reason FROM heartbeats \
             WHERE agent_id = ? AND heartbeat_id = ?",
        )
        .bind(run.key.agent.as_str())
        .bind(run.key.heartbeat.as_str())
        .fetch_optional(&mut **tx)
        .await?;
        if let Some((count, enabled, reason)) = row {
            let consecutive_failures = u32::try_from(count).unwrap_or(u32::MAX);
            counts.insert(run.key.clone(), BreakerStep::unchanged(consecutive_failures));
            if breaker::is_open(enabled != 0, reason.as_deref()) {
                open.insert(run.key.clone());
            }
        }
    }
    let mut steps = Vec::with_capacity(runs.len());
    for run in runs {
        let Some(current) = counts.get_mut(&run.key) else {
            // Deleted while it ran: nothing left to count against.
            steps.push(BreakerStep::unchanged(0));
            continue;
        };
        if open.contains(&run.key) {
            steps.push(BreakerStep::unchanged(current.consecutive_failures));
            continue;
        }
        let step = breaker::after_run(current.consecutive_failures, !run.failed(), breaker_failures_max);
        *current = BreakerStep {
            tripped: current.tripped || step.tripped,
            ..BreakerStep::unchanged(step.consecutive_failures)
        };
        if step.tripped {
            open.insert(run.key.clone());
            opened.insert(run.key.clone(), Some(run.finished_at));
        } else if step.consecutive_failures == 0 {
            opened.insert(run.key.clone(), None);
        }
        steps.push(step);
    }
    let updates = counts
        .into_iter()
        .map(|(key, step)| {
            let opened_at = opened.get(&key).copied();
            (key, step, opened_at)
        })
        .collect();
    Ok((steps, updates))
}

/// Rows one multi-row upsert writes: 24 parameters each, under SQLite's 32,766.
const UPSERT_ROWS_MAX: usize = 1_000;

/// Inserts or replaces definitions (at most [`UPSERT_ROWS_MAX`], each key once), in one
/// statement. A replaced heartbeat is re-enabled with a clean breaker and no armed slot.
/// A fingerprint `None` keeps the stored config fingerprint.
async fn upsert(
    tx: &mut Transaction<'_, Sqlite>,
    defs: &[(HeartbeatDef, Option<String>)],
    at: Timestamp,
) -> Result<(), StoreError> {
    if defs.is_empty() {
        return Ok(());
    }
    let mut insert = QueryBuilder::<Sqlite>::new(
        "INSERT INTO heartbeats (agent_id, heartbeat_id, kind, prompt, schedule_kind, every_ms, cron_expr, \
         cron_timezone, at_ms, catch_up, catch_up_window_ms, overlap, jitter_max_ms, delete_after_run, dedup, \
         delivery_target, active_start, active_end, active_timezone, timeout_ms, origin, config_fingerprint, \
         created_at_ms, updated_at_ms, enabled, disabled_reason, consecutive_failures, next_slot_ms) ",
    );
    insert.push_values(defs, |mut row, (def, fingerprint)| {
        let window = def.active_hours.as_ref();
        let (every_ms, cron, at_ms) = match &def.schedule {
            Schedule::Every(interval) => (Some(millis(*interval)), None, None),
            Schedule::Cron(cron) => (None, Some(cron), None),
            Schedule::At(at) => (None, None, Some(at.as_millisecond())),
        };
        row.push_bind(def.key.agent.as_str().to_owned())
            .push_bind(def.key.heartbeat.as_str().to_owned())
            .push_bind(def.kind.as_str())
            .push_bind(def.prompt.clone())
            .push_bind(def.schedule.kind())
            .push_bind(every_ms)
            .push_bind(cron.map(|cron| cron.expression().to_owned()))
            .push_bind(cron.map(|cron| cron.zone_name().to_owned()))
            .push_bind(at_ms)
            .push_bind(def.policy.catch_up.as_str())
            .push_bind(millis(def.policy.catch_up_window))
            .push_bind(def.policy.overlap.as_str())
            .push_bind(millis(def.policy.jitter_max))
            .push_bind(i64::from(def.delete_after_run))
            .push_bind(i64::from(def.dedup))
            .push_bind(def.target.to_string())
            .push_bind(window.map(|window| window.start_text()))
            .push_bind(window.map(|window| window.end_text()))
            .push_bind(window.map(|window| window.zone_name().to_owned()))
            .push_bind(millis(def.timeout))
            .push_bind(def.origin.as_str())
            .push_bind(fingerprint.clone())
            .push_bind(at.as_millisecond())
            .push_bind(at.as_millisecond())
            .push_unseparated(", 1, NULL, 0, NULL");
    });
    insert.push(
        " ON CONFLICT (agent_id, heartbeat_id) DO UPDATE SET kind = excluded.kind, prompt = excluded.prompt, \
         schedule_kind = excluded.schedule_kind, every_ms = excluded.every_ms, cron_expr = excluded.cron_expr, \
         cron_timezone = excluded.cron_timezone, at_ms = excluded.at_ms, catch_up = excluded.catch_up, \
         catch_up_window_ms = excluded.catch_up_window_ms, overlap = excluded.overlap, \
         jitter_max_ms = excluded.jitter_max_ms, delete_after_run = excluded.delete_after_run, dedup = excluded.dedup, \
         delivery_target = excluded.delivery_target, \
         active_start = excluded.active_start, active_end = excluded.active_end, \
         active_timezone = excluded.active_timezone, timeout_ms = excluded.timeout_ms, origin = excluded.origin, \
         config_fingerprint = COALESCE(excluded.config_fingerprint, heartbeats.config_fingerprint), \
         enabled = 1, disabled_reason = NULL, consecutive_failures = 0, next_slot_ms = NULL, \
         breaker_opened_at_ms = NULL, updated_at_ms = excluded.updated_at_ms",
    );
    insert.build().execute(&mut **tx).await?;
    Ok(())
}

async fn heartbeat_exists(tx: &mut Transaction<'_, Sqlite>, key: &HeartbeatKey) -> Result<bool, StoreError> {
    let row = sqlx::query("SELECT 1 FROM heartbeats WHERE agent_id = ? AND heartbeat_id = ?")
        .bind(key.agent.as_str())
        .bind(key.heartbeat.as_str())
        .fetch_optional(&mut **tx)
        .await?;
    Ok(row.is_some())
}

async fn update_next_slots(
    tx: &mut Transaction<'_, Sqlite>,
    slots: &[(HeartbeatKey, Timestamp)],
) -> Result<(), StoreError> {
    for chunk in slots.chunks(STORE_BATCH_ROWS_MAX) {
        let mut update = QueryBuilder::<Sqlite>::new("UPDATE heartbeats SET next_slot_ms = v.column3 FROM (");
        update.push_values(chunk, |mut row, (key, next_slot)| {
            row.push_bind(key.agent.as_str()).push_bind(key.heartbeat.as_str()).push_bind(next_slot.as_millisecond());
        });
        update.push(") AS v WHERE heartbeats.agent_id = v.column1 AND heartbeats.heartbeat_id = v.column2");
        update.build().execute(&mut **tx).await?;
    }
    Ok(())
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

fn corrupt(what: impl Into<String>, problem: impl ToString) -> StoreError {
    StoreError::Corrupt { what: what.into(), problem: problem.to_string() }
}

fn key_from_parts(agent: String, heartbeat: String) -> Result<HeartbeatKey, StoreError> {
    let what = format!("heartbeat {agent}/{heartbeat}");
    Ok(HeartbeatKey {
        agent: AgentId::new(agent).map_err(|e| corrupt(&what, format!("agent id {e}")))?,
        heartbeat: HeartbeatId::new(heartbeat).map_err(|e| corrupt(&what, format!("heartbeat id {e}")))?,
    })
}

fn timestamp(ms: i64, what: &str) -> Result<Timestamp, StoreError> {
    Timestamp::from_millisecond(ms).map_err(|e| corrupt(what, e))
}

fn duration_ms(ms: i64, what: &str) -> Result<Duration, StoreError> {
    u64::try_from(ms).map(Duration::from_millis).map_err(|_| corrupt(what, format!("negative duration {ms} ms")))
}

/// The columns a heartbeat is read from, in the order of a loaded page's arrays.
const HEARTBEAT_COLUMNS: [&str; 26] = [
    "agent_id",
    "heartbeat_id",
    "kind",
    "prompt",
    "schedule_kind",
    "every_ms",
    "cron_expr",
    "cron_timezone",
    "at_ms",
    "catch_up",
    "catch_up_window_ms",
    "overlap",
    "jitter_max_ms",
    "delete_after_run",
    "dedup",
    "delivery_target",
    "active_start",
    "active_end",
    "active_timezone",
    "timeout_ms",
    "origin",
    "enabled",
    "disabled_reason",
    "consecutive_failures",
    "next_slot_ms",
    "breaker_opened_at_ms",
];

/// Heartbeats a page of the start-up load holds.
const LOAD_PAGE_ROWS: usize = 10_000;

/// One heartbeat of a loaded page: its columns as JSON values, in [`HEARTBEAT_COLUMNS`] order.
struct JsonRow(Vec<serde_json::Value>);

/// What a column may hold.
trait FromColumn: Sized {
    fn from_column(value: &serde_json::Value) -> Option<Self>;
}

impl FromColumn for String {
    fn from_column(value: &serde_json::Value) -> Option<Self> {
        value.as_str().map(str::to_owned)
    }
}

impl FromColumn for i64 {
    fn from_column(value: &serde_json::Value) -> Option<Self> {
        value.as_i64()
    }
}

impl<T: FromColumn> FromColumn for Option<T> {
    fn from_column(value: &serde_json::Value) -> Option<Self> {
        if value.is_null() {
            Some(None)
        } else {
            T::from_column(value).map(Some)
        }
    }
}

impl JsonRow {
    /// The column `name`, as sqlx's `try_get` would read it.
    fn try_get<T: FromColumn, I: AsRef<str>>(&self, name: I) -> Result<T, StoreError> {
        let name = name.as_ref();
        let value = HEARTBEAT_COLUMNS.iter().position(|column| *column == name).and_then(|index| self.0.get(index));
        value
            .and_then(T::from_column)
            .ok_or_else(|| corrupt("a loaded heartbeat", format!("column {name} is missing or mistyped")))
    }
}

fn heartbeat_from_row(row: &JsonRow) -> Result<Heartbeat, StoreError> {
    let key = key_from_parts(row.try_get("agent_id")?, row.try_get("heartbeat_id")?)?;
    let what = format!("heartbeat {key}");
    let target: String = row.try_get("delivery_target")?;
    let window: (Option<String>, Option<String>, Option<String>) =
        (row.try_get("active_start")?, row.try_get("active_end")?, row.try_get("active_timezone")?);
    let active_hours = match window {
        (Some(start), Some(end), Some(zone)) => {
            Some(ActiveHours::new(&start, &end, &zone).map_err(|e| corrupt(&what, e))?)
        }
        (None, None, None) => None,
        _ => return Err(corrupt(&what, "active hours are partly set")),
    };
    let origin: String = row.try_get("origin")?;
    let next_slot: Option<i64> = row.try_get("next_slot_ms")?;
    let opened_at: Option<i64> = row.try_get("breaker_opened_at_ms")?;
    let failures: i64 = row.try_get("consecutive_failures")?;
    let kind: String = row.try_get("kind")?;
    let catch_up: String = row.try_get("catch_up")?;
    let overlap: String = row.try_get("overlap")?;
    let policy = RunPolicy {
        catch_up: CatchUp::parse(&catch_up).ok_or_else(|| corrupt(&what, format!("unknown catch-up {catch_up:?}")))?,
        catch_up_window: duration_ms(row.try_get("catch_up_window_ms")?, &what)?,
        overlap: Overlap::parse(&overlap).ok_or_else(|| corrupt(&what, format!("unknown overlap {overlap:?}")))?,
        jitter_max: duration_ms(row.try_get("jitter_max_ms")?, &what)?,
    };
    let def = HeartbeatDef {
        kind: JobKind::parse(&kind).ok_or_else(|| corrupt(&what, format!("unknown kind {kind:?}")))?,
        prompt: row.try_get("prompt")?,
        schedule: schedule_from_row(row, &what)?,
        policy,
        delete_after_run: row.try_get::<i64, _>("delete_after_run")? == 1,
        dedup: row.try_get::<i64, _>("dedup")? == 1,
        target: DeliveryTarget::parse(&target).map_err(|e| corrupt(&what, e))?,
        active_hours,
        timeout: duration_ms(row.try_get("timeout_ms")?, &what)?,
        origin: Origin::parse(&origin).ok_or_else(|| corrupt(&what, format!("unknown origin {origin:?}")))?,
        key,
    };
    let state = HeartbeatState {
        enabled: row.try_get::<i64, _>("enabled")? == 1,
        disabled_reason: row.try_get("disabled_reason")?,
        consecutive_failures: u32::try_from(failures).map_err(|_| corrupt(&what, "failure count out of range"))?,
        next_slot: next_slot.map(|ms| timestamp(ms, &what)).transpose()?,
        breaker_opened_at: opened_at.map(|ms| timestamp(ms, &what)).transpose()?,
    };
    Ok(Heartbeat { def, state })
}

fn schedule_from_row(row: &JsonRow, what: &str) -> Result<Schedule, StoreError> {
    let kind: String = row.try_get("schedule_kind")?;
    let every: Option<i64> = row.try_get("every_ms")?;
    let cron: (Option<String>, Option<String>) = (row.try_get("cron_expr")?, row.try_get("cron_timezone")?);
    let at: Option<i64> = row.try_get("at_ms")?;
    match (kind.as_str(), every, cron, at) {
        ("every", Some(ms), _, _) => Ok(Schedule::Every(duration_ms(ms, what)?)),
        ("cron", _, (Some(expression), Some(zone)), _) => {
            Ok(Schedule::Cron(CronSchedule::parse(&expression, &zone).map_err(|e| corrupt(what, e))?))
        }
        ("at", _, _, Some(ms)) => Ok(Schedule::At(timestamp(ms, what)?)),
        _ => Err(corrupt(what, format!("schedule kind {kind:?} without its columns"))),
    }
}

fn execution_from_row(row: &SqliteRow) -> Result<Execution, StoreError> {
    let key = key_from_parts(row.try_get("agent_id")?, row.try_get("heartbeat_id")?)?;
    let what = format!("execution of {key}");
    let status: String = row.try_get("status")?;
    let skip_reason: Option<String> = row.try_get("skip_reason")?;
    let delivery: Option<String> = row.try_get("delivery")?;
    let finished_at: Option<i64> = row.try_get("finished_at_ms")?;
    let duration: Option<i64> = row.try_get("duration_ms")?;
    let stop_reason: Option<String> = row.try_get("stop_reason")?;
    let reply: Option<String> = row.try_get("reply")?;
    Ok(Execution {
        reply: reply
            .map(|text| ReplyKind::parse(&text).ok_or_else(|| corrupt(&what, format!("unknown reply {text:?}"))))
            .transpose()?,
        slot: timestamp(row.try_get("slot_ms")?, &what)?,
        started_at: timestamp(row.try_get("started_at_ms")?, &what)?,
        finished_at: finished_at.map(|ms| timestamp(ms, &what)).transpose()?,
        status: ExecutionStatus::parse(&status).ok_or_else(|| corrupt(&what, format!("unknown status {status:?}")))?,
        skip_reason: skip_reason
            .map(|text| SkipReason::parse(&text).ok_or_else(|| corrupt(&what, format!("unknown skip reason {text:?}"))))
            .transpose()?,
        delivery: delivery
            .map(|text| {
                DeliveryStatus::parse(&text).ok_or_else(|| corrupt(&what, format!("unknown delivery {text:?}")))
            })
            .transpose()?,
        duration: duration.map(|ms| duration_ms(ms, &what)).transpose()?,
        error: row.try_get("error")?,
        output_preview: row.try_get("output_preview")?,
        stop_reason: stop_reason
            .map(|text| StopReason::parse(&text).ok_or_else(|| corrupt(&what, format!("unknown stop reason {text:?}"))))
            .transpose()?,
        key,
    })
}
