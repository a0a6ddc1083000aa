//! The dispatch path's two writes on SQLite's direct writer (ADRs 0033, 0034): a pass's
//! claims, and a group commit of results. Each is one prepared statement per kind of
//! write (kept prepared by the writer's connection), stepped once per row, in a
//! transaction the caller began and commits. They do what the
//! shared multi-row statements do on PostgreSQL (`sql_store`), and the store conformance
//! suite holds both to one behaviour. After a pass's claims commit, the writer reads the
//! definitions they won here too, with the store's own read (ADR 0037).

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;

use super::breaker_batch::{self, BreakerUpdate, StoredBreaker};
use super::slot_batch;
use super::sql_lists::{json_list, listed_keys};
use super::sql_rows::{schedule_columns, stored_count};
use super::sqlite_direct::{Direct, Value};
use super::sqlite_statements::{
    BREAKER_READ_SQL, BREAKER_WRITE_SQL, CLAIMED_ROW_SQL, CLAIM_SQL, CONSUME_EVENT_SQL, LOST_CLAIM_SQL,
    RESULT_ON_RUNNING_SQL, RESULT_SQL,
};
use crate::core::breaker::{BreakerStep, DISABLED_BY_BREAKER};
use crate::core::ids::HeartbeatKey;
use crate::core::reply::ReplyKind;
use crate::limits::STORE_BATCH_ROWS_MAX;
use crate::ports::store::{ClaimOutcome, ExecutionStatus, RunRecord, SlotClaim, StopReason, StoreError};

/// Claims `claims` in order; a slot twice in one batch is won once. Then stores each
/// claimed heartbeat's next slot and raises its latest logged slot.
pub(super) fn claim(direct: &Direct<'_>, claims: &[SlotClaim]) -> Result<Vec<ClaimOutcome>, StoreError> {
    let mut insert = direct.prepare(CLAIM_SQL)?;
    let mut lost = direct.prepare(LOST_CLAIM_SQL)?;
    let mut outcomes = Vec::with_capacity(claims.len());
    for claim in claims {
        let key = key_values(&claim.key);
        let inserted = insert.execute(&[
            key[0],
            key[1],
            claim.slot.as_millisecond().into(),
            claim.claimed_at.as_millisecond().into(),
            ExecutionStatus::Running.as_str().into(),
            i64::from(claim.triggered).into(),
        ])?;
        let outcome = if inserted > 0 {
            ClaimOutcome::Claimed
        } else {
            let met = [key[0], key[1], claim.slot.as_millisecond().into()];
            // A row met that is not there (NULL, read as 0) cannot be: the row is the claim.
            match lost.query_row(&met, |row| Ok(row.int(0)))? {
                None => ClaimOutcome::Gone,
                Some(0) => ClaimOutcome::AlreadyClaimed,
                Some(_) => ClaimOutcome::AlreadyTriggered,
            }
        };
        outcomes.push(outcome);
    }
    let scheduled = slot_batch::scheduled_won(claims, &outcomes);
    if scheduled.is_empty() {
        return Ok(outcomes);
    }
    // In claim order: the last claim's next slot stands, the highest slot is the latest.
    let mut claimed_row = direct.prepare(CLAIMED_ROW_SQL)?;
    for claim in &scheduled {
        let next = &claim.next_slot;
        let (every_ms, cron, at_ms) = schedule_columns(&next.schedule);
        let key = key_values(&claim.key);
        claimed_row.execute(&[
            key[0],
            key[1],
            next.at.as_millisecond().into(),
            next.schedule.kind().into(),
            every_ms.into(),
            cron.map(|cron| cron.expression()).into(),
            cron.map(|cron| cron.zone_name()).into(),
            at_ms.into(),
            claim.slot.as_millisecond().into(),
        ])?;
    }
    Ok(outcomes)
}

