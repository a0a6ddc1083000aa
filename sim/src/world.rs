//! What every part of one simulated run shares: the clock, the fault injector, the
//! durable store state, the trace, and the crash signal the supervisor waits on.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use rand_chacha::ChaCha8Rng;
use tokio::sync::Notify;

use systole::adapters::memory_workspace::MemoryWorkspace;
use systole::adapters::virtual_clock::VirtualClock;
use systole::ports::clock::Clock;
use systole::store::memory::MemoryStore;

use crate::faults::{FaultKind, Injector};
use crate::options::SimOptions;
use crate::trace::{Event, Recorder};

pub struct World {
    pub options: SimOptions,
    pub clock: Arc<VirtualClock>,
    pub injector: Arc<Injector>,
    /// The store's durable state: every applied write is durable at once (SQLite in WAL
    /// with `synchronous = FULL`); a crash loses only what was not yet applied.
    pub durable: Arc<MemoryStore>,
    pub recorder: Recorder,
    /// Raised by a dying incarnation; the supervisor kills and later restarts the node.
    pub crashed: Notify,
    pub lives: AtomicU32,
    pub llm_rng: Mutex<ChaCha8Rng>,
    /// Whether a reply is full of mentions and markup, and which: a stream of its own,
    /// so the other draws of a seed stay what they were before it existed.
    pub ping_rng: Mutex<ChaCha8Rng>,
    /// The simulated tool server (another process: it outlives the engine's crashes).
    pub tools: Mutex<crate::ports::tools::ToolWorld>,
    /// The model's draws of tool calls.
    pub tool_use_rng: Mutex<ChaCha8Rng>,
    /// The provider's refusals during the run (issue 27).
    pub refusal_rng: Mutex<ChaCha8Rng>,
    /// The run log's failed reads during the run.
    pub log_read_rng: Mutex<ChaCha8Rng>,
    /// The agents' workspaces: files survive crashes, like a disk.
    pub workspace: Arc<MemoryWorkspace>,
    /// Calls failed so far per flaky prompt (see `FLAKY_MARKER`), across lives.
    pub flaky_calls: Mutex<std::collections::BTreeMap<String, u32>>,
    /// The planted store faults that have not fired yet.
    pub planted_store_faults: Mutex<Vec<crate::one_shot_triggers::PlantedStoreFault>>,
    /// The config file's heartbeats now: the options' at first, a reload's after it (a
    /// restart seeds what the file says, like the daemon).
    pub config: Mutex<Vec<systole::core::heartbeat::HeartbeatDef>>,
    /// How often each rare path the engine must get right was taken (`--stats`).
    pub paths: Mutex<std::collections::BTreeMap<RarePath, u64>>,
}

/// Paths that a bug could hide in and that a workload takes only if it sets out to: each
/// is counted when taken, so `--stats` shows they are common, not left to regression seeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RarePath {
    /// One group commit carried several results of one heartbeat (their order matters).
    BatchWithRunsOfOneHeartbeat,
    /// The node restarted while a breaker's cooldown ran.
    CooldownAcrossRestart,
    /// The wall clock jumped while a breaker's cooldown ran.
    CooldownAcrossClockJump,
    /// The node restarted while a breaker was half-open (its probe not yet passed).
    ProbeAcrossRestart,
    /// A backfill was accepted for a heartbeat with an armed slot of its own.
    BackfillBesideArmedSlot,
    /// A grid slot started after a later trigger of its heartbeat: both waited for places.
    TriggerAheadOfWaitingSlot,
    /// One read answered the duplicate checks of several runs, some delivered, some not.
    SharedDuplicateCheck,
    /// A start-up's load failed after the engine had armed some of its pages.
    LoadFailedMidway,
    /// One pass won several slots of one heartbeat (`allow-all`): each run needs the
    /// definition.
    ClaimsOfOneHeartbeatInAPass,
    /// A reload made a recurring job, armed for a slot, a one-shot due before that slot.
    OneShotBelowArmedSlot,
    /// An operator enabled a one-shot, enabled already, whose slot waited behind a run.
    EnableOfHeldOneShot,
    /// An operator triggered a one-shot while a run of it at or after its instant went.
    TriggerBesideOneShotRun,
    /// An operator enabled a one-shot whose last run failed, with a skip logged above it.
    EnableOverSkippedFailure,
    /// A planted fault failed the claim of an operator's trigger of a one-shot.
    TriggerClaimFailed,
    /// A planted fault failed the write that retired a one-shot.
    RetirementUnwritten,
    /// The process was killed while a one-shot's only rows at or after its instant were an
    /// operator's triggers (ADR 0049).
    KillWithOnlyTriggersOfOneShot,
    /// An operator disabled a one-shot whose jittered own run was due and held behind an
    /// operator's trigger of it (ADR 0050).
    DisableOfOwnSlotHeldBehindTrigger,
    /// An operator enabled a one-shot, enabled already, while an operator's trigger of it
    /// was held behind a run, before its jittered own run was due (seed 1927871794526).
    EnableOverHeldTrigger,
    /// A claim of the schedule's met an operator's trigger's row of the same millisecond.
    ClaimMetTriggerRow,
    /// A planted fault failed the write of a skip of a one-shot's own slot.
    OwnSkipUnwritten,
    /// An operator enabled a one-shot the engine had retired while the run log held nothing
    /// of its own at or after its instant: the enable runs it.
    EnableOfRetiredOneShotUnrun,
    /// A planted fault failed the write of a one-shot's own run's result: its row stays
    /// `running`.
    OwnResultUnwritten,
    /// An operator enabled a one-shot whose instant an operator's trigger's row holds, with
    /// nothing of its own logged yet: its own slot waits on the next free millisecond.
    EnableOfOneShotOffTrigger,
    /// The same, with a later operator's trigger of it logged: the trigger that holds the
    /// instant is no longer the latest.
    EnableOfOneShotOffEarlierTrigger,
    /// The process was killed during a one-shot's retry whose failed own run lies below an
    /// operator's successful trigger of it (seed 1927871652031).
    KillDuringRetryBelowTriggerSuccess,
    /// A planted fault failed the first read of a one-shot's run log after an operator's
    /// enable of it was asked: the read that enable's re-arm makes, when it makes one (ADR
    /// 0052, amended in stop 83: the armed own slot stands).
    LogUnreadAtEnable,
    /// A duplicate check answered by the store's index of recent deliveries, not a read.
    CheckFromIndex,
    /// A fill of the store's index of recent deliveries failed by injection: it stayed
    /// cold and the checks were read.
    IndexFillFailed,
    /// The store's index of recent deliveries forgot (a prune) while a duplicate check
    /// filled or read it.
    IndexForgotDuringCheck,
    /// The index forgot while a write of results went: the write's deliveries cannot be
    /// vouched for, and it forgets again.
    IndexForgotDuringWrite,
}

