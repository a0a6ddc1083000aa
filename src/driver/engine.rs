//! The driver loop: one task that owns the schedule, sleeps until the earliest due slot,
//! decides what each due slot does, and dispatches runs concurrently (bounded).

mod adoption;
mod arming;
mod breaker;
mod budget;
mod lifts;
mod loading;
pub(crate) mod operator;
mod pause_changes;
mod retention;
mod wakes;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use jiff::{SignedDuration, Timestamp};

use crate::core::breaker::{cooldown_length, Cooldown};
use crate::core::budget::DayLedger;
use crate::core::flood::FloodGuard;
use crate::core::guard::{self, GuardInput, SkipReason};
use crate::core::heartbeat::{Heartbeat, HeartbeatDef, JobKind, Origin};
use crate::core::ids::{AgentId, HeartbeatKey};
use crate::core::key_map::{key_map, KeyMap};
use crate::core::pause::Pause;
use crate::core::policy::{backoff_delay, jitter_offset, on_overlap, CatchUp, OverlapDecision};
use crate::core::schedule::Schedule;
use crate::core::slots::{add, truncate_to_millis, SlotTimer};
use crate::core::timer_queue::TimerQueue;
use crate::core::wake::{PendingWake, WakeReason};
use crate::driver::events::EngineEvent;
use crate::driver::group_commit::RunNews;
use crate::driver::run::{run_claimed, Claimed, FinishedRun, RunContext, DEFINITION_GONE};
use crate::driver::run_events::RunEvent;
use crate::limits::{
    AT_RETRY_AFTER_HOLD_SECS_MIN, DRIVER_SLEEP_SECS_MAX, DUE_PER_WAKE_MAX, ONE_SHOT_LOG_ROWS_READ_MAX,
    RESULTS_WAITING_PER_PLACE_MAX, RUNS_PRUNE_FIRST_DELAY_SECS,
};
use crate::ports::clock::{Mono, Now};
use crate::ports::store::{ClaimOutcome, ClaimedSlots, ExecutionStatus, NextSlot, SkipRecord, SlotClaim};
use arming::{Arming, Commons};

/// Why a heartbeat whose schedule ran out (a past `at`, a cron with no future occurrence)
/// was disabled instead of deleted.
pub const NO_MORE_SLOTS: &str = "no-more-slots";

/// What the handle asks of the driver. Store writes happen before a command is sent, so
/// the driver only re-arms its in-memory schedule, then answers on `applied`: once the
/// handle hears back, no slot can fire under the old definition.
pub(crate) enum Command {
    Change {
        change: Change,
        applied: oneshot::Sender<()>,
    },
    /// Every job (or those of `only` it has) with the guard's verdict for now.
    Inspect {
        only: Option<Vec<HeartbeatKey>>,
        answer: oneshot::Sender<Vec<operator::JobView>>,
    },
    /// Each agent's jobs, enabled and disabled, counted: what `/metrics` shows, without a
    /// view a job.
    Count {
        answer: oneshot::Sender<BTreeMap<AgentId, operator::EnabledCounts>>,
    },
    /// The jobs with a run going: what a stop waits for, without a view of every job.
    InFlight {
        answer: oneshot::Sender<Vec<HeartbeatKey>>,
    },
    /// Run a job now, once, through the normal claim.
    Trigger {
        key: HeartbeatKey,
        answer: oneshot::Sender<operator::TriggerOutcome>,
    },
    /// Run these past slots of a job, oldest first, one after another.
    Backfill {
        key: HeartbeatKey,
        slots: Vec<Timestamp>,
        answer: oneshot::Sender<operator::TriggerOutcome>,
    },
    /// `request_now`: answers whether the agent has an agent heartbeat to wake.
    Wake {
        agent: AgentId,
        reason: WakeReason,
        accepted: oneshot::Sender<bool>,
    },
    Shutdown {
        grace: Duration,
        done: oneshot::Sender<usize>,
    },
}

pub(crate) enum Change {
    Upsert(Box<HeartbeatDef>),
    /// Rows the store holds (written by another node's seed, say): run each as a start-up
    /// would load it, with its state as the store holds it when the driver takes this.
    Adopt(Vec<Heartbeat>),
    /// Rows the store holds, adopted only where the driver arms the heartbeat otherwise
    /// (or not at all): a cluster node that missed a reload took its partitions from the
    /// store later, so what it runs is not what its own file said before.
    AdoptChanged(Vec<Heartbeat>),
    Delete(HeartbeatKey),
    /// A reload's file holds these heartbeats (of this engine's partition): every other
    /// one the file once seeded goes, as the store's seed removed it.
    KeepConfigOnly(BTreeSet<HeartbeatKey>),
    SetEnabled(HeartbeatKey, bool),
    Pause(AgentId, Pause),
    /// An operator ended the agent's pause early.
    Resume(AgentId),
}

/// What the run log says of a one-shot's latest run (ADR 0046).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OneShotLastRun {
    Failed,
    /// Its own run, at or after its instant.
    Succeeded,
    /// Nothing that decides: no row, a skip, an interrupted run, an earlier schedule's run.
    Neither,
}

/// The driver's view of one heartbeat.
struct Entry {
    /// What arming and deciding its slots read of its definition; a run reads the whole
    /// definition from the store when its slot is claimed (ADR 0026).
    def: Arming,
    /// Runs of it going (`runs_in_flight()`): 4 bytes, so the entry is 24 bytes, not 32.
    runs_in_flight: u32,
    enabled: bool,
    /// Whether the last run of this heartbeat succeeded.
    last_succeeded: bool,
    /// Its schedule has no more slots: once nothing runs or waits, it is retired.
    exhausted: bool,
    /// A one-shot the engine retired (here or, by its stored reason, before a restart): it
    /// was done, and an enable runs nothing of it again, unless an own slot of it runs (its
    /// instant was never decided in the store), which makes it live again.
    retired: bool,
    /// What few heartbeats have at a time (a backlog, a backoff, a retry, a probe), out of
    /// line and only while any of it is set: 96 bytes inline in every entry before.
    rare: Option<Box<Rare>>,
}

/// An entry's state that a heartbeat at rest does not have.
#[derive(Default)]
struct Rare {
    /// Slots waiting to run one after another: missed slots under catch-up `all`, or the
    /// one slot `buffer_one` holds while a run is going.
    waiting: VecDeque<Timestamp>,
    /// No run starts before this (error backoff after a failure).
    backoff_until: Option<Mono>,
    /// The next slot it had when it lost its timer (disabled): the floor of its next timer.
    next_slot_floor: Option<Timestamp>,
    /// A one-shot whose run failed: its slots are retries, held ones are tried again.
    retrying: bool,
    /// The latest slot a retry was armed for: the next one goes above it.
    retry_slot: Option<Timestamp>,
    /// Enabled by its breaker's cooldown for a probe: the next run's success closes the
    /// breaker (announced), a failure opens it again.
    half_open: bool,
}

/// The rare state of every entry that has none.
static AT_REST: Rare = Rare {
    waiting: VecDeque::new(),
    backoff_until: None,
    next_slot_floor: None,
    retrying: false,
    retry_slot: None,
    half_open: false,
};

impl Rare {
    fn at_rest(&self) -> bool {
        self.waiting.is_empty()
            && self.backoff_until.is_none()
            && self.next_slot_floor.is_none()
            && !self.retrying
            && self.retry_slot.is_none()
            && !self.half_open
    }
}

impl Entry {
    fn runs_in_flight(&self) -> usize {
        usize::try_from(self.runs_in_flight).unwrap_or(usize::MAX)
    }

    fn set_runs_in_flight(&mut self, runs: usize) {
        self.runs_in_flight = u32::try_from(runs).unwrap_or(u32::MAX);
    }

    fn new(def: HeartbeatDef, enabled: bool, next_slot_floor: Option<Timestamp>, commons: &mut Commons) -> Self {
        let mut entry = Self {
            def: Arming::new(def, commons),
            runs_in_flight: 0,
            enabled,
            last_succeeded: false,
            exhausted: false,
            retired: false,
            rare: None,
        };
        entry.with_rare(|rare| rare.next_slot_floor = next_slot_floor);
        entry
    }

    /// Its slots' stable offset (`key` is its key in the entries map).
    fn jitter(&self, key: &HeartbeatKey) -> Duration {
        jitter_offset(key, self.def.common.policy.jitter_max)
    }

    fn rare(&self) -> &Rare {
        self.rare.as_deref().unwrap_or(&AT_REST)
    }

    /// Changes its rare state, which stays out of line only while any of it is set.
    fn with_rare<T>(&mut self, change: impl FnOnce(&mut Rare) -> T) -> T {
        match &mut self.rare {
            Some(rare) => {
                let out = change(rare);
                if rare.at_rest() {
                    self.rare = None;
                }
                out
            }
            None => {
                let mut rare = Rare::default();
                let out = change(&mut rare);
                if !rare.at_rest() {
                    self.rare = Some(Box::new(rare));
                }
                out
            }
        }
    }
}