/// The stored definitions of `keys`' heartbeats as `definitions_sql` (the store's batched
/// definitions read, its list one JSON parameter) answers them: a page of JSON rows for
/// each batch of keys, decoded by the caller, off this thread.
pub(super) fn definitions_pages(
    direct: &Direct<'_>,
    definitions_sql: &str,
    keys: &[HeartbeatKey],
) -> Result<Vec<String>, StoreError> {
    let mut read = direct.prepare(definitions_sql)?;
    let mut pages = Vec::new();
    for chunk in keys.chunks(STORE_BATCH_ROWS_MAX) {
        let list = json_list(&listed_keys(chunk))?;
        // An aggregate: one row, an empty array when none of them is stored.
        let page = read.query_row(&[Value::Text(&list)], |row| row.text(0))?.flatten();
        pages.push(page.unwrap_or_else(|| "[]".to_owned()));
    }
    Ok(pages)
}

/// What a group commit of results wrote: each run's breaker step, and whether its result
/// found its claimed row (one that did not wrote nothing: the index of recent deliveries
/// must not count its reply).
#[derive(Debug)]
pub(crate) struct Finished {
    pub(crate) steps: Vec<BreakerStep>,
    pub(crate) written: Vec<bool>,
    /// A result was written over a row that was no longer running: a reply it had
    /// delivered may be gone.
    pub(crate) rewrote: bool,
}

/// Records `runs`' results, steps the breaker through them in order, and consumes the
/// system events the succeeded ones processed. Returns each run's breaker step.
pub(super) fn finish(
    direct: &Direct<'_>,
    runs: &[RunRecord],
    breaker_failures_max: u32,
) -> Result<Finished, StoreError> {
    let mut on_running = direct.prepare(RESULT_ON_RUNNING_SQL)?;
    let mut written = Vec::with_capacity(runs.len());
    let mut rewrote = false;
    for run in runs {
        let key = key_values(&run.key);
        let tool_use = run.tool_use.as_ref().and_then(|tool_use| serde_json::to_string(tool_use).ok());
        let values = [
            key[0],
            key[1],
            run.slot.as_millisecond().into(),
            run.finished_at.as_millisecond().into(),
            run.status.as_str().into(),
            run.delivery.as_str().into(),
            i64::try_from(run.duration.as_millis()).unwrap_or(i64::MAX).into(),
            run.error.as_deref().into(),
            run.output_preview.as_deref().into(),
            run.stop_reason.map(StopReason::as_str).into(),
            run.reply.map(ReplyKind::as_str).into(),
            run.reply_digest.as_deref().into(),
            i64::from(run.llm_calls).into(),
            tool_use.as_deref().into(),
            stored_count(run.usage.tokens.input).into(),
            stored_count(run.usage.tokens.cached).into(),
            stored_count(run.usage.tokens.output).into(),
            stored_count(run.usage.tokens.reasoning).into(),
            stored_count(run.usage.cost_micros).into(),
            i64::from(run.usage.unpriced_calls).into(),
            run.transcript.as_deref().into(),
        ];
        let mut changed = on_running.execute(&values)?;
        if changed == 0 {
            // Not the running row a claim wrote (never in a dispatch): the rarer statement.
            changed = direct.prepare(RESULT_SQL)?.execute(&values)?;
            rewrote |= changed > 0;
        }
        written.push(changed > 0);
    }
    let mut read = direct.prepare(BREAKER_READ_SQL)?;
    let mut stored = BTreeMap::new();
    // Each row's count and whether it has no cooldown: an update that changes neither is
    // not written (runs that succeed after successes, most of them).
    let mut as_stored: BTreeMap<&HeartbeatKey, (u32, bool)> = BTreeMap::new();
    for key in runs.iter().map(|run| &run.key).collect::<BTreeSet<_>>() {
        let row = read.query_row(&key_values(key), |row| {
            let breaker = StoredBreaker {
                consecutive_failures: u32::try_from(row.int(0)).unwrap_or(u32::MAX),
                enabled: row.int(1) != 0,
                disabled_reason: row.text(2)?,
            };
            Ok((breaker, row.int(3) != 0))
        })?;
        if let Some((row, no_cooldown)) = row {
            as_stored.insert(key, (row.consecutive_failures, no_cooldown));
            stored.insert(key.clone(), row);
        }
    }
    let (steps, updates) = breaker_batch::step_batch(runs, stored, breaker_failures_max);
    let changes = |(key, step, opened_at): &&BreakerUpdate| {
        let unchanged = as_stored.get(key).is_some_and(|(count, no_cooldown)| {
            step.consecutive_failures == *count
                && !step.tripped
                && match opened_at {
                    None => true,
                    Some(None) => *no_cooldown,
                    Some(Some(_)) => false,
                }
        });
        !unchanged
    };
    let mut write = direct.prepare(BREAKER_WRITE_SQL)?;
    for (key, step, opened_at) in updates.iter().filter(changes) {
        let key = key_values(key);
        write.execute(&[
            key[0],
            key[1],
            i64::from(step.consecutive_failures).into(),
            i64::from(step.tripped).into(),
            opened_at.flatten().map(Timestamp::as_millisecond).into(),
            i64::from(opened_at.is_some()).into(),
            DISABLED_BY_BREAKER.into(),
        ])?;
    }
    consume_system_events(direct, runs)?;
    Ok(Finished { steps, written, rewrote })
}