impl RarePath {
    pub const ALL: [RarePath; 30] = [
        RarePath::BatchWithRunsOfOneHeartbeat,
        RarePath::CooldownAcrossRestart,
        RarePath::CooldownAcrossClockJump,
        RarePath::ProbeAcrossRestart,
        RarePath::BackfillBesideArmedSlot,
        RarePath::TriggerAheadOfWaitingSlot,
        RarePath::SharedDuplicateCheck,
        RarePath::LoadFailedMidway,
        RarePath::ClaimsOfOneHeartbeatInAPass,
        RarePath::OneShotBelowArmedSlot,
        RarePath::EnableOfHeldOneShot,
        RarePath::TriggerBesideOneShotRun,
        RarePath::EnableOverSkippedFailure,
        RarePath::TriggerClaimFailed,
        RarePath::RetirementUnwritten,
        RarePath::KillWithOnlyTriggersOfOneShot,
        RarePath::DisableOfOwnSlotHeldBehindTrigger,
        RarePath::EnableOverHeldTrigger,
        RarePath::ClaimMetTriggerRow,
        RarePath::OwnSkipUnwritten,
        RarePath::EnableOfRetiredOneShotUnrun,
        RarePath::OwnResultUnwritten,
        RarePath::EnableOfOneShotOffTrigger,
        RarePath::EnableOfOneShotOffEarlierTrigger,
        RarePath::KillDuringRetryBelowTriggerSuccess,
        RarePath::LogUnreadAtEnable,
        RarePath::CheckFromIndex,
        RarePath::IndexFillFailed,
        RarePath::IndexForgotDuringCheck,
        RarePath::IndexForgotDuringWrite,
    ];

    pub fn name(self) -> &'static str {
        match self {
            RarePath::BatchWithRunsOfOneHeartbeat => "batch-runs-of-one-heartbeat",
            RarePath::CooldownAcrossRestart => "cooldown-across-restart",
            RarePath::CooldownAcrossClockJump => "cooldown-across-clock-jump",
            RarePath::ProbeAcrossRestart => "probe-across-restart",
            RarePath::BackfillBesideArmedSlot => "backfill-beside-armed-slot",
            RarePath::TriggerAheadOfWaitingSlot => "trigger-ahead-of-waiting-slot",
            RarePath::SharedDuplicateCheck => "duplicate-check-read-shared",
            RarePath::LoadFailedMidway => "load-failed-midway",
            RarePath::ClaimsOfOneHeartbeatInAPass => "claims-of-one-heartbeat-in-a-pass",
            RarePath::OneShotBelowArmedSlot => "one-shot-below-armed-slot",
            RarePath::EnableOfHeldOneShot => "enable-of-held-one-shot",
            RarePath::TriggerBesideOneShotRun => "trigger-beside-one-shot-run",
            RarePath::EnableOverSkippedFailure => "enable-over-skipped-failure",
            RarePath::TriggerClaimFailed => "trigger-claim-failed",
            RarePath::RetirementUnwritten => "retirement-unwritten",
            RarePath::KillWithOnlyTriggersOfOneShot => "kill-with-only-triggers-of-one-shot",
            RarePath::DisableOfOwnSlotHeldBehindTrigger => "disable-of-own-slot-held-behind-trigger",
            RarePath::EnableOverHeldTrigger => "enable-over-held-trigger",
            RarePath::ClaimMetTriggerRow => "claim-met-trigger-row",
            RarePath::OwnSkipUnwritten => "own-skip-unwritten",
            RarePath::EnableOfRetiredOneShotUnrun => "enable-of-retired-one-shot-unrun",
            RarePath::OwnResultUnwritten => "own-result-unwritten",
            RarePath::EnableOfOneShotOffTrigger => "enable-of-one-shot-off-trigger",
            RarePath::EnableOfOneShotOffEarlierTrigger => "enable-of-one-shot-off-earlier-trigger",
            RarePath::KillDuringRetryBelowTriggerSuccess => "kill-during-retry-below-trigger-success",
            RarePath::LogUnreadAtEnable => "log-unread-at-enable",
            RarePath::CheckFromIndex => "duplicate-check-from-index",
            RarePath::IndexFillFailed => "dedup-index-fill-failed",
            RarePath::IndexForgotDuringCheck => "dedup-index-forgot-during-check",
            RarePath::IndexForgotDuringWrite => "dedup-index-forgot-during-write",
        }
    }
}