pub(crate) struct Driver {
    /// Shared by every run behind one count: a run's copy of the context's thirty handles
    /// was thirty counts raised as it started and lowered as it ended, each a cache line
    /// the driver's and the runs' cores passed between them.
    context: Arc<RunContext>,
    /// Each heartbeat's entry and, while it is armed, its one timer.
    entries: TimerQueue<Entry>,
    /// What the entries' arming records have in common, one copy of each.
    commons: Commons,
    /// Agents whose timed heartbeats are paused, until each pause ends.
    pauses: BTreeMap<AgentId, Pause>,
    /// Heartbeats the breaker disabled, until each one's probe.
    cooldowns: BTreeMap<HeartbeatKey, Cooldown>,
    /// Every run started and not yet heard finished (its result committed).
    runs: BTreeMap<(HeartbeatKey, Timestamp), RunTask>,
    /// How many of `runs` are done working and wait for their result to be written: they
    /// hold no place among `runs_in_flight_max` (ADR 0042). Counted, not derived: every
    /// pass asks for the room, and `runs` may hold up to twice a limit of 10,000.
    writing: usize,
    /// Agent heartbeat wakes asked for and not yet decided, per agent.
    wakes: BTreeMap<AgentId, PendingWake>,
    /// The agent heartbeat's flood guard, per agent (this process's starts).
    floods: BTreeMap<AgentId, FloodGuard>,
    /// What an agent heartbeat whose slot is being claimed will run with.
    prepared: BTreeMap<HeartbeatKey, wakes::Prepared>,
    /// The latest slot each agent heartbeat was decided under (read from the store once).
    agent_slots: BTreeMap<AgentId, Timestamp>,
    /// What each agent spent in its current local day, and when that day ends.
    ledgers: BTreeMap<AgentId, (DayLedger, Timestamp)>,
    /// All agents' spending in the engine's day (the global cap), once read.
    global_spend: Option<budget::GlobalSpend>,
    /// Slots an operator triggered, decided in the next turn of the loop.
    triggered: Vec<(HeartbeatKey, Timestamp)>,
    /// Triggered slots not decided yet (one may wait behind a run, `buffer_one`): explicit
    /// requests until they run or skip.
    explicit: std::collections::BTreeSet<(HeartbeatKey, Timestamp)>,
    /// The latest slot triggered per job, so two triggers in one millisecond stay two slots.
    /// Kept when the job is deleted: one made again under its id triggers above the slots
    /// its predecessor's triggers took (the run log keys runs by id and slot).
    trigger_floor: KeyMap<Timestamp>,
    /// Slots an operator triggered, until their run starts (its `RunTask` says so from then
    /// on) or they are dropped: a triggered run says nothing of a one-shot's own slot.
    trigger_slots: std::collections::BTreeSet<(HeartbeatKey, Timestamp)>,
    /// Heartbeats that may have slots waiting: a superset of those whose `waiting` is not
    /// empty, so a wake looks at these instead of every armed heartbeat.
    backlogged: BTreeSet<HeartbeatKey>,
    /// Heartbeats that may be exhausted: a superset of those marked so, for the same reason.
    exhausted: BTreeSet<HeartbeatKey>,
    /// When the run log is pruned next.
    next_prune: Mono,
    /// Timers held, disarmed, because the read of their heartbeat's latest logged slot
    /// failed (`lifts`), and when that read is tried again.
    unlifted: BTreeMap<HeartbeatKey, SlotTimer>,
    next_lift_retry: Mono,
    /// How many runs may be going at once: a slot is claimed only when its run can start
    /// (admission before the claim, ADR 0023), so `runs` never holds more.
    runs_in_flight_max: usize,
    /// Slots that passed their guards when no run could start, in the order they came;
    /// decided again (guards included) before anything new is taken in.
    admission_queue: VecDeque<(HeartbeatKey, Timestamp)>,
    /// How many slots each heartbeat has in the admission queue (it is not exhausted
    /// while one waits there).
    queued: KeyMap<usize>,
    /// The latest slot a heartbeat's queued slot was decided as while more of its slots
    /// wait in the queue: those at or below it were caught up to and do not run again.
    queue_caught_up: KeyMap<Timestamp>,
    /// The latest slot decided (run or skipped) of each heartbeat while an older slot of
    /// it was held behind a run or waited for a place: that one then runs as it is, since
    /// catching it up would decide one of those again.
    decided_past_held: KeyMap<Timestamp>,
    commands: mpsc::Receiver<Command>,
    /// Runs done working, and finished runs in the order the store committed their
    /// results (see `group_commit`).
    completions: mpsc::UnboundedReceiver<RunNews>,
}

/// A run's task, and whether its work is done and only its result's write is left.
struct RunTask {
    task: JoinHandle<()>,
    writing: bool,
    /// An operator's trigger: kept with the run, not in `Driver::trigger_slots`, which a
    /// disable clears of what waits (seed 1927871743162: a trigger's run that ended after
    /// a disable read as a one-shot's own success, which deleted it unrun).
    triggered: bool,
}

/// Forgets the run of `key`'s `slot` among `runs`, and among the `writing` ones if it was;
/// on the fields alone, so that a caller may hold an entry meanwhile. Whether it was an
/// operator's trigger.
fn forget_run_in(
    runs: &mut BTreeMap<(HeartbeatKey, Timestamp), RunTask>,
    writing: &mut usize,
    key: &HeartbeatKey,
    slot: Timestamp,
) -> bool {
    let Some(run) = runs.remove(&(key.clone(), slot)) else { return false };
    if run.writing {
        *writing -= 1;
    }
    run.triggered
}

impl Driver {
    pub(crate) fn new(
        context: RunContext,
        runs_in_flight_max: usize,
        commands: mpsc::Receiver<Command>,
        completions: mpsc::UnboundedReceiver<RunNews>,
    ) -> Self {
        let started = context.clock.monotonic();
        let next_prune = started + Duration::from_secs(RUNS_PRUNE_FIRST_DELAY_SECS);
        Self {
            context: Arc::new(context),
            entries: TimerQueue::new(),
            pauses: BTreeMap::new(),
            cooldowns: BTreeMap::new(),
            runs: BTreeMap::new(),
            writing: 0,
            wakes: BTreeMap::new(),
            floods: BTreeMap::new(),
            prepared: BTreeMap::new(),
            agent_slots: BTreeMap::new(),
            ledgers: BTreeMap::new(),
            global_spend: None,
            triggered: Vec::new(),
            explicit: std::collections::BTreeSet::new(),
            trigger_floor: key_map(),
            trigger_slots: std::collections::BTreeSet::new(),
            backlogged: BTreeSet::new(),
            commons: Commons::default(),
            exhausted: BTreeSet::new(),
            next_prune,
            unlifted: BTreeMap::new(),
            next_lift_retry: started,
            runs_in_flight_max: runs_in_flight_max.max(1),
            admission_queue: VecDeque::new(),
            queued: key_map(),
            queue_caught_up: key_map(),
            decided_past_held: key_map(),
            commands,
            completions,
        }
    }

    /// The loop. Returns when shut down (or when every handle is gone), after in-flight
    /// runs finished or the grace period ran out.
    pub(crate) async fn run(mut self) {
        loop {
            // Read the clock only for what may end (a reading is not free in the simulator).
            if !self.pauses.is_empty() {
                self.end_pauses(self.context.clock.now()).await;
            }
            if !self.cooldowns.is_empty() {
                self.end_cooldowns(self.context.clock.now()).await;
            }
            self.retry_lifts(self.context.clock.now()).await;
            self.fire_due(self.context.clock.now()).await;
            self.retire_exhausted().await;
            self.prune_if_due(self.context.clock.now());
            let wake = self.next_wake(self.context.clock.now());
            let clock = Arc::clone(&self.context.clock);
            tokio::select! {
                biased;
                Some(news) = self.completions.recv() => {
                    self.hear(news).await;
                    // The rest of its group commit is in the channel already: heard before
                    // the next decision, which must not judge by half of one commit (a
                    // backoff skip after a success the store had counted, seed 1225000007955).
                    while let Ok(news) = self.completions.try_recv() {
                        self.hear(news).await;
                    }
                }
                command = self.commands.recv() => match command {
                    Some(Command::Shutdown { grace, done }) => {
                        let abandoned = self.drain(grace).await;
                        let _ = done.send(abandoned);
                        return;
                    }
                    Some(Command::Change { change, applied }) => {
                        self.apply(change).await;
                        let _ = applied.send(());
                    }
                    Some(Command::Wake { agent, reason, accepted }) => {
                        let now = self.context.clock.now();
                        let _ = accepted.send(self.request_wake(&agent, reason, None, now));
                    }
                    Some(Command::Inspect { only, answer }) => {
                        let now = self.context.clock.now();
                        let _ = answer.send(self.inspect(now, only.as_deref()).await);
                    }
                    Some(Command::Count { answer }) => {
                        let _ = answer.send(self.enabled_counts());
                    }
                    Some(Command::InFlight { answer }) => {
                        let _ = answer.send(self.keys_in_flight());
                    }
                    Some(Command::Trigger { key, answer }) => {
                        let now = self.context.clock.now();
                        let _ = answer.send(self.trigger(&key, now));
                    }
                    Some(Command::Backfill { key, slots, answer }) => {
                        let now = self.context.clock.now();
                        let _ = answer.send(self.backfill(&key, slots, now));
                    }
                    None => {
                        self.drain(Duration::ZERO).await;
                        return;
                    }
                },
                () = clock.sleep_until(wake) => {}
            }
        }
    }

    /// Decides every slot that is due, admitting runs before their claims (ADR 0023): a
    /// slot is claimed only when its run can start at once. A slot that passed its guards
    /// with no place left waits in the admission queue, and while any does, nothing new is
    /// taken in: timers stay due (their catch-up policy decides later what of the slots
    /// that passed meanwhile runs), backlogs and wakes stay pending. So the queue holds at
    /// most one pass's slots, and every heartbeat gets its turn in the order it came.
    async fn fire_due(&mut self, now: Now) {
        self.reap_lost_runs();
        let room = self.room();
        if room == 0 {
            return;
        }
        let mut claims = Vec::new();
        let mut skips = Vec::new();
        let from_queue = !self.admission_queue.is_empty();
        let mut behind_queued = Vec::new();
        let due: Vec<(HeartbeatKey, Timestamp)> = if !from_queue {
            let due = self.take_in(now);
            // Agent heartbeat wakes first: one per agent at most, and they are decided
            // only while there is room, so a busy schedule must not keep them waiting.
            self.decide_wakes(now, room, &mut claims, &mut skips).await;
            due
        } else {
            // Only as many as there are places: the rest keep their turn and are decided when
            // it comes, so a pass costs what it can start, not the whole queue (ADR 0023).
            // Those that skip leave room, and the next pass follows at once.
            let mut due = Vec::new();
            while due.len() < room {
                let Some((key, slot)) = self.admission_queue.pop_front() else { break };
                let last_of_key = match self.queued.get_mut(&key) {
                    Some(queued) => {
                        *queued = queued.saturating_sub(1);
                        *queued == 0
                    }
                    None => true,
                };
                if last_of_key {
                    self.queued.remove(&key);
                }
                let explicit = self.is_explicit(&key, slot);
                // A heartbeat's older queued slot that caught up to a later one (a held slot
                // and its timer's next, both waiting) has taken that one's place: it runs once.
                let covered = !explicit && self.queue_caught_up.get(&key).is_some_and(|latest| slot <= *latest);
                if !covered {
                    if let Some((key, slot)) =
                        self.catch_up_queued(now, key.clone(), slot, last_of_key, &mut behind_queued)
                    {
                        // A trigger's slot is its own: it neither stands for nor hides another.
                        if !explicit && !last_of_key {
                            let latest = self.queue_caught_up.entry(key.clone()).or_insert(slot);
                            *latest = (*latest).max(slot);
                        }
                        due.push((key, slot));
                    }
                }
                if last_of_key {
                    self.queue_caught_up.remove(&key);
                }
            }
            due
        };
        self.decide(now, room, due, from_queue, claims, skips).await;
        self.backlog_behind_queued(now, behind_queued);
    }

    /// Under catch-up `all`, the slots a heartbeat's timer came due for while its queued
    /// slot waited for a place run after that slot, one after another, once it is decided.
    /// Left to the timer, the first would be decided beside that slot's run and skipped as
    /// its overlap (seed 1927870024294 with slow duplicate checks, ADR 0027).
    fn backlog_behind_queued(&mut self, now: Now, keys: Vec<HeartbeatKey>) {
        for key in keys {
            let Some(timer) = self.entries.timer(&key).filter(|timer| now.wall >= timer.due_wall()) else {
                continue;
            };
            self.entries.disarm(&key);
            self.fire_timer(now, &key, timer, true);
        }
    }

