//! The cluster simulation (ADR 0017): several engine nodes, each a madsim node with its
//! own skewed wall clock, share one memory store with PostgreSQL's lease and fence
//! semantics, and run the real `systole::cluster` loop. Faults: a node paused past its
//! lease (madsim pauses every task of it), a node cut from the store, a node killed and
//! restarted, a node leaving cleanly and joining again. A safety phase with faults, then a
//! healed liveness phase; `checker` reads the records.

pub mod checker;
mod freezes;
mod pause_end_freeze;
mod ports;
mod reloads;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::sync::Notify;

use systole::adapters::memory_workspace::MemoryWorkspace;
use systole::adapters::virtual_clock::VirtualClock;
use systole::cluster::engines::{ClusterRoute, Engines};
use systole::cluster::reload::NodeReload;
use systole::cluster::{self, ClusterSettings};
use systole::core::delivery_target::DeliveryTarget;
use systole::core::heartbeat::{HeartbeatDef, JobKind, Origin};
use systole::core::ids::{AgentId, HeartbeatId, HeartbeatKey};
use systole::core::policy::RunPolicy;
use systole::core::retention::RunRetention;
use systole::core::routing::Route;
use systole::core::schedule::Schedule;
use systole::driver::{EngineError, EngineOptions, Ports, TriggerOutcome};
use systole::ports::clock::Clock;
use systole::ports::store::Store;
use systole::store::memory::MemoryStore;

use freezes::Freezes;
use ports::{recording_messenger, Link, NodeLeases, NodeStore, RunSink, SlowModel};

/// What happened, in the store's order (a sequence number) and at the true time.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Record {
    /// A grant, with the node's monotonic time when it sent the request: the lease is
    /// surely its own until `sent` plus the lease, by its clock.
    Granted {
        node: String,
        partition: u32,
        term: u64,
        sent: Duration,
    },
    /// A renewal that went through, with the time its request was sent.
    Renewed {
        node: String,
        partition: u32,
        term: u64,
        sent: Duration,
    },
    /// A lease given back (the store ignores a release of a term no longer held).
    Released {
        node: String,
        partition: u32,
        term: u64,
    },
    /// A fenced write of a partition's engine, with the term it carried.
    Write {
        node: String,
        partition: u32,
        term: u64,
        kind: &'static str,
        /// The agent whose pause it sets or deletes, if it is such a write.
        agent: Option<AgentId>,
        accepted: bool,
    },
    Claimed {
        node: String,
        key: HeartbeatKey,
        slot: Timestamp,
    },
    RunStarted {
        node: String,
        key: HeartbeatKey,
        slot: Timestamp,
    },
    /// A part posted to the platform (after the engine's fence let it out).
    Delivered {
        node: String,
        agent: AgentId,
        idempotency_key: String,
    },
    /// A node stopped inside a fenced write's transaction, holding its partition's lease
    /// row as PostgreSQL's `FOR SHARE` would.
    TxFrozen {
        node: String,
        partition: u32,
    },
    /// That transaction's locks went: it committed after the node woke, or the database
    /// ended the idle session.
    TxEnded {
        node: String,
        partition: u32,
        by_database: bool,
    },
    /// A grant that found the lease row locked by another node's transaction, and how
    /// long it waited for it.
    LockWaited {
        node: String,
        partition: u32,
        waited: Duration,
        gave_up: bool,
    },
    /// A slot an engine skipped (paused, backoff, overlap...), with no run.
    Skipped {
        node: String,
        key: HeartbeatKey,
        slot: Timestamp,
    },
    /// A run that failed or timed out.
    RunFailed {
        node: String,
        key: HeartbeatKey,
        slot: Timestamp,
    },
    /// A heartbeat's breaker opened on `node`, for `cooldown` by that node's clock (none:
    /// until an operator enables it).
    BreakerTripped {
        node: String,
        key: HeartbeatKey,
        cooldown: Option<Duration>,
    },
    /// An engine took an operator's trigger (or backfill) of `slot`: an explicit request,
    /// which runs through a pause. Recorded from the engine, since a forwarded trigger's
    /// answer may be lost (the owner stalled) while the owner still applies it.
    SlotTriggered {
        node: String,
        key: HeartbeatKey,
        slot: Timestamp,
    },
    /// An engine applied a pause of `agent` (an operator's or its model's), after the store
    /// took it.
    AgentPaused {
        node: String,
        agent: AgentId,
        minutes: u32,
        /// When it ends, by the applying node's wall clock.
        until: Timestamp,
    },
    /// An engine applied a reminder its model set (`remind-<due second>`), after the store
    /// took it.
    ReminderSet {
        node: String,
        key: HeartbeatKey,
    },
    /// A run whose delivery the lease's fence dropped.
    EffectFenced {
        node: String,
        key: HeartbeatKey,
    },
    Fault {
        node: String,
        kind: FaultKind,
        detail: String,
    },
    /// An operator asks node `asked` to pause, resume or trigger `agent` (op `op`); the
    /// API on that node routes it (`core::routing`) to the node that runs the agent.
    OperatorAsked {
        op: usize,
        asked: String,
        agent: AgentId,
        kind: CallKind,
    },
    /// `answered_by`'s engine disabled (`enabled: false`) or enabled the heartbeat.
    OperatorSetEnabled {
        op: usize,
        answered_by: String,
        key: HeartbeatKey,
        enabled: bool,
    },
    /// The resume was applied by `answered_by`'s engine.
    OperatorResumed {
        op: usize,
        answered_by: String,
        agent: AgentId,
    },
    /// The trigger was taken by `answered_by`'s engine: the slot it decides in its next
    /// turn (`None`: not queued, the job being disabled, say).
    OperatorTriggered {
        op: usize,
        answered_by: String,
        key: HeartbeatKey,
        slot: Option<Timestamp>,
    },
    /// The pause was applied by `answered_by`'s engine, for `minutes`.
    OperatorPaused {
        op: usize,
        answered_by: String,
        agent: AgentId,
        minutes: u32,
    },
    /// No node acknowledged it: no owner, or the owner's store refused it (nothing was
    /// done); or its engine stopped after the pause was stored, or it did not answer in
    /// time and may apply it when it wakes (`maybe_applied`, as a real owner may after a
    /// forward timed out).
    OperatorRefused {
        op: usize,
        agent: AgentId,
        minutes: u32,
        maybe_applied: bool,
        why: String,
    },
    /// The config files of every node now hold `options.reloads[op]`'s heartbeats, and
    /// an operator asks node `asked` to reload.
    ReloadAsked {
        op: usize,
        asked: String,
    },
    /// A node's seed of its config file changed or added these heartbeats' definitions in
    /// the store: each starts afresh there, its breaker closed.
    Seeded {
        node: String,
        keys: Vec<HeartbeatKey>,
    },
    /// The reload was applied on the node asked; `everywhere` when every other node it
    /// asked applied it too.
    Reloaded {
        op: usize,
        everywhere: bool,
        answers: String,
    },
    /// What a node's partition engines hold, asked once a reload was applied everywhere.
    EnginesHold {
        op: usize,
        node: String,
        keys: Vec<HeartbeatKey>,
    },
    /// The reload did nothing (a node disagreed or did not answer), or its answer did not
    /// come in time.
    ReloadRefused {
        op: usize,
        why: String,
    },
    /// Every fault is over: the liveness phase starts.
    Healed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    /// Every task of the node stops (a GC pause, a stopped VM) for longer than its lease.
    PausedPastLease,
    /// The node is stopped past its lease while a model call of it is in flight, so it
    /// wakes with a reply in hand.
    PausedWithReply,
    /// The node is stopped past its lease inside a fenced write's transaction.
    FrozenInTransaction,
    /// The node's calls to the store fail.
    CutFromStore,
    Killed,
    Restarted,
    /// A clean shutdown: engines drain, leases are given back.
    Left,
    Joined,
    ClockSkew,
    /// A model call fails (the endpoint answers 500).
    ModelFailed,
    /// A model call never answers within the run's timeout.
    ModelHung,
    /// The provider refuses a call in a way no retry heals (402): the breaker opens at once.
    ModelRefused,
    /// The webhook answers a delivery's attempt 503 (nothing posted).
    DeliveryRefused,
    /// The model pauses its agent's heartbeats (`pause_heartbeats`).
    ModelPaused,
    /// The model sets its agent a one-shot reminder (`heartbeat` create with `at`).
    ModelReminder,
    /// A partition's engine pruned rows of its run log (counted per row).
    RunsPruned,
    /// The node is stopped inside the write that ends a pause, while an operator stores a
    /// newer pause of the agent.
    FrozenAtPauseEnd,
    /// The same, just after that write committed, before the node sees its answer.
    StoppedAfterPauseEnd,
}

