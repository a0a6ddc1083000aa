//! Reading the relational stores' rows back into the engine's types, for SQLite and
//! PostgreSQL alike: a stored row that does not parse is `StoreError::Corrupt`, never a panic.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use arcstr::ArcStr;
use jiff::Timestamp;
use sqlx::{ColumnIndex, Decode, Row, Type};

use crate::core::active_hours::ActiveHours;
use crate::core::budget::DaySpend;
use crate::core::cron::CronSchedule;
use crate::core::delivery_target::DeliveryTarget;
use crate::core::guard::SkipReason;
use crate::core::heartbeat::{Heartbeat, HeartbeatDef, HeartbeatState, JobKind, Origin};
use crate::core::ids::{AgentId, HeartbeatId, HeartbeatKey};
use crate::core::policy::{CatchUp, Overlap, RunPolicy};
use crate::core::reply::ReplyKind;
use crate::core::schedule::Schedule;
use crate::core::tool_policy::JobTools;
use crate::core::usage::{RunUsage, TokenUsage};
use crate::ports::store::{Armable, DeliveryStatus, Execution, ExecutionStatus, StopReason, StoreError};

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

pub(super) fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// A schedule as its kind's own columns: `every_ms`, the cron (its expression and zone),
/// `at_ms`; exactly one is set.
pub(super) fn schedule_columns(schedule: &Schedule) -> (Option<i64>, Option<&CronSchedule>, Option<i64>) {
    match schedule {
        Schedule::Every(interval) => (Some(millis(*interval)), None, None),
        Schedule::Cron(cron) => (None, Some(cron), None),
        Schedule::At(at) => (None, None, Some(at.as_millisecond())),
    }
}

pub(super) fn corrupt(what: impl Into<String>, problem: impl ToString) -> StoreError {
    StoreError::Corrupt { what: what.into(), problem: problem.to_string() }
}

pub(super) fn key_from_parts(agent: String, heartbeat: String) -> Result<HeartbeatKey, StoreError> {
    let what = format!("heartbeat {agent}/{heartbeat}");
    Ok(HeartbeatKey {
        agent: AgentId::new(agent).map_err(|e| corrupt(&what, format!("agent id {e}")))?,
        heartbeat: HeartbeatId::new(heartbeat).map_err(|e| corrupt(&what, format!("heartbeat id {e}")))?,
    })
}

pub(super) fn timestamp(ms: i64, what: &dyn fmt::Display) -> Result<Timestamp, StoreError> {
    Timestamp::from_millisecond(ms).map_err(|e| corrupt(what.to_string(), e))
}