    /// A slot that waited for admission is decided as a timer that fires late would be:
    /// armed again at that slot and fired now, by its catch-up policy, which runs the
    /// latest of the slots that passed meanwhile (`once`), or none if that is too old
    /// (`skip`). `all` runs each one; a trigger is an explicit request and a one-shot has
    /// one slot, so those run as they are.
    fn catch_up_queued(
        &mut self,
        now: Now,
        key: HeartbeatKey,
        slot: Timestamp,
        last_of_key: bool,
        behind_queued: &mut Vec<HeartbeatKey>,
    ) -> Option<(HeartbeatKey, Timestamp)> {
        let recurring = |entry: &Entry| !matches!(entry.def.schedule(), Schedule::At(_));
        let Some((entry, Some(armed))) = self.entries.get_with_timer(&key).filter(|(entry, _)| recurring(entry)) else {
            return Some((key, slot));
        };
        if self.is_explicit(&key, slot) {
            return Some((key, slot));
        }
        let (schedule, policy) = (entry.def.schedule().clone(), entry.def.common.policy);
        // If the wall clock went back while it waited, the slot still runs (the fire finds
        // it "due by elapsed time"): it was due, is late already, and holds its place in its
        // heartbeat's order, as a held or backlog slot does.
        let timer = SlotTimer::resume(now, &schedule, entry.jitter(&key), slot);
        let fired = timer.fire(now, &schedule, &policy);
        // The timer it had, unless slots passed beyond it: its monotonic deadline stays. But
        // not a deadline that passed while the slot waited (the wall clock lagging after a
        // backward jump, so the fire above passed no slot beyond this one): a late timer's
        // next is an interval after its run, or the two slots would be decided at once and
        // the second skipped as the first's overlap (seed 1927000002369; under catch-up
        // `all` too, seed 1927870024294).
        let stale = |next: &SlotTimer| next.next_slot == armed.next_slot && armed.is_due(now);
        if policy.catch_up == CatchUp::All {
            if last_of_key && now.wall >= armed.due_wall() {
                // Its timer's slots came due while this one, its last in the queue, waited
                // for a place: they run after it, one after another, as catch-up `all` runs
                // missed slots (once it is decided: `backlog_behind_queued`).
                behind_queued.push(key.clone());
            } else if let Some(next) = fired.next.filter(stale) {
                self.arm(key.clone(), next);
            }
            return Some((key, slot));
        }
        // A slot held behind a run (`buffer_one`) while its timer went on deciding the
        // slots after it: those are decided, so it runs as it is (seed 972460027560). Known
        // by the decisions themselves: an enable moves the timer without deciding any
        // (seed 1125000006678).
        if self.decided_past_held.get(&key).is_some_and(|decided| *decided > slot) {
            return Some((key, slot));
        }
        // Armed at the queued slot, then at once at `next` below: the first is announced
        // only, and a `next` that is the timer it had stays where it is. This runs for every
        // queued slot on every pass (ADR 0023), and moving each key in the timer queue's
        // three indexes twice was a fifth of a saturated engine's CPU.
        self.announce_armed(&key, timer.next_slot);
        if fired.missed > 0 {
            let first = fired.run.first().copied().unwrap_or(slot);
            let runs = fired.run.len() as u64;
            let event = EngineEvent::CaughtUp { key: key.clone(), slot: first, runs, missed: fired.missed };
            self.context.events.emit(now.wall, &event);
        }
        // The timer it had, unless slots passed beyond it (or it is stale, above).
        match fired.next.filter(|next| next.next_slot > armed.next_slot || stale(next)) {
            Some(next) => self.arm(key.clone(), next),
            None => self.announce_armed(&key, armed.next_slot),
        }
        // The slot it catches up to may be one an operator's backfill holds (explicit,
        // waiting its turn): that one runs there, once, and stands for this one as the
        // latest would (seed 1927870817135: it was offered twice, and its second claim lost).
        let latest = fired.run.last().copied().filter(|latest| !self.is_explicit(&key, *latest))?;
        Some((key, latest))
    }

    /// Everything due now: slots an operator triggered, slots waiting behind a finished
    /// run, and the slots of the timers that are due (at most `DUE_PER_WAKE_MAX`).
    fn take_in(&mut self, now: Now) -> Vec<(HeartbeatKey, Timestamp)> {
        // Slots an operator triggered come first; they are explicit requests (see `operator`).
        let mut due: Vec<(HeartbeatKey, Timestamp)> = std::mem::take(&mut self.triggered);
        // Then the slots waiting behind a finished run: they are older than any that fires now.
        let backlogged: Vec<HeartbeatKey> = self.backlogged.iter().cloned().collect();
        for key in backlogged {
            let Some(entry) = self.entries.get_mut(&key).filter(|entry| !entry.rare().waiting.is_empty()) else {
                self.backlogged.remove(&key);
                continue;
            };
            if entry.runs_in_flight() == 0 {
                if let Some(slot) = entry.with_rare(|rare| rare.waiting.pop_front()) {
                    due.push((key, slot));
                }
            }
        }
        // Keys with a slot in `due` already. A timer's key is not added: the queue holds one
        // timer a key, so no key comes out of it twice in one take.
        let due_keys: BTreeSet<HeartbeatKey> = due.iter().map(|(key, _)| key.clone()).collect();
        let mut ticks = Vec::new();
        for (key, timer) in self.entries.take_due(now, DUE_PER_WAKE_MAX) {
            let Some(entry) = self.entries.get_mut(&key) else { continue };
            if entry.def.common.kind == JobKind::Agent {
                // The agent heartbeat's slots are wake requests like any other: they merge
                // with the rest, and the wake decides (see `wakes`).
                let fired = timer.fire(now, entry.def.schedule(), &entry.def.common.policy);
                ticks.push((key.agent.clone(), fired.run.last().copied()));
                if let Some(next) = fired.next {
                    self.arm(key, next);
                }
                continue;
            }
            let busy = !entry.rare().waiting.is_empty() || due_keys.contains(&key);
            let joins_backlog = busy && entry.def.common.policy.catch_up == CatchUp::All;
            if let Some(slot) = self.fire_timer(now, &key, timer, joins_backlog) {
                // Decided now (run, held or skipped by the overlap policy).
                due.push((key, slot));
            }
        }
        for (agent, slot) in ticks {
            self.request_wake(&agent, WakeReason::Interval, slot, now);
        }
        due
    }

    /// Fires `key`'s due `timer`, out of the timer queue now, and arms the one after it.
    /// The first slot it runs is returned, to be decided now, unless `into_backlog`; the
    /// others (all of them, then) run one after another, in order, behind any backlog.
    fn fire_timer(&mut self, now: Now, key: &HeartbeatKey, timer: SlotTimer, into_backlog: bool) -> Option<Timestamp> {
        let entry = self.entries.get_mut(key)?;
        let fired = timer.fire(now, entry.def.schedule(), &entry.def.common.policy);
        if fired.next.is_none() {
            entry.exhausted = true;
            self.exhausted.insert(key.clone());
            entry.with_rare(|rare| rare.next_slot_floor = fired.run.last().copied().or(Some(timer.next_slot)));
        }
        if fired.missed > 0 || fired.run.len() > 1 || into_backlog {
            let slot = fired.run.first().copied().unwrap_or(timer.next_slot);
            let runs = fired.run.len() as u64;
            let event = EngineEvent::CaughtUp { key: key.clone(), slot, runs, missed: fired.missed };
            self.context.events.emit(now.wall, &event);
        }
        let mut run = fired.run.into_iter();
        let decided_now = if into_backlog { None } else { run.next() };
        entry.with_rare(|rare| rare.waiting.extend(run));
        if !entry.rare().waiting.is_empty() {
            self.backlogged.insert(key.clone());
        }
        if let Some(next) = fired.next {
            self.arm(key.clone(), next);
        }
        decided_now
    }

    /// Decides each due slot by its guards and the overlap policy: a run (claimed if there
    /// is room, queued for admission if not), a hold behind a run, or a skip. `from_queue`:
    /// the slots come from the admission queue, where a heartbeat's other queued slots are
    /// its later turns, not older slots held back (a trigger queued before a grid slot).
    async fn decide(
        &mut self,
        now: Now,
        room: usize,
        due: Vec<(HeartbeatKey, Timestamp)>,
        from_queue: bool,
        mut claims: Vec<SlotClaim>,
        mut skips: Vec<SkipRecord>,
    ) {
        let mut claimed_now: KeyMap<usize> = key_map();
        let mut retries = Vec::new();
        let spent = self.spent_budgets(due.iter().map(|(key, _)| key.agent.clone()).collect(), now).await;
        for (key, slot) in due {
            // Decided now, unless held behind a run: then it stays explicit until it is.
            let explicit = !self.explicit.is_empty() && self.explicit.remove(&(key.clone(), slot));
            let paused = !explicit && self.pauses.get(&key.agent).is_some_and(|pause| pause.holds(now));
            let Some((entry, timer)) = self.entries.get_mut_with_timer(&key) else { continue };
            let alerts_disabled = budget::shows_nothing(&self.context.visibility, &entry.def);
            let next_slot =
                NextSlot { at: timer.map_or(slot, |timer| timer.next_slot), schedule: entry.def.schedule().clone() };
            let in_flight = entry.runs_in_flight() + claimed_now.get(&key).copied().unwrap_or(0);
            // Whether an older slot of it is held or waits for a place, if this one is decided.
            let older_held = !entry.rare().waiting.is_empty() || (!from_queue && self.queued.contains_key(&key));
            let overlap = on_overlap(entry.def.common.policy.overlap, in_flight, entry.rare().waiting.len());
            let input = GuardInput {
                enabled: entry.enabled,
                paused,
                active_hours: if explicit { None } else { entry.def.active_hours() },
                heartbeat_file_empty: false,
                user_busy: false,
                alerts_disabled,
                flooded: false,
                cap_reached: Self::held_by_cap(&key.agent, &entry.def, &spent),
                in_backoff: !explicit && entry.rare().backoff_until.is_some_and(|until| now.mono < until),
                run_in_flight: overlap == OverlapDecision::Skip,
                wall_now: now.wall,
            };
            match guard::check(input) {
                Ok(()) if overlap == OverlapDecision::Hold => {
                    entry.with_rare(|rare| rare.waiting.push_back(slot));
                    self.backlogged.insert(key.clone());
                    if explicit {
                        self.explicit.insert((key, slot));
                    }
                }
                Ok(()) if claims.len() >= room => {
                    // No place for its run: it waits its turn, undecided (ADR 0023).
                    if explicit {
                        self.explicit.insert((key.clone(), slot));
                    }
                    *self.queued.entry(key.clone()).or_default() += 1;
                    self.admission_queue.push_back((key, slot));
                }
                Ok(()) => {
                    self.note_decided(&key, slot, older_held);
                    *claimed_now.entry(key.clone()).or_default() += 1;
                    let triggered = explicit && self.trigger_slots.contains(&(key.clone(), slot));
                    claims.push(SlotClaim { key, slot, claimed_at: now.wall, next_slot, triggered });
                }
                Err(reason) => {
                    if entry.exhausted && entry.rare().retrying && reason != SkipReason::Disabled && !explicit {
                        // A failed one-shot's retry was held (quiet hours, a pause, a backoff
                        // a forward wall jump cut short): it tries again later. Not an
                        // operator's trigger skipped beside the retry's own run: that run
                        // decides (seed 1927871578372: the trigger's overlap armed another
                        // retry, which ran after the probe had succeeded).
                        retries.push((key.clone(), slot));
                    }
                    self.note_decided(&key, slot, older_held);
                    let triggered = explicit && self.trigger_slots.remove(&(key.clone(), slot));
                    self.context.events.emit(now.wall, &EngineEvent::Skipped { key: key.clone(), slot, reason });
                    self.context.run_events.publish(RunEvent::skipped(key.clone(), slot, now.wall, reason));
                    skips.push(SkipRecord { key, slot, at: now.wall, reason, next_slot, triggered });
                }
            }
        }
        if !skips.is_empty() {
            if let Err(error) = self.context.store.record_skips(&skips).await {
                self.store_failed("record_skips", error.to_string(), "the skips are only in the log");
            }
        }
        for (key, above) in retries {
            // Asking the log first: a start-up takes a one-shot whose stored slot lies past
            // its instant for one retrying, and that retry may have succeeded, its
            // retirement's write failed. Each guard's skip armed another retry, and the one
            // a guard let through ran it again (seed 1927873154205).
            let after = self.hold_retry_delay(&key, now);
            self.retry_one_shot(&key, now, after, above).await;
        }
        if !claims.is_empty() {
            self.claim_and_start(claims, now).await;
        }
        // An agent heartbeat that did not start after all gives its lane back.
        for (key, _) in std::mem::take(&mut self.prepared) {
            self.context.lanes.end_heartbeat(&key.agent);
        }
    }

