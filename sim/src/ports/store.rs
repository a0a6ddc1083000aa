//! The simulated store: the real memory store's semantics over the run's durable state,
//! with faults on every write (an error, a crash before it, a crash after it), on the
//! prompt reads of claimed slots and on reads of the run log, and duplicate checks that
//! take time to read.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use jiff::Timestamp;

use systole::core::breaker::BreakerStep;
use systole::core::budget::DaySpend;
use systole::core::heartbeat::{Heartbeat, HeartbeatDef};
use systole::core::ids::{AgentId, HeartbeatKey};
use systole::core::pause::PauseRecord;
use systole::core::retention::RunRetention;
use systole::core::system_events::SystemEvent;
use systole::ports::clock::Clock;
use systole::ports::store::{
    Armable, ClaimOutcome, DedupQuery, Definitions, Execution, ExecutionStatus, NextSlot, Queued, RunRecord,
    SeedReport, SkipRecord, SlotClaim, Store, StoreError,
};
use systole::store::delivered_index::DeliveredIndex;

use crate::faults::FaultKind;
use crate::one_shot_triggers::PlantedStoreFault;
use crate::trace::{DurableWrite, Event, LoggedRow};
use crate::world::{Life, RarePath, World};

/// A failed half-open write's fault names this operation; the breaker checker reads it.
pub const HALF_OPEN_WRITE: &str = "half_open_breaker";
/// A start-up's load that failed in a later page names this; the breaker checker reads it.
pub const ARMING_LOAD: &str = "load_for_arming_in_pages";

/// The fault detail of a definitions read that failed by injection (the trace then names
/// the heartbeats it asked for: the checker's `unreadable-justified` excuses their claimed
/// runs failing after it, and no others).
pub const DEFINITIONS_READ: &str = "definitions";

/// The fault detail of a fill of the index of recent deliveries that failed by injection.
pub const RECENT_DELIVERIES_READ: &str = "recent_deliveries";

/// The fault detail of a read of a heartbeat's run log that failed by injection (the
/// trace then names the heartbeat: the checker excuses what the engine says it may do
/// without the read).
pub const LOG_READ: &str = "executions";

pub struct SimStore {
    pub world: Arc<World>,
    pub life: Arc<Life>,
    /// The life's index of recent deliveries, as SQLite keeps one (ADR 0066): cold at each
    /// start, small, so that it fills, evicts and forgets in every workload.
    deliveries: DeliveredIndex,
    /// Held while a prune deletes runs, as SQLite's write lock is: a write of results waits
    /// for it, its index generation taken before (ADR 0066).
    pruning: tokio::sync::RwLock<()>,
}

/// Delivered replies the simulated store's index holds: few, so that it evicts and its
/// floor rises past what it evicted (the mutant that keeps the floor is caught in 29 % of
/// seeds); about a quarter of the checks are answered from it, the rest read.
pub const DEDUP_INDEX_ENTRIES_MAX: usize = 16;

impl SimStore {
    pub fn new(world: Arc<World>, life: Arc<Life>) -> Self {
        Self {
            world,
            life,
            deliveries: DeliveredIndex::new(DEDUP_INDEX_ENTRIES_MAX),
            pruning: tokio::sync::RwLock::new(()),
        }
    }

    async fn write<T>(
        &self,
        operation: &str,
        apply: impl Future<Output = Result<T, StoreError>>,
        durable: impl FnOnce(&T) -> Vec<DurableWrite>,
    ) -> Result<T, StoreError> {
        self.life.ensure_alive().await;
        let injector = &self.world.injector;
        if injector.roll(FaultKind::StoreError) {
            self.world.fault(FaultKind::StoreError, operation);
            return Err(StoreError::Backend(format!("injected store error in {operation}")));
        }
        if injector.roll(FaultKind::CrashBeforeWrite) {
            self.world.fault(FaultKind::CrashBeforeWrite, operation);
            self.life.crash(&self.world).await;
        }
        let result = apply.await;
        if let Ok(value) = &result {
            for write in durable(value) {
                self.world.record(Event::Durable { life: self.life.number, write });
            }
        }
        if injector.roll(FaultKind::CrashAfterWrite) {
            self.world.fault(FaultKind::CrashAfterWrite, operation);
            self.life.crash(&self.world).await;
        }
        result
    }