/// A count as a column keeps it (the columns are signed 64-bit).
pub(super) fn stored_count(count: u64) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// A sum the store read back as a count (a negative one can only come from a corrupt row).
fn count(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// The calls, tokens and cost sums of `spent_since`.
pub(super) fn spend_from((calls, tokens, cost_micros): (i64, i64, i64)) -> DaySpend {
    DaySpend { calls: count(calls), tokens: count(tokens), cost_micros: count(cost_micros) }
}

pub(super) fn duration_ms(ms: i64, what: &dyn fmt::Display) -> Result<Duration, StoreError> {
    u64::try_from(ms)
        .map(Duration::from_millis)
        .map_err(|_| corrupt(what.to_string(), format!("negative duration {ms} ms")))
}

/// What a start-up's arming reads of a heartbeat, first in a row (in [`HeartbeatRow`]'s
/// order).
pub(super) const ARMING_COLUMNS: [&str; 24] = [
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
    "delivery_target",
    "active_start",
    "active_end",
    "active_timezone",
    "origin",
    "enabled",
    "disabled_reason",
    "consecutive_failures",
    "next_slot_ms",
    "breaker_opened_at_ms",
];

/// What only a claimed slot's run reads, last in a row: a load for arming leaves them out
/// (a restart of a million parsed and built them for nothing; the driver reads a claimed
/// slot's whole definition).
pub(super) const RUN_COLUMNS: [&str; 4] = ["dedup", "timeout_ms", "tools", "model"];

/// A whole heartbeat's row as read (`.0`) and as selected from `heartbeats` named `table`
/// (`.1`): the arming columns, a null where a load for arming has the latest slot
/// ([`LATEST_SLOT_COLUMN`]), and the run's columns.
pub(super) fn whole_row_columns(table: &str) -> (String, String) {
    let read: Vec<&str> = ARMING_COLUMNS.iter().chain(&["latest_slot_ms"]).chain(&RUN_COLUMNS).copied().collect();
    let qualified = |column: &&str| format!("{table}{column}");
    let selected: Vec<String> = ARMING_COLUMNS
        .iter()
        .map(qualified)
        .chain(["NULL AS latest_slot_ms".to_owned()])
        .chain(RUN_COLUMNS.iter().map(qualified))
        .collect();
    (read.join(", "), selected.join(", "))
}

/// What a load for arming selects after [`ARMING_COLUMNS`]: an enabled heartbeat's latest
/// slot in the log, as its row keeps it (ADR 0031; a seek in the log per row was a quarter
/// of SQLite's time in a restart of a million).
pub(super) const LATEST_SLOT_COLUMN: &str = "CASE WHEN enabled = 1 THEN latest_slot_ms END AS latest_slot_ms";

/// The latest slot in the log of the key in `v.column1` (agent) and `v.column2`
/// (heartbeat), an operator's triggers left out (ADR 0049), sought in the log itself: for
/// keys that may have no row, and for a row being stored. Read down the log's key, it stops
/// at the first row that is not a trigger.
pub(super) const LOGGED_LATEST_SLOT_OF_V: &str = "(SELECT e.slot_ms FROM executions e \
     WHERE e.agent_id = v.column1 AND e.heartbeat_id = v.column2 AND e.triggered = 0 ORDER BY e.slot_ms DESC LIMIT 1)";

/// Heartbeats a page of the start-up load holds.
pub(super) const LOAD_PAGE_ROWS: usize = 10_000;

/// One heartbeat of a read's rows, decoded straight from its JSON array (fields in the
/// order of [`ARMING_COLUMNS`], the latest slot, [`RUN_COLUMNS`]): no JSON value per column
/// (a million rows spent 6 s going through `serde_json::Value`), and its texts borrowed
/// from the page unless escaped. A load for arming's row ends before the run's columns,
/// which then take their defaults.
#[derive(serde::Deserialize)]
pub(super) struct HeartbeatRow<'page> {
    #[serde(borrow)]
    agent_id: Cow<'page, str>,
    #[serde(borrow)]
    heartbeat_id: Cow<'page, str>,
    #[serde(borrow)]
    kind: Cow<'page, str>,
    #[serde(borrow)]
    prompt: Cow<'page, str>,
    #[serde(borrow)]
    schedule_kind: Cow<'page, str>,
    every_ms: Option<i64>,
    #[serde(borrow)]
    cron_expr: Option<Cow<'page, str>>,
    #[serde(borrow)]
    cron_timezone: Option<Cow<'page, str>>,
    at_ms: Option<i64>,
    #[serde(borrow)]
    catch_up: Cow<'page, str>,
    catch_up_window_ms: i64,
    #[serde(borrow)]
    overlap: Cow<'page, str>,
    jitter_max_ms: i64,
    delete_after_run: i64,
    #[serde(borrow)]
    delivery_target: Cow<'page, str>,
    #[serde(borrow)]
    active_start: Option<Cow<'page, str>>,
    #[serde(borrow)]
    active_end: Option<Cow<'page, str>>,
    #[serde(borrow)]
    active_timezone: Option<Cow<'page, str>>,
    #[serde(borrow)]
    origin: Cow<'page, str>,
    enabled: i64,
    #[serde(borrow)]
    disabled_reason: Option<Cow<'page, str>>,
    consecutive_failures: i64,
    next_slot_ms: Option<i64>,
    breaker_opened_at_ms: Option<i64>,
    /// A load for arming's [`LATEST_SLOT_COLUMN`]; null in a whole row.
    #[serde(default)]
    latest_slot_ms: Option<i64>,
    #[serde(default)]
    dedup: i64,
    #[serde(default)]
    timeout_ms: i64,
    #[serde(borrow, default)]
    tools: Option<Cow<'page, str>>,
    #[serde(borrow, default)]
    model: Option<Cow<'page, str>>,
}