impl FaultKind {
    pub const ALL: [FaultKind; 18] = [
        FaultKind::PausedPastLease,
        FaultKind::PausedWithReply,
        FaultKind::FrozenInTransaction,
        FaultKind::CutFromStore,
        FaultKind::Killed,
        FaultKind::Restarted,
        FaultKind::Left,
        FaultKind::Joined,
        FaultKind::ClockSkew,
        FaultKind::ModelFailed,
        FaultKind::ModelHung,
        FaultKind::ModelRefused,
        FaultKind::DeliveryRefused,
        FaultKind::ModelPaused,
        FaultKind::ModelReminder,
        FaultKind::RunsPruned,
        FaultKind::FrozenAtPauseEnd,
        FaultKind::StoppedAfterPauseEnd,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FaultKind::PausedPastLease => "paused-past-lease",
            FaultKind::PausedWithReply => "paused-with-reply",
            FaultKind::FrozenInTransaction => "frozen-in-transaction",
            FaultKind::CutFromStore => "cut-from-store",
            FaultKind::Killed => "killed",
            FaultKind::Restarted => "restarted",
            FaultKind::Left => "left",
            FaultKind::Joined => "joined",
            FaultKind::ClockSkew => "clock-skew",
            FaultKind::ModelFailed => "model-failed",
            FaultKind::ModelHung => "model-hung",
            FaultKind::ModelRefused => "model-refused",
            FaultKind::DeliveryRefused => "delivery-refused",
            FaultKind::ModelPaused => "model-paused",
            FaultKind::ModelReminder => "model-reminder",
            FaultKind::RunsPruned => "runs-pruned",
            FaultKind::FrozenAtPauseEnd => "frozen-at-pause-end",
            FaultKind::StoppedAfterPauseEnd => "stopped-after-pause-end",
        }
    }
}

/// One entry of the record: sequence, true time since the start, what.
pub type Entry = (u64, Duration, Record);

/// What a seed is made of, drawn from it.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    pub seed: u64,
    pub start: Timestamp,
    /// Each node's name, wall-clock skew, and when it first starts.
    pub nodes: Vec<(String, SignedDuration, Duration)>,
    pub heartbeats: Vec<HeartbeatDef>,
    pub lease: Duration,
    pub faults: Vec<(Duration, usize, Fault)>,
    pub safety: Duration,
    pub liveness: Duration,
    /// Operator pauses, by when they are asked.
    pub operator: Vec<OperatorCall>,
    /// Config reloads, by when they are asked.
    pub reloads: Vec<ReloadOp>,
    /// The share of model calls, in percent, that fail, hang past the run's timeout, or
    /// are refused for good, and of delivery attempts the webhook refuses, until the heal.
    pub model_failure_percent: u32,
    pub model_hang_percent: u32,
    pub model_refusal_percent: u32,
    pub delivery_refusal_percent: u32,
    /// What each partition's engine keeps of its run log (it prunes its own partition's
    /// rows five minutes after it starts, then hourly).
    pub run_retention: RunRetention,
    /// A node frozen at a pause's end while a newer pause is stored, in some seeds.
    pub pause_end_freeze: Option<pause_end_freeze::PauseEndFreeze>,
}

/// An operator changes every node's file to `heartbeats`, then asks one node to reload.
#[derive(Debug, Clone)]
pub struct ReloadOp {
    pub at: Duration,
    pub node: usize,
    pub heartbeats: Vec<HeartbeatDef>,
}

/// An operator's call about an agent, asked of one node.
#[derive(Debug, Clone, Copy)]
pub struct OperatorCall {
    pub at: Duration,
    /// The index of the node asked.
    pub node: usize,
    /// The agent's index; with `own`, an index among the agents the asked node runs then
    /// (a call that reaches a node paused past its lease, about one of its own agents).
    pub agent: usize,
    pub own: bool,
    pub kind: CallKind,
    /// How long a pause lasts.
    pub minutes: u32,
}