impl World {
    pub fn record(&self, event: Event) {
        // One reading for both (each is a lookup of the runtime's clock).
        let now = self.clock.now();
        self.recorder.push(now.mono.since_origin(), now.wall, event);
    }

    pub fn took(&self, path: RarePath) {
        *self.paths.lock().unwrap_or_else(std::sync::PoisonError::into_inner).entry(path).or_default() += 1;
    }

    /// Whether a breaker's cooldown is running now, as the durable store holds it.
    pub fn cooldown_running(&self) -> bool {
        self.durable.any_heartbeat(|state| !state.enabled && state.breaker_opened_at.is_some())
    }

    /// Whether a breaker is half-open: enabled again at its failure limit, its probe to come.
    pub fn probe_pending(&self) -> bool {
        let limit = self.options.breaker_failures_max;
        self.durable.any_heartbeat(|state| state.enabled && state.consecutive_failures >= limit)
    }

    pub fn fault(&self, kind: FaultKind, detail: impl Into<String>) {
        self.record(Event::Fault { kind, detail: detail.into() });
    }

    /// Whether the provider refuses this call (counted as the fault when it does), with
    /// the status it answers, from [`World::refusal_rng`].
    pub fn refusal(&self) -> Option<u16> {
        use rand::Rng;
        let rate = self.options.fault_rates.per_call.get(&FaultKind::LlmRefused).copied().unwrap_or(0.0);
        if rate <= 0.0 || !self.injector.is_active() {
            return None;
        }
        let mut rng = self.refusal_rng.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !rng.random_bool(rate) {
            return None;
        }
        let status = [401, 402, 403][rng.random_range(0..3)];
        drop(rng);
        self.injector.count(FaultKind::LlmRefused);
        Some(status)
    }

    /// Whether this read of the run log fails (counted as the fault when it does), from
    /// [`World::log_read_rng`].
    pub fn log_read_fails(&self) -> bool {
        use rand::Rng;
        let rate = self.options.fault_rates.per_call.get(&FaultKind::StoreLogReadError).copied().unwrap_or(0.0);
        if rate <= 0.0 || !self.injector.is_active() {
            return false;
        }
        let fails = self.log_read_rng.lock().unwrap_or_else(std::sync::PoisonError::into_inner).random_bool(rate);
        if fails {
            self.injector.count(FaultKind::StoreLogReadError);
        }
        fails
    }

    /// Whether this reply is a ping reply (counted as the fault when it is), and a draw
    /// in `0..variants` for its shape, from [`World::ping_rng`].
    pub fn ping_reply(&self, variants: u64) -> Option<u64> {
        use rand::Rng;
        let rate = self.options.fault_rates.per_call.get(&FaultKind::LlmPingReply).copied().unwrap_or(0.0);
        if rate <= 0.0 || !self.injector.is_active() {
            return None;
        }
        let mut rng = self.ping_rng.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !rng.random_bool(rate) {
            return None;
        }
        let variant = rng.random_range(0..variants);
        drop(rng);
        self.injector.count(FaultKind::LlmPingReply);
        Some(variant)
    }
}

/// One incarnation of the engine process. Once it dies, every port call it makes waits
/// forever (the node is killed right after, so nothing it does reaches the world).
pub struct Life {
    pub number: u32,
    alive: AtomicBool,
}

impl Life {
    pub fn new(number: u32) -> Arc<Self> {
        Arc::new(Self { number, alive: AtomicBool::new(true) })
    }

    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    /// Returns at once while alive; never returns once dead.
    pub async fn ensure_alive(&self) {
        if !self.alive.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
    }

    /// Dies: tells the supervisor and never returns.
    pub async fn crash(&self, world: &World) -> ! {
        if self.alive.swap(false, Ordering::SeqCst) {
            world.record(Event::Crash { life: self.number });
            world.crashed.notify_one();
        }
        let never: std::convert::Infallible = std::future::pending().await;
        match never {}
    }
}
