//! A seed's rows on SQLite: one prepared upsert, stepped once per row on the seed's own
//! connection (sqlx's writer, held through its lock handle) inside the seed's transaction.
//!
//! Through sqlx, a seed of 1,000,000 built a statement of 27,000 parameters for each
//! thousand rows, copied every text into sqlx's arguments, and had SQLite parse that
//! statement and copy each text again: sqlx's thread, the seed's bottleneck, spent about a
//! quarter of its time binding (`docs/performance.md`, 2026-12-03). Here each value is
//! bound straight from its definition, to a statement prepared once a turn.

use jiff::Timestamp;
use sqlx::{Sqlite, Transaction};

use super::sql_rows::{millis, schedule_columns};
use super::sql_store::{UPSERT_CONFLICT_SQL, UPSERT_HEAD_SQL};
use super::sqlite_direct::{Borrowed, Direct, Value};
use crate::core::active_hours::ActiveHours;
use crate::core::heartbeat::{HeartbeatDef, Origin};
use crate::core::hex::lower_hex;
use crate::ports::store::StoreError;

/// Rows stepped in one turn on the connection before the seed's task yields: a turn keeps
/// its runtime thread a few tens of milliseconds, so that a seed of a million does not
/// keep the other tasks of that thread waiting for seconds.
const SEED_ROWS_A_TURN: usize = 5_000;

/// A new row's latest slot, from the log its key kept (deleted, then stored again; ADR
/// 0031), an operator's triggers left out (ADR 0049), as the shared upsert sets it.
const LATEST_SLOT_SQL: &str = "UPDATE heartbeats SET latest_slot_ms = \
     (SELECT e.slot_ms FROM executions e WHERE e.agent_id = ?1 AND e.heartbeat_id = ?2 AND e.triggered = 0 \
     ORDER BY e.slot_ms DESC LIMIT 1) \
     WHERE agent_id = ?1 AND heartbeat_id = ?2 AND latest_slot_ms IS NULL";

const ANY_LOGGED_SQL: &str = "SELECT EXISTS (SELECT 1 FROM executions)";

/// Upserts `changed` (`defs[index]`, in key order) as config rows stored at `at`, in `tx`,
/// each with its config fingerprint, taken as its row is gathered: on another core than
/// SQLite's, while it writes the turn before.
pub(super) async fn write_rows(
    tx: &mut Transaction<'_, Sqlite>,
    defs: &[HeartbeatDef],
    changed: &[usize],
    at: Timestamp,
) -> Result<(), StoreError> {
    let upsert_sql = upsert_sql();
    // A store with no log at all (a first seed) has no latest slot to find for any row.
    let mut any_logged = None;
    let mut turns = changed.chunks(SEED_ROWS_A_TURN);
    let mut next = turns.next().map(|turn| Gathered::of(defs, turn, at));
    while let Some(gathered) = next.take() {
        let following = turns.next();
        {
            let mut handle = tx.lock_handle().await?;
            // SAFETY: the lock handle keeps sqlx's thread off the connection while it
            // lives, and `borrowed` drops before it.
            let borrowed = unsafe { Borrowed::new(handle.as_raw_handle()) };
            // The next turn's values are gathered on another core while this one's are
            // written: a definition read in key order is a cache miss, a sixth of the
            // writing thread's time when it did both.
            let written = std::thread::scope(|scope| {
                let gathering = following.map(|turn| scope.spawn(move || Gathered::of(defs, turn, at)));
                let written = write_turn(&borrowed.direct(), &upsert_sql, &mut any_logged, &gathered);
                // Gathering cannot fail; a panic there is a bug, and stays one.
                next = gathering.map(|thread| thread.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)));
                written
            });
            written?;
        }
        tokio::task::yield_now().await;
    }
    Ok(())
}

/// The upsert of one row: its [`UPSERT_VALUES`] values, then the three of a fresh breaker,
/// then the first slot.
fn upsert_sql() -> String {
    let values: Vec<String> = (1..UPSERT_VALUES).map(|n| format!("?{n}")).collect();
    format!("{UPSERT_HEAD_SQL}VALUES ({}, 1, NULL, 0, ?{UPSERT_VALUES}){UPSERT_CONFLICT_SQL}", values.join(", "))
}

/// Values an upsert binds a row; the first two are its key.
const UPSERT_VALUES: usize = 27;

