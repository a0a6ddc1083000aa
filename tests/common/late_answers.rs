//! A store whose answer to an operator's write (a put, an enable, a resume) comes late: the write is
//! made at once, the answer after a delay on the virtual clock, as a slow commit's would.
//! Runs that end meanwhile reach the engine before the write's change does. Run results
//! can be made slow the same way (`results_delay`), as a slow group commit's, reads of the
//! run log can be made to fail (`fail_log_reads_after`), as a lost connection's would, and
//! so can the next claims (`fail_claims`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use jiff::Timestamp;

use systole::adapters::virtual_clock::VirtualClock;
use systole::core::breaker::BreakerStep;
use systole::core::budget::DaySpend;
use systole::core::heartbeat::{Heartbeat, HeartbeatDef};
use systole::core::ids::{AgentId, HeartbeatKey};
use systole::core::pause::PauseRecord;
use systole::core::retention::RunRetention;
use systole::core::system_events::SystemEvent;
use systole::ports::clock::Clock;
use systole::ports::store::{
    Armable, ClaimOutcome, ClaimedSlots, DedupQuery, Definitions, Execution, NextSlot, Queued, RunRecord, SeedReport,
    SkipRecord, SlotClaim, Store, StoreError,
};
use systole::store::memory::MemoryStore;

pub struct LateAnswers {
    pub inner: Arc<MemoryStore>,
    pub clock: Arc<VirtualClock>,
    /// How late the next operator writes answer (none: at once).
    pub delay: Mutex<Option<Duration>>,
    /// How late the next group commits of run results answer (none: at once).
    pub results_delay: Mutex<Option<Duration>>,
    /// How many more reads of a heartbeat's run log answer before the rest fail (none:
    /// all answer).
    log_reads_answered: Mutex<Option<usize>>,
    /// How many of the next claims fail, writing nothing.
    claims_failing: Mutex<usize>,
}

impl LateAnswers {
    pub fn new(inner: Arc<MemoryStore>, clock: Arc<VirtualClock>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            clock,
            delay: Mutex::new(None),
            results_delay: Mutex::new(None),
            log_reads_answered: Mutex::new(None),
            claims_failing: Mutex::new(0),
        })
    }

    /// Reads of the run log fail after the next `answered` ones.
    pub fn fail_log_reads_after(&self, answered: usize) {
        *self.log_reads_answered.lock().expect("lock") = Some(answered);
    }

    /// The next `count` claims fail, writing nothing.
    pub fn fail_claims(&self, count: usize) {
        *self.claims_failing.lock().expect("lock") = count;
    }

    /// Whether this claim goes through (a failing one counts down).
    fn claim(&self) -> Result<(), StoreError> {
        let mut failing = self.claims_failing.lock().expect("lock");
        if *failing > 0 {
            *failing -= 1;
            return Err(StoreError::Backend("the claim's commit failed: connection lost".into()));
        }
        Ok(())
    }

    /// Reads of the run log answer again.
    pub fn answer_log_reads(&self) {
        *self.log_reads_answered.lock().expect("lock") = None;
    }

    /// Whether this read of the run log answers (and counts it).
    fn log_read(&self) -> Result<(), StoreError> {
        if let Some(answered) = self.log_reads_answered.lock().expect("lock").as_mut() {
            if *answered == 0 {
                return Err(StoreError::Backend("the run log's read failed: connection lost".into()));
            }
            *answered -= 1;
        }
        Ok(())
    }

    async fn answer_late(&self) {
        let delay = *self.delay.lock().expect("lock");
        if let Some(delay) = delay {
            self.clock.sleep(delay).await;
        }
    }
}