    async fn claim_and_start(&mut self, claims: Vec<SlotClaim>, now: Now) {
        // The claims, and the definitions their runs need, in one call (ADR 0037).
        let ClaimedSlots { outcomes, definitions } = match self.context.store.claim_and_read(&claims).await {
            Ok(claimed) => claimed,
            Err(error) => {
                self.store_failed("claim_slots", error.to_string(), "the slots are not run: a run needs a claim");
                let first = self.context.error_backoff.first().copied().unwrap_or(Duration::ZERO);
                for claim in claims {
                    self.trigger_slots.remove(&(claim.key.clone(), claim.slot));
                    let event = EngineEvent::ClaimFailed { key: claim.key.clone(), slot: claim.slot };
                    self.context.events.emit(now.wall, &event);
                    // A one-shot has no next slot to go on with: it tries again instead. Not
                    // for an operator's trigger, which says nothing of the one-shot (seed
                    // 1927871661338: a trigger's failed claim beside the own run armed a
                    // retry, which ran after that run succeeded).
                    // Nor when the log says its own run succeeded: a backfill of its instant,
                    // asked for while its probe ran, failed its claim after the probe's
                    // success, and the retry ran it again (seed 1927872974990).
                    if !claim.triggered && self.entries.get(&claim.key).is_some_and(|entry| entry.exhausted) {
                        self.retry_one_shot(&claim.key, now, first, claim.slot).await;
                    }
                }
                return;
            }
        };
        // If the read failed, each claimed run fails at once with the store's error (ADR
        // 0026): its slot is claimed, and a claimed slot ends with a result.
        let mut definitions = definitions.map_err(|error| {
            self.store_failed("definitions", error.to_string(), "the claimed runs fail without calling the model");
            error.to_string()
        });
        // Runs a heartbeat has in this pass (more than one under overlap `allow-all`): each
        // gets its definition, the last takes it.
        let mut runs_of_key: KeyMap<usize> = key_map();
        for (claim, outcome) in claims.iter().zip(&outcomes) {
            if *outcome == ClaimOutcome::Claimed {
                *runs_of_key.entry(claim.key.clone()).or_default() += 1;
            }
        }
        for (claim, outcome) in claims.into_iter().zip(outcomes) {
            match outcome {
                ClaimOutcome::Claimed => {
                    let last_of_key = runs_of_key.get_mut(&claim.key).is_none_or(|left| {
                        *left -= 1;
                        *left == 0
                    });
                    let gone = || DEFINITION_GONE.to_owned();
                    let def = match &mut definitions {
                        Ok(definitions) if last_of_key => definitions.remove(&claim.key).ok_or_else(gone),
                        Ok(definitions) => definitions.get(&claim.key).cloned().ok_or_else(gone),
                        Err(error) => Err(error.clone()),
                    };
                    self.start_run(claim, def, now);
                }
                ClaimOutcome::AlreadyTriggered if !claim.triggered && self.own_slot_of_unarmed_one_shot(&claim) => {
                    self.move_off_trigger(claim, now).await;
                }
                ClaimOutcome::AlreadyClaimed | ClaimOutcome::AlreadyTriggered => {
                    self.trigger_slots.remove(&(claim.key.clone(), claim.slot));
                    self.context
                        .events
                        .emit(now.wall, &EngineEvent::ClaimLost { key: claim.key.clone(), slot: claim.slot });
                    self.lift_past_claims(&claim.key).await;
                }
                ClaimOutcome::Gone => {
                    self.trigger_slots.remove(&(claim.key.clone(), claim.slot));
                    let event = EngineEvent::ClaimGone { key: claim.key, slot: claim.slot };
                    self.context.events.emit(now.wall, &event);
                }
            }
        }
    }

    /// Starts the run of a claimed slot. `def`: its heartbeat's stored definition, or why
    /// it could not be read; an agent heartbeat runs the prompt its wake prepared.
    fn start_run(&mut self, claim: SlotClaim, def: Result<Arc<HeartbeatDef>, String>, now: Now) {
        let Some(entry) = self.entries.get_mut(&claim.key) else { return };
        entry.set_runs_in_flight(entry.runs_in_flight() + 1);
        if claim.key.heartbeat.is_reserved() {
            // Only a run that starts counts against the flood guard: a wake whose claim
            // failed made no call, and its retry must not wait out the spacing for it.
            self.floods.entry(claim.key.agent.clone()).or_default().started(now.mono);
        }
        let kind = entry.def.common.kind;
        let prepared = self.prepared.remove(&claim.key);
        let (claimed, consumes) = match (def, prepared) {
            (Ok(mut def), Some(prepared)) => {
                Arc::make_mut(&mut def).prompt = prepared.prompt.into();
                (Claimed::Read(def), prepared.consumes)
            }
            (Ok(def), None) => (Claimed::Read(def), Vec::new()),
            (Err(error), prepared) => {
                let consumes = prepared.map(|prepared| prepared.consumes).unwrap_or_default();
                (Claimed::Unreadable { key: claim.key.clone(), kind, error }, consumes)
            }
        };
        let context = Arc::clone(&self.context);
        let slot = claim.slot;
        if claim.triggered {
            self.trigger_slots.remove(&(claim.key.clone(), slot));
        } else {
            // Its own slot runs: a one-shot retired before is not done any more, and its
            // failure retries like any other's, after a breaker's cooldown too (seed
            // 1927871872102: its skip was never written, and an enable ran its instant).
            entry.retired = false;
        }
        // Admitted before its claim: it starts now, within `runs_in_flight_max`.
        self.context.events.emit(now.wall, &EngineEvent::RunStarted { key: claim.key.clone(), slot });
        // Boxed: the run's future is kilobytes, and the task's cell was built by copying it
        // four times on the driver's thread, where a box copies it once (ADR 0054).
        let task = tokio::spawn(Box::pin(run_claimed(context, claimed, slot, consumes)));
        self.runs.insert((claim.key, slot), RunTask { task, writing: false, triggered: claim.triggered });
    }

    async fn hear(&mut self, news: RunNews) {
        match news {
            RunNews::Writing { key, slot } => {
                let run_id = (key, slot);
                let Some(run) = self.runs.get_mut(&run_id) else { return };
                if run.writing {
                    return;
                }
                run.writing = true;
                self.writing += 1;
                let (key, slot) = run_id;
                self.context.events.emit(self.context.clock.wall(), &EngineEvent::RunWorkDone { key, slot });
            }
            RunNews::Finished(finished) => self.complete(finished).await,
        }
    }

    /// Forgets a run that ended (finished, lost or abandoned).
    fn forget_run(&mut self, key: &HeartbeatKey, slot: Timestamp) {
        forget_run_in(&mut self.runs, &mut self.writing, key, slot);
    }

