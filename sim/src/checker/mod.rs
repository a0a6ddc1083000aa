//! The invariants, checked over a run's whole trace. Each is named and counted every time
//! it is checked, so `run --stats` shows that none is vacuous.
//!
//! The breaker and presence model follows `Durable` events (what reached the store), not
//! what the engine saw: after a crash between a write and its acknowledgement, the two
//! differ, and only the durable state survives a restart.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};

use systole::core::active_hours::ActiveHours;
use systole::core::guard::SkipReason;
use systole::core::heartbeat::HeartbeatDef;
use systole::core::ids::{AgentId, HeartbeatKey};
use systole::core::policy::Overlap;
use systole::core::schedule::Schedule;
use systole::driver::events::EngineEvent;
use systole::limits::{AGENT_LOOP_ITERATIONS_MAX_DEFAULT, DRIVER_SLEEP_SECS_MAX, PAUSE_MINUTES_MAX_DEFAULT};
use systole::ports::messenger::DeliveryKind;

use crate::options::SimOptions;
use crate::trace::{DurableWrite, Entry, Event};
use crate::workload::Op;

mod admission;
mod agents;
mod breaker;
mod delivery;
mod first_slots;
mod guards;
#[cfg(test)]
mod independence_tests;
mod one_shots;
pub mod reference;
mod replies;
mod retention;
mod schedules;
mod skips;
/// Whether a run of `slot` is a one-shot's own by the engine's rule (ADR 0046): at or after
/// the instant of the one-shot `def` now is. A run below it (of a one-shot it replaced, due
/// earlier, still going when the new one was stored) says nothing of the new one (seed
/// 1927871554764: the old one-shot's run timed out, and the checker took it for a failure
/// of the new one, whose only slot had been skipped as an overlap). Not a one-shot: as any.
fn at_or_after_instant(def: Option<&HeartbeatDef>, slot: jiff::Timestamp) -> bool {
    match def.map(|def| &def.schedule) {
        // The engine stores slots in whole milliseconds.
        Some(Schedule::At(at)) => {
            jiff::Timestamp::from_millisecond(at.as_millisecond()).is_ok_and(|instant| slot >= instant)
        }
        _ => true,
    }
}

#[cfg(test)]
mod tests;
mod tools;
pub mod traces;
mod unreadable;

pub const ACTIVE_HOURS: &str = "active-hours";
pub const SLOT_ONCE: &str = "slot-once";
pub const DELIVERY_ONCE: &str = "delivery-once";
pub const NO_OVERLAP: &str = "no-overlap";
pub const BREAKER_EXACT: &str = "breaker-exact";
pub const STOPPED_NEVER_RUNS: &str = "stopped-never-runs";
pub const ACKNOWLEDGED_DURABLE: &str = "acknowledged-durable";
pub const NO_RUNNING_AFTER_RECOVERY: &str = "no-running-after-recovery";
pub const RUN_BUDGET: &str = "run-budget";
pub const LIVENESS: &str = "liveness";
pub const PAUSE_HOLDS: &str = "pause-holds";
pub const LOOP_CAP: &str = "loop-cap";
pub const SLOT_ORDER: &str = "slot-order";
pub const CATCH_UP: &str = "catch-up";
pub const BACKOFF: &str = "backoff";
pub const SLOTS_EXPECTED: &str = "slots-expected";
/// Every cron slot decided is one the reference cron gives for its expression.
pub const SLOT_ON_SCHEDULE: &str = "slot-on-schedule";
pub const CALENDAR_TIME: &str = "calendar-time";
pub const NO_TOKEN_DELIVERED: &str = "no-token-delivered";
pub const NO_DUPLICATE_DAY: &str = "no-duplicate-within-24h";
pub const CLAIM_GONE_JUSTIFIED: &str = "claim-gone-justified";
/// One node never offers a slot of its schedule that the store has decided: the next slot
/// is written with the claim, and a heartbeat new to the process is armed above its id's
/// latest run, and an operator's trigger never takes an instant of its schedule's grid.
/// (A trigger or a backfill may name a decided slot itself.)
pub const NO_SLOT_OFFERED_TWICE: &str = "no-slot-offered-twice";
pub const AT_RETRIES: &str = "at-retries";
/// A failed one-shot that is still there, enabled and not stopped by its breaker has a
/// retry armed when the world has healed: a timer above the failed run's slot. Without
/// it, a one-shot whose retry was never armed just stays unarmed, which `at-retries`
/// (a retirement after a failure) does not see.
pub const AT_RETRY_ARMED: &str = "at-retry-armed";
/// An operator's trigger is an explicit request: a pause, quiet hours and a backoff never
/// skip it (the budget, the overlap policy, a disable and a silent target may).
pub const TRIGGER_EXPLICIT: &str = "trigger-explicit";
/// Every trigger is decided (run or skipped, under its own slot) unless its process died
/// first or its job was deleted.
pub const TRIGGER_DECIDED: &str = "trigger-decided";

/// How recently a job's queue of triggers must have moved for the ones still waiting at
/// the end to be excused: several rounds of one place shared by a simulation's jobs with
/// faults off (runs of up to 90 s), far below the liveness phase.
const TRIGGER_QUEUE_MOVING_SECS: u64 = 1_200;
/// A trigger still waiting when a disable or a delete of its job was acknowledged went with
/// the job's backlog: it is never decided afterwards (seed 1927760016712).
pub const TRIGGER_DROPPED: &str = "trigger-dropped";

/// Every model call carries a prompt: the driver keeps none but an agent heartbeat's, and
/// a claimed slot whose prompt could not be read fails instead of running (ADR 0025).
pub const PROMPT_SENT: &str = "prompt-sent";
/// The engine's retirement of a job out of slots (a disable with the reason `no-more-slots`)
/// lands only on an enabled row: a disable stored before it keeps the reason its operator
/// gave, or the breaker's (ADR 0050).
pub const RETIREMENT_KEEPS_DISABLE: &str = "retirement-keeps-disable";

/// A claim lost after a read of the job's run log failed in that life (counted, not
/// judged: the claim is the guard the engine falls back on).
pub const LOG_UNREAD_CLAIM_LOST: &str = "log-unread-claim-lost";
/// Every duplicate check is answered as the run log holds it then, the store's index of
/// recent deliveries (ADR 0066) or a read.
pub const DUPLICATE_CHECK_TRUE: &str = "duplicate-check-true";

pub const INVARIANTS: [&str; 82] = [
    NO_SLOT_OFFERED_TWICE,
    RETIREMENT_KEEPS_DISABLE,
    unreadable::UNREADABLE_JUSTIFIED,
    PROMPT_SENT,
    admission::RUN_ADMITTED,
    admission::CLAIM_STARTS,
    first_slots::FIRST_SLOT_AFTER_STORING,
    first_slots::NEW_SCHEDULE_ARMED_AT_ONCE,
    tools::CHECK_GATES_MODEL,
    traces::TRACE_ONCE,
    traces::TRACE_WITHIN_RUN,
    skips::PAUSED,
    skips::QUIET_HOURS,
    skips::BUDGET,
    skips::TOKEN_CAP,
    skips::COST_CAP,
    skips::GLOBAL_TOKEN_CAP,
    skips::GLOBAL_COST_CAP,
    skips::BACKOFF,
    skips::FLOOD_GUARD,
    skips::OVERLAP,
    skips::REQUESTS_IN_FLIGHT,
    skips::DISABLED,
    skips::EMPTY_FILE,
    skips::ALERTS_DISABLED,
    retention::PRUNE_EXACT,
    delivery::PART_ONCE,
    delivery::PARTS_IN_ORDER,
    delivery::NO_RETRY_AFTER_REFUSAL,
    delivery::PART_FITS,
    delivery::PART_NOTIFIES_NOBODY,
    delivery::REQUEST_NAMES_SYSTOLE,
    tools::TOOL_CALL_IN_RUN,
    tools::TOOL_CALLS_ONE_RUN,
    tools::TOOL_CALL_IN_BUDGET,
    tools::TOOL_CAP,
    tools::TOOL_WRITE_OPT_IN,
    tools::TOOL_REQUIRED,
    breaker::BREAKER_COOLDOWN,
    breaker::BREAKER_ANNOUNCED,
    guards::BUDGET,
    guards::TOKEN_CAP,
    guards::COST_CAP,
    guards::GLOBAL_TOKEN_CAP,
    guards::GLOBAL_COST_CAP,
    guards::CAP_ANNOUNCED,
    guards::USAGE_COUNTED,
    guards::VISIBILITY,
    agents::EMPTY_FILE_NO_CALL,
    agents::USER_GOES_FIRST,
    agents::FLOOD_CAPS,
    agents::EVENT_CONSUMED_ONCE,
    agents::EVENTS_PROCESSED,
    ACTIVE_HOURS,
    SLOT_ONCE,
    DELIVERY_ONCE,
    NO_OVERLAP,
    BREAKER_EXACT,
    STOPPED_NEVER_RUNS,
    ACKNOWLEDGED_DURABLE,
    NO_RUNNING_AFTER_RECOVERY,
    RUN_BUDGET,
    LIVENESS,
    PAUSE_HOLDS,
    LOOP_CAP,
    SLOT_ORDER,
    CATCH_UP,
    BACKOFF,
    SLOTS_EXPECTED,
    SLOT_ON_SCHEDULE,
    CALENDAR_TIME,
    NO_TOKEN_DELIVERED,
    NO_DUPLICATE_DAY,
    CLAIM_GONE_JUSTIFIED,
    AT_RETRIES,
    AT_RETRY_ARMED,
    one_shots::AT_NOT_RETIRED_EARLY,
    one_shots::AT_RUNS_ONCE,
    TRIGGER_EXPLICIT,
    TRIGGER_DECIDED,
    TRIGGER_DROPPED,
    DUPLICATE_CHECK_TRUE,
];