/// What an operator's call asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CallKind {
    Pause,
    /// Ends the agent's pause early.
    Resume,
    /// Runs the agent's heartbeat now.
    Trigger,
    /// Disables the agent's heartbeat (asked while a reload changes it, ADR 0056).
    Disable,
    /// Enables it again (once the cluster has settled).
    Enable,
}

#[derive(Debug, Clone, Copy)]
pub enum Fault {
    Pause(Duration),
    /// Waits for a model call of the node in flight, then pauses it.
    PauseWithReply(Duration),
    /// Waits for a fenced write of the node, then pauses it inside its transaction.
    FreezeInTransaction(Duration),
    Cut(Duration),
    Kill(Duration),
    Leave(Duration),
}

const NODES_COUNT: usize = 3;
const SKEW_SECS_MAX: i64 = 30;
const SAFETY_MINUTES: u64 = 30;
const LIVENESS_MINUTES: u64 = 20;
/// How long a pause-with-reply fault waits for a model call of its node to be in flight.
const REPLY_WAIT_SECS_MAX: u64 = 120;
/// Operator pauses during the faults, and once the cluster has settled after the heal.
const OPERATOR_OPS_RANGE: std::ops::Range<usize> = 8..21;
const OPERATOR_OPS_SETTLED: u64 = 3;
/// The most runs per heartbeat a seed's retention keeps: few, so prunes delete rows.
const RUNS_KEPT_PER_HEARTBEAT_MAX: u32 = 5;
/// Resumes and triggers during the faults.
const OPERATOR_RESUMES_TRIGGERS_RANGE: std::ops::Range<usize> = 2..8;
const PAUSE_MINUTES_RANGE: std::ops::RangeInclusive<u32> = 2..=10;
/// How long the node asked waits for the owner to answer (the API's `FORWARD_TIMEOUT_SECS`).
pub(crate) const FORWARD_TIMEOUT_SECS: u64 = 30;
/// Reloads during the faults (one more is asked once the cluster has settled).
const RELOADS_RANGE: std::ops::Range<usize> = 1..3;
/// How many heartbeats a reload changes the interval of, at most.
const RELOAD_CHANGES_MAX: usize = 3;
/// The share of seeds (with a node stopped or cut off late enough) in which a reload adds
/// heartbeats that the next removes (`add_passing_heartbeat`, ADR 0024).
const PASSING_HEARTBEAT_PROBABILITY: f64 = 0.6;
/// The id and the interval range of those heartbeats: frequent, so a node that kept one
/// claims it soon.
const PASSING_HEARTBEAT_ID: &str = "passing";
const PASSING_HEARTBEAT_SECS: std::ops::RangeInclusive<u64> = 20..=90;
/// How long the operator waits for a reload's answer (its HTTP client's patience): the
/// check and the apply may each wait a forward's timeout.
const RELOAD_ANSWER_SECS: u64 = FORWARD_TIMEOUT_SECS * 3;
/// When the settled phase's reload is asked, after the cluster has settled.
const SETTLED_RELOAD_SECS: u64 = 30;
/// The share of reloads during the faults at which an operator disables a heartbeat the
/// reload changes, and how long after the reload is asked, at most: a little over a read
/// of every row (`HEARTBEATS_READ_MS`), so many disables fall inside a node's apply.
const DISABLE_DURING_RELOAD_PROBABILITY: f64 = 0.5;
const DISABLE_AFTER_RELOAD_MS_MAX: u64 = 700;
/// When those heartbeats are enabled again, after the cluster has settled (before the
/// settled reload).
const SETTLED_ENABLE_SECS: u64 = 15;
/// The engines' waits after failures in a row, and their breaker's cooldown: short, so a
/// breaker opened during the faults is probed and closed within the healed phase.
pub(crate) const ERROR_BACKOFF_SECS: [u64; 3] = [10, 20, 40];
pub(crate) const BREAKER_COOLDOWN_SECS: u64 = 120;
/// The id of a model's reminder: this, then the second it is due.
pub(crate) const REMINDER_PREFIX: &str = "remind-";
/// How long a hung model call takes: past every heartbeat's timeout.
pub(crate) const MODEL_HANG_SECS: u64 = 90;