    async fn complete(&mut self, finished: FinishedRun) {
        let FinishedRun { mut record, breaker, withheld } = finished;
        if breaker.is_some() {
            let now = self.context.clock.now();
            self.count_spend(&record, now);
        }
        // One search of the entries for all of it (a finished run is on the dispatch path):
        // the rest below touches other fields.
        let entry = self.entries.get_mut(&record.key);
        let use_indicator =
            entry.as_ref().is_none_or(|entry| self.context.visibility.resolve(&entry.def.common.target).use_indicator);
        let preview = record.output_preview.take();
        self.context.run_events.publish(RunEvent::finished(&record, preview, withheld, use_indicator));
        let manual = forget_run_in(&mut self.runs, &mut self.writing, &record.key, record.slot);
        let now = self.context.clock.now();
        self.context.events.emit(
            now.wall,
            &EngineEvent::RunFinished {
                key: record.key.clone(),
                slot: record.slot,
                status: record.status,
                delivery: record.delivery,
                duration: record.duration,
                error: record.error.clone(),
                reply: record.reply,
                recorded: breaker.is_some(),
                llm_calls: record.llm_calls,
                finished_at: record.finished_at,
                usage: record.usage,
            },
        );
        let Some(mut entry) = entry else { return };
        entry.set_runs_in_flight(entry.runs_in_flight().saturating_sub(1));
        let succeeded = record.status == ExecutionStatus::Succeeded;
        // A run of a one-shot's id below its instant (of the schedule it replaced, or an
        // operator's trigger before it) says nothing of whether the one-shot did its work:
        // its own run and retries lie at or above the instant. The old schedule's run timed
        // out after the one-shot's own run succeeded, and it "retried" (seed 1927871484937).
        // Nor does an operator's trigger, failed or not: the one-shot's own slot and its
        // retries decide (seed 1927871577312: a failed trigger armed a retry, which ran after
        // the held own slot had succeeded), as the run log read after a restart does, where
        // a trigger's success above a failed own run had retired the one-shot (seed
        // 1927871652031; ADR 0048).
        let own = match entry.def.schedule() {
            Schedule::At(at) => record.slot >= truncate_to_millis(*at) && !manual,
            _ => true,
        };
        if own {
            entry.last_succeeded = succeeded;
            entry.with_rare(|rare| rare.retrying &= !succeeded);
        }
        if entry.def.common.kind == JobKind::CronMain && succeeded {
            // Its event is queued (or was already): the agent heartbeat processes it now.
            self.request_wake(&record.key.agent, WakeReason::Cron, None, now);
            let Some(again) = self.entries.get_mut(&record.key) else { return };
            entry = again;
        }
        let retries = own && entry.exhausted;
        let Some(step) = breaker else {
            // The result did not reach the store, so the breaker did not count it; a failed
            // one-shot still tries again, after the first backoff step.
            if !succeeded && retries {
                let first = self.context.error_backoff.first().copied().unwrap_or(Duration::ZERO);
                self.arm_retry(&record.key, now, first, record.slot).await;
            }
            return;
        };
        if !step.counted {
            return; // it finished with the breaker open: the probe decides
        }
        if step.tripped {
            entry.enabled = false;
            entry.with_rare(|rare| rare.half_open = false);
            // Disabled by the breaker, which says why: not retired over it as `no-more-slots`.
            entry.exhausted = false;
            entry.with_rare(|rare| rare.waiting.clear());
            self.explicit.retain(|(key, _)| *key != record.key);
            self.trigger_slots.retain(|(key, _)| *key != record.key);
            self.unqueue(&record.key);
            self.disarm(&record.key);
            self.breaker_opened(&record, step, now);
        } else if step.consecutive_failures > 0 {
            let delay = backoff_delay(&self.context.error_backoff, step.consecutive_failures);
            entry.with_rare(|rare| rare.backoff_until = Some(now.mono + delay));
            if retries {
                self.arm_retry(&record.key, now, delay, record.slot).await;
            }
        } else {
            entry.with_rare(|rare| {
                rare.backoff_until = None;
                rare.half_open = false;
            });
            if step.closed {
                self.breaker_closed(&record, now);
            }
        }
    }

    async fn apply(&mut self, change: Change) {
        let now = self.context.clock.now();
        match change {
            Change::Upsert(def) => {
                let def = *def;
                let key = def.key.clone();
                // Counted from the runs themselves, not the old entry: a heartbeat deleted
                // and made again under its id must not start beside a run of the old one.
                let runs_in_flight = self.runs.keys().filter(|(run_key, _)| *run_key == key).count();
                // A one-shot has one slot, its instant: the slot the old definition's timer
                // had armed, not decided, says nothing of it (the slots the store decided
                // still lift it, below), as a start-up arms it. Kept as its floor, a one-shot
                // whose instant came before that slot had no slot at once and never ran; and
                // with a failed run of the old definition in the log, it "retried" before its
                // instant (seed 1927871251589).
                let floor = if matches!(def.schedule, Schedule::At(_)) { None } else { self.slot_floor(&key) };
                // Nor is it a floor for a new schedule: an hourly cron armed for 14:00 and
                // made one of every five minutes at 13:10 ran first at 14:00 (ADR 0051). A
                // new schedule arms from the clock, lifted above what the store decided.
                let schedule_changed =
                    self.entries.get(&key).is_some_and(|entry| *entry.def.schedule() != def.schedule);
                // What waited under the old definition goes with it, as its backlog does.
                self.unqueue(&key);
                // The floor stays with the entry: if the store says it is tripped, it is left
                // disarmed, and its probe after the cooldown must still go above the old
                // timer's slots (a backward wall jump in between, seed 1325000002181).
                let mut entry = Entry::new(def, true, floor, &mut self.commons);
                entry.set_runs_in_flight(runs_in_flight);
                self.entries.insert(key.clone(), entry);
                self.context.events.emit(now.wall, &EngineEvent::DefinitionApplied { key: key.clone() });
                let failures = self.backoff_from_store(&key, now).await;
                if self.tripped_after_write(&key, failures, now) {
                    self.lift_past_claims(&key).await;
                    return;
                }
                // A new definition starts with a closed breaker (the store cleared it).
                self.cooldowns.remove(&key);
                self.rearm(key.clone(), now, floor.filter(|_| !schedule_changed)).await;
                // Its slots go above any the store has decided for the id (a one-shot that
                // already ran, or a heartbeat deleted and made again after a backward wall
                // jump), as at start-up: no slot is offered twice. Without that read its
                // timer is held until a later read lifts it (`lifts`): after a backward wall
                // jump the clock's first slot may lie below decided ones.
                self.lift_past_claims(&key).await;
            }
            Change::Adopt(heartbeats) => self.adopt_as_stored(heartbeats, now).await,
            Change::AdoptChanged(heartbeats) => {
                let changed: Vec<Heartbeat> = heartbeats
                    .into_iter()
                    .filter(|heartbeat| {
                        !self.entries.get(&heartbeat.def.key).is_some_and(|entry| entry.def.arms(&heartbeat.def))
                    })
                    .collect();
                if !changed.is_empty() {
                    self.adopt_as_stored(changed, now).await;
                }
            }
            Change::Resume(agent) => self.apply_pause_change(agent, None, now).await,
            Change::Delete(key) => self.forget(&key),
            Change::KeepConfigOnly(in_file) => {
                let gone: Vec<HeartbeatKey> = self
                    .entries
                    .iter()
                    .filter(|(key, entry)| entry.def.common.origin == Origin::Config && !in_file.contains(*key))
                    .map(|(key, _)| key.clone())
                    .collect();
                for key in gone {
                    self.forget(&key);
                }
            }
            Change::Pause(agent, pause) => self.apply_pause_change(agent, Some(pause), now).await,
            Change::SetEnabled(key, enabled) => {
                let floor = self.slot_floor(&key);
                // An operator's word closes the breaker (enable) or keeps it shut (disable).
                self.cooldowns.remove(&key);
                let Some(was_enabled) = self.entries.get(&key).map(|entry| entry.enabled) else { return };
                // What waits behind a run (a backlog, a backfill, a held trigger) or for a
                // place to run goes with a disable; an enable of a job that was enabled leaves it.
                let clears = !(enabled && was_enabled);
                if clears {
                    self.explicit.retain(|(explicit_key, _)| *explicit_key != key);
                    self.trigger_slots.retain(|(explicit_key, _)| *explicit_key != key);
                    self.unqueue(&key);
                }
                let Some(entry) = self.entries.get_mut(&key) else { return };
                entry.with_rare(|rare| rare.half_open = false);
                if clears {
                    entry.with_rare(|rare| rare.waiting.clear());
                }
                entry.enabled = enabled;
                if enabled {
                    // Enabling clears the breaker count in the store, and the backoff with it.
                    entry.with_rare(|rare| rare.backoff_until = None);
                    let failures = self.backoff_from_store(&key, now).await;
                    if self.tripped_after_write(&key, failures, now) {
                        return;
                    }
                    self.enable_entry(&key, now, floor).await;
                } else {
                    self.disarm(&key);
                }
            }
        }
    }

    /// Drops `key` (deleted): its timer, what waits for it and its cooldown; a run of it
    /// already going ends as it would.
    fn forget(&mut self, key: &HeartbeatKey) {
        self.unqueue(key);
        self.explicit.retain(|(explicit_key, _)| explicit_key != key);
        self.trigger_slots.retain(|(explicit_key, _)| explicit_key != key);
        self.cooldowns.remove(key);
        // Disarmed (announced) before its entry goes with whatever timer it had.
        self.disarm(key);
        self.entries.remove(key);
    }

    /// Arms a heartbeat that was just enabled (by an operator, or by its breaker for a
    /// probe), never below `floor`. A one-shot with no slot left whose latest run failed
    /// tries once more.
    async fn enable_entry(&mut self, key: &HeartbeatKey, now: Now, floor: Option<Timestamp>) {
        self.rearm(key.clone(), now, floor).await;
        self.exhaust_if_decided(key).await;
        // Not while a run of it is going or a slot of it is still to run (held behind a
        // run, or waiting for a place): that run decides, and its failure retries.
        let queued = self.queued.contains_key(key);
        // Nor one the engine retired: it was done (seed 1927871577312 after a restart: a
        // trigger's failed row, under a later slot than the own run that succeeded, read
        // as the one-shot's last run).
        let settled = self.entries.get(key).is_some_and(|entry| {
            let run_to_end = queued || !entry.rare().waiting.is_empty() || entry.runs_in_flight() > 0;
            entry.exhausted && !run_to_end && !entry.retired
        });
        if settled && self.one_shot_last_run(key).await == Some(OneShotLastRun::Failed) {
            self.arm_retry(key, now, Duration::ZERO, floor.unwrap_or(now.wall)).await;
        }
    }

    /// A one-shot re-armed for its slot when the store has decided that slot already (its
    /// own run tripped the breaker, after earlier failures of triggered runs) has no slot
    /// left: it is exhausted, and an enable retries it or retires it like any other.
    async fn exhaust_if_decided(&mut self, key: &HeartbeatKey) {
        let one_shot = self.entries.get(key).is_some_and(|entry| matches!(entry.def.schedule(), Schedule::At(_)));
        let Some(timer) = self.entries.timer(key).filter(|_| one_shot) else { return };
        // Decided when the log holds its slot, or any slot above it: a retry of the one-shot
        // (a failed claim leaves no row for the instant itself, but its retry ran above it),
        // or a slot a re-created one-shot would be lifted above anyway. Not an operator's
        // trigger, which decides nothing of the schedule (ADR 0049).
        // A slot waiting for a place to run is as good as decided: it runs from the queue.
        // Not an operator's trigger waiting there (seed 1927871794526: an enable while a
        // trigger waited for a place retired the one-shot unrun).
        let own = |slot: &Timestamp| *slot >= timer.next_slot && !self.trigger_slots.contains(&(key.clone(), *slot));
        let queued = self.queued.contains_key(key)
            && self.admission_queue.iter().any(|(queued, slot)| queued == key && own(slot));
        // So is one held behind a run (`buffer_one`): an enable of a one-shot that was
        // enabled already, its slot fired and held, re-armed that slot and offered it twice
        // (seed 1927871444419: the second claim lost).
        let held = self.entries.get(key).is_some_and(|entry| entry.rare().waiting.iter().any(own));
        let decided = queued
            || held
            || match self.context.store.latest_slots(std::slice::from_ref(key)).await {
                Ok(latest) => latest.get(key).is_some_and(|slot| *slot >= timer.next_slot),
                Err(error) => {
                    // Claimed unread, an instant below a retry already run ran out of order
                    // (seed 1927872822302): held, a later read decides it (`lifts`).
                    self.store_failed(
                        "latest_slots",
                        error.to_string(),
                        "its timer is held until a later read lifts it",
                    );
                    self.hold_unlifted(key);
                    false
                }
            };
        if decided {
            if let Some(entry) = self.entries.get_mut(key) {
                entry.exhausted = true;
                self.exhausted.insert(key.clone());
            }
            self.disarm(key);
        }
    }