/// How long one decision pass of the driver lasts in simulated time (polls advance it by
/// nanoseconds): an overlap skip is justified by a claim made within it, and a slot due
/// at a pass that filled the engine waited for a place like one due after it.
pub const PASS_SLACK: Duration = Duration::from_millis(1);

/// How close to the engine's own reading of a deadline the checker stops judging: the
/// engine and the trace read the clock a few nanoseconds apart.
pub const DEADLINE_SLACK: Duration = Duration::from_millis(1);

/// How close to a pause's end a decision may fall and go unjudged: the engine reads the
/// clock a few nanoseconds before the trace records the event.
pub const PAUSE_BOUNDARY_SLACK: Duration = Duration::from_millis(1);

/// How far past its budget a run may be measured: the runtime advances virtual time by a
/// few nanoseconds per poll between the deadline firing and the duration being read.
pub const RUN_BUDGET_SLACK: Duration = Duration::from_millis(1);

/// After healing, how long in-flight work from the safety phase may take to drain: the
/// longest run budget (120 s) plus one driver sleep, with room to spare.
pub const SETTLE_SECS: u64 = 300;
/// How late a healthy heartbeat's next decision may be beyond its interval: one driver
/// sleep (the wall clock is re-read at least that often) plus scheduling noise.
pub const LIVENESS_SLACK_SECS: u64 = DRIVER_SLEEP_SECS_MAX + 5;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub invariant: &'static str,
    /// Index of the trace entry at which it was found.
    pub index: usize,
    pub elapsed: Duration,
    pub wall: Timestamp,
    pub message: String,
}

#[derive(Debug, Clone, Default)]
pub struct Verdict {
    pub checks: BTreeMap<&'static str, u64>,
    pub violation: Option<Violation>,
    /// How often the engine ran full (a start took its last place), so slots waited for
    /// admission (ADR 0023).
    pub engine_full: u64,
    /// Starts in a place that a run waiting for its result's write had freed (ADR 0042).
    pub freed_place_starts: u64,
}

/// Why a heartbeat must not start runs any more.
#[derive(Debug, Clone, Copy)]
struct Stop {
    /// The life in which it became durable.
    life: u32,
    /// Whether the engine acknowledged it (then even the same life must obey it).
    acknowledged: bool,
    why: &'static str,
}

/// The checker's view of an agent's pause: it holds while both clocks are short of its end.
#[derive(Debug, Clone, Copy)]
struct PauseModel {
    until: Timestamp,
    /// Elapsed simulated time at which its monotonic deadline falls.
    end: Duration,
    /// When either clock first said it was over, and whether a started engine was
    /// running then to see it (and clear it).
    ended_at: Option<(Duration, bool)>,
    /// An `end_pause` write failed after it ended: a restart may revive it (ADR 0005).
    clear_failed: bool,
    /// The life that wrote it, and whether the engine has applied it (its `Paused` event,
    /// or a later life's start-up): only then must no run start.
    life: u32,
    applied: bool,
    /// The engine said it resumed the agent (in this life): it is over for good.
    resumed: bool,
    /// The store no longer has it (an operator's resume, or the engine clearing it): no
    /// run is held by it, but the engine may skip as paused until it says `Resumed`.
    cleared: bool,
}

/// A live engine clears an ended pause at its next wake-up, well within this.
const PAUSE_CLEAR_BOUND: Duration = Duration::from_secs(DRIVER_SLEEP_SECS_MAX);

impl PauseModel {
    /// Clearly holding, clearly over, or too close to the end to judge.
    fn state(&self, entry: &Entry) -> Option<bool> {
        // Whichever end comes first ends it (ADR 0005): once the engine saw it end, a
        // backward wall jump does not revive it in the same life.
        if self.resumed {
            return Some(false);
        }
        let slack = SignedDuration::try_from(PAUSE_BOUNDARY_SLACK).unwrap_or(SignedDuration::ZERO);
        let near_wall = entry.wall.duration_since(self.until).abs() <= slack;
        let near_mono = entry.elapsed.abs_diff(self.end) <= PAUSE_BOUNDARY_SLACK;
        if near_wall || near_mono {
            return None;
        }
        let holds = entry.wall < self.until && entry.elapsed < self.end;
        if holds && self.ended_at.is_some() {
            // The wall passed `until` and came back before the engine said it resumed:
            // whether it saw the end depends on when it looked.
            return None;
        }
        Some(holds)
    }
}

/// A run going: how many LLM calls it made, and whether another run of the same
/// heartbeat overlapped it (`allow_all`), so its calls cannot be counted alone.
#[derive(Debug, Clone, Copy)]
struct OpenRun {
    calls: u32,
    shared: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    Run,
    /// The store had the slot decided already (an earlier heartbeat of the same id).
    AlreadyDecided,
    Skip(SkipReason),
    /// Slots that waited for a place to run and that the catch-up policy let go (`skip`:
    /// too old by then): the heartbeat was decided, with nothing to run (ADR 0023).
    LetGo,
}

struct Model<'a> {
    options: &'a SimOptions,
    checks: BTreeMap<&'static str, u64>,
    started_slots: BTreeSet<(HeartbeatKey, Timestamp)>,
    delivered: BTreeSet<String>,
    /// Runs going, with how many LLM calls each made.
    open_runs: BTreeMap<(u32, HeartbeatKey, Timestamp), OpenRun>,
    /// Every definition the run has seen: config ones, and those put at run time.
    defs: BTreeMap<HeartbeatKey, HeartbeatDef>,
    pauses: BTreeMap<AgentId, PauseModel>,
    /// When the last started engine died.
    last_crash_at: Option<Duration>,
    /// Whether an engine has finished start-up and not died since.
    engine_running: bool,
    failures: BTreeMap<HeartbeatKey, u32>,
    /// Heartbeats in the durable store, and whether each is enabled.
    present: BTreeMap<HeartbeatKey, bool>,
    stopped: BTreeMap<HeartbeatKey, Stop>,
    healed_at: Option<Duration>,
    /// The wall clock minus elapsed time after healing (no clock jumps any more).
    healed_wall_offset: Option<SignedDuration>,
    decisions: BTreeMap<HeartbeatKey, Vec<(Duration, Timestamp, Decision)>>,
    /// Every slot decided (run or skipped), with when: the reference for expected slots.
    decided: BTreeMap<HeartbeatKey, BTreeMap<Timestamp, Duration>>,
    /// The latest slot each heartbeat was armed for, with when: slots only move forward, so
    /// a slot below it (after a backward wall jump) is never expected.
    armed: BTreeMap<HeartbeatKey, Vec<(Duration, Timestamp)>>,
    /// The latest slot started per heartbeat: slots only move forward.
    last_started: BTreeMap<HeartbeatKey, Timestamp>,
    /// The slots a catch-up fire must decide next, in order (the reference model's list),
    /// and when that fire happened.
    catch_up_due: BTreeMap<HeartbeatKey, std::collections::VecDeque<(Timestamp, Duration)>>,
    /// When each heartbeat's definition or enablement last changed in the store. The driver
    /// applies such a change (dropping what waits) a moment after the write, and may fire
    /// a timer in between.
    changed_at: BTreeMap<HeartbeatKey, Duration>,
    /// The definition each heartbeat runs under in the driver: the store's once the engine
    /// says it applied it (or a start-up loaded it). Between a store write and that, a timer
    /// of the old one may fire, and only the old one can judge it.
    running_defs: BTreeMap<HeartbeatKey, HeartbeatDef>,
    /// Deliveries per heartbeat: the reply's normal form, the wall time, the slot, and
    /// whether its run's success is durable (only then does the engine know of it).
    deliveries: BTreeMap<HeartbeatKey, Vec<(String, Timestamp, Timestamp, bool)>>,
    /// Heartbeats the engine retired (schedule out of slots) since they were last put.
    retired: BTreeSet<HeartbeatKey>,
    /// Heartbeats the engine retired though the retirement's write failed: this process
    /// holds them disabled while the store has them enabled, until a write about them or
    /// the process's death.
    retired_unwritten: BTreeSet<HeartbeatKey>,
    /// Heartbeats whose breaker a run tripped since their definition was last written: a
    /// create acknowledged after that may find it disabled (a refusal trips at once).
    tripped_since_put: BTreeSet<HeartbeatKey>,
    /// Whether each heartbeat's latest run (since it was last put) failed, and when it
    /// finished (elapsed).
    last_failed: BTreeMap<HeartbeatKey, bool>,
    /// Failures the store never recorded: a crash takes the engine's knowledge of them
    /// along (after the restart the row says `interrupted`, an outcome not known).
    unrecorded_failures: BTreeSet<HeartbeatKey>,
    last_finished: BTreeMap<HeartbeatKey, Duration>,
    /// The slot of that latest run.
    last_run_slot: BTreeMap<HeartbeatKey, Timestamp>,
    /// When a heartbeat was first disabled since it was last enabled or put (elapsed).
    disabled_at: BTreeMap<HeartbeatKey, Duration>,
    /// A failure's backoff: (when the failure became durable, when the backoff ends).
    backoffs: BTreeMap<HeartbeatKey, (Duration, Duration)>,
    /// Backoffs an enable or a new definition lifted in the store: the driver may skip a
    /// slot for one until it applies the change.
    lifted_backoffs: BTreeMap<HeartbeatKey, (Duration, Duration)>,
    /// The agent layer: files, lanes, flood history, system events.
    agents: agents::AgentModel,
    /// What each agent's runs spent, per day; cap skips and announcements.
    guards: guards::GuardModel,
    /// Open breakers and their cooldowns; announcements owed.
    breaker: breaker::BreakerModel,
    /// What the platform took of each message.
    delivery: delivery::DeliveryModel,
    tools: tools::ToolModel,
    traces: traces::TraceModel,
    admission: admission::AdmissionModel,
    /// The latest wall-clock reading of this life's engine so far: a slot due before it had
    /// been reached, even if the clock went back since.
    wall_high_water: Option<Timestamp>,
    /// Per heartbeat, the slots its catch-up policy let go after they waited for a place to
    /// run: from the slot that waited up to the wall time it was decided.
    let_go: BTreeMap<HeartbeatKey, Vec<(Timestamp, Timestamp)>>,
    /// Triggers (and backfill slots) not decided yet, with the life that took them and
    /// whether they are excused from being decided: a disable, a delete, a breaker trip or
    /// a replace drops what waits behind a run.
    triggers_pending: BTreeMap<(HeartbeatKey, Timestamp), (u32, bool)>,
    /// Slots the store claimed as the schedule's (not an operator's trigger), until their
    /// run starts.
    schedule_claims: BTreeSet<(HeartbeatKey, Timestamp)>,
    /// Per heartbeat, the slot of the trigger it decided last and when (elapsed): a queue
    /// of triggers still being worked through at the end is not a lost one.
    trigger_last_decided: BTreeMap<HeartbeatKey, (Timestamp, Duration)>,
    /// Triggers that a disable or a delete dropped while they waited.
    triggers_dropped: BTreeSet<(HeartbeatKey, Timestamp)>,
    /// The trigger the event being checked decides: an operator's slot, not one of the
    /// schedule's, so the schedule rules leave it. (After a backward wall jump the schedule
    /// may later reach the same instant; that decision is the schedule's.)
    deciding_trigger: Option<(HeartbeatKey, Timestamp)>,
    /// Runs of triggers going: their result is not the schedule's (a one-shot whose manual
    /// run failed still has its own slot, which skips and retires like any other).
    trigger_runs: BTreeSet<(HeartbeatKey, Timestamp)>,
    /// Overlap skips waiting for the end of their decision pass: (life, key, slot, when).
    overlap_pending: Vec<(u32, HeartbeatKey, Timestamp, Duration)>,
    /// Overlap skips decided while an operator's trigger of the heartbeat was running: a
    /// trigger runs outside the schedule's cadence, so its overlap says nothing of a slow
    /// run after healing (seed 1927873737440: a trigger that waited for a place started in
    /// the instant the catch-up of a slot that waited too was decided).
    overlaps_a_trigger: BTreeSet<(HeartbeatKey, Duration)>,
    /// The definition the driver decided each run under: a replace while it runs does not
    /// change what its end means for the driver's entry.
    run_defs: BTreeMap<(HeartbeatKey, Timestamp), HeartbeatDef>,
    /// The definition each run runs with (its budget, tools, dedup): the store's as its
    /// slot was claimed (ADR 0026), which is newer than the driver's while a replace is
    /// written but not yet applied.
    run_read_defs: BTreeMap<(HeartbeatKey, Timestamp), HeartbeatDef>,
    /// Each heartbeat's definition before its latest replace: the driver may still decide
    /// under it until it applies the new one (or a start-up loaded it just before).
    previous_defs: BTreeMap<HeartbeatKey, HeartbeatDef>,
    /// The reference's parsed crons.
    crons: reference::CronCache,
    first_slots: first_slots::FirstSlotModel,
    unreadable: unreadable::UnreadableModel,
    one_shots: one_shots::OneShotModel,
    /// Heartbeats a read of whose run log failed by injection in this life: the engine
    /// may arm a slot the store decided (a lift past the log's latest slot not made), and
    /// the store's claim then refuses it.
    log_unread: BTreeSet<HeartbeatKey>,
}