/// Hands `each` the rows of a page (the page query's JSON array of arrays) one at a time,
/// as they are decoded: a page decoded whole first held 10,000 rows of 600 bytes, grown and
/// then moved row by row into what was built from them (an eighth of a restart's parse).
/// The first error `each` returns ends the page.
pub(super) fn each_heartbeat_row<'page>(
    page: &'page str,
    each: &mut dyn FnMut(HeartbeatRow<'page>) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    struct Rows<'each, 'page>(&'each mut dyn FnMut(HeartbeatRow<'page>) -> Result<(), StoreError>);

    impl<'page> serde::de::Visitor<'page> for Rows<'_, 'page> {
        /// What `each` said, apart from the page's own decoding errors.
        type Value = Result<(), StoreError>;

        fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
            formatter.write_str("an array of heartbeat rows")
        }

        fn visit_seq<A: serde::de::SeqAccess<'page>>(self, mut rows: A) -> Result<Self::Value, A::Error> {
            while let Some(row) = rows.next_element::<HeartbeatRow<'page>>()? {
                if let Err(error) = (self.0)(row) {
                    // The rest is read past unbuilt: the page must still end where it should.
                    while rows.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                    return Ok(Err(error));
                }
            }
            Ok(Ok(()))
        }
    }

    let decoding = |e: serde_json::Error| corrupt("a page of heartbeats", e);
    let mut page_json = serde_json::Deserializer::from_str(page);
    serde::Deserializer::deserialize_seq(&mut page_json, Rows(each)).map_err(decoding)??;
    page_json.end().map_err(decoding)
}

/// Texts that many rows of one read repeat, parsed once and shared: the heartbeats of one
/// agent share its id's text, those of one delivery target its target's. At a start-up of
/// a million this also keeps the load from allocating, row by row, texts it frees again
/// between the ids it keeps.
#[derive(Default)]
pub(super) struct SharedTexts {
    agents: BTreeMap<String, AgentId>,
    /// The agent of the row before: rows come by key, an agent's together, so most rows
    /// end here rather than in a search of the map (a restart's million searched it).
    last_agent: Option<AgentId>,
    /// Keyed by each target's own text: a key of its own would be freed after the load
    /// among the texts kept, a hole each when every heartbeat has a target of its own.
    targets: BTreeMap<ArcStr, DeliveryTarget>,
}

impl SharedTexts {
    fn agent(&mut self, raw: &str, what: impl FnOnce() -> String) -> Result<AgentId, StoreError> {
        if let Some(last) = self.last_agent.as_ref().filter(|last| last.as_str() == raw) {
            return Ok(last.clone());
        }
        let id = match self.agents.get(raw) {
            Some(id) => id.clone(),
            None => {
                let id = AgentId::new(raw).map_err(|e| corrupt(what(), format!("agent id {e}")))?;
                self.agents.insert(raw.to_owned(), id.clone());
                id
            }
        };
        self.last_agent = Some(id.clone());
        Ok(id)
    }

    fn target(&mut self, raw: &str, what: impl FnOnce() -> String) -> Result<DeliveryTarget, StoreError> {
        if let Some(target) = self.targets.get(raw) {
            return Ok(target.clone());
        }
        let target = DeliveryTarget::parse(raw).map_err(|e| corrupt(what(), e))?;
        self.targets.insert(target.text().clone(), target.clone());
        Ok(target)
    }
}

/// A heartbeat of a load for arming, with its latest slot when the row has one.
pub(super) fn armable_from_row(mut row: HeartbeatRow<'_>, shared: &mut SharedTexts) -> Result<Armable, StoreError> {
    let latest_slot_ms = row.latest_slot_ms.take();
    let heartbeat = heartbeat_from_row(row, shared)?;
    let latest_slot = latest_slot_ms.map(|ms| timestamp(ms, &NamedHeartbeat(&heartbeat.def.key))).transpose()?;
    Ok(Armable { heartbeat, latest_slot })
}