impl ClusterOptions {
    pub fn from_seed(seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x0063_6c75_7374_6572);
        let start =
            Timestamp::from_second(1_790_000_000 + rng.random_range(0..86_400 * 365)).unwrap_or(Timestamp::UNIX_EPOCH);
        let lease = Duration::from_secs([5, 10, 15, 30][rng.random_range(0..4)]);
        let nodes: Vec<(String, SignedDuration, Duration)> = (0..NODES_COUNT)
            .map(|index| {
                let skew = SignedDuration::from_secs(rng.random_range(-SKEW_SECS_MAX..=SKEW_SECS_MAX));
                // The first node starts at once; the others may join later.
                let join = if index == 0 { Duration::ZERO } else { Duration::from_secs(rng.random_range(0..300)) };
                (format!("node-{}", index + 1), skew, join)
            })
            .collect();
        let agents = rng.random_range(4..14);
        let heartbeats: Vec<HeartbeatDef> = (0..agents)
            .map(|index| {
                let every = Duration::from_secs(rng.random_range(20..240));
                heartbeat(&format!("agent-{index}"), every)
            })
            .collect();
        let safety = Duration::from_secs(SAFETY_MINUTES * 60);
        let faults_count = rng.random_range(2..9);
        let mut faults: Vec<(Duration, usize, Fault)> = (0..faults_count)
            .map(|_| {
                let at = Duration::from_secs(rng.random_range(60..safety.as_secs() - 300));
                let node = rng.random_range(0..NODES_COUNT);
                let past_lease = lease + Duration::from_secs(rng.random_range(1..lease.as_secs() * 3));
                let fault = match rng.random_range(0..6) {
                    0 => Fault::Pause(past_lease),
                    1 => Fault::Cut(past_lease),
                    2 => Fault::Kill(Duration::from_secs(rng.random_range(1..120))),
                    3 => Fault::PauseWithReply(past_lease),
                    4 => Fault::FreezeInTransaction(past_lease),
                    _ => Fault::Leave(Duration::from_secs(rng.random_range(10..240))),
                };
                (at, node, fault)
            })
            .collect();
        faults.sort_by_key(|(at, node, _)| (*at, *node));
        let liveness = Duration::from_secs(LIVENESS_MINUTES * 60);
        // Drawn last, so the rest of a seed is as it was before operators came. Some during
        // the faults, some once the cluster has settled after the heal.
        let during: Vec<Duration> = (0..rng.random_range(OPERATOR_OPS_RANGE))
            .map(|_| Duration::from_secs(rng.random_range(60..safety.as_secs())))
            .collect();
        let settled = (0..OPERATOR_OPS_SETTLED).map(|index| safety + liveness / 2 + Duration::from_secs(60 * index));
        let mut operator: Vec<OperatorCall> = during
            .into_iter()
            .chain(settled)
            .map(|at| {
                let node = rng.random_range(0..NODES_COUNT);
                let agent = rng.random_range(0..agents);
                let minutes = rng.random_range(PAUSE_MINUTES_RANGE);
                OperatorCall { at, node, agent, own: false, kind: CallKind::Pause, minutes }
            })
            .collect();
        // While a node is stopped past its lease, a call reaches it about one of its agents:
        // it answers when it wakes, and must not acknowledge what its successor never hears.
        for (at, node, fault) in &faults {
            if let Fault::Pause(length) | Fault::PauseWithReply(length) | Fault::FreezeInTransaction(length) = fault {
                let into = lease + Duration::from_secs(rng.random_range(0..=length.saturating_sub(lease).as_secs()));
                let (agent, minutes) = (rng.random_range(0..agents), rng.random_range(PAUSE_MINUTES_RANGE));
                let kind = CallKind::Pause;
                operator.push(OperatorCall { at: *at + into, node: *node, agent, own: true, kind, minutes });
            }
        }
        operator.sort_by_key(|op| op.at);
        let reloads = draw_reloads(&mut rng, &nodes, &heartbeats, safety, liveness);
        // Model and delivery faults: none in some seeds, a few percent in most.
        let mut percent = |max: u32| if rng.random_bool(0.2) { 0 } else { rng.random_range(0..=max) };
        let model_failure_percent = percent(20);
        let model_hang_percent = percent(5);
        let model_refusal_percent = percent(3);
        let delivery_refusal_percent = percent(30);
        // Resumes and triggers, routed like the pauses: some during the faults, some once
        // the cluster has settled (between the settled pauses).
        let resumes_and_triggers = (0..rng.random_range(OPERATOR_RESUMES_TRIGGERS_RANGE))
            .map(|_| Duration::from_secs(rng.random_range(60..safety.as_secs())))
            .chain((0..OPERATOR_OPS_SETTLED).map(|index| safety + liveness / 2 + Duration::from_secs(30 + 60 * index)))
            .collect::<Vec<_>>();
        for at in resumes_and_triggers {
            let kind = if rng.random_bool(0.5) { CallKind::Resume } else { CallKind::Trigger };
            let (node, agent) = (rng.random_range(0..NODES_COUNT), rng.random_range(0..agents));
            operator.push(OperatorCall { at, node, agent, own: false, kind, minutes: 0 });
        }
        operator.sort_by_key(|op| op.at);
        let run_retention = RunRetention {
            kept_days: systole::limits::RUNS_KEPT_DAYS_MIN,
            kept_per_heartbeat: rng.random_range(1..=RUNS_KEPT_PER_HEARTBEAT_MAX),
        };
        // Drawn last, so the rest of a seed is as it was before passing heartbeats came.
        let mut reloads = reloads;
        if rng.random_bool(PASSING_HEARTBEAT_PROBABILITY) {
            add_passing_heartbeat(&mut rng, &mut reloads, &heartbeats, &faults, lease);
        }
        // Drawn last again: disables asked while a reload changes the heartbeat.
        add_disables_during_reloads(&mut rng, &mut operator, &reloads, &heartbeats, safety + liveness / 2);
        // And last again: a freeze at a pause's end, clear of the other faults.
        let pause_end_freeze = pause_end_freeze::draw(&mut rng, &faults, heartbeats.len(), lease, safety);
        Self {
            seed,
            start,
            nodes,
            heartbeats,
            lease,
            faults,
            safety,
            liveness,
            operator,
            reloads,
            model_failure_percent,
            model_hang_percent,
            model_refusal_percent,
            delivery_refusal_percent,
            run_retention,
            pause_end_freeze,
        }
    }

    /// The spread of the nodes' wall clocks.
    pub fn skew_spread(&self) -> Duration {
        skew_spread(&self.nodes)
    }

    /// The longest interval `key` has in any of the seed's configs.
    pub fn longest_interval(&self, key: &HeartbeatKey) -> Option<Duration> {
        std::iter::once(&self.heartbeats)
            .chain(self.reloads.iter().map(|reload| &reload.heartbeats))
            .flat_map(|defs| defs.iter().filter(|def| def.key == *key))
            .filter_map(|def| match def.schedule {
                Schedule::Every(interval) => Some(interval),
                _ => None,
            })
            .max()
    }
}

fn skew_spread(nodes: &[(String, SignedDuration, Duration)]) -> Duration {
    let skews: Vec<i64> = nodes.iter().map(|(_, skew, _)| skew.as_secs()).collect();
    let spread = skews.iter().max().copied().unwrap_or(0) - skews.iter().min().copied().unwrap_or(0);
    Duration::from_secs(u64::try_from(spread).unwrap_or(0))
}

/// Reloads during the faults, each changing a few heartbeats' intervals either way, and
/// one once the cluster has settled that lengthens them by more than the clocks' spread
/// (a node that kept the old interval then claims sooner than the new one allows).
fn draw_reloads(
    rng: &mut ChaCha8Rng,
    nodes: &[(String, SignedDuration, Duration)],
    heartbeats: &[HeartbeatDef],
    safety: Duration,
    liveness: Duration,
) -> Vec<ReloadOp> {
    let spread = skew_spread(nodes);
    let mut config = heartbeats.to_vec();
    let mut during: Vec<Duration> = (0..rng.random_range(RELOADS_RANGE))
        .map(|_| Duration::from_secs(rng.random_range(60..safety.as_secs())))
        .collect();
    during.sort();
    let settled = safety + liveness / 2 + Duration::from_secs(SETTLED_RELOAD_SECS);
    let count = during.len();
    during
        .into_iter()
        .chain(std::iter::once(settled))
        .enumerate()
        .map(|(index, at)| {
            let node = rng.random_range(0..nodes.len());
            for _ in 0..rng.random_range(1..=RELOAD_CHANGES_MAX) {
                let changed = rng.random_range(0..config.len());
                let Schedule::Every(old) = config[changed].schedule else { continue };
                let new = if index == count {
                    old + spread + Duration::from_secs(rng.random_range(30..120))
                } else {
                    Duration::from_secs(rng.random_range(20..240))
                };
                config[changed].schedule = Schedule::Every(new);
            }
            ReloadOp { at, node, heartbeats: config.clone() }
        })
        .collect()
}