    /// Fires the first planted fault that `aims` at this write, once, while faults are on:
    /// the write fails as a store error would.
    fn planted_fault(&self, operation: &str, aims: impl Fn(&PlantedStoreFault) -> bool) -> Result<(), StoreError> {
        if !self.world.injector.is_active() {
            return Ok(());
        }
        let mut planted = self.world.planted_store_faults.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(index) = planted.iter().position(aims) else { return Ok(()) };
        let fault = planted.remove(index);
        drop(planted);
        self.world.took(match fault {
            PlantedStoreFault::TriggerClaim(_) => RarePath::TriggerClaimFailed,
            PlantedStoreFault::Retirement(_) => RarePath::RetirementUnwritten,
            PlantedStoreFault::OwnSkip(_) => RarePath::OwnSkipUnwritten,
            PlantedStoreFault::OwnResult(..) => RarePath::OwnResultUnwritten,
            PlantedStoreFault::LogRead(_) => RarePath::LogUnreadAtEnable,
        });
        self.world.injector.count(FaultKind::StoreError);
        self.world.fault(FaultKind::StoreError, format!("{operation} (planted: {fault:?})"));
        Err(StoreError::Backend(format!("injected store error in {operation}")))
    }

    /// Whether a planted fault fails this read of `key`'s run log (once, while faults are
    /// on), counted as the log read fault it stands for.
    fn planted_log_read_fails(&self, key: &HeartbeatKey) -> bool {
        if !self.world.injector.is_active() {
            return false;
        }
        let mut planted = self.world.planted_store_faults.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(index) = planted.iter().position(|fault| *fault == PlantedStoreFault::LogRead(key.clone())) else {
            return false;
        };
        planted.remove(index);
        drop(planted);
        self.world.took(RarePath::LogUnreadAtEnable);
        self.world.injector.count(FaultKind::StoreLogReadError);
        true
    }

    async fn read<T>(&self, apply: impl Future<Output = Result<T, StoreError>>) -> Result<T, StoreError> {
        self.life.ensure_alive().await;
        apply.await
    }
}

/// Heartbeats a page of a start-up's load holds: a workload's few span several pages.
const LOAD_PAGE_ROWS: usize = 3;

/// How long a duplicate check's read takes while faults are on: long, so that the checks
/// of runs finishing together overlap and share reads.
const DEDUP_READ_MILLIS: u64 = 2_000;

/// How long a prune's delete takes while faults are on.
const PRUNE_MILLIS: u64 = 2_000;

fn none<T>(_: &T) -> Vec<DurableWrite> {
    Vec::new()
}

#[async_trait]
impl Store for SimStore {
    async fn load_heartbeats(&self) -> Result<Vec<Heartbeat>, StoreError> {
        self.read(self.world.durable.load_heartbeats()).await
    }

    async fn heartbeats(&self, keys: &[HeartbeatKey]) -> Result<Vec<Heartbeat>, StoreError> {
        self.read(self.world.durable.heartbeats(keys)).await
    }

    async fn load_for_arming_in_pages(&self, arm: &mut (dyn FnMut(Vec<Armable>) + Send)) -> Result<(), StoreError> {
        let mut all = Vec::new();
        self.read(self.world.durable.load_for_arming_in_pages(&mut |page| all.extend(page))).await?;
        let mut heartbeats = all.into_iter().peekable();
        // Pages of a few, so a start-up arms across pages as a SQL store's million are; the
        // read of a later page may fail, after the engine armed the earlier ones.
        let mut first = true;
        while heartbeats.peek().is_some() {
            if !first && self.world.injector.roll(FaultKind::StoreReadError) {
                self.world.fault(FaultKind::StoreReadError, ARMING_LOAD);
                self.world.took(RarePath::LoadFailedMidway);
                return Err(StoreError::Backend("injected store error in a page of the load".to_owned()));
            }
            first = false;
            arm(heartbeats.by_ref().take(LOAD_PAGE_ROWS).collect());
        }
        Ok(())
    }