#[async_trait]
impl Store for LateAnswers {
    async fn load_heartbeats(&self) -> Result<Vec<Heartbeat>, StoreError> {
        self.inner.load_heartbeats().await
    }
    async fn heartbeats(&self, keys: &[HeartbeatKey]) -> Result<Vec<Heartbeat>, StoreError> {
        self.inner.heartbeats(keys).await
    }
    async fn seed_config(&self, defs: &[HeartbeatDef], at: Timestamp) -> Result<SeedReport, StoreError> {
        self.inner.seed_config(defs, at).await
    }
    async fn put_heartbeat(&self, def: &HeartbeatDef, at: Timestamp) -> Result<(), StoreError> {
        let written = self.inner.put_heartbeat(def, at).await;
        self.answer_late().await;
        written
    }
    async fn delete_heartbeat(&self, key: &HeartbeatKey) -> Result<bool, StoreError> {
        self.inner.delete_heartbeat(key).await
    }
    async fn set_enabled(&self, key: &HeartbeatKey, enabled: bool, reason: Option<&str>) -> Result<bool, StoreError> {
        let written = self.inner.set_enabled(key, enabled, reason).await;
        self.answer_late().await;
        written
    }
    async fn disable_if_enabled(&self, key: &HeartbeatKey, reason: &str) -> Result<bool, StoreError> {
        let written = self.inner.disable_if_enabled(key, reason).await;
        self.answer_late().await;
        written
    }
    async fn half_open_breaker(&self, key: &HeartbeatKey) -> Result<bool, StoreError> {
        self.inner.half_open_breaker(key).await
    }
    async fn set_next_slots(&self, slots: &[(HeartbeatKey, NextSlot)]) -> Result<(), StoreError> {
        self.inner.set_next_slots(slots).await
    }
    async fn claim_slots(&self, claims: &[SlotClaim]) -> Result<Vec<ClaimOutcome>, StoreError> {
        self.claim()?;
        self.inner.claim_slots(claims).await
    }
    async fn claim_and_read(&self, claims: &[SlotClaim]) -> Result<ClaimedSlots, StoreError> {
        self.claim()?;
        self.inner.claim_and_read(claims).await
    }
    async fn record_skips(&self, skips: &[SkipRecord]) -> Result<(), StoreError> {
        self.inner.record_skips(skips).await
    }
    async fn finish_runs(&self, runs: &[RunRecord], breaker_failures_max: u32) -> Result<Vec<BreakerStep>, StoreError> {
        let written = self.inner.finish_runs(runs, breaker_failures_max).await;
        let delay = *self.results_delay.lock().expect("lock");
        if let Some(delay) = delay {
            self.clock.sleep(delay).await;
        }
        written
    }
    async fn recover_interrupted(&self, at: Timestamp) -> Result<u64, StoreError> {
        self.inner.recover_interrupted(at).await
    }
    async fn set_pause(&self, agent: &AgentId, pause: &PauseRecord) -> Result<(), StoreError> {
        self.inner.set_pause(agent, pause).await
    }
    async fn clear_pause(&self, agent: &AgentId) -> Result<(), StoreError> {
        let written = self.inner.clear_pause(agent).await;
        self.answer_late().await;
        written
    }
    async fn end_pause(&self, agent: &AgentId, until: Timestamp) -> Result<(), StoreError> {
        self.inner.end_pause(agent, until).await
    }
    async fn load_pauses(&self) -> Result<Vec<(AgentId, PauseRecord)>, StoreError> {
        self.inner.load_pauses().await
    }
    async fn consecutive_failures(&self, key: &HeartbeatKey) -> Result<Option<u32>, StoreError> {
        self.inner.consecutive_failures(key).await
    }
    async fn prune_runs(&self, now: Timestamp, retention: RunRetention) -> Result<u64, StoreError> {
        self.inner.prune_runs(now, retention).await
    }
    async fn latest_slots(&self, keys: &[HeartbeatKey]) -> Result<BTreeMap<HeartbeatKey, Timestamp>, StoreError> {
        self.log_read()?;
        self.inner.latest_slots(keys).await
    }
    async fn executions_page(
        &self,
        key: &HeartbeatKey,
        before: Option<Timestamp>,
        limit: usize,
    ) -> Result<Vec<Execution>, StoreError> {
        self.log_read()?;
        self.inner.executions_page(key, before, limit).await
    }
    async fn recent_executions(
        &self,
        keys: &[HeartbeatKey],
        limit: usize,
    ) -> Result<BTreeMap<HeartbeatKey, Vec<Execution>>, StoreError> {
        self.inner.recent_executions(keys, limit).await
    }
    async fn load_for_arming(&self) -> Result<Vec<Heartbeat>, StoreError> {
        self.inner.load_for_arming().await
    }
    async fn load_for_arming_in_pages(&self, arm: &mut (dyn FnMut(Vec<Armable>) + Send)) -> Result<(), StoreError> {
        self.inner.load_for_arming_in_pages(arm).await
    }
    async fn definitions(&self, keys: &[HeartbeatKey]) -> Result<Definitions, StoreError> {
        self.inner.definitions(keys).await
    }
    async fn delivered_since(&self, queries: &[DedupQuery]) -> Result<Vec<bool>, StoreError> {
        self.inner.delivered_since(queries).await
    }
    async fn queue_system_event(&self, agent: &AgentId, text: &str, at: Timestamp) -> Result<Queued, StoreError> {
        self.inner.queue_system_event(agent, text, at).await
    }
    async fn pending_system_events(&self, agent: &AgentId, now: Timestamp) -> Result<Vec<SystemEvent>, StoreError> {
        self.inner.pending_system_events(agent, now).await
    }
    async fn spent_since(
        &self,
        agent: Option<&AgentId>,
        since: Timestamp,
        excluding: &[(HeartbeatKey, Timestamp)],
    ) -> Result<DaySpend, StoreError> {
        self.inner.spent_since(agent, since, excluding).await
    }
    async fn spent_since_each(
        &self,
        days: &[(AgentId, Timestamp)],
        excluding: &[(HeartbeatKey, Timestamp)],
    ) -> Vec<Result<DaySpend, StoreError>> {
        self.inner.spent_since_each(days, excluding).await
    }
    async fn transcript(&self, key: &HeartbeatKey, slot: Timestamp) -> Result<Option<String>, StoreError> {
        self.inner.transcript(key, slot).await
    }
    async fn spent_by_job(
        &self,
        agent: Option<&AgentId>,
        since: Timestamp,
    ) -> Result<BTreeMap<HeartbeatKey, DaySpend>, StoreError> {
        self.inner.spent_by_job(agent, since).await
    }
}