/// Checks every invariant over `entries`; stops at the first violation.
pub fn check(options: &SimOptions, entries: &[Entry]) -> Verdict {
    let mut model = Model {
        options,
        checks: INVARIANTS.iter().map(|name| (*name, 0)).collect(),
        started_slots: BTreeSet::new(),
        delivered: BTreeSet::new(),
        open_runs: BTreeMap::new(),
        defs: options.heartbeats.iter().map(|def| (def.key.clone(), def.clone())).collect(),
        pauses: BTreeMap::new(),
        last_crash_at: None,
        engine_running: false,
        failures: BTreeMap::new(),
        present: options.heartbeats.iter().map(|def| (def.key.clone(), true)).collect(),
        stopped: BTreeMap::new(),
        healed_at: None,
        healed_wall_offset: None,
        decisions: BTreeMap::new(),
        decided: BTreeMap::new(),
        last_started: BTreeMap::new(),
        armed: BTreeMap::new(),
        backoffs: BTreeMap::new(),
        lifted_backoffs: BTreeMap::new(),
        catch_up_due: BTreeMap::new(),
        changed_at: BTreeMap::new(),
        running_defs: options.heartbeats.iter().map(|def| (def.key.clone(), def.clone())).collect(),
        deliveries: BTreeMap::new(),
        retired: BTreeSet::new(),
        retired_unwritten: BTreeSet::new(),
        tripped_since_put: BTreeSet::new(),
        last_failed: BTreeMap::new(),
        unrecorded_failures: BTreeSet::new(),
        last_finished: BTreeMap::new(),
        last_run_slot: BTreeMap::new(),
        disabled_at: BTreeMap::new(),
        agents: agents::AgentModel::default(),
        guards: guards::GuardModel::default(),
        breaker: breaker::BreakerModel::new(options.breaker_cooldown.clone(), options.breaker_failures_max),
        delivery: delivery::DeliveryModel::new(options.platform, options.allow_mentions),
        tools: tools::ToolModel::new(options.tool_calls_max as usize, options.agent_tools.clone()),
        traces: traces::TraceModel::default(),
        admission: admission::AdmissionModel::new(options.runs_in_flight_max),
        wall_high_water: None,
        let_go: BTreeMap::new(),
        triggers_pending: BTreeMap::new(),
        schedule_claims: BTreeSet::new(),
        trigger_last_decided: BTreeMap::new(),
        triggers_dropped: BTreeSet::new(),
        deciding_trigger: None,
        trigger_runs: BTreeSet::new(),
        crons: reference::CronCache::default(),
        first_slots: first_slots::FirstSlotModel::default(),
        unreadable: unreadable::UnreadableModel::default(),
        one_shots: one_shots::OneShotModel::default(),
        log_unread: BTreeSet::new(),
        run_defs: BTreeMap::new(),
        run_read_defs: BTreeMap::new(),
        previous_defs: BTreeMap::new(),
        overlap_pending: Vec::new(),
        overlaps_a_trigger: BTreeSet::new(),
    };
    for (index, entry) in entries.iter().enumerate() {
        if let Err((invariant, message)) = model.step(entry) {
            let violation = Violation { invariant, index, elapsed: entry.elapsed, wall: entry.wall, message };
            return model.verdict(Some(violation));
        }
    }
    model.verdict(None)
}

type Step = Result<(), (&'static str, String)>;

impl Model<'_> {
    /// What the check found, with the counts `--stats` reports.
    fn verdict(self, violation: Option<Violation>) -> Verdict {
        let (engine_full, freed_place_starts) = (self.admission.filled, self.admission.freed_place_starts);
        Verdict { checks: self.checks, violation, engine_full, freed_place_starts }
    }
}

fn fail(invariant: &'static str, message: String) -> Step {
    Err((invariant, message))
}

