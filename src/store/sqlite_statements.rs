//! The statements SQLite's dispatch path steps a row at a time (`sqlite_writes`). Public so
//! that the scale benchmark's SQLite floor steps the very same statements with no engine
//! around them (`benches/scale/sqlite_floor.rs`).

/// A claim: the slot's row, written only while its heartbeat is stored (one deleted while
/// its timer fired never runs again) and only once (the unique key is the claim).
pub const CLAIM_SQL: &str =
    "INSERT INTO executions (agent_id, heartbeat_id, slot_ms, started_at_ms, status, triggered) \
     SELECT ?1, ?2, ?3, ?4, ?5, ?6 WHERE EXISTS (SELECT 1 FROM heartbeats WHERE agent_id = ?1 AND heartbeat_id = ?2) \
     ON CONFLICT (agent_id, heartbeat_id, slot_ms) DO NOTHING";

/// Why a claim wrote no row: none when its heartbeat is gone, else whether the row it met
/// is an operator's trigger's (`triggered`, ADR 0055).
pub const LOST_CLAIM_SQL: &str = "SELECT (SELECT triggered FROM executions \
     WHERE agent_id = ?1 AND heartbeat_id = ?2 AND slot_ms = ?3) \
     FROM heartbeats WHERE agent_id = ?1 AND heartbeat_id = ?2";

/// What a claim changes in its heartbeat's row, in one statement: the next slot, stored
/// where the row still has the schedule that gave it (`NextSlot`: the kind, then the kind's
/// own columns), and the latest logged slot, only ever raised (ADR 0031). One statement,
/// not two: one step a claim.
pub const CLAIMED_ROW_SQL: &str = "UPDATE heartbeats SET \
     next_slot_ms = CASE WHEN schedule_kind = ?4 \
         AND (?5 IS NULL OR every_ms = ?5) \
         AND (?6 IS NULL OR (cron_expr = ?6 AND cron_timezone = ?7)) \
         AND (?8 IS NULL OR at_ms = ?8) THEN ?3 ELSE next_slot_ms END, \
     latest_slot_ms = CASE WHEN latest_slot_ms IS NULL OR latest_slot_ms < ?9 THEN ?9 ELSE latest_slot_ms END \
     WHERE agent_id = ?1 AND heartbeat_id = ?2";

/// A run's result written on its row, and a condition after the row's key.
macro_rules! result_sql {
    ($condition:literal) => {
        concat!(
            "UPDATE executions SET finished_at_ms = ?4, status = ?5, delivery = ?6, duration_ms = ?7, \
             error = ?8, output_preview = ?9, stop_reason = ?10, reply = ?11, reply_digest = ?12, llm_calls = ?13, \
             tool_use = ?14, input_tokens = ?15, cached_tokens = ?16, output_tokens = ?17, reasoning_tokens = ?18, \
             cost_micros = ?19, unpriced_calls = ?20, transcript = ?21 \
             WHERE agent_id = ?1 AND heartbeat_id = ?2 AND slot_ms = ?3",
            $condition
        )
    };
}

/// A run's result, on the `running` row its claim wrote: every run of a dispatch.
pub const RESULT_ON_RUNNING_SQL: &str = result_sql!(" AND status = 'running'");
/// A result on a row that is not running (finished already, or skipped): written as well,
/// but whatever the row held before, a delivered reply among it, is gone.
pub const RESULT_SQL: &str = result_sql!("");

/// A heartbeat's breaker as stored, read once a group commit for each of its heartbeats.
pub const BREAKER_READ_SQL: &str = "SELECT consecutive_failures, enabled, disabled_reason, \
     breaker_opened_at_ms IS NULL FROM heartbeats WHERE agent_id = ?1 AND heartbeat_id = ?2";

/// A breaker's step, written only where it changes the row.
pub const BREAKER_WRITE_SQL: &str = "UPDATE heartbeats SET consecutive_failures = ?3, \
     enabled = CASE WHEN ?4 = 1 THEN 0 ELSE enabled END, \
     disabled_reason = CASE WHEN ?4 = 1 THEN ?7 ELSE disabled_reason END, \
     breaker_opened_at_ms = CASE WHEN ?6 = 1 THEN ?5 ELSE breaker_opened_at_ms END \
     WHERE agent_id = ?1 AND heartbeat_id = ?2";

/// A system event a succeeded run processed leaves the queue.
pub const CONSUME_EVENT_SQL: &str = "UPDATE system_events SET state = 'consumed', left_at_ms = ?1 \
     WHERE id = ?2 AND agent_id = ?3 AND state = 'pending'";