/// A turn's rows, each as its upsert's values in order, their texts copied into one buffer.
struct Gathered {
    texts: String,
    values: Vec<Gathering>,
}

/// A value of [`Gathered`]: a text is its place in the buffer.
#[derive(Clone, Copy)]
enum Gathering {
    Int(i64),
    Null,
    Text { start: usize, end: usize },
}

impl Gathered {
    fn of(defs: &[HeartbeatDef], turn: &[usize], at: Timestamp) -> Self {
        let mut gathered = Self { texts: String::new(), values: Vec::with_capacity(turn.len() * UPSERT_VALUES) };
        for index in turn {
            let def = &defs[*index];
            let fingerprint = lower_hex(&def.fingerprint_digest());
            row_values(def, &fingerprint, at, &mut |value| gathered.push(value));
        }
        gathered
    }

    fn push(&mut self, value: Value<'_>) {
        let gathering = match value {
            Value::Int(int) => Gathering::Int(int),
            Value::Null => Gathering::Null,
            Value::Text(text) => {
                let start = self.texts.len();
                self.texts.push_str(text);
                Gathering::Text { start, end: self.texts.len() }
            }
        };
        self.values.push(gathering);
    }

    /// Each row's values, borrowing the buffer's texts.
    fn rows(&self) -> impl Iterator<Item = [Value<'_>; UPSERT_VALUES]> {
        self.values.chunks_exact(UPSERT_VALUES).map(|row| {
            std::array::from_fn(|column| match row[column] {
                Gathering::Int(int) => Value::Int(int),
                Gathering::Null => Value::Null,
                Gathering::Text { start, end } => Value::Text(self.texts.get(start..end).unwrap_or_default()),
            })
        })
    }
}

/// The values of `def`'s upsert as a config row stored at `at`, in the statement's order.
fn row_values(def: &HeartbeatDef, fingerprint: &str, at: Timestamp, push: &mut impl FnMut(Value<'_>)) {
    let window = def.active_hours.as_ref();
    let (start, end) = (window.map(ActiveHours::start_text), window.map(ActiveHours::end_text));
    let tools = def.tools.to_json();
    let (every_ms, cron, at_ms) = schedule_columns(&def.schedule);
    let stored_at = at.as_millisecond();
    let values: [Value<'_>; UPSERT_VALUES] = [
        def.key.agent.as_str().into(),
        def.key.heartbeat.as_str().into(),
        def.kind.as_str().into(),
        (&*def.prompt).into(),
        def.schedule.kind().into(),
        every_ms.into(),
        cron.map(|cron| cron.expression()).into(),
        cron.map(|cron| cron.zone_name()).into(),
        at_ms.into(),
        def.policy.catch_up.as_str().into(),
        millis(def.policy.catch_up_window).into(),
        def.policy.overlap.as_str().into(),
        millis(def.policy.jitter_max).into(),
        i64::from(def.delete_after_run).into(),
        i64::from(def.dedup).into(),
        def.target.text().as_str().into(),
        start.as_deref().into(),
        end.as_deref().into(),
        window.map(ActiveHours::zone_name).into(),
        millis(def.timeout).into(),
        Origin::Config.as_str().into(),
        fingerprint.into(),
        tools.as_deref().into(),
        def.model.as_deref().into(),
        stored_at.into(),
        stored_at.into(),
        // Stored with its first slot: a first start then arms without a write (ADR 0028).
        def.schedule.first_slot(at).map(|slot| slot.as_millisecond()).into(),
    ];
    for value in values {
        push(value);
    }
}

fn write_turn(
    direct: &Direct<'_>,
    upsert_sql: &str,
    any_logged: &mut Option<bool>,
    gathered: &Gathered,
) -> Result<(), StoreError> {
    let logged = match *any_logged {
        Some(logged) => logged,
        None => {
            let logged = direct.prepare(ANY_LOGGED_SQL)?.query_row(&[], |row| Ok(row.int(0) != 0))?.unwrap_or(false);
            *any_logged = Some(logged);
            logged
        }
    };
    let mut upsert = direct.prepare(upsert_sql)?;
    let mut latest = if logged { Some(direct.prepare(LATEST_SLOT_SQL)?) } else { None };
    for row in gathered.rows() {
        upsert.execute(&row)?;
        if let Some(latest) = latest.as_mut() {
            latest.execute(&row[..2])?;
        }
    }
    Ok(())
}