impl Model<'_> {
    fn count(&mut self, invariant: &'static str) {
        *self.checks.entry(invariant).or_default() += 1;
    }

    fn step(&mut self, entry: &Entry) -> Step {
        self.overlap_unjustified(entry.elapsed)?;
        self.admission.claims_started(entry.elapsed)?;
        if let Event::Engine { .. } = entry.event {
            self.wall_high_water = Some(self.wall_high_water.map_or(entry.wall, |high| high.max(entry.wall)));
        }
        self.breaker.saw(entry);
        let running = self.engine_running;
        for pause in self.pauses.values_mut() {
            match pause.ended_at {
                None if entry.elapsed >= pause.end || entry.wall >= pause.until => {
                    pause.ended_at = Some((entry.elapsed, running));
                }
                // Ended by a forward wall jump that a backward one took back before a live
                // engine had to look: it may never have seen the end (seed 1927760007172).
                Some((ended, true))
                    if entry.wall < pause.until
                        && entry.elapsed < pause.end
                        && entry.elapsed < ended + PAUSE_CLEAR_BOUND =>
                {
                    pause.ended_at = Some((ended, false));
                }
                _ => {}
            }
        }
        match &entry.event {
            Event::Engine { life, event } => {
                self.agent_event(entry, *life, event)?;
                self.engine_event(entry, *life, event)
            }
            Event::Crash { life } => {
                // Slots waiting in a backlog die with the process ("at most once with crashes").
                self.catch_up_due.clear();
                self.one_shots.process_died();
                self.retired_unwritten.clear();
                // Only the death of a running engine ends the time it had to clear an ended
                // pause; a start-up that failed ran nothing.
                if self.engine_running {
                    self.last_crash_at = Some(entry.elapsed);
                }
                self.engine_running = false;
                self.open_runs.retain(|(run_life, _, _), _| run_life != life);
                self.admission.crashed(entry.elapsed, *life);
                // A pass cut short by the crash claimed nothing.
                self.overlap_pending.retain(|(skip_life, _, _, _)| skip_life != life);
                self.triggers_pending.retain(|_, (trigger_life, _)| trigger_life != life);
                for key in std::mem::take(&mut self.unrecorded_failures) {
                    self.last_failed.remove(&key);
                }
                self.agents.crashed(*life);
                Ok(())
            }
            Event::Started { life, running_rows, heartbeats } => {
                for (key, def) in &self.defs {
                    self.first_slots.loaded(key, &def.schedule);
                }
                self.wall_high_water = None;
                // A start-up arms each heartbeat above the latest slot its row holds.
                self.log_unread.clear();
                // A start-up loads every definition from the store. One whose schedule the
                // start's seed changed is a new schedule, as a reload's: the triggers decided
                // before kept off the old one's slots only (seed 1927873909092: a trigger's
                // millisecond, off a cron's grid, fell on the restored every-minute grid).
                for (key, def) in &self.defs {
                    let before = self.running_defs.insert(key.clone(), def.clone());
                    if before.is_some_and(|before| before.schedule != def.schedule) {
                        self.one_shots.schedule_changed(key);
                    }
                }
                self.restart_pauses(entry);
                self.restart_backoffs(entry);
                self.breaker.restarted(entry);
                self.engine_running = true;
                self.started(*life, *running_rows, heartbeats)
            }
            Event::LlmCall { life, prompt, .. } => {
                self.count(PROMPT_SENT);
                if prompt.trim().is_empty() {
                    return fail(PROMPT_SENT, format!("a model call in life {life} carried no prompt"));
                }
                self.agent_llm_call(prompt)?;
                self.llm_call(*life, prompt)
            }
            Event::Delivered { idempotency_key, heartbeat, text, kind, .. } => {
                self.count(DELIVERY_ONCE);
                if !self.delivered.insert(idempotency_key.clone()) {
                    return fail(DELIVERY_ONCE, format!("idempotency key {idempotency_key} delivered twice"));
                }
                if *kind == DeliveryKind::CapReached {
                    return self.cap_announced(idempotency_key);
                }
                if *kind != DeliveryKind::Reply {
                    self.count(breaker::BREAKER_ANNOUNCED);
                    return self.breaker.announced(heartbeat, *kind);
                }
                self.visibility_of_delivery(heartbeat, text)?;
                self.reply_delivered(entry, heartbeat, idempotency_key, text)
            }
            Event::Durable { life, write } => self.durable(entry, *life, write),
            Event::PartPosted { key, outcome, shape, .. } => {
                let checks = &mut self.checks;
                self.delivery.posted(key, *outcome, shape, |invariant| *checks.entry(invariant).or_default() += 1)
            }
            Event::OpAcked { op, applied, .. } => self.acknowledged(op, *applied),
            Event::ToolCalled { life, key, slot, tool, timeout } => {
                let running = self.open_runs.contains_key(&(*life, key.clone(), *slot));
                let def = self.run_read_defs.get(&(key.clone(), *slot));
                let checks = &mut self.checks;
                let count = |invariant| *checks.entry(invariant).or_default() += 1;
                self.tools.called(count, entry.elapsed, *life, key, *slot, tool, *timeout, running, def)
            }
            Event::ToolAnswered { key, slot, tool, quiet, .. } => {
                self.tools.answered(key, *slot, tool, *quiet);
                Ok(())
            }
            Event::ToolEffect { .. } => Ok(()),
            Event::RunTraced { life, key, slot, trace } => {
                let checks = &mut self.checks;
                let count = |invariant| *checks.entry(invariant).or_default() += 1;
                self.traces.traced(count, *life, key, *slot, trace)
            }
            Event::Healed => {
                self.healed_at = Some(entry.elapsed);
                let elapsed = SignedDuration::try_from(entry.elapsed).unwrap_or(SignedDuration::ZERO);
                self.healed_wall_offset = Some(entry.wall.duration_since(Timestamp::UNIX_EPOCH) - elapsed);
                Ok(())
            }
            Event::End { heartbeats } => {
                self.overlap_unjustified(Duration::MAX)?;
                self.triggers_decided(entry.elapsed)?;
                self.probes_due(entry.elapsed)?;
                self.events_processed(entry.elapsed, heartbeats)?;
                self.failed_one_shots_rearmed(heartbeats)?;
                self.liveness(entry.elapsed, heartbeats)?;
                self.slots_expected(entry, heartbeats)
            }
            Event::DefinitionsUnread { keys } => {
                self.unreadable.read_failed(keys);
                Ok(())
            }
            Event::LogUnread { key } => {
                self.log_unread.insert(key.clone());
                Ok(())
            }
            Event::DuplicateChecked { life, wrong, .. } => {
                self.count(DUPLICATE_CHECK_TRUE);
                match wrong.first() {
                    Some(answer) => {
                        fail(DUPLICATE_CHECK_TRUE, format!("life {life} answered {answer}; the run log says not"))
                    }
                    None => Ok(()),
                }
            }
            Event::Fault { kind, detail } => {
                self.breaker.fault(entry, *kind, detail);
                Ok(())
            }
            Event::Restart { .. } | Event::StartFailed { .. } | Event::OpFailed { .. } => Ok(()),
            Event::WorkspaceChanged { agent, content } => {
                self.agents.file_changed(agent, content);
                Ok(())
            }
        }
    }

    fn engine_event(&mut self, entry: &Entry, life: u32, event: &EngineEvent) -> Step {
        self.deciding_trigger = None;
        if let EngineEvent::RunStarted { key, .. }
        | EngineEvent::ClaimLost { key, .. }
        | EngineEvent::ClaimFailed { key, .. }
        | EngineEvent::ClaimGone { key, .. } = event
        {
            self.overlap_claimed(life, key);
            self.count(NO_SLOT_OFFERED_TWICE);
        }
        // A lost claim found a row of the run log there, an operator's trigger's too (seed
        // 1927871442722: a trigger skipped before two backward jumps left a row above a later
        // one-shot's instant, and the one-shot rightly retired at once). A skip decides its
        // slot, below, once it is known whose it is.
        if let EngineEvent::ClaimLost { key, slot } = event {
            self.one_shots.decided(key, *slot);
        }
        match event {
            EngineEvent::RunStarted { key, slot }
            | EngineEvent::Skipped { key, slot, .. }
            | EngineEvent::ClaimLost { key, slot }
            | EngineEvent::ClaimFailed { key, slot }
            | EngineEvent::ClaimGone { key, slot } => {
                let trigger = (key.clone(), *slot);
                // A run the store claimed as the schedule's decides no trigger, though a
                // trigger's slot may be the same millisecond: one dropped at a breaker's
                // trip, and a cron slot that came again after a backward wall jump (seed
                // 1927871926769).
                // (A backfill's slot is the schedule's own, claimed unmarked: it is decided
                // as the explicit request it is.)
                let scheduled = matches!(event, EngineEvent::RunStarted { .. })
                    && self.schedule_claims.remove(&trigger)
                    && self.one_shots.is_operator_trigger(key, *slot);
                if !scheduled && self.triggers_dropped.contains(&trigger) {
                    return fail(
                        TRIGGER_DROPPED,
                        format!("{key}: the trigger (slot {slot}) that a disable or a delete dropped was decided"),
                    );
                }
                if !scheduled && self.triggers_pending.remove(&trigger).is_some() {
                    self.count(TRIGGER_DECIDED);
                    self.trigger_last_decided.insert(key.clone(), (*slot, entry.elapsed));
                    self.deciding_trigger = Some(trigger);
                }
            }
            _ => {}
        }
        if let EngineEvent::Skipped { key, slot, .. } = event {
            self.one_shots.skipped(key, *slot, self.is_trigger(key, *slot));
        }
        match event {
            EngineEvent::DefinitionApplied { key } => {
                self.previous_defs.remove(key);
                self.first_slots.applied(key, entry.elapsed);
                // The driver starts the new definition afresh: a failure it heard before
                // says nothing of it (a replaced one-shot whose only slot already ran
                // retires; seed 679069650231).
                self.last_failed.remove(key);
                self.unrecorded_failures.remove(key);
                if let Some(def) = self.defs.get(key) {
                    let before = self.running_defs.insert(key.clone(), def.clone());
                    if before.is_some_and(|before| before.schedule != def.schedule) {
                        self.one_shots.schedule_changed(key);
                    }
                }
                Ok(())
            }
            EngineEvent::Triggered { key, slot, backfill } => {
                self.one_shots.triggered(key, *slot, *backfill);
                // Triggered again (a later backfill over the same slot, after a backward wall
                // jump): a new request, which a decision answers (seed 1927850029966).
                self.triggers_dropped.remove(&(key.clone(), *slot));
                self.triggers_pending.insert((key.clone(), *slot), (life, false));
                Ok(())
            }
            EngineEvent::Skipped { key, reason, slot } if self.is_trigger(key, *slot) => {
                self.count(TRIGGER_EXPLICIT);
                if matches!(reason, SkipReason::Paused | SkipReason::QuietHours | SkipReason::Backoff) {
                    let reason = reason.as_str();
                    return fail(
                        TRIGGER_EXPLICIT,
                        format!("{key}: the operator's trigger (slot {slot}) was skipped as {reason}"),
                    );
                }
                if reason.is_day_cap() {
                    self.budget_skip(entry, key);
                }
                self.skip_justified(entry, life, key, *slot, *reason)
            }
            EngineEvent::CapReached { agent, reason, day } => self.cap_reached(agent, *day, reason.as_str()),
            EngineEvent::Paused { agent, .. } => {
                if let Some(pause) = self.pauses.get_mut(agent) {
                    pause.applied = true;
                    // A `Resumed` heard before this belonged to the pause it replaced.
                    pause.resumed = false;
                }
                Ok(())
            }
            EngineEvent::Resumed { agent } => {
                if let Some(pause) = self.pauses.get_mut(agent) {
                    pause.resumed = true;
                }
                Ok(())
            }
            EngineEvent::ClaimMetTrigger { key, slot, moved_to } => {
                // A one-shot's own slot that met an operator's trigger's row is not decided:
                // it moves up to a free millisecond (ADR 0055; seed 1927871805525 lost its
                // own run there before). The row must be a trigger's.
                self.count(NO_SLOT_OFFERED_TWICE);
                if !self.one_shots.decided_as_trigger(key, *slot) || moved_to <= slot {
                    return fail(
                        NO_SLOT_OFFERED_TWICE,
                        format!("{key} moved slot {slot} to {moved_to} off a trigger's row the store did not hold"),
                    );
                }
                Ok(())
            }
            EngineEvent::ClaimLost { key, slot } => {
                // A slot a trigger decided is the schedule's too (mutant
                // `trigger-claim-stores-next-slot`), but for a one-shot's own, which moves
                // off it (`ClaimMetTrigger`), and not a slot of a schedule set after a trigger took its millisecond: the
                // trigger kept off the old schedule's slots only, and backward wall jumps
                // brought the new one's there (seed 1927871965001; ADR 0052's open collision).
                let trigger_before_new_schedule = self.one_shots.decided_as_trigger_before_new_schedule(key, *slot);
                // Nor a slot armed after a read of the job's run log failed: the store's
                // claim is then what keeps the slot from running twice.
                let log_unread = self.log_unread.contains(key);
                if log_unread {
                    self.count(LOG_UNREAD_CLAIM_LOST);
                }
                if !self.is_trigger(key, *slot) && !trigger_before_new_schedule && !log_unread {
                    return fail(
                        NO_SLOT_OFFERED_TWICE,
                        format!("{key} offered slot {slot}, which the store had decided"),
                    );
                }
                self.note_decision(key, entry, *slot, Decision::AlreadyDecided);
                self.catch_up_next(key, *slot)
            }
            EngineEvent::CaughtUp { key, slot, runs, missed } => {
                if *runs == 0 && self.admission.filled > 0 {
                    self.let_go.entry(key.clone()).or_default().push((*slot, entry.wall));
                    if self.healed_at.is_some() {
                        let decision = (entry.elapsed, entry.wall, Decision::LetGo);
                        self.decisions.entry(key.clone()).or_default().push(decision);
                    }
                }
                self.catch_up_fired(entry, key, *slot, *runs, *missed)
            }
            EngineEvent::Armed { key, next_slot } => {
                self.armed.entry(key.clone()).or_default().push((entry.elapsed, *next_slot));
                let latest = self.one_shots.latest_decided(key);
                let at = (entry.elapsed, entry.wall);
                if let Some(verdict) = self.first_slots.armed_after_change(&mut self.crons, key, *next_slot, at, latest)
                {
                    self.count(first_slots::NEW_SCHEDULE_ARMED_AT_ONCE);
                    verdict?;
                }
                match self.first_slots.armed(&mut self.crons, key, *next_slot, entry.wall) {
                    Some(verdict) => {
                        self.count(first_slots::FIRST_SLOT_AFTER_STORING);
                        verdict
                    }
                    None => Ok(()),
                }
            }
            EngineEvent::Retired { key, deleted } => {
                self.retired.insert(key.clone());
                if !deleted && self.present.get(key) == Some(&true) {
                    self.retired_unwritten.insert(key.clone());
                }
                self.count(one_shots::AT_NOT_RETIRED_EARLY);
                self.one_shots.retired(key, self.running_defs.get(key), entry.wall)?;
                // A failed one-shot retries after its backoff until it succeeds or the
                // breaker disables it: it is never retired on a failure.
                self.count(AT_RETRIES);
                let one_shot = self.defs.get(key).is_some_and(|def| matches!(def.schedule, Schedule::At(_)));
                // Not when it was disabled before its run finished (the engine knew, and
                // retires what is disabled), deleted, or tripped.
                let disabled_first = match (self.disabled_at.get(key), self.last_finished.get(key)) {
                    (Some(disabled), Some(finished)) => disabled < finished,
                    _ => false,
                };
                let stopped_otherwise =
                    disabled_first || self.stopped.get(key).is_some_and(|stop| stop.why != "disabled");
                if one_shot && self.last_failed.get(key) == Some(&true) && !stopped_otherwise {
                    return fail(AT_RETRIES, format!("{key} (at) was retired after a failed run instead of retrying"));
                }
                Ok(())
            }
            // A failed claim drops the slot, a backlog slot too: a run needs a claim.
            EngineEvent::ClaimFailed { key, slot } => self.catch_up_next(key, *slot),
            EngineEvent::ClaimGone { key, slot } => {
                self.count(CLAIM_GONE_JUSTIFIED);
                if self.present.contains_key(key) {
                    return fail(
                        CLAIM_GONE_JUSTIFIED,
                        format!("{key} slot {slot}: claim refused as deleted, but it exists"),
                    );
                }
                // Only a timer that fired as the delete was being applied may still try:
                // once the delete is acknowledged (or in a later life), the timer is gone.
                self.count(STOPPED_NEVER_RUNS);
                if let Some(stop) = self.stopped.get(key).filter(|stop| stop.why == "deleted") {
                    if stop.acknowledged || life > stop.life {
                        return fail(
                            STOPPED_NEVER_RUNS,
                            format!("{key} tried to claim slot {slot} after it was deleted"),
                        );
                    }
                }
                self.catch_up_next(key, *slot)
            }
            EngineEvent::RunLost { key, slot } => {
                self.admission.ended(entry.elapsed, life, key, *slot);
                Ok(())
            }
            EngineEvent::RunWorkDone { key, slot } => {
                self.admission.work_done(entry.elapsed, life, key, *slot);
                Ok(())
            }
            EngineEvent::StoreFailed { operation: "end_pause", .. } => {
                for pause in self.pauses.values_mut().filter(|pause| pause.ended_at.is_some()) {
                    pause.clear_failed = true;
                }
                Ok(())
            }
            EngineEvent::RunStarted { key, slot } => {
                self.count(admission::RUN_ADMITTED);
                self.admission.started(entry.elapsed, life, key, *slot)?;
                if self.is_trigger(key, *slot) {
                    self.trigger_runs.insert((key.clone(), *slot));
                }
                self.note_decision(key, entry, *slot, Decision::Run);
                if let Some(def) = self.running_defs.get(key).or_else(|| self.defs.get(key)) {
                    self.run_defs.insert((key.clone(), *slot), def.clone());
                }
                // Read in the same pass, with no write between the read and this event.
                if let Some(def) = self.defs.get(key) {
                    self.run_read_defs.insert((key.clone(), *slot), def.clone());
                }
                self.tools.run_started(key, *slot, entry.elapsed);
                if !self.is_trigger(key, *slot) {
                    self.count(one_shots::AT_RUNS_ONCE);
                    self.one_shots.started(key, *slot, self.run_defs.get(&(key.clone(), *slot)))?;
                }
                self.slot_on_schedule(key, *slot)?;
                self.catch_up_next(key, *slot)?;
                self.run_started(entry, life, key, *slot)?;
                self.budget_holds(entry, key, *slot)?;
                self.visibility_at_start(key, *slot)?;
                self.schedule_rules(entry, key, *slot)
            }
            EngineEvent::Skipped { key, reason, slot } => {
                self.note_decision(key, entry, *slot, Decision::Skip(*reason));
                self.slot_on_schedule(key, *slot)?;
                self.catch_up_next(key, *slot)?;
                if reason.is_day_cap() {
                    self.budget_skip(entry, key);
                }
                self.skip_justified(entry, life, key, *slot, *reason)
            }
            EngineEvent::RunFinished {
                key, slot, status, duration, recorded, llm_calls, finished_at, usage, ..
            } => {
                self.admission.ended(entry.elapsed, life, key, *slot);
                let checks = &mut self.checks;
                let count = |invariant| *checks.entry(invariant).or_default() += 1;
                self.traces.finished(count, life, key, *slot, *status, *llm_calls)?;
                if *recorded {
                    let spent = guards::Spent {
                        calls: u64::from(*llm_calls),
                        tokens: usage.tokens.input + usage.tokens.output,
                        cost_micros: usage.cost_micros,
                    };
                    self.run_recorded(key, *finished_at, spent);
                    let succeeded = *status == systole::ports::store::ExecutionStatus::Succeeded;
                    self.usage_counted(key, *slot, succeeded, spent)?;
                }
                // What the engine knows of its last run, recorded or not, decides a one-shot.
                // A manual run that succeeds does what a one-shot was for and ends its retries;
                // one that fails says nothing of the job's own slot.
                let manual = self.trigger_runs.remove(&(key.clone(), *slot));
                let succeeded = *status == systole::ports::store::ExecutionStatus::Succeeded;
                self.agents.run_finished(key, entry.elapsed, succeeded);
                // A run of an earlier, recurring definition says nothing of a one-shot that
                // replaced it (seed 32723).
                let of_one_shot = self
                    .run_defs
                    .get(&(key.clone(), *slot))
                    .is_none_or(|def| matches!(def.schedule, systole::core::schedule::Schedule::At(_)))
                    && at_or_after_instant(self.running_defs.get(key), *slot);
                if self.present.contains_key(key) && (!manual || succeeded) && of_one_shot {
                    let failed = *status != systole::ports::store::ExecutionStatus::Succeeded;
                    self.last_failed.insert(key.clone(), failed);
                    if failed && !*recorded {
                        self.unrecorded_failures.insert(key.clone());
                    } else {
                        self.unrecorded_failures.remove(key);
                    }
                    self.last_finished.insert(key.clone(), entry.elapsed);
                    self.last_run_slot.insert(key.clone(), *slot);
                }
                if let Some(OpenRun { calls, shared: false }) = self.open_runs.remove(&(life, key.clone(), *slot)) {
                    self.count(LOOP_CAP);
                    let cap = AGENT_LOOP_ITERATIONS_MAX_DEFAULT;
                    if calls > cap {
                        return fail(LOOP_CAP, format!("{key} slot {slot} made {calls} LLM calls; the cap is {cap}"));
                    }
                }
                self.count(RUN_BUDGET);
                // The budget of the definition it ran with (a replace may shorten it).
                self.run_defs.remove(&(key.clone(), *slot));
                let started_under = self.run_read_defs.remove(&(key.clone(), *slot));
                let timeout =
                    started_under.or_else(|| self.defs.get(key).cloned()).map_or(Duration::MAX, |def| def.timeout);
                let checks = &mut self.checks;
                let count = |invariant| *checks.entry(invariant).or_default() += 1;
                self.tools.finished(count, entry.elapsed, key, *slot, *duration, timeout)?;
                if *duration > timeout.saturating_add(RUN_BUDGET_SLACK) {
                    return fail(RUN_BUDGET, format!("{key} ran {duration:?}, past its {timeout:?} budget"));
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Whether the event being checked decides an operator's trigger of `key` at `slot`.
    fn is_trigger(&self, key: &HeartbeatKey, slot: Timestamp) -> bool {
        self.deciding_trigger
            .as_ref()
            .is_some_and(|(trigger_key, trigger_slot)| trigger_key == key && *trigger_slot == slot)
    }

    fn note_decision(&mut self, key: &HeartbeatKey, entry: &Entry, slot: Timestamp, decision: Decision) {
        self.one_shots.decided(key, slot);
        // An operator's trigger's slot is not one of the schedule's; a backfill's is the
        // schedule's own (seed 1927872738592: backfilled slots dropped at a breaker's trip
        // stayed pending, and after a backward wall jump the schedule's claim of one of
        // them was taken for the backfill's alone, its slot never decided).
        if self.is_trigger(key, slot) && self.one_shots.is_operator_trigger(key, slot) {
            return;
        }
        self.decided.entry(key.clone()).or_default().insert(slot, entry.elapsed);
        if self.healed_at.is_some() {
            self.decisions.entry(key.clone()).or_default().push((entry.elapsed, entry.wall, decision));
        }
    }

    fn run_started(&mut self, entry: &Entry, life: u32, key: &HeartbeatKey, slot: Timestamp) -> Step {
        self.count(SLOT_ONCE);
        if !self.started_slots.insert((key.clone(), slot)) {
            return fail(SLOT_ONCE, format!("slot {slot} of {key} started twice"));
        }
        self.count(NO_OVERLAP);
        // The policy of the definition the driver runs: a replace in the store that it has
        // not applied yet cannot bind a timer of the old one.
        let running = self.running_defs.get(key).or_else(|| self.defs.get(key));
        let allow_all = running.is_some_and(|def| def.policy.overlap == Overlap::AllowAll);
        let mut shared = false;
        for ((_, _, open), run) in
            self.open_runs.range_mut((life, key.clone(), Timestamp::MIN)..=(life, key.clone(), Timestamp::MAX))
        {
            if !allow_all {
                return fail(NO_OVERLAP, format!("{key} started slot {slot} while slot {open} was still running"));
            }
            // Overlapping runs of one heartbeat: the LLM calls can no longer be told apart.
            run.shared = true;
            shared = true;
        }
        self.open_runs.insert((life, key.clone(), slot), OpenRun { calls: 0, shared });
        self.count(STOPPED_NEVER_RUNS);
        if let Some(stop) = self.stopped.get(key) {
            if stop.acknowledged || life > stop.life {
                return fail(STOPPED_NEVER_RUNS, format!("{key} started slot {slot} after it was {}", stop.why));
            }
        }
        // An explicit wake of the agent heartbeat, or an operator's trigger, goes through a
        // pause and quiet hours.
        let explicit = self.agents.explicit(key) || self.is_trigger(key, slot);
        self.count(PAUSE_HOLDS);
        if let Some(pause) = self.pauses.get(&key.agent).filter(|pause| !explicit && !pause.cleared) {
            let binding = pause.applied || life > pause.life;
            if binding && pause.state(entry) == Some(true) {
                let message = format!("{key} started slot {slot} while its agent was paused until {}", pause.until);
                return fail(PAUSE_HOLDS, message);
            }
        }
        // The driver runs the definition it last applied; a replace written but not applied
        // yet (or loaded just after a start-up read the store) may be either.
        let candidates: Vec<Option<ActiveHours>> = [self.running_defs.get(key), self.defs.get(key)]
            .into_iter()
            .flatten()
            .map(|def| def.active_hours.clone())
            .collect();
        let windowed_in_all = !candidates.is_empty() && candidates.iter().all(Option::is_some);
        if let Some(window) = candidates.into_iter().flatten().next().filter(|_| !explicit && windowed_in_all) {
            self.count(ACTIVE_HOURS);
            let open_in_any = [self.running_defs.get(key), self.defs.get(key)]
                .into_iter()
                .flatten()
                .filter_map(|def| def.active_hours.as_ref())
                .any(|window| window_contains(window, entry.wall));
            if !open_in_any {
                let local = entry.wall.to_zoned(zone(&window));
                let message = format!(
                    "{key} started at {local} (wall {}), outside {}-{} {}",
                    entry.wall,
                    window.start_text(),
                    window.end_text(),
                    window.zone_name()
                );
                return fail(ACTIVE_HOURS, message);
            }
        }
        Ok(())
    }

    fn llm_call(&mut self, life: u32, prompt: &str) -> Step {
        let Some(key) = self.defs.values().find(|def| *def.prompt == *prompt).map(|def| def.key.clone()) else {
            return Ok(());
        };
        for (_, run) in self.open_runs.range_mut((life, key.clone(), Timestamp::MIN)..=(life, key, Timestamp::MAX)) {
            run.calls += 1;
        }
        Ok(())
    }

    /// A restart loses the monotonic deadline: a stored pause holds for what is left of it
    /// by the wall clock, at most the maximum (docs/adr/0005). But a pause that ran its
    /// full length while a process was alive to see it must have been cleared: it may not
    /// come back, unless clearing it failed.
    fn restart_pauses(&mut self, entry: &Entry) {
        let max = Duration::from_secs(u64::from(PAUSE_MINUTES_MAX_DEFAULT) * 60);
        let crashed_at = self.last_crash_at;
        self.pauses.retain(|_, pause| {
            if pause.cleared {
                return false; // the store no longer has it
            }
            let seen_ending =
                matches!((pause.ended_at, crashed_at), (Some((ended, true)), Some(crash)) if ended + PAUSE_CLEAR_BOUND < crash);
            !seen_ending || pause.clear_failed
        });
        for pause in self.pauses.values_mut() {
            let left = pause.until.duration_since(entry.wall);
            let left = if left.is_negative() { Duration::ZERO } else { left.unsigned_abs() };
            pause.end = entry.elapsed + left.min(max);
            pause.ended_at = None;
            pause.applied = true;
            pause.resumed = false;
        }
    }

    /// Every cooldown that ended once faults were off led to a probe.
    fn probes_due(&mut self, end: Duration) -> Step {
        let (Some(healed_at), Some(offset)) = (self.healed_at, self.healed_wall_offset) else { return Ok(()) };
        let present = &self.present;
        let checks = self.checks.entry(breaker::BREAKER_COOLDOWN).or_default();
        self.breaker.probes_due(end, healed_at, offset, |key| present.contains_key(key), || *checks += 1)
    }

    /// Every trigger of a process still alive was decided, unless its job is gone or the
    /// engine was still working through its queue at the end: it decides a job's waiting
    /// triggers oldest slot first, one place at a time, so a long backfill behind a busy
    /// place outlasts the run (seed 1927870275816: 32 slots, one decided every 180 s). A
    /// queue counts as moving when an older trigger of the job was decided within
    /// [`TRIGGER_QUEUE_MOVING_SECS`] of the end; a trigger skipped over is still caught (an
    /// older one left waiting behind a newer decided one).
    fn triggers_decided(&mut self, end: Duration) -> Step {
        for ((key, slot), (_, excused)) in &self.triggers_pending {
            *self.checks.entry(TRIGGER_DECIDED).or_default() += 1;
            let moving = self.trigger_last_decided.get(key).is_some_and(|(decided_slot, at)| {
                decided_slot < slot && end.saturating_sub(*at) <= Duration::from_secs(TRIGGER_QUEUE_MOVING_SECS)
            });
            if self.present.contains_key(key) && !excused && !moving {
                return fail(TRIGGER_DECIDED, format!("{key}: the operator's trigger (slot {slot}) was never decided"));
            }
        }
        Ok(())
    }

    /// What waits behind a run of `key` is dropped by a disable, a delete, a trip or a
    /// replace: its triggers need not be decided any more.
    fn excuse_triggers(&mut self, key: &HeartbeatKey) {
        for ((trigger_key, _), (_, excused)) in &mut self.triggers_pending {
            if trigger_key == key {
                *excused = true;
            }
        }
    }

    /// A write enabled (`true`) or disabled `key` (an operator's, or a retirement's).
    fn enable_written(&mut self, entry: &Entry, life: u32, key: &HeartbeatKey, enabled: bool) {
        self.breaker.forget(entry, key);
        self.changed_at.insert(key.clone(), entry.elapsed);
        if let Some(present) = self.present.get_mut(key) {
            *present = enabled;
            if enabled {
                self.failures.insert(key.clone(), 0);
                self.lift_backoff(key);
                self.stopped.remove(key);
                self.disabled_at.remove(key);
            } else {
                self.stopped.insert(key.clone(), Stop { life, acknowledged: false, why: "disabled" });
                self.disabled_at.entry(key.clone()).or_insert(entry.elapsed);
            }
        }
    }

    fn durable(&mut self, entry: &Entry, life: u32, write: &DurableWrite) -> Step {
        let touched = match write {
            DurableWrite::SetEnabled { key, .. } | DurableWrite::Retired { key } | DurableWrite::Delete { key } => {
                Some(key)
            }
            DurableWrite::Put { def, .. } => Some(&def.key),
            _ => None,
        };
        if let Some(key) = touched {
            self.retired_unwritten.remove(key);
        }
        match write {
            DurableWrite::SetEnabled { key, enabled: false }
            | DurableWrite::Retired { key }
            | DurableWrite::Delete { key } => self.excuse_triggers(key),
            DurableWrite::Put { def, .. } => {
                self.tripped_since_put.remove(&def.key);
                self.one_shots.stored(&def.key);
                self.excuse_triggers(&def.key)
            }
            DurableWrite::Finish { key, tripped: true, .. } => {
                self.tripped_since_put.insert(key.clone());
                self.excuse_triggers(key)
            }
            _ => {}
        }
        if let DurableWrite::Claimed { key, slot, .. } | DurableWrite::Finish { key, slot, .. } = write {
            self.one_shots.decided(key, *slot);
        }
        match write {
            DurableWrite::Finish {
                key,
                slot,
                status,
                finished_at,
                consecutive_failures,
                tripped,
                opened,
                closed,
                consumed,
                llm_calls,
                tokens,
                cost_micros,
                error,
                tools,
                stop_reason,
            } => {
                let def = self.run_read_defs.get(&(key.clone(), *slot));
                // An operator's trigger ran it early: its own slot still comes.
                let own = !self.trigger_runs.contains(&(key.clone(), *slot));
                let succeeded = *status == systole::ports::store::ExecutionStatus::Succeeded;
                if succeeded && own {
                    let driven = self.run_defs.get(&(key.clone(), *slot));
                    self.one_shots.succeeded(key, *slot, driven, def);
                }
                // The run log is what a restart reads of a one-shot's last run: a crash between
                // this record and the engine's word of the run leaves this outcome, not the
                // one before it (seed 927310012221 under the held one-shot scenario: a retry
                // recorded its success, the process died, and the restart rightly retired it).
                let of_one_shot = self
                    .run_defs
                    .get(&(key.clone(), *slot))
                    .is_none_or(|def| matches!(def.schedule, systole::core::schedule::Schedule::At(_)))
                    && at_or_after_instant(self.defs.get(key), *slot);
                if self.present.contains_key(key) && (own || succeeded) && of_one_shot {
                    self.last_failed.insert(key.clone(), !succeeded);
                }
                let checks = &mut self.checks;
                let count = |invariant| *checks.entry(invariant).or_default() += 1;
                self.tools.recorded(count, key, *slot, *status, error.as_deref(), tools.as_ref(), def)?;
                let count = |invariant| *checks.entry(invariant).or_default() += 1;
                self.unreadable.finished(count, key, *slot, error.as_deref())?;
                let count = |invariant| *checks.entry(invariant).or_default() += 1;
                // System events the run carried: consumed by a success; a failed agent
                // heartbeat's run may have carried some too (they stay queued).
                let agent_failed = def.is_some_and(|def| def.kind == systole::core::heartbeat::JobKind::Agent)
                    && reference::counts_as_failure(*status);
                let events = !consumed.is_empty() || agent_failed;
                self.tools.check_gated(count, key, *slot, *status, *llm_calls, *stop_reason, events, def)?;
                self.events_consumed(key, *slot, consumed)?;
                let spent = guards::Spent { calls: u64::from(*llm_calls), tokens: *tokens, cost_micros: *cost_micros };
                self.guards.durable_finish(&key.agent, *finished_at, spent);
                let failed = reference::counts_as_failure(*status);
                if !failed {
                    let deliveries = self.deliveries.entry(key.clone()).or_default();
                    for delivery in deliveries.iter_mut().filter(|delivery| delivery.2 == *slot) {
                        delivery.3 = true;
                    }
                }
                if !self.present.contains_key(key) {
                    return Ok(()); // deleted while it ran: nothing to count against
                }
                self.count(BREAKER_EXACT);
                let before = self.failures.get(key).copied().unwrap_or(0);
                if self.stopped.get(key).is_some_and(|stop| stop.why == "tripped") {
                    // Open: a run that started beside the one that tripped it says nothing;
                    // only the probe after the cooldown does.
                    if (*consecutive_failures, *tripped, *opened, *closed) != (before, false, false, false) {
                        let message = format!(
                            "{key} slot {slot} finished with its breaker open at {before}, and the store moved \
                             it to {consecutive_failures} (tripped {tripped}, opened {opened}, closed {closed})"
                        );
                        return fail(BREAKER_EXACT, message);
                    }
                    return Ok(());
                }
                let max = self.options.breaker_failures_max;
                // A refusal no retry heals (401, 402, 403) opens it at once, at the ladder's
                // first step, or the next one for a refused probe.
                let expected = match (failed, reference::provider_refused(error.as_deref())) {
                    (false, _) => 0,
                    (true, false) => before + 1,
                    (true, true) => (before + 1).max(max),
                };
                // Disabled by an operator while it ran: counted, but their word stands; it
                // neither opens nor closes the breaker (seed 1927870538462: a trip written
                // after the disable turned it into a cooldown that no engine would end).
                let operator_disabled = self.present.get(key) == Some(&false);
                let expected_trip = failed && expected >= max && !operator_disabled;
                // Opened: this failure reached the limit from below; closed: a probe (a run
                // with the count at the limit) succeeded.
                let expected_open = expected_trip && before < max;
                let expected_close = !failed && before >= max && !operator_disabled;
                if (*consecutive_failures, *tripped, *opened, *closed)
                    != (expected, expected_trip, expected_open, expected_close)
                {
                    let message = format!(
                        "{key} slot {slot}: the store recorded {consecutive_failures} failures (tripped {tripped}, \
                         opened {opened}, closed {closed}) where {before} before and this run give {expected} \
                         (tripped {expected_trip}, opened {expected_open}, closed {expected_close})"
                    );
                    return fail(BREAKER_EXACT, message);
                }
                if expected_trip {
                    self.breaker.tripped(entry, key, *finished_at, expected, expected_open);
                }
                if expected_close {
                    self.breaker.closed(key);
                }
                self.failures.insert(key.clone(), expected);
                if failed && !expected_trip {
                    let delay = reference::backoff_after(&self.options.error_backoff, expected);
                    self.backoffs.insert(key.clone(), (entry.elapsed, entry.elapsed + delay));
                } else {
                    self.backoffs.remove(key);
                }
                if expected_trip {
                    self.catch_up_due.remove(key);
                    self.present.insert(key.clone(), false);
                    // The run is still in flight until the driver hears of the trip, so no
                    // slot of it can start in between: the same life must obey it too.
                    self.stopped.insert(key.clone(), Stop { life, acknowledged: true, why: "tripped" });
                }
            }
            DurableWrite::HalfOpen { key } => {
                self.count(breaker::BREAKER_COOLDOWN);
                match self.stopped.get(key) {
                    Some(stop) if stop.why == "tripped" => {}
                    other => {
                        let why = other.map_or("enabled", |stop| stop.why);
                        return fail(breaker::BREAKER_COOLDOWN, format!("{key} was half-opened while {why}"));
                    }
                }
                self.stopped.remove(key);
                self.present.insert(key.clone(), true);
                let healed = self.healed_at.zip(self.healed_wall_offset);
                self.breaker.half_opened(entry, key, healed)?;
            }
            DurableWrite::Retired { key } => {
                self.count(RETIREMENT_KEEPS_DISABLE);
                if self.present.get(key) == Some(&false) {
                    return fail(
                        RETIREMENT_KEEPS_DISABLE,
                        format!("{key} was disabled as out of slots while it was disabled already, its reason lost"),
                    );
                }
                self.enable_written(entry, life, key, false);
            }
            DurableWrite::SetEnabled { key, enabled } => self.enable_written(entry, life, key, *enabled),
            DurableWrite::Put { def, at } => {
                let key = &def.key;
                self.first_slots.put(key, &def.schedule, *at);
                self.breaker.forget(entry, key);
                self.changed_at.insert(key.clone(), entry.elapsed);
                if let Some(previous) = self.defs.insert(key.clone(), (**def).clone()) {
                    if previous.schedule != def.schedule {
                        // A new schedule starts a new sequence of slots (a past `at` may
                        // lie below the slots the old one ran).
                        self.last_started.remove(key);
                    }
                    self.previous_defs.insert(key.clone(), previous);
                }
                self.retired.remove(key);
                self.last_failed.remove(key);
                self.disabled_at.remove(key);
                self.present.insert(key.clone(), true);
                self.failures.insert(key.clone(), 0);
                self.lift_backoff(key);
                self.stopped.remove(key);
            }
            DurableWrite::Delete { key } => {
                self.breaker.forget(entry, key);
                self.first_slots.deleted(key);
                self.unreadable.deleted(key);
                self.catch_up_due.remove(key);
                self.present.remove(key);
                // A later heartbeat of the same id starts a new sequence of slots.
                self.last_started.remove(key);
                self.stopped.insert(key.clone(), Stop { life, acknowledged: false, why: "deleted" });
            }
            DurableWrite::Claimed { key, slot, triggered } => {
                if !triggered {
                    self.schedule_claims.insert((key.clone(), *slot));
                }
                self.count(admission::CLAIM_STARTS);
                self.admission.claimed(entry.elapsed, life, key, *slot);
                self.unreadable.claimed(key, *slot);
            }
            DurableWrite::Pause { agent, until, minutes } => {
                let end = entry.elapsed + Duration::from_secs(u64::from(*minutes) * 60);
                let pause = PauseModel {
                    until: *until,
                    end,
                    ended_at: None,
                    clear_failed: false,
                    life,
                    applied: false,
                    resumed: false,
                    cleared: false,
                };
                self.pauses.insert(agent.clone(), pause);
            }
            DurableWrite::ClearPause { agent } => {
                if let Some(pause) = self.pauses.get_mut(agent) {
                    pause.cleared = true;
                }
            }
            DurableWrite::EndPause { agent, until } => {
                if let Some(pause) = self.pauses.get_mut(agent).filter(|pause| pause.until == *until) {
                    pause.cleared = true;
                }
            }
            DurableWrite::EventQueued { agent, id, text, dropped } => {
                self.event_queued(entry, agent, *id, text, *dropped);
            }
            DurableWrite::Pruned { now, kept_days, kept_per_heartbeat, before, pruned } => {
                self.count(retention::PRUNE_EXACT);
                retention::judge(*now, *kept_days, *kept_per_heartbeat, before, pruned)?;
            }
        }
        Ok(())
    }

    fn acknowledged(&mut self, op: &Op, applied: bool) -> Step {
        let Some(key) = op.key() else { return Ok(()) };
        self.count(ACKNOWLEDGED_DURABLE);
        let state = self.present.get(key).copied();
        let durable = match op {
            // Its first run (or one of the definition it replaced) may be refused by the
            // provider and trip the breaker between the write and the ack (seed 942251056949).
            Op::Create(_) | Op::OneShotAtLatestTrigger(_) => {
                state == Some(true) || (state == Some(false) && self.tripped_since_put.contains(key))
            }
            Op::Delete(_) => state.is_none(),
            // The engine said there was nothing to change (a reload removed it, say).
            Op::Disable(_) | Op::Enable(_) if !applied => state.is_none(),
            Op::Disable(_) => state == Some(false),
            // A run in flight may trip the breaker between the write and the ack.
            Op::Enable(_) => state.is_some(),
            Op::SetFile(..)
            | Op::Wake(..)
            | Op::UserTurn(..)
            | Op::Trigger(..)
            | Op::Pause(..)
            | Op::Resume(..)
            | Op::Reload(..)
            | Op::Kill
            | Op::Backfill(..)
            | Op::LogUnreadable(_) => true,
        };
        // A one-shot may run and be retired before its creator hears back; after that, an
        // enable or disable finds nothing (or a retired one) to change.
        let durable = durable || self.retired.contains(key);
        if !durable {
            return fail(ACKNOWLEDGED_DURABLE, format!("acknowledged `{}` but the store has {state:?}", op.describe()));
        }
        if matches!(op, Op::Delete(_) | Op::Disable(_)) {
            if let Some(stop) = self.stopped.get_mut(key) {
                stop.acknowledged = true;
            }
        }
        if matches!(op, Op::Delete(_) | Op::Disable(_)) && applied {
            let waiting: Vec<_> = self.triggers_pending.keys().filter(|(trigger, _)| trigger == key).cloned().collect();
            for trigger in waiting {
                self.count(TRIGGER_DROPPED);
                self.triggers_pending.remove(&trigger);
                self.triggers_dropped.insert(trigger);
            }
        }
        Ok(())
    }

    fn started(&mut self, life: u32, running_rows: usize, heartbeats: &[(HeartbeatKey, bool)]) -> Step {
        self.count(NO_RUNNING_AFTER_RECOVERY);
        if running_rows != 0 {
            return fail(
                NO_RUNNING_AFTER_RECOVERY,
                format!("life {life} started with {running_rows} runs still 'running'"),
            );
        }
        self.count(ACKNOWLEDGED_DURABLE);
        let stored: BTreeMap<HeartbeatKey, bool> = heartbeats.iter().cloned().collect();
        if stored != self.present {
            let message =
                format!("after restart the store holds {stored:?}, but durable writes say {:?}", self.present);
            return fail(ACKNOWLEDGED_DURABLE, message);
        }
        Ok(())
    }

    /// `at-retry-armed`, at the end of a healed world with the engine running: every failure
    /// it knows of has been through its completion, or through a start-up that found it in
    /// the run log, and each of those arms the retry (or retires, disables or trips it,
    /// which the conditions below leave out).
    fn failed_one_shots_rearmed(&mut self, heartbeats: &[(HeartbeatKey, bool)]) -> Step {
        if self.healed_at.is_none() || !self.engine_running {
            return Ok(());
        }
        for (key, _) in heartbeats.iter().filter(|(_, enabled)| *enabled) {
            let one_shot = self.defs.get(key).is_some_and(|def| matches!(def.schedule, Schedule::At(_)));
            let failed = self.last_failed.get(key) == Some(&true);
            let standing = self.present.get(key) == Some(&true) && !self.stopped.contains_key(key);
            let Some(failed_slot) = self.last_run_slot.get(key).copied().filter(|_| one_shot && failed && standing)
            else {
                continue;
            };
            self.count(AT_RETRY_ARMED);
            let latest_armed = self.armed.get(key).and_then(|armed| armed.last()).map(|(_, next_slot)| *next_slot);
            if latest_armed.is_none_or(|next_slot| next_slot <= failed_slot) {
                let armed =
                    latest_armed.map_or("never armed".to_owned(), |next_slot| format!("last armed for {next_slot}"));
                return fail(
                    AT_RETRY_ARMED,
                    format!("{key} (at) failed its run of {failed_slot} and has no retry armed ({armed})"),
                );
            }
        }
        Ok(())
    }

    /// Every enabled heartbeat, after the system healed and settled, decides a slot at
    /// least once per interval (plus slack), and runs every slot its window allows.
    fn liveness(&mut self, end: Duration, heartbeats: &[(HeartbeatKey, bool)]) -> Step {
        let Some(healed_at) = self.healed_at else { return Ok(()) };
        let from = healed_at + Duration::from_secs(SETTLE_SECS);
        for (key, _) in heartbeats.iter().filter(|(_, enabled)| *enabled) {
            let Some(def) = self.defs.get(key).cloned() else { continue };
            // Cron and `at` slots are checked one by one against the reference model instead.
            let Schedule::Every(interval) = def.schedule else { continue };
            self.count(LIVENESS);
            // A constant jitter shifts every slot alike, but the monotonic chain may wait
            // for it on top of the interval (after a backward wall jump).
            let bound = interval + def.policy.jitter_max + Duration::from_secs(LIVENESS_SLACK_SECS);
            let decisions: Vec<_> = self
                .decisions
                .get(key)
                .map(|d| d.iter().filter(|(at, _, _)| *at >= from).cloned().collect())
                .unwrap_or_default();
            let mut previous = from;
            for (at, wall, decision) in &decisions {
                // A breaker's probe restarts the cadence (open, it decided nothing).
                if let Some(half_opened) = self.breaker.half_opened_between(key, previous, *at) {
                    previous = half_opened;
                }
                if self.breaker.was_open(key, *at) {
                    // Held by its breaker (a wake skipped as disabled): `breaker-cooldown`
                    // checks the probe came on time.
                    previous = *at;
                    continue;
                }
                // Slots wait for a place while the engine is full (ADR 0023).
                if *at > previous + bound + self.admission.full_within(previous, *at) {
                    let gap = *at - previous;
                    return fail(LIVENESS, format!("{key}: {gap:?} without a decision, more than {bound:?}"));
                }
                // A slot that waited for a place started late, less than an interval before
                // this decision; its run may still be going when the next slot comes due.
                let after_a_wait = *at < previous + interval
                    && self.admission.full_within(previous.saturating_sub(bound), previous) > Duration::ZERO;
                previous = *at;
                let open = def.active_hours.as_ref().is_none_or(|window| window_contains(window, *wall));
                match decision {
                    Decision::Skip(SkipReason::QuietHours) if open => {
                        return fail(LIVENESS, format!("{key} skipped for quiet hours at {wall}, inside its window"));
                    }
                    // A pause set before healing may run into the liveness phase;
                    // `skip-justified:paused` checks that it still held.
                    Decision::Skip(SkipReason::Paused) => {}
                    // A failure just before healing may still be backing off;
                    // `skip-justified:backoff` checks each such skip against the model.
                    Decision::Skip(SkipReason::Backoff) => {}
                    // The agent heartbeat's own skips: an empty file, a closed flood guard (cron
                    // wakes) or a user turn still ending; each judged by its `skip-justified`.
                    Decision::Skip(
                        SkipReason::EmptyHeartbeatFile | SkipReason::FloodGuard | SkipReason::RequestsInFlight,
                    ) if key.heartbeat.is_reserved() => {}
                    // A reached cap lasts the day (`skip-justified:budget`, `:token-cap`,
                    // `:cost-cap` and the global ones check it was reached); a target that
                    // shows nothing never runs (`visibility`).
                    Decision::Skip(reason) if reason.is_day_cap() => {}
                    // The overlap that wait made (ADR 0023): a healed world's runs are fast,
                    // but one that started late can outlast its heartbeat's next due slot.
                    // `skip-justified:overlap` checks a run of it was going. An operator's
                    // trigger runs outside the cadence, and its run may overlap a slot too.
                    Decision::Skip(SkipReason::Overlap)
                        if after_a_wait || self.overlaps_a_trigger.contains(&(key.clone(), *at)) => {}
                    Decision::Skip(SkipReason::AlertsDisabled) if reference::shows_nothing(self.options.visibility) => {
                    }
                    Decision::Skip(reason) if *reason != SkipReason::QuietHours => {
                        return fail(LIVENESS, format!("{key} skipped ({}) at {wall} after healing", reason.as_str()));
                    }
                    _ => {}
                }
            }
            if let Some(half_opened) = self.breaker.half_opened_between(key, previous, end) {
                previous = half_opened;
            }
            if end > previous + bound + self.admission.full_within(previous, end) {
                return fail(
                    LIVENESS,
                    format!("{key}: no decision in the last {:?} (bound {bound:?})", end - previous),
                );
            }
        }
        Ok(())
    }
}

fn signed(duration: Duration) -> SignedDuration {
    SignedDuration::try_from(duration).unwrap_or(SignedDuration::MAX)
}

fn zone(window: &ActiveHours) -> TimeZone {
    TimeZone::get(window.zone_name()).unwrap_or(TimeZone::UTC)
}

fn minutes(text: &str) -> u32 {
    let (hours, minutes) = text.split_once(':').unwrap_or(("0", "0"));
    hours.parse::<u32>().unwrap_or(0) * 60 + minutes.parse::<u32>().unwrap_or(0)
}

/// The checker's own reading of a window, written independently of the engine's, so a
/// bug there (a forgotten midnight wrap, say) is caught rather than copied.
pub fn window_contains(window: &ActiveHours, at: Timestamp) -> bool {
    let local = at.to_zoned(zone(window));
    let minute = u32::try_from(local.hour()).unwrap_or(0) * 60 + u32::try_from(local.minute()).unwrap_or(0);
    let (start, end) = (minutes(&window.start_text()), minutes(&window.end_text()));
    if start < end {
        (start..end).contains(&minute)
    } else {
        minute >= start || minute < end
    }
}
