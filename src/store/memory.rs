//! An in-memory store with the same semantics as the SQLite one: for tests, embedding,
//! and as the base of the simulator's store.

use std::collections::{btree_map, BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use jiff::Timestamp;

use crate::core::breaker::{self, BreakerStep, DISABLED_BY_BREAKER};
use crate::core::budget::DaySpend;
use crate::core::heartbeat::{Heartbeat, HeartbeatDef, HeartbeatState, JobKind, Origin};
use crate::core::ids::{AgentId, HeartbeatId, HeartbeatKey};
use crate::core::pause::PauseRecord;
use crate::core::recent_deliveries::Fill;
use crate::core::retention::{LogRow, RunRetention};
use crate::core::system_events::{self, SystemEvent};
use crate::core::text_pool::TextPool;
use crate::core::tool_policy::SharedJobTools;
use crate::core::usage::RunUsage;
use crate::ports::store::{
    AgentJobs, Armable, ClaimOutcome, ClaimedSlots, DedupQuery, Definitions, DeliveryStatus, Execution,
    ExecutionStatus, NextSlot, Queued, RunRecord, SeedReport, SkipRecord, SlotClaim, Store, StoreError,
    INTERRUPTED_ERROR_TEXT,
};
use crate::store::config_keys::ConfigKeys;
use crate::store::memory_row::{Body, Row};
use crate::store::seed_threads;
use crate::store::text_check;

/// A row of the run log. What dedup and the caps read lives on the row, as in SQLite:
/// a run with no row records nothing, and a pruned row takes its digest and spending along.
#[derive(Debug, Clone)]
struct LogEntry {
    execution: Execution,
    /// The digest of the reply the run delivered.
    reply_digest: Option<String>,
    transcript: Option<String>,
}

impl LogEntry {
    fn new(execution: Execution) -> Self {
        Self { execution, reply_digest: None, transcript: None }
    }

    /// When it finished and what it spent, if it is a row the daily caps count.
    fn spent(&self) -> Option<(Timestamp, DaySpend)> {
        let execution = &self.execution;
        execution.finished_at.filter(|_| execution.llm_calls > 0).map(|at| (at, execution.spend()))
    }
}

/// One agent's spending rows by when they finished. The rows of one instant are a list:
/// runs seldom finish in the same microsecond, and a map for each instant was a B-tree
/// node of 632 bytes a run where the list's one row takes 64.
type SpendingByTime = BTreeMap<Timestamp, Vec<SpendRow>>;

/// A log row's spending, by the row's key and slot.
type SpendRow = ((HeartbeatKey, Timestamp), DaySpend);

/// Everything the memory store holds. Cloneable, so a simulator can snapshot it.
#[derive(Debug, Clone, Default)]
pub struct MemoryState {
    /// Rows inline, packed (`memory_row`): a first seed builds the map from its sorted
    /// rows, which fills every node.
    heartbeats: BTreeMap<HeartbeatKey, Row>,
    executions: BTreeMap<(HeartbeatKey, Timestamp), LogEntry>,
    /// The log's rows that spent (called the LLM and finished), by agent and when they
    /// finished: the daily caps read the day's spending every minute, which a walk of the
    /// whole log, skips included, made the simulator's costliest read; and an agent's read
    /// walks its own rows only (by time alone, 1,000 agents' first reads of a burst of
    /// 100,000 walked every row of the day each: half of its CPU). An index, as in SQL.
    spending: BTreeMap<AgentId, SpendingByTime>,
    pauses: BTreeMap<AgentId, PauseRecord>,
    /// Pending system events per agent, oldest first; consumed and dropped ones leave.
    system_events: BTreeMap<AgentId, Vec<SystemEvent>>,
    /// The last system event id handed out.
    system_event_id: u64,
    /// The partition leases and the nodes alive (see `memory_leases`).
    pub(super) leases: BTreeMap<u32, LeaseRow>,
    pub(super) nodes: BTreeMap<String, NodeRow>,
}

impl MemoryState {
    /// `agent`'s rows after the id `after` (from its first when `None`), in id order: a
    /// range of the map, where a filter of every row took a model's schedule tool through
    /// a million rows for its agent's dozen.
    fn rows_of_agent<'s>(
        &'s self,
        agent: &'s AgentId,
        after: Option<&HeartbeatId>,
    ) -> impl Iterator<Item = (&'s HeartbeatKey, &'s Row)> + 's {
        let from = match after {
            Some(after) => Bound::Excluded(HeartbeatKey { agent: agent.clone(), heartbeat: after.clone() }),
            None => Bound::Included(HeartbeatKey { agent: agent.clone(), heartbeat: HeartbeatId::lowest() }),
        };
        self.heartbeats.range((from, Bound::Unbounded)).take_while(move |(key, _)| key.agent == *agent)
    }

    /// The run log's rows of `key`, oldest slot first.
    fn log_of(&self, key: &HeartbeatKey) -> btree_map::Range<'_, (HeartbeatKey, Timestamp), LogEntry> {
        self.executions.range((key.clone(), Timestamp::MIN)..=(key.clone(), Timestamp::MAX))
    }

    /// The latest slot of `key`'s log that is not an operator's trigger (ADR 0049).
    fn latest_slot(&self, key: &HeartbeatKey) -> Option<Timestamp> {
        self.log_of(key).rev().find(|(_, entry)| !entry.execution.triggered).map(|((_, slot), _)| *slot)
    }

    /// Changes the log row `id` with `change`, keeping the spending index true.
    fn change_row(&mut self, id: &(HeartbeatKey, Timestamp), change: impl FnOnce(&mut LogEntry)) {
        let Some(entry) = self.executions.get_mut(id) else { return };
        let before = entry.spent();
        change(entry);
        let after = entry.spent();
        if before == after {
            return;
        }
        if let Some((at, _)) = before {
            self.forget_spend(at, id);
        }
        if let Some((at, spend)) = after {
            // The row's spending before, if any, was forgotten above: one entry a row.
            self.spending.entry(id.0.agent.clone()).or_default().entry(at).or_default().push((id.clone(), spend));
        }
    }

    /// Drops the log row `id`, and its spending.
    fn remove_row(&mut self, id: &(HeartbeatKey, Timestamp)) {
        if let Some((at, _)) = self.executions.remove(id).and_then(|entry| entry.spent()) {
            self.forget_spend(at, id);
        }
    }

    fn forget_spend(&mut self, at: Timestamp, id: &(HeartbeatKey, Timestamp)) {
        let agent = &id.0.agent;
        let Some(by_time) = self.spending.get_mut(agent) else { return };
        if let Some(rows) = by_time.get_mut(&at) {
            rows.retain(|(row, _)| row != id);
            if rows.is_empty() {
                by_time.remove(&at);
            }
        }
        if by_time.is_empty() {
            self.spending.remove(agent);
        }
    }
}