pub(super) fn heartbeat_from_row(row: HeartbeatRow<'_>, shared: &mut SharedTexts) -> Result<Heartbeat, StoreError> {
    let raw_what = || format!("heartbeat {}/{}", row.agent_id, row.heartbeat_id);
    let agent = shared.agent(&row.agent_id, raw_what)?;
    let heartbeat =
        HeartbeatId::new(&*row.heartbeat_id).map_err(|e| corrupt(raw_what(), format!("heartbeat id {e}")))?;
    let key = HeartbeatKey { agent, heartbeat };
    // Named only if a column is bad: a million rows load at a restart.
    let what = &NamedHeartbeat(&key);
    let active_hours = match (row.active_start, row.active_end, row.active_timezone) {
        (Some(start), Some(end), Some(zone)) => {
            Some(ActiveHours::new(&start, &end, &zone).map_err(|e| corrupt(what.to_string(), e))?)
        }
        (None, None, None) => None,
        _ => return Err(corrupt(what.to_string(), "active hours are partly set")),
    };
    let (catch_up, overlap) = (row.catch_up, row.overlap);
    let policy = RunPolicy {
        catch_up: CatchUp::parse(&catch_up)
            .ok_or_else(|| corrupt(what.to_string(), format!("unknown catch-up {catch_up:?}")))?,
        catch_up_window: duration_ms(row.catch_up_window_ms, what)?,
        overlap: Overlap::parse(&overlap)
            .ok_or_else(|| corrupt(what.to_string(), format!("unknown overlap {overlap:?}")))?,
        jitter_max: duration_ms(row.jitter_max_ms, what)?,
    };
    let tools = match row.tools {
        Some(text) => {
            JobTools::from_json(&text).map_err(|problem| corrupt(what.to_string(), format!("tools: {problem}")))?
        }
        None => JobTools::default(),
    };
    let schedule = match (&*row.schedule_kind, row.every_ms, row.cron_expr, row.cron_timezone, row.at_ms) {
        ("every", Some(ms), _, _, _) => Schedule::Every(duration_ms(ms, what)?),
        ("cron", _, Some(expression), Some(zone), _) => {
            Schedule::cron(CronSchedule::parse(&expression, &zone).map_err(|e| corrupt(what.to_string(), e))?)
        }
        ("at", _, _, _, Some(ms)) => Schedule::At(timestamp(ms, what)?),
        (kind, ..) => return Err(corrupt(what.to_string(), format!("schedule kind {kind:?} without its columns"))),
    };
    let failures = row.consecutive_failures;
    let state = HeartbeatState {
        enabled: row.enabled == 1,
        disabled_reason: row.disabled_reason.map(Box::from),
        consecutive_failures: u32::try_from(failures)
            .map_err(|_| corrupt(what.to_string(), "failure count out of range"))?,
        next_slot: row.next_slot_ms.map(|ms| timestamp(ms, what)).transpose()?,
        breaker_opened_at: row.breaker_opened_at_ms.map(|ms| timestamp(ms, what)).transpose()?,
    };
    let (kind, origin) = (row.kind, row.origin);
    let def = HeartbeatDef {
        tools: tools.into(),
        model: row.model.map(Cow::into_owned),
        kind: JobKind::parse(&kind).ok_or_else(|| corrupt(what.to_string(), format!("unknown kind {kind:?}")))?,
        prompt: row.prompt.into(),
        schedule,
        policy,
        delete_after_run: row.delete_after_run == 1,
        dedup: row.dedup == 1,
        target: shared.target(&row.delivery_target, || what.to_string())?,
        active_hours,
        timeout: duration_ms(row.timeout_ms, what)?,
        origin: Origin::parse(&origin)
            .ok_or_else(|| corrupt(what.to_string(), format!("unknown origin {origin:?}")))?,
        key,
    };
    Ok(Heartbeat { def, state })
}

/// "heartbeat agent/id", written only into an error.
struct NamedHeartbeat<'key>(&'key HeartbeatKey);

impl fmt::Display for NamedHeartbeat<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "heartbeat {}", self.0)
    }
}