    /// After a replace or an enable (which reset the stored failure count), backs off
    /// again if a run of it failed since: its completion may have reached this loop before
    /// the change did, and the store's order is the one that counts.
    /// A replace or an enable cleared the breaker in the store, yet the store counts
    /// `failures` at the limit: a run that started before it finished after it and tripped
    /// the breaker again (a refusal trips at once). The driver heard of that run first, so
    /// the heartbeat stays as the store has it: disabled by its breaker, its cooldown kept,
    /// not armed (seed 313834002827: a reload re-armed it and it ran in the cooldown).
    /// With no cooldown known (the run that tripped it ended while its id had no entry,
    /// deleted and made again while it ran; or an enable dropped the one it started), one
    /// starts now, so the probe comes (seed 1927871094531).
    fn tripped_after_write(&mut self, key: &HeartbeatKey, failures: u32, now: Now) -> bool {
        let max = self.context.breaker_failures_max;
        if max == 0 || failures < max {
            return false;
        }
        if !self.cooldowns.contains_key(key) {
            if let Some(length) = cooldown_length(&self.context.breaker_cooldown, failures, max) {
                self.cooldowns.insert(key.clone(), Cooldown::start(now, now.wall, length));
            }
        }
        if let Some(entry) = self.entries.get_mut(key) {
            entry.enabled = false;
            entry.with_rare(|rare| {
                rare.half_open = false;
                rare.backoff_until = None;
                rare.waiting.clear();
            });
        }
        self.unqueue(key);
        self.explicit.retain(|(explicit_key, _)| explicit_key != key);
        self.trigger_slots.retain(|(explicit_key, _)| explicit_key != key);
        self.disarm(key);
        true
    }

    /// Reads the store's count of consecutive failures into the heartbeat's backoff, and
    /// returns it.
    async fn backoff_from_store(&mut self, key: &HeartbeatKey, now: Now) -> u32 {
        let failures = match self.context.store.consecutive_failures(key).await {
            Ok(failures) => failures.unwrap_or(0),
            Err(error) => {
                self.store_failed("consecutive_failures", error.to_string(), "no backoff until its next failure");
                0
            }
        };
        if let Some(entry) = self.entries.get_mut(key) {
            let until = (failures > 0).then(|| now.mono + backoff_delay(&self.context.error_backoff, failures));
            entry.with_rare(|rare| rare.backoff_until = until);
            // A one-shot's failure the store counted against this definition (its run
            // finished after the replace) is this definition's: it retries (seed 31886).
            if failures > 0 && matches!(entry.def.schedule(), Schedule::At(_)) {
                entry.with_rare(|rare| rare.retrying = true);
                entry.last_succeeded = false;
            }
        }
        failures
    }

    /// Arms a heartbeat afresh (created, updated, enabled), never below `floor`, and
    /// stores its next slot; a schedule with no slot left is marked for retirement.
    async fn rearm(&mut self, key: HeartbeatKey, now: Now, floor: Option<Timestamp>) {
        let Some(entry) = self.entries.get(&key) else { return };
        let timer = if matches!(entry.def.schedule(), Schedule::At(_)) {
            // A one-shot's own slot is its instant, or the next free millisecond where a
            // trigger holds the instant (ADR 0052): the floor is weighed against that slot.
            // Against the instant, a re-arm whose floor is the moved slot it had armed found
            // no slot left (seed 1927872091756: an enable retired the one-shot unrun).
            let own = SlotTimer::rearm(now, entry.def.schedule(), entry.jitter(&key), None);
            let own = own.map(|timer| self.off_trigger_slots(&key, timer, now));
            // The timer armed now, if it is the floor and not a retry's: the own slot, found
            // off the triggers when it was armed, and not decided yet (it has not fired).
            let armed_own =
                self.armed_or_held(&key).filter(|armed| !entry.rare().retrying && floor == Some(armed.next_slot));
            let below_floor = |own: &SlotTimer| floor.is_some_and(|floor| truncate_to_millis(floor) > own.next_slot);
            let own = match own {
                Some(timer) if below_floor(&timer) => Some(self.off_logged_triggers(&key, timer, armed_own, now).await),
                own => own,
            };
            own.filter(|own| !below_floor(own))
        } else {
            SlotTimer::rearm(now, entry.def.schedule(), entry.jitter(&key), floor)
        };
        let Some(entry) = self.entries.get_mut(&key) else { return };
        match timer {
            Some(timer) => {
                entry.exhausted = false;
                self.arm(key.clone(), timer);
                self.store_next_slot(key, timer.next_slot).await;
            }
            None => {
                entry.exhausted = true;
                self.exhausted.insert(key.clone());
                self.disarm(&key);
            }
        }
    }

    /// A one-shot armed for the very millisecond of an operator's trigger of it that this
    /// process made (a reload made it a one-shot for that instant, say) takes the next free
    /// millisecond for its own slot: the run log holds one row a slot, and a claim or a
    /// skip of the instant would be lost to the trigger's row, as if the trigger had decided
    /// it (ADR 0052; seeds 1927871804321, 1927871874215). Known here: the latest trigger
    /// and any not started yet. The others (one whose run started before a later trigger,
    /// one of an earlier process) are in the run log, read when a re-arm is about to find
    /// no slot (`off_logged_triggers`). A backfill's slot is the schedule's own, not taken.
    fn off_trigger_slots(&self, key: &HeartbeatKey, timer: SlotTimer, now: Now) -> SlotTimer {
        let Some(entry) = self.entries.get(key) else { return timer };
        if !matches!(entry.def.schedule(), Schedule::At(_)) {
            return timer;
        }
        let taken = |slot: Timestamp| {
            self.trigger_floor.get(key) == Some(&slot) || self.trigger_slots.contains(&(key.clone(), slot))
        };
        let slot = crate::core::slots::first_free_millisecond(timer.next_slot, taken);
        if slot == timer.next_slot {
            return timer;
        }
        SlotTimer::resume(now, entry.def.schedule(), entry.jitter(key), slot)
    }

    /// A one-shot's own slot moved off the triggers' rows the run log holds from it on:
    /// what a re-arm needs when its floor lies above the slot this process would arm, about
    /// to find none. Triggers this process no longer holds in memory are known only there:
    /// one whose run started before a later trigger (seed 1927872182998), one of an earlier
    /// process that a claim met (ADR 0055; seeds 1927872100004, 1927872113524), or any
    /// before a restart that followed the edit's moved slot; each time an enable retired
    /// the one-shot unrun. A retry's floor stays above: the own failed run holds the
    /// instant, not a trigger. Where the log no longer holds the rows that `armed_own` (the
    /// one-shot's own slot, armed and not fired) was moved off, that slot stands: a prune
    /// keeps each heartbeat's latest rows only (seed 1927872728561: an enable retired the
    /// one-shot unrun). A failed read moves nothing either: that slot stands, and with none
    /// armed no slot is found.
    async fn off_logged_triggers(
        &mut self,
        key: &HeartbeatKey,
        timer: SlotTimer,
        armed_own: Option<SlotTimer>,
        now: Now,
    ) -> SlotTimer {
        let rows = match self.context.store.executions(key, ONE_SHOT_LOG_ROWS_READ_MAX).await {
            Ok(rows) => rows,
            Err(error) => {
                let consequence = "a one-shot keeps the slot it had armed, and one with none retires";
                self.store_failed("executions", error.to_string(), consequence);
                return armed_own.unwrap_or(timer);
            }
        };
        let triggered: BTreeSet<Timestamp> =
            rows.iter().filter(|row| row.triggered && row.slot >= timer.next_slot).map(|row| row.slot).collect();
        let slot = crate::core::slots::first_free_millisecond(timer.next_slot, |slot| triggered.contains(&slot));
        let Some(entry) = self.entries.get(key) else { return timer };
        if slot == timer.next_slot {
            return armed_own.filter(|armed| armed.next_slot > slot).unwrap_or(timer);
        }
        let moved = SlotTimer::resume(now, entry.def.schedule(), entry.jitter(key), slot);
        self.off_trigger_slots(key, moved, now)
    }

    /// Whether `claim` is a one-shot's own slot, at or after its instant, and the one-shot
    /// has no timer: what its fire left when it found no slot after this one. A slot of the
    /// schedule it replaced, or one claimed beside a timer armed since, is not its own.
    fn own_slot_of_unarmed_one_shot(&self, claim: &SlotClaim) -> bool {
        let Some((entry, timer)) = self.entries.get_with_timer(&claim.key) else { return false };
        let Schedule::At(at) = entry.def.schedule() else { return false };
        timer.is_none() && claim.slot.as_millisecond() >= at.as_millisecond()
    }

    /// A one-shot's own slot whose claim met an operator's trigger's row of that very
    /// millisecond is not decided: the trigger decided nothing of the schedule (ADR 0049).
    /// In this process `off_trigger_slots` keeps it off the triggers it made (ADR 0052);
    /// this is the one made before a restart, which only the run log knows (ADR 0055). It
    /// takes the next free millisecond, as a one-shot's own slot, and is claimed there.
    async fn move_off_trigger(&mut self, claim: SlotClaim, now: Now) {
        let Ok(above) = claim.slot.checked_add(SignedDuration::from_millis(1)) else { return };
        let Some(entry) = self.entries.get(&claim.key) else { return };
        let timer = SlotTimer::resume(now, entry.def.schedule(), entry.jitter(&claim.key), above);
        let timer = self.off_trigger_slots(&claim.key, timer, now);
        let moved_to = timer.next_slot;
        let event = EngineEvent::ClaimMetTrigger { key: claim.key.clone(), slot: claim.slot, moved_to };
        self.context.events.emit(now.wall, &event);
        let Some(entry) = self.entries.get_mut(&claim.key) else { return };
        entry.exhausted = false;
        self.arm(claim.key.clone(), timer);
        self.store_next_slot(claim.key, moved_to).await;
    }