/// A reload asked while a node is stopped or cut off past its lease adds a heartbeat to
/// every agent, and the next reload (the settled one) removes them. The node is no owner
/// then and is not asked to apply it; back, it takes partitions from the store, added
/// heartbeats among them, while its own file never had them. Placed after the last reload
/// during the faults, so the node applies none in between.
fn add_passing_heartbeat(
    rng: &mut ChaCha8Rng,
    reloads: &mut Vec<ReloadOp>,
    heartbeats: &[HeartbeatDef],
    faults: &[(Duration, usize, Fault)],
    lease: Duration,
) {
    let Some(last_during) = reloads.len().checked_sub(2).map(|index| &reloads[index]) else { return };
    // Halfway between the end of the node's lease and its return.
    let windows: Vec<(Duration, usize)> = faults
        .iter()
        .filter_map(|(at, node, fault)| match fault {
            Fault::Pause(length) | Fault::Cut(length) => Some((*at + lease + length.saturating_sub(lease) / 2, *node)),
            _ => None,
        })
        .filter(|(at, _)| *at > last_during.at)
        .collect();
    if windows.is_empty() || heartbeats.is_empty() {
        return;
    }
    let (at, away) = windows[rng.random_range(0..windows.len())];
    let mut config = last_during.heartbeats.clone();
    // One for every agent: whichever partitions the node takes when it is back, some hold one.
    for pulse in heartbeats {
        let mut def = pulse.clone();
        def.key.heartbeat = HeartbeatId::new(PASSING_HEARTBEAT_ID).unwrap_or_else(|_| unreachable!("a valid id"));
        def.schedule = Schedule::Every(Duration::from_secs(rng.random_range(PASSING_HEARTBEAT_SECS)));
        config.push(def);
    }
    let node = (away + rng.random_range(1..NODES_COUNT)) % NODES_COUNT;
    let settled = reloads.len() - 1;
    reloads.insert(settled, ReloadOp { at, node, heartbeats: config });
}

/// In a share of the reloads during the faults, an operator disables one of the heartbeats
/// the reload changes, a moment after the reload is asked: often while the node applying it
/// has read the store's rows and its engines have not yet taken them (each read of every
/// row takes `HEARTBEATS_READ_MS`). The heartbeat is enabled again once the cluster has
/// settled (`cluster-disable-holds`, ADR 0056).
fn add_disables_during_reloads(
    rng: &mut ChaCha8Rng,
    operator: &mut Vec<OperatorCall>,
    reloads: &[ReloadOp],
    heartbeats: &[HeartbeatDef],
    settled: Duration,
) {
    let mut before: &[HeartbeatDef] = heartbeats;
    for reload in reloads.iter().filter(|reload| reload.at < settled) {
        let changed: Vec<usize> = heartbeats
            .iter()
            .enumerate()
            .filter(|(_, pulse)| {
                let def_in = |defs: &[HeartbeatDef]| defs.iter().find(|def| def.key == pulse.key).cloned();
                def_in(before) != def_in(&reload.heartbeats)
            })
            .map(|(index, _)| index)
            .collect();
        before = &reload.heartbeats;
        if changed.is_empty() || !rng.random_bool(DISABLE_DURING_RELOAD_PROBABILITY) {
            continue;
        }
        let agent = changed[rng.random_range(0..changed.len())];
        let node = rng.random_range(0..NODES_COUNT);
        let at = reload.at + Duration::from_millis(rng.random_range(0..=DISABLE_AFTER_RELOAD_MS_MAX));
        operator.push(OperatorCall { at, node, agent, own: false, kind: CallKind::Disable, minutes: 0 });
        let at = settled + Duration::from_secs(SETTLED_ENABLE_SECS);
        let node = rng.random_range(0..NODES_COUNT);
        operator.push(OperatorCall { at, node, agent, own: false, kind: CallKind::Enable, minutes: 0 });
    }
    operator.sort_by_key(|op| op.at);
}

/// The key of an agent's one heartbeat in the workload.
fn pulse_key(agent: &AgentId) -> HeartbeatKey {
    let heartbeat = HeartbeatId::new("pulse").unwrap_or_else(|_| unreachable!("a valid id"));
    HeartbeatKey { agent: agent.clone(), heartbeat }
}

fn heartbeat(agent: &str, every: Duration) -> HeartbeatDef {
    let agent = AgentId::new(agent).unwrap_or_else(|_| unreachable!("generated ids are valid"));
    let heartbeat = HeartbeatId::new("pulse").unwrap_or_else(|_| unreachable!("a valid id"));
    HeartbeatDef {
        key: HeartbeatKey { agent, heartbeat },
        kind: JobKind::Heartbeat,
        prompt: "report".into(),
        schedule: Schedule::Every(every),
        policy: RunPolicy::default(),
        delete_after_run: false,
        dedup: false,
        target: DeliveryTarget::parse("sim:inbox").unwrap_or_else(|_| unreachable!("a valid target")),
        active_hours: None,
        timeout: Duration::from_secs(60),
        origin: Origin::Config,
        tools: Default::default(),
        model: None,
    }
}

/// What the nodes share: the true clock (the store's), the store, the record.
pub struct ClusterWorld {
    pub options: ClusterOptions,
    pub clock: Arc<VirtualClock>,
    pub store: Arc<MemoryStore>,
    records: Mutex<Vec<Entry>>,
    sequence: AtomicU64,
    partitioned: Mutex<BTreeSet<String>>,
    rng: Mutex<ChaCha8Rng>,
    /// Each node's own wall clock, skewed; kept across its restarts.
    node_clocks: BTreeMap<String, Arc<VirtualClock>>,
    leave: BTreeMap<String, Notify>,
    fired: Mutex<BTreeMap<FaultKind, u64>>,
    /// Model calls in flight, by node.
    calls_in_flight: Mutex<BTreeMap<String, u64>>,
    /// The database's side of frozen transactions (see [`Freeze`]).
    pub freezes: Freezes,
    /// What each node's API routes by: its cluster loop's view, from its latest life.
    routes: Mutex<BTreeMap<String, ClusterRoute>>,
    /// The heartbeats of every node's config file now (a reload changes all files first).
    config: Mutex<Vec<HeartbeatDef>>,
    /// Set at the heal: model and delivery faults stop.
    healed: std::sync::atomic::AtomicBool,
    /// Each node's reload endpoint, from its latest life.
    reload_servers: Mutex<BTreeMap<String, tokio::sync::mpsc::Sender<reloads::ReloadRequest>>>,
}

