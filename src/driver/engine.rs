//! The driver loop: one task that owns the schedule, sleeps until the earliest due slot,
//! decides what each due slot does, and dispatches runs concurrently (bounded).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio::task::JoinHandle;

use crate::core::guard::{self, GuardInput};
use jiff::Timestamp;

use crate::core::heartbeat::{Heartbeat, HeartbeatDef};
use crate::core::ids::{AgentId, HeartbeatKey};
use crate::core::pause::{Pause, PauseRecord};
use crate::core::schedule::Schedule;
use crate::core::slots::SlotTimer;
use crate::driver::events::EngineEvent;
use crate::driver::run::{run_claimed, FinishedRun, RunContext};
use crate::limits::DUE_PER_WAKE_MAX;
use crate::ports::clock::{Mono, Now};
use crate::ports::store::{ClaimOutcome, SkipRecord, SlotClaim};

/// What the handle asks of the driver. Store writes happen before a command is sent, so
/// the driver only re-arms its in-memory schedule, then answers on `applied`: once the
/// handle hears back, no slot can fire under the old definition.
pub(crate) enum Command {
    Change { change: Change, applied: oneshot::Sender<()> },
    Shutdown { grace: Duration, done: oneshot::Sender<usize> },
}

pub(crate) enum Change {
    Upsert(HeartbeatDef),
    Delete(HeartbeatKey),
    SetEnabled(HeartbeatKey, bool),
    Pause(AgentId, Pause),
}

/// The driver's view of one heartbeat.
struct Entry {
    def: HeartbeatDef,
    enabled: bool,
    in_flight: bool,
    /// The next slot it had when it lost its timer (disabled): the floor of its next timer.
    next_slot_floor: Option<Timestamp>,
}

pub(crate) struct Driver {
    context: RunContext,
    schedule: Schedule,
    entries: BTreeMap<HeartbeatKey, Entry>,
    /// Agents whose timed heartbeats are paused, until each pause ends.
    pauses: BTreeMap<AgentId, Pause>,
    runs: BTreeMap<HeartbeatKey, JoinHandle<()>>,
    permits: Arc<Semaphore>,
    commands: mpsc::Receiver<Command>,
    completions_tx: mpsc::UnboundedSender<FinishedRun>,
    completions: mpsc::UnboundedReceiver<FinishedRun>,
}

impl Driver {
    pub(crate) fn new(context: RunContext, runs_in_flight_max: usize, commands: mpsc::Receiver<Command>) -> Self {
        let (completions_tx, completions) = mpsc::unbounded_channel();
        Self {
            context,
            schedule: Schedule::new(),
            entries: BTreeMap::new(),
            pauses: BTreeMap::new(),
            runs: BTreeMap::new(),
            permits: Arc::new(Semaphore::new(runs_in_flight_max.max(1))),
            commands,
            completions_tx,
            completions,
        }
    }

    /// Arms every enabled heartbeat loaded from the store. Those that never had a slot
    /// wait one full interval; the others resume at their stored slot.
    pub(crate) async fn load(&mut self, heartbeats: Vec<Heartbeat>, pauses: Vec<(AgentId, PauseRecord)>) {
        let now = self.context.clock.now();
        for (agent, record) in pauses {
            let pause = Pause::resume(now, record, self.context.settings(&agent).pause_minutes_max);
            if pause.holds(now) {
                self.pauses.insert(agent, pause);
            } else if let Err(error) = self.context.store.clear_pause(&agent).await {
                // Over now; left in the store, a later backward jump and restart could revive it.
                let consequence = "a later restart may resume the pause for what is left of it by the wall clock";
                self.store_failed("clear_pause", error.to_string(), consequence);
            }
        }
        let mut first_slots = Vec::new();
        for heartbeat in heartbeats {
            let key = heartbeat.def.key.clone();
            if heartbeat.state.enabled {
                let timer = match heartbeat.state.next_slot {
                    Some(next_slot) => SlotTimer::resume(now, heartbeat.def.interval, next_slot),
                    None => {
                        let timer = SlotTimer::first(now, heartbeat.def.interval);
                        first_slots.push((key.clone(), timer.next_slot));
                        timer
                    }
                };
                self.arm(key.clone(), timer);
            }
            let entry = Entry {
                def: heartbeat.def,
                enabled: heartbeat.state.enabled,
                in_flight: false,
                next_slot_floor: heartbeat.state.next_slot,
            };
            self.entries.insert(key, entry);
        }
        if let Err(error) = self.context.store.set_next_slots(&first_slots).await {
            self.store_failed("set_next_slots", error.to_string(), "next_run_at stays unknown until the first run");
        }
    }