/// A node alive until `expires_at`, as PostgreSQL's `cluster_nodes` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct NodeRow {
    pub(super) expires_at: Timestamp,
    pub(super) api_url: Option<String>,
}

/// One partition's lease, as PostgreSQL's `partition_leases` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct LeaseRow {
    pub(super) owner: Option<String>,
    pub(super) term: u64,
    pub(super) expires_at: Timestamp,
}

#[derive(Default)]
pub struct MemoryStore {
    pub(super) state: Arc<Mutex<MemoryState>>,
    /// The store's own clock: what judges lease expiry (the database's `now()`).
    pub(super) clock: Option<Arc<dyn crate::ports::clock::Clock>>,
    /// Set for a partition's engine, as `PostgresStore`'s (ADR 0017).
    pub(super) fence: Option<crate::ports::leases::Lease>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore").field("fence", &self.fence).finish_non_exhaustive()
    }
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// A store that starts from `state` (a simulator's durable snapshot).
    pub fn from_state(state: MemoryState) -> Self {
        Self { state: Arc::new(Mutex::new(state)), clock: None, fence: None }
    }

    /// A store whose leases expire by `clock`: the simulated database's clock, which no
    /// node's skew touches.
    pub fn with_lease_clock(clock: Arc<dyn crate::ports::clock::Clock>) -> Self {
        Self { clock: Some(clock), ..Self::default() }
    }

    /// A copy of everything held.
    pub fn snapshot(&self) -> MemoryState {
        self.lock().clone()
    }

    /// Whether any stored heartbeat's state passes `test`, each row's built in turn under
    /// the lock, not a copy of the store (the simulator asks whether a breaker's cooldown is
    /// running when it injects a fault).
    pub fn any_heartbeat(&self, test: impl Fn(&HeartbeatState) -> bool) -> bool {
        self.lock().heartbeats.values().any(|row| test(&row.state()))
    }

    /// Every row of the run log, by heartbeat and slot: the simulator reads it around a
    /// prune to check what went against its own reading of the retention rule.
    /// Each row is read in place and mapped, so a caller that needs a few fields does not
    /// copy every reply and error.
    pub fn run_log_rows<T>(&self, row: impl Fn(&Execution) -> T) -> Vec<T> {
        self.lock().executions.values().map(|entry| row(&entry.execution)).collect()
    }

    /// What a store's index of recent deliveries is filled with
    /// (`store::delivered_index`): the latest finish of each delivered reply at or after
    /// `from_ms`, newest first, at most `entries_max` of them.
    pub fn recent_deliveries(&self, from_ms: i64, entries_max: usize) -> Fill {
        let state = self.lock();
        let mut latest: HashMap<(&HeartbeatKey, &str), i64> = HashMap::new();
        for ((key, _), entry) in &state.executions {
            let finished = entry.execution.finished_at.map(Timestamp::as_millisecond);
            if let (Some(digest), Some(finished)) = (entry.reply_digest.as_deref(), finished) {
                if finished >= from_ms {
                    let at = latest.entry((key, digest)).or_insert(finished);
                    *at = (*at).max(finished);
                }
            }
        }
        let delivered =
            latest.into_iter().map(|((key, digest), finished)| (key.clone(), digest.to_owned(), finished)).collect();
        Fill::newest(from_ms, delivered, entries_max)
    }

    /// The status of each run's row in the log, if it has one: a result finds its claimed
    /// row there (`running`), or another, or none and writes nothing.
    pub fn logged_statuses(&self, runs: &[RunRecord]) -> Vec<Option<ExecutionStatus>> {
        let state = self.lock();
        runs.iter()
            .map(|run| state.executions.get(&(run.key.clone(), run.slot)).map(|entry| entry.execution.status))
            .collect()
    }

    /// The ids of `agent`'s pending system events, expired ones included (for a simulator
    /// that must see what a write consumed).
    pub fn pending_event_ids(&self, agent: &AgentId) -> Vec<u64> {
        self.lock()
            .system_events
            .get(agent)
            .map(|queue| queue.iter().map(|event| event.id).collect())
            .unwrap_or_default()
    }

    /// This store's heartbeats as a start-up arms them, a page of `ARMING_PAGE_ROWS` at a
    /// time to `take`, until it declines one.
    fn arming_pages(&self, state: &MemoryState, mut take: impl FnMut(Vec<Armable>) -> bool) {
        let mut page = Vec::with_capacity(ARMING_PAGE_ROWS);
        for (key, row) in state.heartbeats.iter().filter(|(key, _)| self.owns(&key.agent)) {
            let latest_slot = if row.enabled() { state.latest_slot(key) } else { None };
            page.push(Armable { heartbeat: for_arming(key, row), latest_slot });
            if page.len() == ARMING_PAGE_ROWS
                && !take(std::mem::replace(&mut page, Vec::with_capacity(ARMING_PAGE_ROWS)))
            {
                return;
            }
        }
        if !page.is_empty() {
            take(page);
        }
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, MemoryState> {
        // A panic while holding the lock cannot leave a half-applied write: every method
        // computes first and mutates last. So a poisoned lock is still consistent.
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Heartbeats a page of the memory store's start-up load holds (as SQLite's pages).
const ARMING_PAGE_ROWS: usize = 10_000;

/// Pages built ahead of the engine's arming, at the most (memory held for them: a page each).
const ARMING_PAGES_AHEAD: usize = 2;

/// A row's heartbeat as a load for arming gives it: what only a run reads left out, as the
/// SQL stores' arming columns leave it (the prompt but an agent heartbeat's, dedup, timeout,
/// tools, model), so the engine a simulator runs on this store arms what production's does.
fn for_arming(key: &HeartbeatKey, row: &Row) -> Heartbeat {
    let body = row.body();
    Heartbeat {
        def: HeartbeatDef {
            key: key.clone(),
            kind: body.kind,
            prompt: if body.kind == JobKind::Agent { Arc::clone(&body.prompt) } else { Arc::default() },
            schedule: body.schedule.clone(),
            policy: body.policy,
            delete_after_run: body.delete_after_run,
            dedup: false,
            target: body.target.clone(),
            active_hours: body.active_hours.clone(),
            timeout: Duration::ZERO,
            origin: body.origin,
            tools: SharedJobTools::default(),
            model: None,
        },
        state: row.state(),
    }
}

/// Keeps `next` as the heartbeat's next slot while it still has the schedule that gave it.
fn set_next_slot(state: &mut MemoryState, key: &HeartbeatKey, next: &NextSlot) {
    if let Some(row) = state.heartbeats.get_mut(key) {
        if row.body().schedule == next.schedule {
            row.set_next_slot(next.at);
        }
    }
}

/// Claims one slot: its run's row in the log, its heartbeat's next slot stored (if its
/// schedule is still the one the claim was decided by); with the definition it claimed.
fn claim_one(state: &mut MemoryState, claim: &SlotClaim) -> (ClaimOutcome, Option<Arc<HeartbeatDef>>) {
    let MemoryState { heartbeats, executions, .. } = state;
    let Some(row) = heartbeats.get_mut(&claim.key) else { return (ClaimOutcome::Gone, None) };
    match executions.entry((claim.key.clone(), claim.slot)) {
        btree_map::Entry::Occupied(met) if met.get().execution.triggered => (ClaimOutcome::AlreadyTriggered, None),
        btree_map::Entry::Occupied(_) => (ClaimOutcome::AlreadyClaimed, None),
        btree_map::Entry::Vacant(vacant) => {
            vacant.insert(LogEntry::new(running(claim)));
            // An operator's trigger changes nothing of the schedule's (ADR 0049).
            if !claim.triggered && row.body().schedule == claim.next_slot.schedule {
                row.set_next_slot(claim.next_slot.at);
            }
            (ClaimOutcome::Claimed, Some(Arc::new(row.def(&claim.key))))
        }
    }
}

/// The bodies of one thread's part of a seed: equal texts share one copy (the pool's), and
/// each run of equal definitions (a template's jobs, alike in all but their keys) one body.
#[derive(Default)]
struct SeedBodies {
    pool: TextPool,
    last: Option<Arc<Body>>,
}

impl SeedBodies {
    /// A configured definition's row as a seed stores it.
    fn config_row(&mut self, def: &HeartbeatDef, at: Timestamp) -> Row {
        let fresh = HeartbeatState::stored_at(&def.schedule, at);
        Row::seeded(self.body(def), &fresh)
    }

    fn body(&mut self, def: &HeartbeatDef) -> Arc<Body> {
        if let Some(last) = self.last.as_ref().filter(|last| last.same_but_origin(def)) {
            return Arc::clone(last);
        }
        let body = Arc::new(Body::of(&self.pool.share(def), Origin::Config));
        self.last = Some(Arc::clone(&body));
        body
    }
}

/// The rows of `defs` in key order (of one key named twice, the later comes last), built
/// and sorted on every core when there are many: copying and sorting a million
/// definitions is most of a first seed. Equal texts and bodies are shared within a
/// thread's part (`SeedBodies`).
fn config_rows(defs: &[HeartbeatDef], at: Timestamp) -> Vec<(HeartbeatKey, Row)> {
    let mapper = || {
        let mut bodies = SeedBodies::default();
        move |_, def: &HeartbeatDef| (def.key.clone(), bodies.config_row(def, at))
    };
    seed_threads::map_sorted(defs, mapper, |row| &row.0)
}

#[async_trait]
impl Store for MemoryStore {
    async fn load_heartbeats(&self) -> Result<Vec<Heartbeat>, StoreError> {
        let state = self.lock();
        let owned = state.heartbeats.iter().filter(|(key, _)| self.owns(&key.agent));
        Ok(owned.map(|(key, row)| row.heartbeat(key)).collect())
    }

    async fn load_for_arming(&self) -> Result<Vec<Heartbeat>, StoreError> {
        let state = self.lock();
        let owned = state.heartbeats.iter().filter(|(key, _)| self.owns(&key.agent));
        Ok(owned.map(|(key, row)| for_arming(key, row)).collect())
    }

    // One snapshot, as a SQL store's load: the pages are built and handed over under the
    // lock (arming takes no store call). A copy of the whole store first (the default) was
    // most of a start-up's peak memory and a third of its time faulting in fresh pages.
    async fn load_for_arming_in_pages(&self, arm: &mut (dyn FnMut(Vec<Armable>) + Send)) -> Result<(), StoreError> {
        let state = self.lock();
        let state = &*state;
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        if cores == 1 || state.heartbeats.len() <= ARMING_PAGE_ROWS {
            self.arming_pages(state, |page| {
                arm(page);
                true
            });
            return Ok(());
        }
        // Many pages: a thread builds the next while the engine arms this one, as a SQL
        // store reads the next page beside it (1,000,000: a third of a start-up was
        // building pages). The same pages in the same order either way.
        std::thread::scope(|scope| {
            let (pages, built) = std::sync::mpsc::sync_channel(ARMING_PAGES_AHEAD);
            scope.spawn(move || self.arming_pages(state, |page| pages.send(page).is_ok()));
            for page in built {
                arm(page);
            }
        });
        Ok(())
    }

    async fn seed_config(&self, defs: &[HeartbeatDef], at: Timestamp) -> Result<SeedReport, StoreError> {
        text_check::seed_defs(defs)?;
        let mut state = self.lock();
        let mut report = SeedReport::default();
        // Into an empty store (a first start), a config without a key twice is built in
        // one pass (the map sorts its rows first): a search from the root per definition
        // was a third of a seed.
        if state.heartbeats.is_empty() {
            let rows: BTreeMap<HeartbeatKey, Row> = config_rows(defs, at).into_iter().collect();
            // A key named twice is one row of the map: that config takes the path below,
            // which keeps its last definition and reports it once.
            if rows.len() == defs.len() {
                state.heartbeats = rows;
                report.inserted = defs.iter().map(|def| def.key.clone()).collect();
                return Ok(report);
            }
        }
        // Only a store that held config rows before can have some that left the config.
        let config_rows = state.heartbeats.values().any(|row| row.body().origin == Origin::Config);
        let config = ConfigKeys::of(defs);
        let mut bodies = SeedBodies::default();
        for (_, def) in config.kept() {
            // One search a definition, and a copy only of what is stored.
            match state.heartbeats.entry(def.key.clone()) {
                btree_map::Entry::Occupied(row) if row.get().seeded_unchanged(&def.key, def) => {
                    report.unchanged.push(def.key.clone());
                }
                entry => {
                    let row = bodies.config_row(def, at);
                    match entry {
                        btree_map::Entry::Occupied(mut occupied) => {
                            occupied.insert(row);
                            report.updated.push(def.key.clone());
                        }
                        btree_map::Entry::Vacant(vacant) => {
                            vacant.insert(row);
                            report.inserted.push(def.key.clone());
                        }
                    }
                }
            }
        }
        let removed: Vec<HeartbeatKey> = if config_rows {
            state
                .heartbeats
                .iter()
                .filter(|(key, row)| row.body().origin == Origin::Config && !config.contains(key))
                .map(|(key, _)| key.clone())
                .collect()
        } else {
            Vec::new()
        };
        for key in &removed {
            state.heartbeats.remove(key);
        }
        report.removed = removed;
        Ok(report)
    }

    async fn put_heartbeat(&self, def: &HeartbeatDef, at: Timestamp) -> Result<(), StoreError> {
        text_check::defs([def])?;
        let mut state = self.lock();
        self.fence(&state, std::iter::once(&def.key.agent))?;
        let fresh = HeartbeatState::stored_at(&def.schedule, at);
        let row = Row::edited(&def.key, def, &fresh, state.heartbeats.get(&def.key));
        state.heartbeats.insert(def.key.clone(), row);
        Ok(())
    }

    async fn consecutive_failures(&self, key: &HeartbeatKey) -> Result<Option<u32>, StoreError> {
        Ok(self.lock().heartbeats.get(key).map(Row::consecutive_failures))
    }

    async fn delete_heartbeat(&self, key: &HeartbeatKey) -> Result<bool, StoreError> {
        let mut state = self.lock();
        self.fence(&state, std::iter::once(&key.agent))?;
        Ok(state.heartbeats.remove(key).is_some())
    }

    async fn set_enabled(&self, key: &HeartbeatKey, enabled: bool, reason: Option<&str>) -> Result<bool, StoreError> {
        let mut state = self.lock();
        self.fence(&state, std::iter::once(&key.agent))?;
        let Some(row) = state.heartbeats.get_mut(key) else { return Ok(false) };
        row.change_state(|heartbeat_state| {
            heartbeat_state.enabled = enabled;
            heartbeat_state.disabled_reason = if enabled { None } else { reason.map(Box::from) };
            if enabled {
                heartbeat_state.consecutive_failures = 0;
                heartbeat_state.breaker_opened_at = None;
            }
        });
        Ok(true)
    }

    async fn disable_if_enabled(&self, key: &HeartbeatKey, reason: &str) -> Result<bool, StoreError> {
        let mut state = self.lock();
        self.fence(&state, std::iter::once(&key.agent))?;
        let Some(row) = state.heartbeats.get_mut(key).filter(|row| row.enabled()) else { return Ok(false) };
        row.change_state(|heartbeat_state| {
            heartbeat_state.enabled = false;
            heartbeat_state.disabled_reason = Some(reason.into());
        });
        Ok(true)
    }

    async fn half_open_breaker(&self, key: &HeartbeatKey) -> Result<bool, StoreError> {
        let mut state = self.lock();
        self.fence(&state, std::iter::once(&key.agent))?;
        let Some(row) = state.heartbeats.get_mut(key) else { return Ok(false) };
        Ok(row.change_state(|heartbeat_state| {
            let open =
                !heartbeat_state.enabled && heartbeat_state.disabled_reason.as_deref() == Some(DISABLED_BY_BREAKER);
            if open {
                heartbeat_state.enabled = true;
                heartbeat_state.disabled_reason = None;
            }
            open
        }))
    }

    async fn set_next_slots(&self, slots: &[(HeartbeatKey, NextSlot)]) -> Result<(), StoreError> {
        let mut state = self.lock();
        self.fence(&state, slots.iter().map(|(key, _)| &key.agent))?;
        for (key, next) in slots {
            set_next_slot(&mut state, key, next);
        }
        Ok(())
    }

    async fn claim_slots(&self, claims: &[SlotClaim]) -> Result<Vec<ClaimOutcome>, StoreError> {
        let mut state = self.lock();
        self.fence(&state, claims.iter().map(|claim| &claim.key.agent))?;
        Ok(claims.iter().map(|claim| claim_one(&mut state, claim).0).collect())
    }

    /// Both under one lock, each claimed heartbeat's definition taken from the row its
    /// claim found.
    async fn claim_and_read(&self, claims: &[SlotClaim]) -> Result<ClaimedSlots, StoreError> {
        let mut state = self.lock();
        self.fence(&state, claims.iter().map(|claim| &claim.key.agent))?;
        let mut outcomes = Vec::with_capacity(claims.len());
        let mut definitions = Definitions::new();
        for claim in claims {
            let (outcome, def) = claim_one(&mut state, claim);
            if let Some(def) = def {
                definitions.insert(claim.key.clone(), def);
            }
            outcomes.push(outcome);
        }
        Ok(ClaimedSlots { outcomes, definitions: Ok(definitions) })
    }

    async fn record_skips(&self, skips: &[SkipRecord]) -> Result<(), StoreError> {
        let mut state = self.lock();
        self.fence(&state, skips.iter().map(|skip| &skip.key.agent))?;
        for skip in skips {
            let id = (skip.key.clone(), skip.slot);
            state.executions.entry(id).or_insert_with(|| {
                LogEntry::new(Execution {
                    key: skip.key.clone(),
                    slot: skip.slot,
                    triggered: skip.triggered,
                    started_at: skip.at,
                    finished_at: Some(skip.at),
                    status: ExecutionStatus::Skipped,
                    skip_reason: Some(skip.reason),
                    delivery: None,
                    duration: None,
                    error: None,
                    output_preview: None,
                    stop_reason: None,
                    reply: None,
                    llm_calls: 0,
                    usage: RunUsage::default(),
                    tool_use: None,
                })
            });
            if !skip.triggered {
                set_next_slot(&mut state, &skip.key, &skip.next_slot);
            }
        }
        Ok(())
    }

    async fn finish_runs(&self, runs: &[RunRecord], breaker_failures_max: u32) -> Result<Vec<BreakerStep>, StoreError> {
        text_check::runs(runs)?;
        let mut state = self.lock();
        self.fence(&state, runs.iter().map(|run| &run.key.agent))?;
        let mut steps = Vec::with_capacity(runs.len());
        for run in runs {
            state.change_row(&(run.key.clone(), run.slot), |entry| {
                entry.reply_digest = run.reply_digest.clone();
                entry.transcript = run.transcript.clone();
                let execution = &mut entry.execution;
                execution.finished_at = Some(run.finished_at);
                execution.status = run.status;
                execution.delivery = Some(run.delivery);
                execution.duration = Some(run.duration);
                execution.error = run.error.clone();
                execution.output_preview = run.output_preview.clone();
                execution.stop_reason = run.stop_reason;
                execution.reply = run.reply;
                execution.tool_use = run.tool_use.clone();
                execution.llm_calls = run.llm_calls;
                execution.usage = run.usage;
            });
            if run.status == ExecutionStatus::Succeeded && !run.consumes.is_empty() {
                if let Some(queue) = state.system_events.get_mut(&run.key.agent) {
                    queue.retain(|event| !run.consumes.contains(&event.id));
                }
            }
            let Some(row) = state.heartbeats.get_mut(&run.key) else {
                // Deleted while it ran: nothing left to count against.
                steps.push(BreakerStep::unchanged(0));
                continue;
            };
            let step = row.change_state(|heartbeat_state| {
                if breaker::is_open(heartbeat_state.enabled, heartbeat_state.disabled_reason.as_deref()) {
                    return BreakerStep::unchanged(heartbeat_state.consecutive_failures);
                }
                let after_run =
                    if heartbeat_state.enabled { breaker::after_run } else { breaker::after_run_while_disabled };
                let step = after_run(heartbeat_state.consecutive_failures, run.verdict(), breaker_failures_max);
                heartbeat_state.consecutive_failures = step.consecutive_failures;
                if step.tripped {
                    heartbeat_state.enabled = false;
                    heartbeat_state.disabled_reason = Some(DISABLED_BY_BREAKER.into());
                    heartbeat_state.breaker_opened_at = Some(run.finished_at);
                } else if step.consecutive_failures == 0 {
                    heartbeat_state.breaker_opened_at = None;
                }
                step
            });
            steps.push(step);
        }
        Ok(steps)
    }

    async fn recover_interrupted(&self, at: Timestamp) -> Result<u64, StoreError> {
        let mut state = self.lock();
        self.fence(&state, std::iter::empty())?;
        let mut count = 0;
        let running: Vec<(HeartbeatKey, Timestamp)> = state
            .executions
            .iter()
            .filter(|(_, entry)| entry.execution.status == ExecutionStatus::Running)
            .filter(|((key, _), _)| self.owns(&key.agent))
            .map(|(id, _)| id.clone())
            .collect();
        for id in &running {
            state.change_row(id, |entry| {
                let execution = &mut entry.execution;
                execution.status = ExecutionStatus::Interrupted;
                execution.finished_at = Some(at);
                execution.delivery = Some(DeliveryStatus::NotNeeded);
                execution.error = Some(INTERRUPTED_ERROR_TEXT.to_owned());
            });
            count += 1;
        }
        Ok(count)
    }

    async fn set_pause(&self, agent: &AgentId, pause: &PauseRecord) -> Result<(), StoreError> {
        let mut state = self.lock();
        self.fence(&state, std::iter::once(agent))?;
        state.pauses.insert(agent.clone(), *pause);
        Ok(())
    }

    async fn clear_pause(&self, agent: &AgentId) -> Result<(), StoreError> {
        let mut state = self.lock();
        self.fence(&state, std::iter::once(agent))?;
        state.pauses.remove(agent);
        Ok(())
    }

    async fn end_pause(&self, agent: &AgentId, until: Timestamp) -> Result<(), StoreError> {
        let mut state = self.lock();
        self.fence(&state, std::iter::once(agent))?;
        if state.pauses.get(agent).is_some_and(|pause| pause.until == until) {
            state.pauses.remove(agent);
        }
        Ok(())
    }

    async fn load_pauses(&self) -> Result<Vec<(AgentId, PauseRecord)>, StoreError> {
        let state = self.lock();
        Ok(state
            .pauses
            .iter()
            .filter(|(agent, _)| self.owns(agent))
            .map(|(agent, pause)| (agent.clone(), *pause))
            .collect())
    }

    async fn executions_page(
        &self,
        key: &HeartbeatKey,
        before: Option<Timestamp>,
        limit: usize,
    ) -> Result<Vec<Execution>, StoreError> {
        let state = self.lock();
        let mine = match before {
            Some(before) => state.executions.range((key.clone(), Timestamp::MIN)..(key.clone(), before)),
            None => state.log_of(key),
        };
        Ok(mine.rev().take(limit).map(|(_, entry)| entry.execution.clone()).collect())
    }

    async fn recent_executions(
        &self,
        keys: &[HeartbeatKey],
        limit: usize,
    ) -> Result<BTreeMap<HeartbeatKey, Vec<Execution>>, StoreError> {
        let state = self.lock();
        let mut recent: BTreeMap<HeartbeatKey, Vec<Execution>> = BTreeMap::new();
        for key in keys {
            // Ordered by slot: the newest are the last of its log.
            let runs: Vec<Execution> =
                state.log_of(key).rev().take(limit).map(|(_, entry)| entry.execution.clone()).collect();
            if !runs.is_empty() {
                recent.insert(key.clone(), runs);
            }
        }
        Ok(recent)
    }

    async fn heartbeats_of_agent(
        &self,
        agent: &AgentId,
        after: Option<&HeartbeatId>,
        limit: usize,
    ) -> Result<Vec<Heartbeat>, StoreError> {
        if !self.owns(agent) {
            return Ok(Vec::new());
        }
        let state = self.lock();
        Ok(state.rows_of_agent(agent, after).take(limit).map(|(key, row)| row.heartbeat(key)).collect())
    }

    async fn heartbeats_page(&self, after: Option<&HeartbeatKey>, limit: usize) -> Result<Vec<Heartbeat>, StoreError> {
        let state = self.lock();
        let later = match after {
            Some(after) => state.heartbeats.range::<HeartbeatKey, _>((Bound::Excluded(after), Bound::Unbounded)),
            None => state.heartbeats.range::<HeartbeatKey, _>(..),
        };
        let owned = later.filter(|(key, _)| self.owns(&key.agent));
        Ok(owned.take(limit).map(|(key, row)| row.heartbeat(key)).collect())
    }

    async fn jobs_of_agents(&self, only: Option<&AgentId>) -> Result<BTreeMap<AgentId, AgentJobs>, StoreError> {
        let state = self.lock();
        let mut jobs: BTreeMap<AgentId, AgentJobs> = BTreeMap::new();
        let counted: Box<dyn Iterator<Item = (&HeartbeatKey, &Row)>> = match only {
            Some(agent) => Box::new(state.rows_of_agent(agent, None)),
            None => Box::new(state.heartbeats.iter()),
        };
        for (key, row) in counted.filter(|(key, _)| self.owns(&key.agent)) {
            let counted = jobs.entry(key.agent.clone()).or_default();
            counted.count += 1;
            counted.has_agent_heartbeat |= row.body().kind == JobKind::Agent;
        }
        Ok(jobs)
    }

    async fn prune_runs(&self, now: Timestamp, retention: RunRetention) -> Result<u64, StoreError> {
        let cutoffs = retention.cutoffs(now);
        let mut state = self.lock();
        let mut doomed = Vec::new();
        let mut current: Option<&HeartbeatKey> = None;
        let mut rank = 0;
        let mut floor_seen = false;
        // Newest first within each heartbeat: the map is ordered by key, then slot.
        let owned = state.executions.iter().rev().filter(|((key, _), _)| self.owns(&key.agent));
        for ((key, slot), LogEntry { execution, .. }) in owned {
            if current == Some(key) {
                rank += 1;
            } else {
                (rank, floor_seen) = (0, false);
            }
            current = Some(key);
            let floor = !floor_seen && !execution.triggered;
            floor_seen |= floor;
            let row = match execution.status {
                ExecutionStatus::Running => LogRow::Running,
                ExecutionStatus::Skipped => LogRow::Skip,
                _ => LogRow::Run,
            };
            if cutoffs.prunes(rank, floor, row, execution.finished_at) {
                doomed.push((key.clone(), *slot));
            }
        }
        for id in &doomed {
            state.remove_row(id);
        }
        Ok(doomed.len() as u64)
    }

    async fn heartbeats(&self, keys: &[HeartbeatKey]) -> Result<Vec<Heartbeat>, StoreError> {
        let state = self.lock();
        Ok(keys.iter().filter_map(|key| state.heartbeats.get(key).map(|row| row.heartbeat(key))).collect())
    }

    async fn definitions(&self, keys: &[HeartbeatKey]) -> Result<Definitions, StoreError> {
        let state = self.lock();
        let stored = keys.iter().filter_map(|key| state.heartbeats.get(key).map(|row| (key, row)));
        Ok(stored.map(|(key, row)| (key.clone(), Arc::new(row.def(key)))).collect())
    }

    async fn delivered_since(&self, queries: &[DedupQuery]) -> Result<Vec<bool>, StoreError> {
        let state = self.lock();
        // In whole milliseconds, as the SQL stores keep times (and their index of recent
        // deliveries compares): a reply that finished earlier in the millisecond `since`
        // falls in counts (seed 1927873866253).
        let found = |DedupQuery { key, digest, since }: &DedupQuery| {
            let mine = state.log_of(key);
            mine.map(|(_, entry)| entry).any(|entry| {
                entry.reply_digest.as_deref() == Some(digest.as_str())
                    && entry.execution.finished_at.is_some_and(|at| at.as_millisecond() >= since.as_millisecond())
            })
        };
        Ok(queries.iter().map(found).collect())
    }

    async fn queue_system_event(&self, agent: &AgentId, text: &str, at: Timestamp) -> Result<Queued, StoreError> {
        text_check::event(text)?;
        let mut state = self.lock();
        let newest = state.system_events.get(agent).and_then(|queue| queue.last()).map(|event| event.text.as_str());
        if !system_events::admits(newest, text) {
            return Ok(Queued::Duplicate);
        }
        state.system_event_id += 1;
        let id = state.system_event_id;
        let queue = state.system_events.entry(agent.clone()).or_default();
        queue.push(SystemEvent { id, text: text.to_owned(), queued_at: at });
        let dropped = system_events::overflow(queue.len());
        queue.drain(..dropped);
        Ok(Queued::Added { id, dropped })
    }

    async fn spent_since(
        &self,
        agent: Option<&AgentId>,
        since: Timestamp,
        excluding: &[(HeartbeatKey, Timestamp)],
    ) -> Result<DaySpend, StoreError> {
        let state = self.lock();
        // As in SQL: only runs that called the LLM (the others cannot have spent).
        let excluded = |key: &HeartbeatKey, slot: &Timestamp| excluding.iter().any(|(k, s)| s == slot && k == key);
        let agents: Box<dyn Iterator<Item = &SpendingByTime>> = match agent {
            Some(agent) => Box::new(state.spending.get(agent).into_iter()),
            None => Box::new(state.spending.values()),
        };
        let mut spent = DaySpend::default();
        for ((key, slot), spend) in agents.flat_map(|by_time| by_time.range(since..)).flat_map(|(_, rows)| rows) {
            if !excluded(key, slot) {
                spent.add(*spend);
            }
        }
        Ok(spent)
    }

    async fn transcript(&self, key: &HeartbeatKey, slot: Timestamp) -> Result<Option<String>, StoreError> {
        let state = self.lock();
        Ok(state.executions.get(&(key.clone(), slot)).and_then(|entry| entry.transcript.clone()))
    }

    async fn spent_by_job(
        &self,
        agent: Option<&AgentId>,
        since: Timestamp,
    ) -> Result<BTreeMap<HeartbeatKey, DaySpend>, StoreError> {
        let state = self.lock();
        let mut jobs: BTreeMap<HeartbeatKey, DaySpend> = BTreeMap::new();
        for ((key, _), entry) in &state.executions {
            let execution = &entry.execution;
            let other_agent = agent.is_some_and(|agent| key.agent != *agent);
            if other_agent || execution.llm_calls == 0 || execution.finished_at.is_none_or(|at| at < since) {
                continue;
            }
            jobs.entry(key.clone()).or_default().add(execution.spend());
        }
        Ok(jobs)
    }

    async fn pending_system_events(&self, agent: &AgentId, now: Timestamp) -> Result<Vec<SystemEvent>, StoreError> {
        let state = self.lock();
        let queue = state.system_events.get(agent).map(Vec::as_slice).unwrap_or_default();
        Ok(queue.iter().filter(|event| system_events::is_live(event, now)).cloned().collect())
    }
}

fn running(claim: &SlotClaim) -> Execution {
    Execution {
        key: claim.key.clone(),
        slot: claim.slot,
        triggered: claim.triggered,
        started_at: claim.claimed_at,
        finished_at: None,
        status: ExecutionStatus::Running,
        skip_reason: None,
        delivery: None,
        duration: None,
        error: None,
        output_preview: None,
        stop_reason: None,
        reply: None,
        llm_calls: 0,
        usage: RunUsage::default(),
        tool_use: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::delivery_target::DeliveryTarget;
    use crate::core::heartbeat::test_def;

    /// Definitions with equal texts, each its own copy, as a config's parse gives them.
    fn alike(ids: &[&str]) -> Vec<HeartbeatDef> {
        let copy = |def: HeartbeatDef| HeartbeatDef {
            prompt: def.prompt.to_string().into(),
            target: DeliveryTarget::parse("webhook:ops").expect("valid"),
            ..def
        };
        ids.iter().map(|id| copy(test_def("main", id, 60))).collect()
    }

    async fn stored(store: &MemoryStore, defs: &[HeartbeatDef]) -> Vec<HeartbeatDef> {
        let keys: Vec<HeartbeatKey> = defs.iter().map(|def| def.key.clone()).collect();
        store.heartbeats(&keys).await.expect("read").into_iter().map(|heartbeat| heartbeat.def).collect()
    }

    #[test]
    fn a_run_of_alike_definitions_shares_one_body() {
        let mut bodies = SeedBodies::default();
        let defs = alike(&["a", "b", "c"]);
        let other = HeartbeatDef { prompt: "Another.".into(), ..test_def("main", "d", 60) };
        let first = bodies.body(&defs[0]);
        assert!(Arc::ptr_eq(&first, &bodies.body(&defs[1])), "alike but their keys: one body");
        assert!(Arc::ptr_eq(&first, &bodies.body(&HeartbeatDef { origin: Origin::Runtime, ..defs[2].clone() })));
        let apart = bodies.body(&other);
        assert!(!Arc::ptr_eq(&first, &apart), "another prompt: a body of its own");
        assert_eq!(apart.def(&other.key), HeartbeatDef { origin: Origin::Config, ..other.clone() });
        let again = bodies.body(&defs[0]);
        assert!(Arc::ptr_eq(&again.prompt, &first.prompt), "a body made again keeps the pool's texts");
        assert_eq!(first.origin, Origin::Config, "a seed's rows are the config's");
    }

    #[tokio::test]
    async fn a_seeds_equal_prompts_and_targets_are_held_once() {
        let store = MemoryStore::new();
        let at = Timestamp::UNIX_EPOCH;
        // A first seed (built in one pass), then one into a store that holds rows.
        let first = alike(&["a", "b", "c"]);
        store.seed_config(&first, at).await.expect("seed");
        let held = stored(&store, &first).await;
        assert!(held.iter().all(|def| Arc::ptr_eq(&def.prompt, &held[0].prompt)), "one prompt");
        assert!(held.iter().all(|def| arcstr::ArcStr::ptr_eq(def.target.text(), held[0].target.text())), "one target");
        let mut later = first.clone();
        later.extend(alike(&["d", "e"]).into_iter().map(|def| HeartbeatDef { prompt: "Another.".into(), ..def }));
        later.extend(alike(&["f", "g"]).into_iter().map(|def| HeartbeatDef { prompt: "Another.".into(), ..def }));
        store.seed_config(&later, at).await.expect("seed");
        let added = stored(&store, &later[3..]).await;
        assert_eq!(added.len(), 4);
        assert!(added.iter().all(|def| Arc::ptr_eq(&def.prompt, &added[0].prompt)), "one prompt");
        assert_eq!(&*added[0].prompt, "Another.");
        assert_eq!(added, later[3..], "the definitions as given");
    }
}