    /// Retires heartbeats whose schedule has no more slots, once nothing of theirs runs or
    /// waits: deleted if they ask for it, their last run succeeded and they were made at run
    /// time; else disabled with a reason. A failed one-shot stays visible, and one from the
    /// config stays disabled (deleted, the next start-up would seed it back).
    async fn retire_exhausted(&mut self) {
        let mut done = Vec::new();
        let entries = &self.entries;
        let queued = &self.queued;
        self.exhausted.retain(|key| {
            let Some(entry) = entries.get(key).filter(|entry| entry.exhausted) else { return false };
            if entry.runs_in_flight() == 0 && entry.rare().waiting.is_empty() && !queued.contains_key(key) {
                done.push(key.clone());
                return false;
            }
            true
        });
        for key in done {
            let Some(entry) = self.entries.get(&key) else { continue };
            // This process did not see the one-shot's last run succeed: its outcome is the
            // run log's. A run that failed may be known as such only to the log: an enable
            // resets the stored failures, and a crash before the retry slot it armed was
            // written leaves the one-shot's own slot, decided (seed 1927870214209). Disabled
            // too: a run that failed after an operator's disable leaves it disabled as they
            // left it, not retired over an enable already stored (seed 1927870716538). And a
            // start-up takes a one-shot whose stored slot lies past its instant for one
            // retrying, though that retry may have succeeded (seed 1927871482441).
            // One the engine retired before was done: it is retired again, whatever a
            // start-up inferred from its stored slot (seed 1927871577312).
            if entry.retired {
                if let Some(entry) = self.entries.get_mut(&key) {
                    entry.with_rare(|rare| rare.retrying = false);
                }
            }
            let Some(entry) = self.entries.get(&key) else { continue };
            let unseen = matches!(entry.def.schedule(), Schedule::At(_)) && !entry.last_succeeded && !entry.retired;
            if unseen {
                match self.one_shot_last_run(&key).await {
                    Some(OneShotLastRun::Failed) => {
                        if let Some(entry) = self.entries.get_mut(&key) {
                            entry.with_rare(|rare| rare.retrying = true);
                        }
                    }
                    // Done (the entry knows it now), or nothing that says: the retry stands
                    // if a stored retry slot said so, else it is done.
                    Some(OneShotLastRun::Succeeded | OneShotLastRun::Neither) => {}
                    None => {
                        // Unknown for now: decided at a later turn, not retired on a guess.
                        self.exhausted.insert(key);
                        continue;
                    }
                }
            }
            let Some(entry) = self.entries.get_mut(&key) else { continue };
            let delete =
                entry.def.common.delete_after_run && entry.last_succeeded && entry.def.common.origin == Origin::Runtime;
            if !entry.enabled && !delete {
                // Disabled by an operator: it stays as they left it, and an enable decides
                // again (it retries, runs what is left, or retires). Disabled while its retry
                // waited, say; or a disable dropped the own slot that waited behind a trigger,
                // and the retirement wrote `no-more-slots` over the operator's reason (seed
                // 1927871742970; ADR 0050). Written anyway, it would also undo an enable
                // stored and not yet applied here.
                entry.exhausted = false;
                continue;
            }
            if entry.rare().retrying && entry.enabled && !entry.last_succeeded {
                // A failed one-shot is never retired for want of slots, whatever took its
                // retry slot (a lost claim after a crash, say): it tries again.
                let now = self.context.clock.now();
                let after = self.hold_retry_delay(&key, now);
                let above = self.entries.get(&key).and_then(|entry| entry.rare().retry_slot).unwrap_or(now.wall);
                self.arm_retry(&key, now, after, above).await;
                continue;
            }
            entry.exhausted = false;
            let now = self.context.clock.wall();
            if delete {
                self.entries.remove(&key);
                if let Err(error) = self.context.store.delete_heartbeat(&key).await {
                    self.store_failed("delete_heartbeat", error.to_string(), "a restart finds it and retires it again");
                }
            } else {
                // Only over an enabled row: an operator's disable stored before its change
                // reached this loop keeps its reason too.
                match self.context.store.disable_if_enabled(&key, NO_MORE_SLOTS).await {
                    Ok(true) => {}
                    Ok(false) => continue,
                    Err(error) => {
                        self.store_failed(
                            "disable_if_enabled",
                            error.to_string(),
                            "a restart finds it and retires it again",
                        );
                    }
                }
                if let Some(entry) = self.entries.get_mut(&key) {
                    entry.enabled = false;
                    entry.retired = true;
                }
            }
            self.context.events.emit(now, &EngineEvent::Retired { key, deleted: delete });
        }
    }

    /// Drops pauses that have ended, from memory and from the store, saying so.
    async fn end_pauses(&mut self, now: Now) {
        let ended: Vec<(AgentId, Timestamp)> = self
            .pauses
            .iter()
            .filter(|(_, pause)| !pause.holds(now))
            .map(|(agent, pause)| (agent.clone(), pause.record.until))
            .collect();
        for (agent, until) in ended {
            self.pauses.remove(&agent);
            // Only this pause: an operator's newer one may be stored already, its command
            // still on its way to this loop (seed 31450167444: cleared, it was lost at the
            // next takeover of the partition).
            if let Err(error) = self.context.store.end_pause(&agent, until).await {
                let consequence = "a restart may resume the pause for what is left of it by the wall clock";
                self.store_failed("end_pause", error.to_string(), consequence);
            }
            self.context.events.emit(now.wall, &EngineEvent::Resumed { agent });
        }
    }

    /// The schedule's next wake-up, or the end of a pause if that comes first; at once if
    /// a slot waits behind a run that has ended (a backlog that is being skipped drains
    /// without waiting for the next timer) or for a place that is free now. With no room
    /// for another run, due slots wait for a run to end (whose completion wakes the loop)
    /// and only housekeeping (pauses, cooldowns, pruning) sets the wake-up.
    fn next_wake(&self, now: Now) -> Mono {
        let pause_end = self.pauses.values().map(|pause| now.mono + pause.ends_within(now)).min();
        let housekeeping = now.mono + Duration::from_secs(DRIVER_SLEEP_SECS_MAX);
        let housekeeping = pause_end.map_or(housekeeping, |end| housekeeping.min(end));
        let housekeeping = self.next_cooldown_end(now).map_or(housekeeping, |end| housekeeping.min(end));
        let housekeeping = housekeeping.min(self.next_prune);
        let housekeeping = self.next_lift_retry().map_or(housekeeping, |retry| housekeeping.min(retry));
        if self.room() == 0 {
            return housekeeping;
        }
        let ready = |key: &HeartbeatKey| {
            self.entries.get(key).is_some_and(|entry| entry.runs_in_flight() == 0 && !entry.rare().waiting.is_empty())
        };
        if !self.admission_queue.is_empty() || !self.triggered.is_empty() || self.backlogged.iter().any(ready) {
            return now.mono;
        }
        let wake = self.entries.next_wake(now).min(housekeeping);
        self.next_agent_wake().map_or(wake, |due| wake.min(due))
    }

    /// Remembers a slot decided while an older one of its heartbeat is held or queued;
    /// forgets the heartbeat's last such slot once nothing older waits.
    fn note_decided(&mut self, key: &HeartbeatKey, slot: Timestamp, older_held: bool) {
        if older_held {
            let decided = self.decided_past_held.entry(key.clone()).or_insert(slot);
            *decided = (*decided).max(slot);
        } else {
            self.decided_past_held.remove(key);
        }
    }

    /// Drops a heartbeat's slots from the admission queue (a disable, a delete, a replace,
    /// a trip: whatever clears its backlog), and its triggers not taken in yet: they waited
    /// for a place as well (a disable while the engine was full left one to be decided
    /// later as an ordinary slot, which quiet hours skipped, seed 1927760016712).
    fn unqueue(&mut self, key: &HeartbeatKey) {
        self.triggered.retain(|(triggered, _)| triggered != key);
        self.decided_past_held.remove(key);
        self.queue_caught_up.remove(key);
        if self.queued.remove(key).is_some() {
            self.admission_queue.retain(|(queued_key, _)| queued_key != key);
        }
    }

    /// How many more runs can start now: a place among `runs_in_flight_max` is held while
    /// a run works, and as many results again may wait for their write (ADR 0042).
    fn room(&self) -> usize {
        let working = self.runs.len().saturating_sub(self.writing);
        let places = self.runs_in_flight_max.saturating_sub(working);
        let writes = self.runs_in_flight_max.saturating_mul(1 + RESULTS_WAITING_PER_PLACE_MAX);
        let writes = writes.saturating_sub(self.runs.len());
        places.min(writes)
    }

    /// Forgets runs whose task ended without a completion (it panicked, which a run must
    /// never do): each would hold its place among `runs_in_flight_max` for ever. A task
    /// that finished has already queued its completion, so only an empty queue says so.
    fn reap_lost_runs(&mut self) {
        if self.room() > 0 || !self.completions.is_empty() {
            return;
        }
        let lost: Vec<(HeartbeatKey, Timestamp)> =
            self.runs.iter().filter(|(_, run)| run.task.is_finished()).map(|(run, _)| run.clone()).collect();
        for (key, slot) in lost {
            self.forget_run(&key, slot);
            if let Some(entry) = self.entries.get_mut(&key) {
                entry.set_runs_in_flight(entry.runs_in_flight().saturating_sub(1));
            }
            self.context.events.emit(self.context.clock.wall(), &EngineEvent::RunLost { key, slot });
        }
    }

    fn arm(&mut self, key: HeartbeatKey, timer: SlotTimer) {
        let next_slot = timer.next_slot;
        // The queue keeps no timer without its entry; only a timer kept is announced.
        if self.entries.arm(&key, timer) {
            self.announce_armed(&key, next_slot);
        }
    }

    /// Says that `key` is armed for `next_slot` (the timer queue holds it already).
    fn announce_armed(&self, key: &HeartbeatKey, next_slot: Timestamp) {
        let event = EngineEvent::Armed { key: key.clone(), next_slot };
        self.context.events.emit(self.context.clock.wall(), &event);
    }

    /// After a lost claim, moves the heartbeat's timer past the latest slot the store has
    /// for it, so it does not walk through slots that were decided before (a heartbeat
    /// deleted and created again under the same id, say). An operator's trigger is not one
    /// of them (ADR 0049). Whether the store answered.
    async fn lift_past_claims(&mut self, key: &HeartbeatKey) -> bool {
        let latest = match self.context.store.latest_slots(std::slice::from_ref(key)).await {
            Ok(latest) => latest,
            Err(error) => {
                self.store_failed("latest_slots", error.to_string(), "its timer is held until a later read lifts it");
                self.hold_unlifted(key);
                return false;
            }
        };
        let (Some(latest), Some(timer)) = (latest.get(key).copied(), self.entries.timer(key)) else { return true };
        let Some(entry) = self.entries.get_mut(key) else { return true };
        match timer.lifted_above(latest, entry.def.schedule()) {
            Some(lifted) if lifted != timer => {
                self.arm(key.clone(), lifted);
                self.store_next_slot(key.clone(), lifted.next_slot).await;
            }
            Some(_) => {}
            None => {
                entry.exhausted = true;
                self.exhausted.insert(key.clone());
                self.disarm(key);
            }
        }
        true
    }