    async fn seed_config(&self, defs: &[HeartbeatDef], at: Timestamp) -> Result<SeedReport, StoreError> {
        // What seeding changed, as the writes the checker follows (a reload changes the config).
        let writes = |report: &SeedReport| {
            let put =
                report.inserted.iter().chain(&report.updated).filter_map(|key| defs.iter().find(|def| def.key == *key));
            let puts = put.map(|def| DurableWrite::Put { def: Box::new(def.clone()), at });
            puts.chain(report.removed.iter().map(|key| DurableWrite::Delete { key: key.clone() })).collect()
        };
        self.write("seed_config", self.world.durable.seed_config(defs, at), writes).await
    }

    async fn put_heartbeat(&self, def: &HeartbeatDef, at: Timestamp) -> Result<(), StoreError> {
        let write = DurableWrite::Put { def: Box::new(def.clone()), at };
        self.write("put_heartbeat", self.world.durable.put_heartbeat(def, at), |_| vec![write]).await
    }

    async fn delete_heartbeat(&self, key: &HeartbeatKey) -> Result<bool, StoreError> {
        self.life.ensure_alive().await;
        self.planted_fault("delete_heartbeat", |fault| *fault == PlantedStoreFault::Retirement(key.clone()))?;
        let write = DurableWrite::Delete { key: key.clone() };
        let existed = |existed: &bool| if *existed { vec![write] } else { Vec::new() };
        self.write("delete_heartbeat", self.world.durable.delete_heartbeat(key), existed).await
    }

    async fn set_enabled(&self, key: &HeartbeatKey, enabled: bool, reason: Option<&str>) -> Result<bool, StoreError> {
        let write = DurableWrite::SetEnabled { key: key.clone(), enabled };
        let existed = |existed: &bool| if *existed { vec![write] } else { Vec::new() };
        self.write("set_enabled", self.world.durable.set_enabled(key, enabled, reason), existed).await
    }

    async fn disable_if_enabled(&self, key: &HeartbeatKey, reason: &str) -> Result<bool, StoreError> {
        self.life.ensure_alive().await;
        self.planted_fault("disable_if_enabled", |fault| *fault == PlantedStoreFault::Retirement(key.clone()))?;
        let write = DurableWrite::Retired { key: key.clone() };
        let changed = |changed: &bool| if *changed { vec![write] } else { Vec::new() };
        self.write("disable_if_enabled", self.world.durable.disable_if_enabled(key, reason), changed).await
    }

    async fn half_open_breaker(&self, key: &HeartbeatKey) -> Result<bool, StoreError> {
        let write = DurableWrite::HalfOpen { key: key.clone() };
        let opened = |opened: &bool| if *opened { vec![write] } else { Vec::new() };
        self.write(HALF_OPEN_WRITE, self.world.durable.half_open_breaker(key), opened).await
    }

    async fn set_next_slots(&self, slots: &[(HeartbeatKey, NextSlot)]) -> Result<(), StoreError> {
        self.write("set_next_slots", self.world.durable.set_next_slots(slots), none).await
    }

    async fn claim_slots(&self, claims: &[SlotClaim]) -> Result<Vec<ClaimOutcome>, StoreError> {
        self.life.ensure_alive().await;
        self.planted_fault("claim_slots", |fault| {
            let PlantedStoreFault::TriggerClaim(key) = fault else { return false };
            claims.iter().any(|claim| claim.triggered && claim.key == *key)
        })?;
        let durable = |outcomes: &Vec<ClaimOutcome>| {
            let met_trigger = |(claim, outcome): (&SlotClaim, &ClaimOutcome)| {
                !claim.triggered && *outcome == ClaimOutcome::AlreadyTriggered
            };
            if claims.iter().zip(outcomes).any(met_trigger) {
                self.world.took(RarePath::ClaimMetTriggerRow);
            }
            let claimed: Vec<&SlotClaim> = claims
                .iter()
                .zip(outcomes)
                .filter(|(_, outcome)| **outcome == ClaimOutcome::Claimed)
                .map(|(claim, _)| claim)
                .collect();
            let keys: BTreeSet<&HeartbeatKey> = claimed.iter().map(|claim| &claim.key).collect();
            if keys.len() < claimed.len() {
                self.world.took(RarePath::ClaimsOfOneHeartbeatInAPass);
            }
            let written = |claim: &&SlotClaim| DurableWrite::Claimed {
                key: claim.key.clone(),
                slot: claim.slot,
                triggered: claim.triggered,
            };
            claimed.iter().map(written).collect()
        };
        self.write("claim_slots", self.world.durable.claim_slots(claims), durable).await
    }