impl ClusterWorld {
    pub fn record(&self, record: Record) {
        let sequence = self.sequence.fetch_add(1, Ordering::SeqCst);
        let at = self.clock.monotonic().since_origin();
        self.records.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((sequence, at, record));
    }

    fn fault(&self, node: &str, kind: FaultKind, detail: String) {
        *self.fired.lock().unwrap_or_else(std::sync::PoisonError::into_inner).entry(kind).or_default() += 1;
        self.record(Record::Fault { node: node.to_owned(), kind, detail });
    }

    /// Counts a fault too frequent to record each time.
    fn count(&self, kind: FaultKind) {
        self.count_by(kind, 1);
    }

    pub(crate) fn count_by(&self, kind: FaultKind, by: u64) {
        *self.fired.lock().unwrap_or_else(std::sync::PoisonError::into_inner).entry(kind).or_default() += by;
    }

    /// Whether a behaviour of `percent` strikes now, healed or not; counted when it does.
    fn strikes_always(&self, kind: FaultKind, percent: u32) -> bool {
        let strikes = self.draw(0..100) < u64::from(percent);
        if strikes {
            self.count(kind);
        }
        strikes
    }

    /// Whether a fault of `percent` strikes now (never after the heal); counted when it does.
    fn strikes(&self, kind: FaultKind, percent: u32) -> bool {
        if percent == 0 || self.healed.load(Ordering::SeqCst) {
            return false;
        }
        let strikes = self.draw(0..100) < u64::from(percent);
        if strikes {
            self.count(kind);
        }
        strikes
    }

    fn is_partitioned(&self, node: &str) -> bool {
        self.partitioned.lock().unwrap_or_else(std::sync::PoisonError::into_inner).contains(node)
    }

    fn calls_in_flight(&self, node: &str) -> u64 {
        self.calls_in_flight.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(node).copied().unwrap_or(0)
    }

    fn count_call(&self, node: &str, delta: i64) {
        let mut calls = self.calls_in_flight.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let count = calls.entry(node.to_owned()).or_default();
        *count = count.saturating_add_signed(delta);
    }