    /// The loop. Returns when shut down (or when every handle is gone), after in-flight
    /// runs finished or the grace period ran out.
    pub(crate) async fn run(mut self) {
        loop {
            self.end_pauses(self.context.clock.now()).await;
            self.fire_due(self.context.clock.now()).await;
            let wake = self.next_wake(self.context.clock.now());
            let clock = Arc::clone(&self.context.clock);
            tokio::select! {
                biased;
                Some(record) = self.completions.recv() => self.complete(record),
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
                    None => {
                        self.drain(Duration::ZERO).await;
                        return;
                    }
                },
                () = clock.sleep_until(wake) => {}
            }
        }
    }

    async fn fire_due(&mut self, now: Now) {
        let fired = self.schedule.pop_due(now, DUE_PER_WAKE_MAX);
        if fired.is_empty() {
            return;
        }
        let mut claims = Vec::new();
        let mut skips = Vec::new();
        for (key, fired_slot) in fired {
            let (Some(entry), Some(timer)) = (self.entries.get(&key), self.schedule.timer(&key)) else { continue };
            let next_slot = timer.next_slot;
            if fired_slot.missed > 0 {
                let event =
                    EngineEvent::SlotsMissed { key: key.clone(), slot: fired_slot.slot, missed: fired_slot.missed };
                self.context.events.emit(now.wall, &event);
            }
            let paused = self.pauses.get(&key.agent).is_some_and(|pause| pause.holds(now));
            let input = GuardInput {
                enabled: entry.enabled,
                paused,
                active_hours: entry.def.active_hours.as_ref(),
                run_in_flight: entry.in_flight,
                wall_now: now.wall,
            };
            match guard::check(input) {
                Ok(()) => claims.push(SlotClaim { key, slot: fired_slot.slot, claimed_at: now.wall, next_slot }),
                Err(reason) => {
                    self.context
                        .events
                        .emit(now.wall, &EngineEvent::Skipped { key: key.clone(), slot: fired_slot.slot, reason });
                    skips.push(SkipRecord { key, slot: fired_slot.slot, at: now.wall, reason, next_slot });
                }
            }
        }
        if !skips.is_empty() {
            if let Err(error) = self.context.store.record_skips(&skips).await {
                self.store_failed("record_skips", error.to_string(), "the skips are only in the log");
            }
        }
        if claims.is_empty() {
            return;
        }
        let outcomes = match self.context.store.claim_slots(&claims).await {
            Ok(outcomes) => outcomes,
            Err(error) => {
                self.store_failed("claim_slots", error.to_string(), "the slots are not run: a run needs a claim");
                return;
            }
        };
        for (claim, outcome) in claims.into_iter().zip(outcomes) {
            match outcome {
                ClaimOutcome::Claimed => self.start_run(claim, now),
                ClaimOutcome::AlreadyClaimed => {
                    self.context
                        .events
                        .emit(now.wall, &EngineEvent::ClaimLost { key: claim.key.clone(), slot: claim.slot });
                    self.lift_past_claims(&claim.key).await;
                }
            }
        }
    }

    fn start_run(&mut self, claim: SlotClaim, now: Now) {
        let Some(entry) = self.entries.get_mut(&claim.key) else { return };
        entry.in_flight = true;
        let def = entry.def.clone();
        let context = self.context.clone();
        let permits = Arc::clone(&self.permits);
        let completions = self.completions_tx.clone();
        let slot = claim.slot;
        self.context.events.emit(now.wall, &EngineEvent::RunStarted { key: claim.key.clone(), slot });
        let task = tokio::spawn(async move {
            // The semaphore is never closed, so acquiring only fails if it were; then run anyway.
            let _permit = permits.acquire_owned().await.ok();
            let finished = run_claimed(context, def, slot).await;
            let _ = completions.send(finished);
        });
        self.runs.insert(claim.key, task);
    }

    fn complete(&mut self, finished: FinishedRun) {
        let FinishedRun { record, breaker } = finished;
        self.runs.remove(&record.key);
        let at = self.context.clock.wall();
        self.context.events.emit(
            at,
            &EngineEvent::RunFinished {
                key: record.key.clone(),
                slot: record.slot,
                status: record.status,
                delivery: record.delivery,
                duration: record.duration,
                error: record.error.clone(),
                recorded: breaker.is_some(),
            },
        );
        let Some(entry) = self.entries.get_mut(&record.key) else { return };
        entry.in_flight = false;
        if let Some(step) = breaker.filter(|step| step.tripped) {
            entry.enabled = false;
            self.disarm(&record.key);
            let event =
                EngineEvent::BreakerTripped { key: record.key, consecutive_failures: step.consecutive_failures };
            self.context.events.emit(at, &event);
        }
    }

    async fn apply(&mut self, change: Change) {
        let now = self.context.clock.now();
        match change {
            Change::Upsert(def) => {
                let key = def.key.clone();
                let in_flight = self.entries.get(&key).is_some_and(|entry| entry.in_flight);
                let timer = SlotTimer::rearm(now, def.interval, self.slot_floor(&key));
                self.arm(key.clone(), timer);
                self.entries.insert(key.clone(), Entry { def, enabled: true, in_flight, next_slot_floor: None });
                self.store_next_slot(key, timer.next_slot).await;
            }
            Change::Delete(key) => {
                self.entries.remove(&key);
                self.disarm(&key);
            }
            Change::Pause(agent, pause) => {
                let event = EngineEvent::Paused {
                    agent: agent.clone(),
                    minutes: pause.record.minutes,
                    until: pause.record.until,
                };
                self.pauses.insert(agent, pause);
                self.context.events.emit(now.wall, &event);
            }
            Change::SetEnabled(key, enabled) => {
                let Some(entry) = self.entries.get_mut(&key) else { return };
                entry.enabled = enabled;
                if enabled {
                    let interval = entry.def.interval;
                    let timer = SlotTimer::rearm(now, interval, self.slot_floor(&key));
                    self.arm(key.clone(), timer);
                    self.store_next_slot(key, timer.next_slot).await;
                } else {
                    self.disarm(&key);
                }
            }
        }
    }

    /// Drops pauses that have ended, from memory and from the store, saying so.
    async fn end_pauses(&mut self, now: Now) {
        let ended: Vec<AgentId> =
            self.pauses.iter().filter(|(_, pause)| !pause.holds(now)).map(|(agent, _)| agent.clone()).collect();
        for agent in ended {
            self.pauses.remove(&agent);
            if let Err(error) = self.context.store.clear_pause(&agent).await {
                let consequence = "a restart may resume the pause for what is left of it by the wall clock";
                self.store_failed("clear_pause", error.to_string(), consequence);
            }
            self.context.events.emit(now.wall, &EngineEvent::Resumed { agent });
        }
    }

    /// The schedule's next wake-up, or the end of a pause if that comes first.
    fn next_wake(&self, now: Now) -> Mono {
        let pause_end = self.pauses.values().map(|pause| now.mono + pause.ends_within(now)).min();
        let wake = self.schedule.next_wake(now);
        pause_end.map_or(wake, |end| wake.min(end))
    }

    fn arm(&mut self, key: HeartbeatKey, timer: SlotTimer) {
        let event = EngineEvent::Armed { key: key.clone(), next_slot: timer.next_slot };
        self.schedule.arm(key, timer);
        self.context.events.emit(self.context.clock.wall(), &event);
    }

    /// After a lost claim, moves the heartbeat's timer past the latest slot the store has
    /// for it, so it does not walk through slots that were decided before (a heartbeat
    /// deleted and created again under the same id, say).
    async fn lift_past_claims(&mut self, key: &HeartbeatKey) {
        let latest = match self.context.store.executions(key, 1).await {
            Ok(latest) => latest,
            Err(error) => {
                self.store_failed("executions", error.to_string(), "the next slot may be found claimed too");
                return;
            }
        };
        if let (Some(execution), Some(timer)) = (latest.first(), self.schedule.timer(key).copied()) {
            let lifted = timer.lifted_above(execution.slot);
            if lifted != timer {
                self.arm(key.clone(), lifted);
                self.store_next_slot(key.clone(), lifted.next_slot).await;
            }
        }
    }

    /// The slot a heartbeat's next timer must not go below: its current timer's next slot,
    /// or the one it had when it was disarmed.
    fn slot_floor(&self, key: &HeartbeatKey) -> Option<Timestamp> {
        let armed = self.schedule.timer(key).map(|timer| timer.next_slot);
        armed.or_else(|| self.entries.get(key).and_then(|entry| entry.next_slot_floor))
    }

    /// Stores a re-armed heartbeat's next slot, so a restart resumes there.
    async fn store_next_slot(&mut self, key: HeartbeatKey, next_slot: Timestamp) {
        if let Err(error) = self.context.store.set_next_slots(&[(key, next_slot)]).await {
            self.store_failed("set_next_slots", error.to_string(), "a restart arms it from its previous slot");
        }
    }

    fn disarm(&mut self, key: &HeartbeatKey) {
        if let Some(timer) = self.schedule.disarm(key) {
            if let Some(entry) = self.entries.get_mut(key) {
                entry.next_slot_floor = Some(timer.next_slot);
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
                Some(record) = self.completions.recv() => self.complete(record),
                // A run's tool may be waiting on a change; apply it so the run can finish.
                Some(Command::Change { change, applied }) = self.commands.recv() => {
                    self.apply(change).await;
                    let _ = applied.send(());
                }
                () = clock.sleep_until(deadline) => break,
            }
        }
        let abandoned = self.runs.len();
        for (_, task) in std::mem::take(&mut self.runs) {
            task.abort();
        }
        abandoned
    }

    fn store_failed(&self, operation: &'static str, error: String, consequence: &'static str) {
        let event = EngineEvent::StoreFailed { operation, error, consequence };
        self.context.events.emit(self.context.clock.wall(), &event);
    }
}