/// One row of `executions`, read from either backend's row type.
pub(super) fn execution_from_row<R>(row: &R) -> Result<Execution, StoreError>
where
    R: Row,
    for<'n> &'n str: ColumnIndex<R>,
    String: for<'r> Decode<'r, R::Database> + Type<R::Database>,
    i64: for<'r> Decode<'r, R::Database> + Type<R::Database>,
{
    let key = key_from_parts(row.try_get("agent_id")?, row.try_get("heartbeat_id")?)?;
    let what = format!("execution of {key}");
    let status: String = row.try_get("status")?;
    let skip_reason: Option<String> = row.try_get("skip_reason")?;
    let delivery: Option<String> = row.try_get("delivery")?;
    let finished_at: Option<i64> = row.try_get("finished_at_ms")?;
    let duration: Option<i64> = row.try_get("duration_ms")?;
    let stop_reason: Option<String> = row.try_get("stop_reason")?;
    let reply: Option<String> = row.try_get("reply")?;
    let tool_use: Option<String> = row.try_get("tool_use")?;
    let llm_calls: i64 = row.try_get("llm_calls")?;
    let usage = RunUsage {
        tokens: TokenUsage {
            input: count(row.try_get("input_tokens")?),
            cached: count(row.try_get("cached_tokens")?),
            output: count(row.try_get("output_tokens")?),
            reasoning: count(row.try_get("reasoning_tokens")?),
        },
        cost_micros: count(row.try_get("cost_micros")?),
        unpriced_calls: u32::try_from(row.try_get::<i64, _>("unpriced_calls")?).unwrap_or(0),
    };
    Ok(Execution {
        llm_calls: u32::try_from(llm_calls).unwrap_or(0),
        usage,
        tool_use: tool_use
            .map(|text| serde_json::from_str(&text).map_err(|e| corrupt(&what, format!("tool_use: {e}"))))
            .transpose()?,
        reply: reply
            .map(|text| ReplyKind::parse(&text).ok_or_else(|| corrupt(&what, format!("unknown reply {text:?}"))))
            .transpose()?,
        slot: timestamp(row.try_get("slot_ms")?, &what)?,
        triggered: row.try_get::<i64, _>("triggered")? != 0,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_load_keeps_one_text_per_agent_and_target_and_no_other_copy() {
        let mut shared = SharedTexts::default();
        let what = || "row".to_owned();
        let first = shared.target("webhook:ops", what).expect("valid");
        let again = shared.target("webhook:ops", what).expect("valid");
        assert!(ArcStr::ptr_eq(first.text(), again.text()), "one text for a target many rows name");
        let (key, kept) = shared.targets.iter().next().expect("one target");
        assert!(ArcStr::ptr_eq(key, kept.text()), "the map's key is the target's own text, not a copy");
        let agent = shared.agent("a1", what).expect("valid");
        assert_eq!(shared.agent("a1", what).expect("valid"), agent);
        assert!(shared.target("no-colon", what).is_err(), "a malformed target is a corrupt row");
        // The agent of the row before is shared as the map's is, after another came between.
        let other = shared.agent("a2", what).expect("valid");
        assert_ne!(other, agent);
        let same_text = |id: AgentId| std::ptr::eq(id.as_str().as_ptr(), agent.as_str().as_ptr());
        assert!(same_text(shared.agent("a1", what).expect("valid")), "a1's one text, from the map");
        assert!(same_text(shared.agent("a1", what).expect("valid")), "a1's one text, as the last agent");
        assert!(shared.agent("bad id!", what).is_err(), "a malformed agent id is a corrupt row");
    }

    /// A load for arming's row of `agent`/`heartbeat` of `kind`: the arming columns and
    /// the latest slot.
    fn arming_row(agent: &str, heartbeat: &str, kind: &str) -> String {
        format!(
            r#"["{agent}","{heartbeat}","{kind}","","every",60000,null,null,null,"once",86400000,"skip",0,0,"webhook:ops",null,null,null,"config",1,null,0,120000,null,180000]"#
        )
    }

    #[test]
    fn a_page_hands_over_its_rows_in_order_and_ends_at_the_first_bad_one() {
        let page = format!(
            "[{},{},{},{}]",
            arming_row("a1", "h1", "heartbeat"),
            arming_row("a1", "h2", "heartbeat"),
            arming_row("a1", "h3", "no-such-kind"),
            arming_row("a1", "h4", "heartbeat")
        );
        let mut shared = SharedTexts::default();
        let mut armed = Vec::new();
        let outcome = each_heartbeat_row(&page, &mut |row| {
            armed.push(armable_from_row(row, &mut shared)?);
            Ok(())
        });
        let ids: Vec<&str> = armed.iter().map(|armable| armable.heartbeat.def.key.heartbeat.as_str()).collect();
        assert_eq!(ids, ["h1", "h2"], "the rows before the bad one, and none after it");
        match outcome {
            Err(StoreError::Corrupt { what, problem }) => {
                assert_eq!(what, "heartbeat a1/h3");
                assert!(problem.contains("no-such-kind"), "{problem}");
            }
            other => panic!("a row of an unknown kind is a corrupt row, not {other:?}"),
        }
        let first = &armed[0];
        assert_eq!(first.latest_slot, Some(Timestamp::from_millisecond(180_000).expect("valid")));
        assert_eq!(first.heartbeat.state.next_slot, Some(Timestamp::from_millisecond(120_000).expect("valid")));
        // A row for arming ends before what only a run reads: those take their defaults.
        assert_eq!((first.heartbeat.def.dedup, first.heartbeat.def.timeout), (false, Duration::ZERO));
        assert_eq!(first.heartbeat.def.model, None);
    }

    #[test]
    fn a_page_that_is_not_rows_is_corrupt() {
        for page in ["", "{}", "[1, 2]", "[[\"a1\"]]", "[] trailing"] {
            let outcome = each_heartbeat_row(page, &mut |_| Ok(()));
            assert!(
                matches!(&outcome, Err(StoreError::Corrupt { what, .. }) if what == "a page of heartbeats"),
                "{page:?}: {outcome:?}"
            );
        }
        let mut count = 0;
        each_heartbeat_row("[]", &mut |_| {
            count += 1;
            Ok(())
        })
        .expect("an empty page");
        assert_eq!(count, 0);
    }
}