/// An event leaves the queue exactly when a run that processed it is recorded.
fn consume_system_events(direct: &Direct<'_>, runs: &[RunRecord]) -> Result<(), StoreError> {
    let mut consume = direct.prepare(CONSUME_EVENT_SQL)?;
    for run in runs.iter().filter(|run| run.status == ExecutionStatus::Succeeded) {
        for id in &run.consumes {
            consume.execute(&[
                run.finished_at.as_millisecond().into(),
                i64::try_from(*id).unwrap_or(i64::MAX).into(),
                run.key.agent.as_str().into(),
            ])?;
        }
    }
    Ok(())
}

fn key_values(key: &HeartbeatKey) -> [Value<'_>; 2] {
    [key.agent.as_str().into(), key.heartbeat.as_str().into()]
}

#[cfg(test)]
mod tests {
    use sqlx::sqlite::SqliteConnectOptions;
    use sqlx::{Row, SqlitePool};

    use super::*;
    use crate::store::sqlite::SqliteStore;

    /// SQLite builds a temporary table for a check's `IN` list of more than two texts once
    /// an execution, and these statements run once a row (ADR 0035): none may need one, and
    /// no table's check may list more than two values.
    #[tokio::test]
    async fn no_dispatch_statement_or_check_builds_a_temporary_table() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("explain.db");
        let store = SqliteStore::open(&path).await.expect("a new store");
        let pool = SqlitePool::connect_with(SqliteConnectOptions::new().filename(&path)).await.expect("a reader");
        let statements = [
            CLAIM_SQL,
            LOST_CLAIM_SQL,
            CLAIMED_ROW_SQL,
            RESULT_ON_RUNNING_SQL,
            RESULT_SQL,
            BREAKER_READ_SQL,
            BREAKER_WRITE_SQL,
            CONSUME_EVENT_SQL,
        ];
        for sql in statements {
            let program = sqlx::query(&format!("EXPLAIN {sql}")).fetch_all(&pool).await.expect("explained");
            let opcodes: Vec<String> = program.iter().map(|row| row.get::<String, _>("opcode")).collect();
            assert!(opcodes.iter().any(|opcode| opcode == "Halt"), "a whole program: {opcodes:?}");
            assert!(!opcodes.iter().any(|opcode| opcode == "OpenEphemeral"), "{sql}: {opcodes:?}");
        }
        // The rule is the schema's, not these statements': a list of three still builds one.
        let listed = sqlx::query("EXPLAIN SELECT 1 FROM executions WHERE status IN ('a', 'b', 'c')")
            .fetch_all(&pool)
            .await
            .expect("explained");
        assert!(listed.iter().any(|row| row.get::<String, _>("opcode") == "OpenEphemeral"));
        // Nor may any table's check list more than two values, whatever writes the table.
        let tables: Vec<String> = sqlx::query_scalar("SELECT sql FROM sqlite_master WHERE type = 'table'")
            .fetch_all(&pool)
            .await
            .expect("the schema");
        for table in &tables {
            for listed in table.split(" IN (").skip(1) {
                let values = listed.split(')').next().unwrap_or_default();
                assert!(values.matches(',').count() < 2, "a check lists ({values}) in {table}");
            }
        }
        drop(store);
    }
}