    /// Whether an operator's trigger or backfill asked for `key`'s `slot`; most passes
    /// have none, and then nothing is looked up.
    fn is_explicit(&self, key: &HeartbeatKey, slot: Timestamp) -> bool {
        !self.explicit.is_empty() && self.explicit.contains(&(key.clone(), slot))
    }

    /// The slot a heartbeat's next timer must not go below: its current timer's next slot,
    /// or the one it had when it was disarmed.
    fn slot_floor(&self, key: &HeartbeatKey) -> Option<Timestamp> {
        let armed = self.entries.timer(key).map(|timer| timer.next_slot);
        armed.or_else(|| self.entries.get(key).and_then(|entry| entry.rare().next_slot_floor))
    }

    /// When a one-shot's held retry tries again: when its backoff is over, or after the
    /// longest backoff step (at least `AT_RETRY_AFTER_HOLD_SECS_MIN`) if it already is.
    fn hold_retry_delay(&self, key: &HeartbeatKey, now: Now) -> Duration {
        let left = self
            .entries
            .get(key)
            .and_then(|entry| entry.rare().backoff_until)
            .map_or(Duration::ZERO, |until| until.saturating_since(now.mono));
        let floor = Duration::from_secs(AT_RETRY_AFTER_HOLD_SECS_MIN);
        let longest = self.context.error_backoff.last().copied().unwrap_or(floor).max(floor);
        if left.is_zero() {
            longest
        } else {
            left
        }
    }

    /// Arms a retry of one-shot `key` (`arm_retry`) unless the run log says its own run
    /// succeeded. When the log cannot be read, the retirement decides at a later turn, a
    /// retry unless the log then says it succeeded: a retry armed on that guess ran a
    /// one-shot that had succeeded once the log answered (the start of seed 1927873154205).
    async fn retry_one_shot(&mut self, key: &HeartbeatKey, now: Now, after: Duration, above: Timestamp) {
        match self.one_shot_last_run(key).await {
            Some(OneShotLastRun::Succeeded) => {}
            Some(OneShotLastRun::Failed | OneShotLastRun::Neither) => self.arm_retry(key, now, after, above).await,
            None => {
                if let Some(entry) = self.entries.get_mut(key) {
                    entry.with_rare(|rare| rare.retrying = true);
                }
                self.exhausted.insert(key.clone());
            }
        }
    }

    /// A one-shot (`at`) whose run failed tries again once its backoff is over, under a
    /// new slot (the retry's time, above `above`), until it succeeds or the breaker trips,
    /// like any other job. Only a schedule with no slot left (`exhausted`) gets one.
    async fn arm_retry(&mut self, key: &HeartbeatKey, now: Now, after: Duration, above: Timestamp) {
        let Some(entry) = self.entries.get(key) else { return };
        if !entry.enabled || !matches!(entry.def.schedule(), Schedule::At(_)) {
            return;
        }
        // Nor the instant of a slot an operator triggered, not claimed yet (seed 1425000003857).
        let above = self.trigger_floor.get(key).map_or(above, |triggered| (*triggered).max(above));
        // Retry slots follow the wall clock: after a backward jump they may reach slots it
        // decided before, which are not offered twice.
        let mut unread = false;
        let above = match self.context.store.executions(key, 1).await {
            Ok(latest) => latest.first().map_or(above, |execution| execution.slot.max(above)),
            Err(error) => {
                // Unread, it goes above what the entry knows (the instant, which its own
                // run and retries lie at or above, and its latest retry slot) and is held
                // until a later read lifts it above the log's latest slot (ADR 0057). By
                // the clock alone, a replace after a backward wall jump armed a retry below
                // the instant's run (seed 1927872828583); above the instant only, one below
                // a slot of the schedule the one-shot replaced (seed 1927872860319).
                unread = true;
                let consequence = "the retry is held until a later read lifts it";
                self.store_failed("executions", error.to_string(), consequence);
                let known = self.entries.get(key).and_then(|entry| {
                    let Schedule::At(at) = entry.def.schedule() else { return None };
                    Some(entry.rare().retry_slot.map_or(truncate_to_millis(*at), |retry| retry.max(*at)))
                });
                known.map_or(above, |known| known.max(above))
            }
        };
        let Some(entry) = self.entries.get_mut(key) else { return };
        let earliest = above.checked_add(SignedDuration::from_millis(1)).unwrap_or(above);
        let slot = truncate_to_millis(add(now.wall, after)).max(earliest);
        entry.exhausted = false;
        entry.with_rare(|rare| {
            rare.retrying = true;
            rare.retry_slot = Some(slot);
        });
        let timer = SlotTimer::resume(now, entry.def.schedule(), entry.jitter(key), slot);
        self.arm(key.clone(), timer);
        self.store_next_slot(key.clone(), slot).await;
        if unread {
            self.hold_unlifted(key);
        }
    }

    /// How the latest run of one-shot `key` ended, as the run log says: not what this
    /// process saw or inferred. A fresh entry (after a restart or a replace) has seen no
    /// run, a start-up infers a retry from a stored slot past the instant, and a run of the
    /// schedule it replaced may finish last, failing, or trip the breaker; each of those,
    /// taken for the one-shot's failure, ran a one-shot that had succeeded again (seeds
    /// 1927871482106, 1927871482140, 1927871493901). A success at or after the instant
    /// ends it, and the entry learns it. `None` when the log cannot be read.
    async fn one_shot_last_run(&mut self, key: &HeartbeatKey) -> Option<OneShotLastRun> {
        let Some((Schedule::At(at), heard_failed)) = self.entries.get(key).map(|entry| {
            // This process heard its own run end failed, with nothing of it going now.
            let heard_failed = !entry.last_succeeded && entry.runs_in_flight() == 0;
            (entry.def.schedule(), heard_failed)
        }) else {
            return Some(OneShotLastRun::Neither);
        };
        let instant = truncate_to_millis(*at);
        // Its latest run, not a skip: an operator's trigger skipped as an overlap of the
        // one-shot's own run logs a row that says nothing of how that run ended (seed
        // 1927871576798: the skip hid the failure, and the one-shot was retired).
        let rows = match self.context.store.executions(key, ONE_SHOT_LOG_ROWS_READ_MAX).await {
            Ok(rows) => rows,
            Err(error) => {
                self.store_failed("executions", error.to_string(), "a one-shot is retired or retried at a later turn");
                return None;
            }
        };
        // Of its runs at or after the instant (one below says nothing of the one-shot, as at
        // its completion), the one of the latest slot, interrupted ones left out. Not the one
        // that ended last: a wall clock that stepped back orders finish times wrongly (seed
        // 1927871622516), and an interrupted run's finish time is the start-up that found
        // it (seed 1927871590237). Nor an operator's trigger, as at its completion (seed
        // 1927871660412: the retirement's write failed, and after a restart a trigger's
        // failure above the own run's success read as the one-shot's; ADR 0048).
        let latest = rows
            .into_iter()
            .filter(|row| {
                !matches!(row.status, ExecutionStatus::Skipped | ExecutionStatus::Interrupted)
                    && row.slot >= instant
                    && !row.triggered
            })
            .max_by_key(|row| row.slot);
        Some(match latest {
            Some(run) if matches!(run.status, ExecutionStatus::Failed | ExecutionStatus::TimedOut) => {
                OneShotLastRun::Failed
            }
            // Still `running`, its run of this life over: its result did not reach the store
            // (the write failed; the next start-up records it as interrupted). How it ended is
            // what this process heard (seed 1927871559156: a probe retired a one-shot whose
            // own run had timed out unrecorded).
            Some(run) if run.status == ExecutionStatus::Running && heard_failed => OneShotLastRun::Failed,
            Some(run) if run.status == ExecutionStatus::Succeeded => {
                if let Some(entry) = self.entries.get_mut(key) {
                    entry.last_succeeded = true;
                    entry.with_rare(|rare| rare.retrying = false);
                }
                OneShotLastRun::Succeeded
            }
            // No run at or after the instant that ended, or one still going.
            _ => OneShotLastRun::Neither,
        })
    }

    /// Stores a re-armed heartbeat's next slot, so a restart resumes there.
    async fn store_next_slot(&mut self, key: HeartbeatKey, next_slot: Timestamp) {
        let Some(schedule) = self.entries.get(&key).map(|entry| entry.def.schedule().clone()) else { return };
        let next = NextSlot { at: next_slot, schedule };
        if let Err(error) = self.context.store.set_next_slots(&[(key, next)]).await {
            self.store_failed("set_next_slots", error.to_string(), "a restart arms it from its previous slot");
        }
    }

    fn disarm(&mut self, key: &HeartbeatKey) {
        if let Some(timer) = self.entries.disarm(key) {
            if let Some(entry) = self.entries.get_mut(key) {
                entry.with_rare(|rare| rare.next_slot_floor = Some(timer.next_slot));
            }
            self.context.events.emit(self.context.clock.wall(), &EngineEvent::Disarmed { key: key.clone() });
        }
    }

    /// Stops scheduling; waits up to `grace` for in-flight runs, then abandons the rest
    /// (their claims stay `running` and the next start-up records them as interrupted).
    /// Returns how many runs were abandoned.
    async fn drain(&mut self, grace: Duration) -> usize {
        let deadline = self.context.clock.monotonic() + grace;
        let clock = Arc::clone(&self.context.clock);
        while !self.runs.is_empty() {
            tokio::select! {
                biased;
                Some(news) = self.completions.recv() => self.hear(news).await,
                // A run's tool may be waiting on a change; apply it so the run can finish.
                Some(command) = self.commands.recv() => match command {
                    Command::Change { change, applied } => {
                        self.apply(change).await;
                        let _ = applied.send(());
                    }
                    Command::Wake { accepted, .. } => {
                        let _ = accepted.send(false);
                    }
                    // Nothing new starts while draining; the callers hear the engine stopped.
                    Command::Inspect { .. }
                    | Command::Count { .. }
                    | Command::InFlight { .. }
                    | Command::Trigger { .. }
                    | Command::Backfill { .. } => {}
                    Command::Shutdown { done, .. } => {
                        let _ = done.send(0);
                    }
                },
                () = clock.sleep_until(deadline) => break,
            }
        }
        let abandoned = self.runs.len();
        for (_, run) in std::mem::take(&mut self.runs) {
            run.task.abort();
        }
        self.writing = 0;
        abandoned
    }

    fn store_failed(&self, operation: &'static str, error: String, consequence: &'static str) {
        let event = EngineEvent::StoreFailed { operation, error, consequence };
        self.context.events.emit(self.context.clock.wall(), &event);
    }
}

#[cfg(all(test, target_pointer_width = "64"))]
mod tests {
    /// A million heartbeats each have an entry: a field that grows it shows here first.
    #[test]
    fn an_entry_stays_within_24_bytes() {
        assert!(std::mem::size_of::<super::Entry>() <= 24, "{} bytes", std::mem::size_of::<super::Entry>());
    }
}