    async fn prune_runs(&self, now: Timestamp, retention: RunRetention) -> Result<u64, StoreError> {
        // The rows before and after, so the checker can judge what went by its own rule.
        let logged = |execution: &Execution| LoggedRow {
            key: execution.key.clone(),
            slot: execution.slot,
            skip: execution.status == ExecutionStatus::Skipped,
            triggered: execution.triggered,
            finished_at: execution.finished_at,
        };
        // Read in the same poll as the prune itself, so no other write falls in between.
        let before: std::sync::Mutex<Vec<LoggedRow>> = std::sync::Mutex::default();
        let prune = async {
            // A prune's delete takes time while faults are on: checks fill the index and
            // results wait meanwhile.
            if self.world.injector.is_active() {
                self.world.clock.sleep(Duration::from_millis(PRUNE_MILLIS)).await;
                self.life.ensure_alive().await;
            }
            let rows = self.world.durable.run_log_rows(logged);
            *before.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = rows;
            self.world.durable.prune_runs(now, retention).await
        };
        let durable = |_: &u64| {
            let before = std::mem::take(&mut *before.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
            // Both lists come in the log's order (by job, then slot) and `after` is a part
            // of `before`, so one walk over both finds what went.
            let after = self.world.durable.run_log_rows(|execution| (execution.key.clone(), execution.slot));
            let mut kept = after.iter().peekable();
            let mut pruned = Vec::new();
            for row in &before {
                let id = (row.key.clone(), row.slot);
                if kept.peek().is_some_and(|kept| **kept == id) {
                    kept.next();
                } else {
                    pruned.push(id);
                }
            }
            let RunRetention { kept_days, kept_per_heartbeat } = retention;
            vec![DurableWrite::Pruned { now, kept_days, kept_per_heartbeat, before, pruned }]
        };
        // As SQLite's: no check is answered from memory while runs go, nor after.
        let lock = self.pruning.write().await;
        self.deliveries.forget();
        let pruned = self.write("prune_runs", prune, durable).await;
        self.deliveries.forget();
        drop(lock);
        pruned
    }

    async fn record_skips(&self, skips: &[SkipRecord]) -> Result<(), StoreError> {
        self.life.ensure_alive().await;
        self.planted_fault("record_skips", |fault| {
            let PlantedStoreFault::OwnSkip(key) = fault else { return false };
            skips.iter().any(|skip| !skip.triggered && skip.key == *key)
        })?;
        self.write("record_skips", self.world.durable.record_skips(skips), none).await
    }

    async fn finish_runs(&self, runs: &[RunRecord], breaker_failures_max: u32) -> Result<Vec<BreakerStep>, StoreError> {
        self.life.ensure_alive().await;
        self.planted_fault("finish_runs", |fault| {
            let PlantedStoreFault::OwnResult(key, slot) = fault else { return false };
            runs.iter().any(|run| run.key == *key && run.slot == *slot)
        })?;
        // What the store really consumed, read around the write (not what the run asked
        // for): a store that consumed on failure must show in the trace.
        let durable = &self.world.durable;
        let pending = || -> BTreeSet<(AgentId, u64)> {
            runs.iter()
                .flat_map(|run| {
                    durable.pending_event_ids(&run.key.agent).into_iter().map(|id| (run.key.agent.clone(), id))
                })
                .collect()
        };
        let before = pending();
        let durable_writes = |steps: &Vec<BreakerStep>| {
            let keys: BTreeSet<&HeartbeatKey> = runs.iter().map(|run| &run.key).collect();
            if keys.len() < runs.len() {
                self.world.took(RarePath::BatchWithRunsOfOneHeartbeat);
            }
            let after = pending();
            runs.iter()
                .zip(steps)
                .map(|(run, step)| DurableWrite::Finish {
                    key: run.key.clone(),
                    slot: run.slot,
                    status: run.status,
                    finished_at: run.finished_at,
                    consecutive_failures: step.consecutive_failures,
                    tripped: step.tripped,
                    opened: step.opened,
                    closed: step.closed,
                    llm_calls: run.llm_calls,
                    tokens: run.usage.tokens.total(),
                    cost_micros: run.usage.cost_micros,
                    error: run.error.clone(),
                    tools: run.tool_use.clone(),
                    stop_reason: run.stop_reason,
                    consumed: before
                        .iter()
                        .filter(|entry| {
                            entry.0 == run.key.agent && run.consumes.contains(&entry.1) && !after.contains(entry)
                        })
                        .map(|entry| entry.1)
                        .collect(),
                })
                .collect()
        };
        // The rows the results land on, read in the same poll as the write: whether each
        // found its claimed row, and whether any was written over a finished one.
        let statuses: std::sync::Mutex<Vec<Option<ExecutionStatus>>> = std::sync::Mutex::default();
        let apply = async {
            *statuses.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = durable.logged_statuses(runs);
            durable.finish_runs(runs, breaker_failures_max).await
        };
        let generation = self.deliveries.generation();
        let lock = self.pruning.read().await;
        let steps = self.write("finish_runs", apply, durable_writes).await;
        drop(lock);
        let steps = steps?;
        let statuses = std::mem::take(&mut *statuses.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        let written: Vec<bool> = statuses.iter().map(Option::is_some).collect();
        let slots: BTreeSet<(&HeartbeatKey, Timestamp)> = runs.iter().map(|run| (&run.key, run.slot)).collect();
        let rewrote =
            slots.len() < runs.len() || statuses.iter().flatten().any(|status| *status != ExecutionStatus::Running);
        if self.deliveries.generation() != generation {
            self.world.took(RarePath::IndexForgotDuringWrite);
        }
        self.deliveries.committed(runs, &written, rewrote, generation);
        Ok(steps)
    }

    async fn recover_interrupted(&self, at: Timestamp) -> Result<u64, StoreError> {
        self.write("recover_interrupted", self.world.durable.recover_interrupted(at), none).await
    }

    async fn set_pause(&self, agent: &AgentId, pause: &PauseRecord) -> Result<(), StoreError> {
        let write = DurableWrite::Pause { agent: agent.clone(), until: pause.until, minutes: pause.minutes };
        self.write("set_pause", self.world.durable.set_pause(agent, pause), |_| vec![write]).await
    }

    async fn clear_pause(&self, agent: &AgentId) -> Result<(), StoreError> {
        let write = DurableWrite::ClearPause { agent: agent.clone() };
        self.write("clear_pause", self.world.durable.clear_pause(agent), |_| vec![write]).await
    }

    async fn end_pause(&self, agent: &AgentId, until: Timestamp) -> Result<(), StoreError> {
        let write = DurableWrite::EndPause { agent: agent.clone(), until };
        self.write("end_pause", self.world.durable.end_pause(agent, until), |_| vec![write]).await
    }

    async fn load_pauses(&self) -> Result<Vec<(AgentId, PauseRecord)>, StoreError> {
        self.read(self.world.durable.load_pauses()).await
    }

    async fn consecutive_failures(&self, key: &HeartbeatKey) -> Result<Option<u32>, StoreError> {
        self.read(self.world.durable.consecutive_failures(key)).await
    }

    async fn executions_page(
        &self,
        key: &HeartbeatKey,
        before: Option<Timestamp>,
        limit: usize,
    ) -> Result<Vec<Execution>, StoreError> {
        self.life.ensure_alive().await;
        if self.planted_log_read_fails(key) || self.world.log_read_fails() {
            self.world.fault(FaultKind::StoreLogReadError, LOG_READ);
            self.world.record(Event::LogUnread { key: key.clone() });
            return Err(StoreError::Backend("injected store error in a read of the run log".to_owned()));
        }
        self.world.durable.executions_page(key, before, limit).await
    }

    async fn definitions(&self, keys: &[HeartbeatKey]) -> Result<Definitions, StoreError> {
        self.life.ensure_alive().await;
        if self.world.injector.roll(FaultKind::StoreReadError) {
            self.world.fault(FaultKind::StoreReadError, DEFINITIONS_READ);
            self.world.record(Event::DefinitionsUnread { keys: keys.to_vec() });
            return Err(StoreError::Backend("injected store error in definitions".to_owned()));
        }
        self.world.durable.definitions(keys).await
    }

    async fn delivered_since(&self, queries: &[DedupQuery]) -> Result<Vec<bool>, StoreError> {
        self.life.ensure_alive().await;
        // A read takes time while faults are on, as a loaded database's does: the duplicate
        // checks of runs finishing meanwhile wait and share the next read
        // (`driver::dedup_reads`). Healed, it answers at once, as the liveness phase's
        // other ports do (a run that waited for a place and then for reads would outlast
        // its next slot and skip it as an overlap).
        if self.world.injector.is_active() {
            self.world.clock.sleep(Duration::from_millis(DEDUP_READ_MILLIS)).await;
            self.life.ensure_alive().await;
        }
        let durable = &self.world.durable;
        let (generation, read) = (self.deliveries.generation(), AtomicUsize::new(0));
        let read_log = |asked: Vec<DedupQuery>| {
            read.store(asked.len(), Ordering::Relaxed);
            async move { durable.delivered_since(&asked).await }
        };
        let read_fill = |from_ms, entries_max| async move {
            // A fill that fails leaves the index cold: the checks are read from the log.
            if self.world.injector.roll(FaultKind::StoreReadError) {
                self.world.fault(FaultKind::StoreReadError, RECENT_DELIVERIES_READ);
                self.world.took(RarePath::IndexFillFailed);
                return Err(StoreError::Backend("injected store error in the read of recent deliveries".to_owned()));
            }
            let fill = durable.recent_deliveries(from_ms, entries_max);
            // A loaded database's read takes time: runs may finish, or go, meanwhile.
            if self.world.injector.is_active() {
                self.world.clock.sleep(Duration::from_millis(DEDUP_READ_MILLIS)).await;
                self.life.ensure_alive().await;
            }
            Ok(fill)
        };
        let found = self.deliveries.delivered_since(queries, read_log, read_fill).await?;
        if self.deliveries.generation() != generation {
            self.world.took(RarePath::IndexForgotDuringCheck);
        }
        // What the run log holds now, in the same poll: every answer must be it.
        let stored = durable.delivered_since(queries).await?;
        let wrong = queries
            .iter()
            .zip(found.iter().zip(&stored))
            .filter(|(_, (found, stored))| found != stored)
            .map(|(query, (found, _))| format!("{} {} since {}: {found}", query.key, query.digest, query.since))
            .collect();
        let from_index = queries.len() - read.load(Ordering::Relaxed);
        (0..from_index).for_each(|_| self.world.took(RarePath::CheckFromIndex));
        self.world.record(Event::DuplicateChecked { life: self.life.number, asked: queries.len(), from_index, wrong });
        if found.contains(&true) && found.contains(&false) {
            self.world.took(RarePath::SharedDuplicateCheck);
        }
        Ok(found)
    }

    async fn queue_system_event(&self, agent: &AgentId, text: &str, at: Timestamp) -> Result<Queued, StoreError> {
        let durable = |queued: &Queued| match queued {
            Queued::Added { id, dropped } => {
                vec![DurableWrite::EventQueued {
                    agent: agent.clone(),
                    id: *id,
                    text: text.to_owned(),
                    dropped: *dropped,
                }]
            }
            Queued::Duplicate => Vec::new(),
        };
        self.write("queue_system_event", self.world.durable.queue_system_event(agent, text, at), durable).await
    }

    async fn spent_since(
        &self,
        agent: Option<&AgentId>,
        since: Timestamp,
        excluding: &[(HeartbeatKey, Timestamp)],
    ) -> Result<DaySpend, StoreError> {
        self.read(self.world.durable.spent_since(agent, since, excluding)).await
    }

    async fn transcript(&self, key: &HeartbeatKey, slot: Timestamp) -> Result<Option<String>, StoreError> {
        self.read(self.world.durable.transcript(key, slot)).await
    }

    async fn spent_by_job(
        &self,
        agent: Option<&AgentId>,
        since: Timestamp,
    ) -> Result<std::collections::BTreeMap<HeartbeatKey, DaySpend>, StoreError> {
        self.read(self.world.durable.spent_by_job(agent, since)).await
    }

    async fn pending_system_events(&self, agent: &AgentId, now: Timestamp) -> Result<Vec<SystemEvent>, StoreError> {
        self.read(self.world.durable.pending_system_events(agent, now)).await
    }
}