    fn config(&self) -> Vec<HeartbeatDef> {
        self.config.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    fn reload_server(&self, node: &str) -> Option<tokio::sync::mpsc::Sender<reloads::ReloadRequest>> {
        self.reload_servers.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(node).cloned()
    }

    fn route_of(&self, node: &str) -> Option<ClusterRoute> {
        self.routes.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(node).cloned()
    }

    /// An operator's call asked of node `asked`, routed as its API routes it: applied
    /// there, forwarded to the owner the lease table names (which must still run the agent,
    /// and answer within the forward's timeout), or refused. The node that applied it, and
    /// a trigger's slot. On refusal, whether the call may be applied all the same, and why.
    async fn routed_call(
        &self,
        asked: &str,
        agent: &AgentId,
        kind: CallKind,
        minutes: u32,
    ) -> Result<(String, Option<Timestamp>), (bool, String)> {
        let refused = |why: String| (false, why);
        let route = self.route_of(asked).ok_or_else(|| refused(format!("{asked} has not started")))?;
        let owner = match route.route(agent) {
            Route::Here => route,
            Route::Forward { node, .. } => self.route_of(&node).ok_or_else(|| refused(format!("{node} is unknown")))?,
            Route::NoAddress { node } => return Err(refused(format!("{node} serves no API"))),
            Route::NoOwner { partition } => return Err(refused(format!("no node runs partition {partition}"))),
        };
        let engine = Engines::Cluster(owner.clone()).for_agent(agent).map_err(|error| refused(error.to_string()))?;
        let call = async {
            match kind {
                CallKind::Pause => engine.pause(agent, minutes).await.map(|_| None),
                CallKind::Resume => engine.resume(agent).await.map(|_| None),
                CallKind::Trigger => engine.trigger(&pulse_key(agent)).await.map(|outcome| match outcome {
                    TriggerOutcome::Queued { slot } => Some(slot),
                    _ => None,
                }),
                CallKind::Disable | CallKind::Enable => {
                    engine.set_enabled(&pulse_key(agent), kind == CallKind::Enable).await.map(|_| None)
                }
            }
        };
        tokio::select! {
            biased; // an unbiased select draws from an RNG outside the seed
            answer = call => answer.map(|slot| (owner.node.clone(), slot)).map_err(|error| {
                // A store error wrote nothing; an engine that stopped may have stored it.
                (!matches!(error, EngineError::Store(_)), error.to_string())
            }),
            () = self.clock.sleep(Duration::from_secs(FORWARD_TIMEOUT_SECS)) => {
                Err((true, "the owner did not answer".into()))
            }
        }
    }

    /// Keeps node `name` (madsim's `id`), frozen inside a transaction, stopped for
    /// `length`. The database ends the idle session after its bound, if the node
    /// configures one; the node stays stopped for the whole fault.
    async fn hold_frozen(
        &self,
        handle: &madsim::runtime::Handle,
        id: madsim::task::NodeId,
        name: &str,
        length: Duration,
    ) {
        handle.pause(id);
        match cluster::idle_transaction_bound(self.options.lease) {
            Some(bound) if bound < length => {
                self.clock.sleep(bound).await;
                self.freezes.end_session(self, name);
                self.clock.sleep(length - bound).await;
            }
            _ => self.clock.sleep(length).await,
        }
        handle.resume(id);
        self.freezes.thaw(name);
    }

    /// Asks `call` of its node, routed as its API routes it, and records what came of it.
    async fn ask(&self, op: usize, call: OperatorCall) {
        let OperatorCall { node, agent, own, kind, minutes, .. } = call;
        let asked = self.options.nodes[node].0.clone();
        let agents: Vec<&AgentId> = self.options.heartbeats.iter().map(|def| &def.key.agent).collect();
        let candidates: Vec<&AgentId> = match (own, self.route_of(&asked)) {
            (true, Some(route)) => agents.into_iter().filter(|agent| route.route(agent) == Route::Here).collect(),
            _ => agents,
        };
        let Some(agent) = candidates.get(agent % candidates.len().max(1)).map(|agent| (*agent).clone()) else {
            return;
        };
        self.record(Record::OperatorAsked { op, asked: asked.clone(), agent: agent.clone(), kind });
        match (self.routed_call(&asked, &agent, kind, minutes).await, kind) {
            (Ok((answered_by, _)), CallKind::Pause) => {
                self.record(Record::OperatorPaused { op, answered_by, agent, minutes });
            }
            (Ok((answered_by, _)), CallKind::Resume) => {
                self.record(Record::OperatorResumed { op, answered_by, agent });
            }
            (Ok((answered_by, slot)), CallKind::Trigger) => {
                let key = pulse_key(&agent);
                self.record(Record::OperatorTriggered { op, answered_by, key, slot });
            }
            (Ok((answered_by, _)), CallKind::Disable | CallKind::Enable) => {
                let (key, enabled) = (pulse_key(&agent), kind == CallKind::Enable);
                self.record(Record::OperatorSetEnabled { op, answered_by, key, enabled });
            }
            (Err((maybe_applied, why)), _) => {
                self.record(Record::OperatorRefused { op, agent, minutes, maybe_applied, why });
            }
        }
    }

    /// A draw from the seed's own stream (delays, fault strikes, a pause's minutes).
    fn draw(&self, range: std::ops::Range<u64>) -> u64 {
        self.rng.lock().unwrap_or_else(std::sync::PoisonError::into_inner).random_range(range)
    }
}

/// What one seed produced.
pub struct ClusterOutcome {
    pub options: ClusterOptions,
    pub entries: Vec<Entry>,
    pub fired: BTreeMap<FaultKind, u64>,
}

pub fn run_seed(seed: u64) -> ClusterOutcome {
    let options = ClusterOptions::from_seed(seed);
    let runtime = madsim::runtime::Runtime::with_seed_and_config(seed, madsim::Config::default());
    let (entries, fired) = runtime.block_on(simulate(options.clone()));
    ClusterOutcome { options, entries, fired }
}

async fn simulate(options: ClusterOptions) -> (Vec<Entry>, BTreeMap<FaultKind, u64>) {
    let clock = Arc::new(VirtualClock::new(options.start));
    let node_clocks = options
        .nodes
        .iter()
        .map(|(name, skew, _)| {
            let wall = options.start.saturating_add(*skew).unwrap_or(options.start);
            (name.clone(), Arc::new(VirtualClock::new(wall)))
        })
        .collect();
    let world = Arc::new(ClusterWorld {
        clock: Arc::clone(&clock),
        store: Arc::new(MemoryStore::with_lease_clock(clock.clone())),
        records: Mutex::default(),
        sequence: AtomicU64::new(0),
        partitioned: Mutex::default(),
        rng: Mutex::new(ChaCha8Rng::seed_from_u64(options.seed ^ 0x006c_6c6d)),
        node_clocks,
        leave: options.nodes.iter().map(|(name, _, _)| (name.clone(), Notify::new())).collect(),
        fired: Mutex::default(),
        calls_in_flight: Mutex::default(),
        freezes: Freezes::new(options.nodes.iter().map(|(name, _, _)| name.clone())),
        routes: Mutex::default(),
        config: Mutex::new(options.heartbeats.clone()),
        healed: std::sync::atomic::AtomicBool::new(false),
        reload_servers: Mutex::default(),
        options,
    });
    for (name, skew, _) in &world.options.nodes {
        if !skew.is_zero() {
            world.fault(name, FaultKind::ClockSkew, skew.to_string());
        }
    }
    let handle = madsim::runtime::Handle::current();
    let origin = clock.monotonic();
    // Nodes start at their join time; a node's madsim id is its index.
    let mut ids = Vec::new();
    for (name, _, _) in &world.options.nodes {
        let node = handle
            .create_node()
            .name(name.clone())
            .init({
                let (world, name) = (Arc::clone(&world), name.clone());
                move || node_life(Arc::clone(&world), name.clone())
            })
            .build();
        // Built nodes run at once; a late joiner is paused until its time (it holds nothing).
        ids.push(node.id());
    }
    for (index, (name, _, join)) in world.options.nodes.clone().iter().enumerate() {
        if !join.is_zero() {
            handle.kill(ids[index]);
            let (world, handle, id, join, name) = (Arc::clone(&world), handle.clone(), ids[index], *join, name.clone());
            tokio::spawn(async move {
                world.clock.sleep_until(origin + join).await;
                world.fault(&name, FaultKind::Joined, format!("after {}s", join.as_secs()));
                // A fault's restart may have started it before its time.
                world.freezes.end_with_process(&world, &name);
                handle.restart(id);
            });
        }
    }
    let operator = tokio::spawn({
        let world = Arc::clone(&world);
        async move {
            for (op, call) in world.options.operator.clone().into_iter().enumerate() {
                world.clock.sleep_until(origin + call.at).await;
                world.ask(op, call).await;
            }
        }
    });
    let first_op = world.options.operator.len();
    let frozen_at_pause_end =
        tokio::spawn(pause_end_freeze::run(Arc::clone(&world), handle.clone(), ids.clone(), origin, first_op));
    let reloader = tokio::spawn({
        let world = Arc::clone(&world);
        async move {
            for (op, reload) in world.options.reloads.clone().into_iter().enumerate() {
                world.clock.sleep_until(origin + reload.at).await;
                // Every node's file changes first; a node that restarts now seeds it.
                *world.config.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = reload.heartbeats;
                let asked = world.options.nodes[reload.node].0.clone();
                world.record(Record::ReloadAsked { op, asked: asked.clone() });
                let patience = Duration::from_secs(RELOAD_ANSWER_SECS);
                match reloads::call_node(&world, &asked, reloads::ReloadCall::Operator, patience).await {
                    Ok(answer) => {
                        let everywhere = answer["everywhere"].as_bool().unwrap_or(false);
                        world.record(Record::Reloaded { op, everywhere, answers: answer["nodes"].to_string() });
                        if everywhere {
                            // What each node's engines run now (`cluster-reload-removes`).
                            for (node, ..) in &world.options.nodes {
                                let call = reloads::ReloadCall::Inspect;
                                let patience = Duration::from_secs(FORWARD_TIMEOUT_SECS);
                                if let Ok(keys) = reloads::call_node(&world, node, call, patience).await {
                                    let keys = serde_json::from_value(keys).unwrap_or_default();
                                    world.record(Record::EnginesHold { op, node: node.clone(), keys });
                                }
                            }
                        }
                    }
                    Err(why) => world.record(Record::ReloadRefused { op, why }),
                }
            }
        }
    });
    for (at, index, fault) in world.options.faults.clone() {
        world.clock.sleep_until(origin + at).await;
        let (name, id) = (world.options.nodes[index].0.clone(), ids[index]);
        match fault {
            Fault::Pause(length) => {
                world.fault(&name, FaultKind::PausedPastLease, format!("{}s", length.as_secs()));
                handle.pause(id);
                world.clock.sleep(length).await;
                handle.resume(id);
            }
            Fault::PauseWithReply(length) => {
                // Wait (within a bound) until the node has a model call in flight.
                let give_up = world.clock.monotonic() + Duration::from_secs(REPLY_WAIT_SECS_MAX);
                while world.calls_in_flight(&name) == 0 && world.clock.monotonic() < give_up {
                    world.clock.sleep(Duration::from_millis(100)).await;
                }
                if world.calls_in_flight(&name) > 0 {
                    world.fault(&name, FaultKind::PausedWithReply, format!("{}s", length.as_secs()));
                    handle.pause(id);
                    world.clock.sleep(length).await;
                    handle.resume(id);
                }
            }
            Fault::FreezeInTransaction(length) => {
                let freezes = &world.freezes;
                freezes.request(&name);
                let frozen = tokio::select! {
                    biased;
                    () = freezes.holding(&name) => true,
                    () = world.clock.sleep(Duration::from_secs(REPLY_WAIT_SECS_MAX)) => !freezes.withdraw(&name),
                };
                if frozen {
                    world.fault(&name, FaultKind::FrozenInTransaction, format!("{}s", length.as_secs()));
                    world.hold_frozen(&handle, id, &name, length).await;
                }
            }
            Fault::Cut(length) => {
                world.fault(&name, FaultKind::CutFromStore, format!("{}s", length.as_secs()));
                world.partitioned.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(name.clone());
                world.clock.sleep(length).await;
                world.partitioned.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&name);
            }
            Fault::Kill(down) => {
                world.fault(&name, FaultKind::Killed, format!("down {}s", down.as_secs()));
                world.freezes.end_with_process(&world, &name);
                handle.kill(id);
                world.clock.sleep(down).await;
                world.fault(&name, FaultKind::Restarted, String::new());
                handle.restart(id);
            }
            Fault::Leave(away) => {
                world.fault(&name, FaultKind::Left, format!("away {}s", away.as_secs()));
                if let Some(leave) = world.leave.get(&name) {
                    leave.notify_one();
                }
                world.clock.sleep(away).await;
                world.fault(&name, FaultKind::Joined, String::new());
                world.freezes.end_with_process(&world, &name);
                handle.restart(id);
            }
        }
    }
    world.clock.sleep_until(origin + world.options.safety).await;
    // Heal: every node up and linked (a late joiner whose time never came starts now).
    world.partitioned.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
    for id in &ids {
        handle.resume(*id);
    }
    world.healed.store(true, Ordering::SeqCst);
    world.record(Record::Healed);
    world.clock.sleep(world.options.liveness).await;
    operator.abort();
    frozen_at_pause_end.abort();
    reloader.abort();
    for id in ids {
        handle.kill(id);
    }
    let entries = std::mem::take(&mut *world.records.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    let fired = world.fired.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    (entries, fired)
}

/// One life of a node: seed the config, join the cluster, run until killed or told to leave.
async fn node_life(world: Arc<ClusterWorld>, name: String) {
    // A leave told to a node that was not running (one that had not joined yet) was for no
    // life: it must not end this one as soon as it starts (seed 31200009583: the node then
    // stayed down for the rest of the seed).
    if let Some(leave) = world.leave.get(&name) {
        let stale = leave.notified();
        tokio::pin!(stale);
        stale.as_mut().enable();
    }
    let link = Link { world: Arc::clone(&world), node: name.clone() };
    let Some(clock) = world.node_clocks.get(&name).cloned() else { return };
    let store: Arc<dyn Store> = Arc::new(NodeStore { link: link.clone(), inner: world.store.clone(), lease: None });
    let messenger = recording_messenger(&link, Arc::clone(&clock) as Arc<dyn Clock>);
    let ports = Ports {
        clock,
        llm: Arc::new(SlowModel { world: Arc::clone(&world), node: name.clone(), replies: AtomicU64::new(0) }),
        messenger,
        store: Arc::clone(&store),
        events: Arc::new(RunSink { link: link.clone() }),
        workspace: Arc::new(MemoryWorkspace::default()),
        tools: Arc::new(systole::ports::tools::NoToolServers),
        telemetry: Arc::new(systole::ports::telemetry::NoTelemetry),
    };
    // Seeding the file retries until the link is up, as a daemon's supervisor restarts it:
    // each start reads the file again (seed 27: a node that kept the file it read before a
    // reload seeded the old heartbeats over the new once its link came back).
    let file = loop {
        let file = world.config();
        if store.seed_config(&file, ports.clock.wall()).await.is_ok() {
            break file;
        }
        world.clock.sleep(Duration::from_secs(1)).await;
    };
    let clock = Arc::clone(&ports.clock);
    let mut options = EngineOptions {
        error_backoff: ERROR_BACKOFF_SECS.into_iter().map(Duration::from_secs).collect(),
        breaker_cooldown: vec![Duration::from_secs(BREAKER_COOLDOWN_SECS)],
        run_retention: world.options.run_retention,
        ..EngineOptions::default()
    };
    options.agent_default.allowed_targets = BTreeSet::from(["sim:inbox".to_owned()]);
    // An address to route by; the operator's calls reach the owner through `routes`.
    let api_url = Some(format!("sim://{name}"));
    let settings = ClusterSettings { node: name.clone(), lease: world.options.lease, api_url };
    let leases = Arc::new(NodeLeases { link, inner: Arc::clone(&world.store) });
    let handle = cluster::start(settings, leases, ports, options);
    let route = ClusterRoute::new(&handle);
    world.routes.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(name.clone(), route.clone());
    let reload = NodeReload { route, store, clock };
    let server = reloads::ReloadServer::serve(Arc::clone(&world), reload, file);
    world.reload_servers.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(name.clone(), server);
    if let Some(leave) = world.leave.get(&name) {
        leave.notified().await;
        handle.shutdown(Duration::from_secs(5)).await;
    }
    std::future::pending::<()>().await;
}
