//! The store port: heartbeats, their runtime state, slot claims and the execution log.
//!
//! Every write that records a run takes a slice, so a driver can group many runs into one
//! statement (on this machine sqlx costs about 70 µs per statement; multi-row statements
//! reach hundreds of thousands of rows a second).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use jiff::Timestamp;

use crate::core::breaker::{BreakerStep, Verdict};
use crate::core::budget::DaySpend;
use crate::core::guard::SkipReason;
use crate::core::heartbeat::{Heartbeat, HeartbeatDef, JobKind};
use crate::core::ids::{AgentId, HeartbeatId, HeartbeatKey};
use crate::core::pause::PauseRecord;
use crate::core::reply::ReplyKind;
use crate::core::retention::RunRetention;
use crate::core::schedule::Schedule;
use crate::core::system_events::SystemEvent;
use crate::core::usage::RunUsage;

/// The error text of a run found `running` at start-up.
pub const INTERRUPTED_ERROR_TEXT: &str = "the process stopped before this run finished";

/// Rows a store without its own [`Store::latest_slots`] reads at a time, down a heartbeat's
/// log, to find its latest slot past an operator's triggers.
pub const LATEST_SLOT_PAGE_ROWS: usize = 16;

/// A request to claim `(heartbeat, slot)` before running it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotClaim {
    pub key: HeartbeatKey,
    pub slot: Timestamp,
    pub claimed_at: Timestamp,
    /// The slot armed after this one; stored with the claim so a restart resumes there.
    pub next_slot: NextSlot,
    /// An operator's trigger, not a slot of the schedule: its row says so (a trigger's run
    /// says nothing of a one-shot, ADR 0048), and its claim stores no next slot and lifts
    /// no latest slot (ADR 0049).
    pub triggered: bool,
}

/// The slot a heartbeat is armed for, and the schedule that gave it. The store keeps the
/// slot only while the heartbeat still has that schedule: a writer that missed a change of
/// the definition (a node frozen through a cluster's reload) would otherwise leave the old
/// schedule's slot for the new definition to resume at (seed 31450034897). A change that
/// keeps the schedule keeps the slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NextSlot {
    pub at: Timestamp,
    pub schedule: Schedule,
}

/// A duplicate check: did `key` deliver a reply with `digest` in a run that finished at or
/// after `since`?
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DedupQuery {
    pub key: HeartbeatKey,
    pub digest: String,
    pub since: Timestamp,
}

/// Whether a claim was won. A slot claimed once is never claimed again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimOutcome {
    Claimed,
    AlreadyClaimed,
    /// The slot's row is an operator's trigger's, made in that very millisecond: it decided
    /// nothing of the schedule (ADR 0049), so a one-shot's own slot there is not decided
    /// either and takes the next free millisecond (ADR 0055).
    AlreadyTriggered,
    /// The heartbeat is no longer in the store (deleted while its timer fired).
    Gone,
}

/// Stored definitions by heartbeat, each shared: the run of a claimed slot holds a count
/// of its definition, whose prompt and target are counts of the store's texts where the
/// store holds them (the memory store, ADR 0062).
pub type Definitions = BTreeMap<HeartbeatKey, Arc<HeartbeatDef>>;

/// A pass's claims as the store answered them ([`Store::claim_and_read`]).
#[derive(Debug)]
pub struct ClaimedSlots {
    /// Each claim's outcome, in order.
    pub outcomes: Vec<ClaimOutcome>,
    /// The stored definitions of the heartbeats whose slots were claimed, or why they could
    /// not be read: the claims stand either way.
    pub definitions: Result<Definitions, StoreError>,
}

/// The heartbeats of `claims` whose claim was won (`outcomes` in the same order).
pub fn claimed_keys(claims: &[SlotClaim], outcomes: &[ClaimOutcome]) -> Vec<HeartbeatKey> {
    claims
        .iter()
        .zip(outcomes)
        .filter(|(_, outcome)| **outcome == ClaimOutcome::Claimed)
        .map(|(claim, _)| claim.key.clone())
        .collect()
}

/// [`Store::claim_and_read`] as two calls: the claims, then the definitions of those won.
///
/// # Errors
/// When the claims cannot be written; a failed read is in the answer instead.
pub async fn claim_then_read<S: Store + ?Sized>(store: &S, claims: &[SlotClaim]) -> Result<ClaimedSlots, StoreError> {
    let outcomes = store.claim_slots(claims).await?;
    let keys = claimed_keys(claims, &outcomes);
    let definitions = if keys.is_empty() { Ok(BTreeMap::new()) } else { store.definitions(&keys).await };
    Ok(ClaimedSlots { outcomes, definitions })
}

/// A due slot the guards skipped, with the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkipRecord {
    pub key: HeartbeatKey,
    pub slot: Timestamp,
    pub at: Timestamp,
    pub reason: SkipReason,
    pub next_slot: NextSlot,
    /// An operator's trigger skipped (an overlap, a budget): its row says so, as a
    /// triggered claim's does, and it lifts no floor of the schedule (ADR 0049).
    pub triggered: bool,
}

/// How a claimed run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ExecutionStatus {
    Running,
    Succeeded,
    Failed,
    TimedOut,
    Skipped,
    /// Claimed, then the process died before it finished (found at start-up).
    Interrupted,
}

impl ExecutionStatus {
    pub const ALL: [ExecutionStatus; 6] = [
        ExecutionStatus::Running,
        ExecutionStatus::Succeeded,
        ExecutionStatus::Failed,
        ExecutionStatus::TimedOut,
        ExecutionStatus::Skipped,
        ExecutionStatus::Interrupted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ExecutionStatus::Running => "running",
            ExecutionStatus::Succeeded => "succeeded",
            ExecutionStatus::Failed => "failed",
            ExecutionStatus::TimedOut => "timed-out",
            ExecutionStatus::Skipped => "skipped",
            ExecutionStatus::Interrupted => "interrupted",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|status| status.as_str() == text)
    }
}

/// What happened to a run's text, separately from whether the run itself succeeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DeliveryStatus {
    /// Nothing to deliver: the reply was empty, or the run failed before a reply.
    NotNeeded,
    Delivered,
    Failed,
}

impl DeliveryStatus {
    pub const ALL: [DeliveryStatus; 3] = [DeliveryStatus::NotNeeded, DeliveryStatus::Delivered, DeliveryStatus::Failed];

    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::NotNeeded => "not-needed",
            DeliveryStatus::Delivered => "delivered",
            DeliveryStatus::Failed => "failed",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|status| status.as_str() == text)
    }
}

/// Why a run's agent loop stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StopReason {
    /// The model answered without asking for more tools.
    Completed,
    /// The model called `pause_heartbeats`; the loop stopped at once.
    PauseHeartbeats,
    /// The model kept asking for tools until the agent's iteration cap.
    IterationCap,
    /// The job's pre-check answered that there is nothing to do: the model was never
    /// asked (ADR 0021).
    QuietCheck,
}

impl StopReason {
    pub const ALL: [StopReason; 4] =
        [StopReason::Completed, StopReason::PauseHeartbeats, StopReason::IterationCap, StopReason::QuietCheck];

    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Completed => "completed",
            StopReason::PauseHeartbeats => "pause_heartbeats",
            StopReason::IterationCap => "iteration-cap",
            StopReason::QuietCheck => "quiet-check",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|reason| reason.as_str() == text)
    }
}

/// The end of a claimed run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRecord {
    pub key: HeartbeatKey,
    pub slot: Timestamp,
    pub finished_at: Timestamp,
    pub status: ExecutionStatus,
    pub delivery: DeliveryStatus,
    pub duration: Duration,
    pub error: Option<String>,
    pub output_preview: Option<String>,
    /// Why the agent loop stopped, when it ran at all.
    pub stop_reason: Option<StopReason>,
    /// What the reply was, when the loop produced one.
    pub reply: Option<ReplyKind>,
    /// The digest of a delivered reply's normal form: what duplicate suppression compares.
    pub reply_digest: Option<String>,
    /// The system events the run's prompt listed. They are consumed in the same write
    /// that records the run, and only if it succeeded: a crash or a failure leaves them
    /// queued for the next run, and no event is consumed twice.
    pub consumes: Vec<u64>,
    /// LLM calls the run made (the daily budget counts them).
    pub llm_calls: u32,
    /// The tokens its completions reported and their cost (the daily caps count them).
    pub usage: RunUsage,
    /// The provider refused one of its completions in a way no retry heals (401, 402,
    /// 403): a failed run with it opens the breaker at once. Not stored.
    pub provider_refused: bool,
    /// What the model was sent and answered (JSON, bounded, secrets blanked); `None` when
    /// the run made no LLM call. Read back with [`Store::transcript`].
    pub transcript: Option<String>,
    /// The tools the run had and every call it made; `None` when it had none.
    pub tool_use: Option<ToolUse>,
}

/// What a run did with tools (ADR 0019), kept in the run log.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ToolUse {
    /// The tools the run was offered (`server/tool`), in the order the model saw them.
    pub offered: Vec<String>,
    pub calls: Vec<ToolCallRecord>,
}

/// One tool call of a run.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ToolCallRecord {
    /// `server/tool`, or the model's name when it named no tool the run had.
    pub tool: String,
    /// The arguments as the model wrote them, cut to `TOOL_ARGUMENTS_LOGGED_CHARS_MAX`.
    pub arguments: String,
    pub duration_ms: u64,
    pub outcome: ToolCallOutcome,
    /// The error, in short, when it did not succeed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// How a tool call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ToolCallOutcome {
    /// The tool answered.
    Ok,
    /// The tool answered with an error (`isError`), which the model read.
    ToolError,
    /// No answer within its time (the call was cancelled).
    Timeout,
    /// The server was down, or died during the call.
    Unavailable,
    /// Refused before it went out: no such tool in the run, or bad arguments.
    Refused,
    /// Refused because the run reached its cap of tool calls.
    Cap,
    /// A tool that may write, refused because this node no longer surely holds its lease.
    Fenced,
}

impl ToolCallOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            ToolCallOutcome::Ok => "ok",
            ToolCallOutcome::ToolError => "tool-error",
            ToolCallOutcome::Timeout => "timeout",
            ToolCallOutcome::Unavailable => "unavailable",
            ToolCallOutcome::Refused => "refused",
            ToolCallOutcome::Cap => "cap",
            ToolCallOutcome::Fenced => "fenced",
        }
    }
}

impl RunRecord {
    /// Whether this run counts as a failure for the circuit breaker.
    pub fn failed(&self) -> bool {
        self.status != ExecutionStatus::Succeeded
    }

    /// What this run adds to its agent's day (the daily caps).
    pub fn spend(&self) -> DaySpend {
        DaySpend {
            calls: u64::from(self.llm_calls),
            tokens: self.usage.tokens.total(),
            cost_micros: self.usage.cost_micros,
        }
    }

    /// How the breaker counts this run.
    pub fn verdict(&self) -> Verdict {
        match (self.failed(), self.provider_refused) {
            (false, _) => Verdict::Succeeded,
            (true, false) => Verdict::Failed,
            (true, true) => Verdict::Refused,
        }
    }
}

/// One row of the execution log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Execution {
    pub key: HeartbeatKey,
    pub slot: Timestamp,
    /// A run or skip of an operator's trigger (its claim or skip said so).
    pub triggered: bool,
    pub started_at: Timestamp,
    pub finished_at: Option<Timestamp>,
    pub status: ExecutionStatus,
    pub skip_reason: Option<SkipReason>,
    pub delivery: Option<DeliveryStatus>,
    pub duration: Option<Duration>,
    pub error: Option<String>,
    pub output_preview: Option<String>,
    pub stop_reason: Option<StopReason>,
    pub reply: Option<ReplyKind>,
    /// LLM calls, tokens and cost of a finished run (zero for a skip or a running row).
    pub llm_calls: u32,
    pub usage: RunUsage,
    pub tool_use: Option<ToolUse>,
}

impl Execution {
    /// What this row adds to its agent's day (zero for a skip or a running row).
    pub fn spend(&self) -> DaySpend {
        DaySpend {
            calls: u64::from(self.llm_calls),
            tokens: self.usage.tokens.total(),
            cost_micros: self.usage.cost_micros,
        }
    }
}

/// What seeding the config did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeedReport {
    pub inserted: Vec<HeartbeatKey>,
    /// The config's definition changed: the definition is replaced and the heartbeat re-enabled.
    pub updated: Vec<HeartbeatKey>,
    /// Same definition as last seed: runtime state (breaker, disable) left alone.
    pub unchanged: Vec<HeartbeatKey>,
    /// Seeded from an earlier config, absent from this one.
    pub removed: Vec<HeartbeatKey>,
}

/// What queueing a system event did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Queued {
    /// Queued under `id`; `dropped` of the oldest pending events made room for it.
    Added { id: u64, dropped: usize },
    /// The newest pending event says the same: a consecutive duplicate is not queued.
    Duplicate,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("store backend error: {0}")]
    Backend(String),
    #[error("store holds a row it cannot read ({what}): {problem}")]
    Corrupt { what: String, problem: String },
    /// A write for partition `partition` under lease term `term`, which another node has
    /// taken over since (or which never held the heartbeat): nothing was written.
    #[error("this node no longer holds partition {partition} (its term {term} was taken over); the write was refused")]
    Fenced { partition: u32, term: u64 },
    /// Text no store may keep (a NUL character): nothing of the write was stored.
    #[error("the store refuses {field}: {problem}")]
    Refused { field: String, problem: String },
}

/// A heartbeat as an engine's start-up arms it ([`Store::load_for_arming_in_pages`]).
#[derive(Debug, Clone)]
pub struct Armable {
    pub heartbeat: Heartbeat,
    /// The latest slot the log has for it when it is enabled, an operator's triggers left
    /// out ([`Store::latest_slots`]): its armed slot goes above.
    pub latest_slot: Option<Timestamp>,
}

/// An agent's jobs as its list shows them ([`Store::jobs_of_agents`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AgentJobs {
    pub count: usize,
    /// Whether one of them is its agent heartbeat (the HEARTBEAT.md one).
    pub has_agent_heartbeat: bool,
}

/// Durable state of the engine.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Every stored heartbeat, enabled or not, ordered by key.
    async fn load_heartbeats(&self) -> Result<Vec<Heartbeat>, StoreError>;

    /// At most `limit` of `agent`'s stored heartbeats after the id `after` (from its first
    /// when `None`), enabled or not, ordered by id: a page of an agent's list, or all of it
    /// for its schedule tool, where [`Store::load_heartbeats`] reads every agent's (a
    /// million rows for one agent's dozen). The default filters that.
    async fn heartbeats_of_agent(
        &self,
        agent: &AgentId,
        after: Option<&HeartbeatId>,
        limit: usize,
    ) -> Result<Vec<Heartbeat>, StoreError> {
        let all = self.load_heartbeats().await?;
        let mine = all.into_iter().filter(|heartbeat| heartbeat.def.key.agent == *agent);
        let later = mine.filter(|heartbeat| after.is_none_or(|after| heartbeat.def.key.heartbeat > *after));
        Ok(later.take(limit).collect())
    }

    /// At most `limit` stored heartbeats after `after` in key order (from the first when
    /// `None`): a page of a status, whose last key is the next page's `after`. The default
    /// filters [`Store::load_heartbeats`].
    async fn heartbeats_page(&self, after: Option<&HeartbeatKey>, limit: usize) -> Result<Vec<Heartbeat>, StoreError> {
        let all = self.load_heartbeats().await?;
        let later = all.into_iter().filter(|heartbeat| after.is_none_or(|after| heartbeat.def.key > *after));
        Ok(later.take(limit).collect())
    }

    /// Each agent that owns a stored heartbeat (`only` that one, when named), with how many
    /// it owns and whether one is its agent heartbeat: the agents' list, and whether an
    /// agent is known, without reading a row's definition. The default counts
    /// [`Store::load_heartbeats`].
    async fn jobs_of_agents(&self, only: Option<&AgentId>) -> Result<BTreeMap<AgentId, AgentJobs>, StoreError> {
        let mut jobs: BTreeMap<AgentId, AgentJobs> = BTreeMap::new();
        let all = self.load_heartbeats().await?;
        for heartbeat in all.into_iter().filter(|heartbeat| only.is_none_or(|agent| heartbeat.def.key.agent == *agent))
        {
            let counted = jobs.entry(heartbeat.def.key.agent).or_default();
            counted.count += 1;
            counted.has_agent_heartbeat |= heartbeat.def.kind == JobKind::Agent;
        }
        Ok(jobs)
    }

    /// Those of `keys` that are stored, definition and state, as the store holds them now
    /// (in no particular order). A cluster's engine adopts a reload's rows by it in its own
    /// turn, after the operator's changes it took before (ADR 0056). One statement per
    /// batch of keys.
    async fn heartbeats(&self, keys: &[HeartbeatKey]) -> Result<Vec<Heartbeat>, StoreError>;

    /// Seeds config definitions: an upsert that never overwrites runtime changes (see
    /// [`SeedReport`]). Heartbeats created at run time are never touched. An inserted or
    /// replaced definition is stored with its schedule's first slot after `at`, as its next
    /// slot (ADR 0028).
    async fn seed_config(&self, defs: &[HeartbeatDef], at: Timestamp) -> Result<SeedReport, StoreError>;

    /// Creates or replaces a heartbeat's definition at run time; a replaced one is re-enabled
    /// with a clean breaker and waits one full interval: its next slot is its schedule's first
    /// after `at` (ADR 0028).
    async fn put_heartbeat(&self, def: &HeartbeatDef, at: Timestamp) -> Result<(), StoreError>;

    /// Deletes a heartbeat; its execution log stays. Returns whether it existed.
    async fn delete_heartbeat(&self, key: &HeartbeatKey) -> Result<bool, StoreError>;

    /// Enables or disables a heartbeat; enabling clears the breaker count. Returns whether it existed.
    async fn set_enabled(&self, key: &HeartbeatKey, enabled: bool, reason: Option<&str>) -> Result<bool, StoreError>;

    /// Disables a heartbeat that is enabled, with `reason`: the engine's retirement of a
    /// job with no slot left. One disabled already (by an operator, or by its breaker)
    /// keeps its reason, and a deleted one stays deleted (ADR 0050). Returns whether it
    /// changed.
    async fn disable_if_enabled(&self, key: &HeartbeatKey, reason: &str) -> Result<bool, StoreError>;

    /// Enables a heartbeat whose breaker is open for its probe (half-open), keeping its
    /// failure count, so one more failure opens it again. Only a heartbeat still disabled by
    /// the breaker changes: an operator's disable or enable in the meantime wins. Returns
    /// whether it changed.
    async fn half_open_breaker(&self, key: &HeartbeatKey) -> Result<bool, StoreError>;

    /// Records the slot each heartbeat is armed for, for heartbeats armed without a claim;
    /// a slot whose schedule is no longer the heartbeat's is not kept ([`NextSlot`]).
    async fn set_next_slots(&self, slots: &[(HeartbeatKey, NextSlot)]) -> Result<(), StoreError>;

    /// Claims slots before running them, in one transaction; the outcome of each claim in order.
    async fn claim_slots(&self, claims: &[SlotClaim]) -> Result<Vec<ClaimOutcome>, StoreError>;

    /// Claims `claims` as [`Store::claim_slots`] does, then reads the definitions of the
    /// heartbeats whose claims were won, as [`Store::definitions`] does: what a dispatch
    /// pass needs before its runs start. A store that can answers both in one round trip
    /// (SQLite reads them on its writer's thread, right after the claims commit, ADR 0037);
    /// a wrapper that adds to either call keeps this default, which goes through its own.
    ///
    /// # Errors
    /// When the claims cannot be written; a read that fails leaves the claims made, and
    /// is in the answer.
    async fn claim_and_read(&self, claims: &[SlotClaim]) -> Result<ClaimedSlots, StoreError> {
        claim_then_read(self, claims).await
    }

    /// Records skipped slots (a slot already recorded is left as it was).
    async fn record_skips(&self, skips: &[SkipRecord]) -> Result<(), StoreError>;

    /// Records finished runs, in one transaction, and advances each heartbeat's breaker in
    /// the same write: the store owns the failure count, so a re-enable that clears it
    /// while a run is in flight is never undone by that run. A step that trips disables
    /// the heartbeat (`circuit-breaker`) and stores when (the run's `finished_at`); a
    /// success closes it. Returns the breaker step of each run, in order.
    async fn finish_runs(&self, runs: &[RunRecord], breaker_failures_max: u32) -> Result<Vec<BreakerStep>, StoreError>;

    /// Marks every run still `running` as `interrupted` (call at start-up, before the
    /// driver starts). Returns how many there were.
    async fn recover_interrupted(&self, at: Timestamp) -> Result<u64, StoreError>;

    /// Records an agent's heartbeat pause, replacing any earlier one. A tool reports the
    /// pause only after this returned, so it survives a crash.
    async fn set_pause(&self, agent: &AgentId, pause: &PauseRecord) -> Result<(), StoreError>;

    /// Removes an agent's pause (an operator's resume).
    async fn clear_pause(&self, agent: &AgentId) -> Result<(), StoreError>;

    /// Removes an agent's pause once it has ended, so a restart after a backward wall jump
    /// cannot revive it: only if the stored one ends at `until`, the one that ended. A newer
    /// pause an operator stored meanwhile, before the engine heard of it, stays.
    async fn end_pause(&self, agent: &AgentId, until: Timestamp) -> Result<(), StoreError>;

    /// Every stored pause (expired ones too; the engine drops what has ended).
    async fn load_pauses(&self) -> Result<Vec<(AgentId, PauseRecord)>, StoreError>;

    /// The heartbeat's stored count of consecutive failures, or `None` when it is not stored.
    /// The driver reads it after a replace or an enable, which reset the count: a run that
    /// finished in between counted against the new definition, whatever order the driver
    /// heard of the two in.
    async fn consecutive_failures(&self, key: &HeartbeatKey) -> Result<Option<u32>, StoreError>;

    /// Deletes the rows of the run log that `retention` lets go at `now` (see
    /// [`crate::core::retention`]: never a heartbeat's newest row, nor its newest that is
    /// not a trigger (ADR 0049), a running one, or what dedup and the budget still read);
    /// returns how many went.
    async fn prune_runs(&self, now: Timestamp, retention: RunRetention) -> Result<u64, StoreError>;

    /// The latest slot the log has for each of `keys` that has one, an operator's
    /// triggers left out (ADR 0049): where a heartbeat armed afresh must go above. A store
    /// should answer in a few statements, not one per key (the default
    /// [`Store::load_for_arming_in_pages`] asks for every enabled heartbeat). Asked for many keys, a store may leave out those of heartbeats it no
    /// longer holds (deleted meanwhile: nothing arms them).
    async fn latest_slots(&self, keys: &[HeartbeatKey]) -> Result<BTreeMap<HeartbeatKey, Timestamp>, StoreError> {
        let mut latest = BTreeMap::new();
        for key in keys {
            // Newest first, a page at a time, down to the first row that is not a trigger.
            let mut before = None;
            loop {
                let page = self.executions_page(key, before, LATEST_SLOT_PAGE_ROWS).await?;
                if let Some(execution) = page.iter().find(|execution| !execution.triggered) {
                    latest.insert(key.clone(), execution.slot);
                    break;
                }
                match page.last() {
                    Some(oldest) if page.len() == LATEST_SLOT_PAGE_ROWS => before = Some(oldest.slot),
                    _ => break,
                }
            }
        }
        Ok(latest)
    }

    /// The newest `limit` executions of a heartbeat, newest first.
    async fn executions(&self, key: &HeartbeatKey, limit: usize) -> Result<Vec<Execution>, StoreError> {
        self.executions_page(key, None, limit).await
    }

    /// The newest `limit` executions of each of `keys` that has any, newest first, in one
    /// read a batch of keys: a status page of hundreds of jobs makes one query, not one a
    /// job. The default asks heartbeat by heartbeat (the stores of the simulator use it).
    async fn recent_executions(
        &self,
        keys: &[HeartbeatKey],
        limit: usize,
    ) -> Result<BTreeMap<HeartbeatKey, Vec<Execution>>, StoreError> {
        let mut recent = BTreeMap::new();
        for key in keys {
            let runs = self.executions(key, limit).await?;
            if !runs.is_empty() {
                recent.insert(key.clone(), runs);
            }
        }
        Ok(recent)
    }

    /// The newest `limit` executions of a heartbeat whose slot is before `before` (all
    /// when `None`), newest first: a page of the run log, the last slot its cursor.
    async fn executions_page(
        &self,
        key: &HeartbeatKey,
        before: Option<Timestamp>,
        limit: usize,
    ) -> Result<Vec<Execution>, StoreError>;

    /// Every heartbeat as [`Store::load_heartbeats`] gives it, for an engine to arm: a store
    /// may leave out what only a run reads, at its default (the prompt but an agent
    /// heartbeat's, dedup, timeout, tools, model; the driver reads a claimed slot's whole
    /// definition with [`Store::definitions`]), so it never enters the engine's memory.
    async fn load_for_arming(&self) -> Result<Vec<Heartbeat>, StoreError> {
        self.load_heartbeats().await
    }

    /// What an engine's start-up arms: [`Store::load_for_arming`] with each enabled
    /// heartbeat's [`Store::latest_slots`], a page at a time and in no promised order. `arm`
    /// takes each page as it is read, so an engine arms one while the store reads the next;
    /// on an error it may have taken some pages. `arm` must not call the store: a store may
    /// hand a page over while it holds its read (the memory store, its lock).
    async fn load_for_arming_in_pages(&self, arm: &mut (dyn FnMut(Vec<Armable>) + Send)) -> Result<(), StoreError> {
        let heartbeats = self.load_for_arming().await?;
        let enabled: Vec<HeartbeatKey> = heartbeats
            .iter()
            .filter(|heartbeat| heartbeat.state.enabled)
            .map(|heartbeat| heartbeat.def.key.clone())
            .collect();
        let latest = self.latest_slots(&enabled).await?;
        arm(heartbeats
            .into_iter()
            .map(|heartbeat| {
                let latest_slot = latest.get(&heartbeat.def.key).copied();
                Armable { heartbeat, latest_slot }
            })
            .collect());
        Ok(())
    }

    /// The stored definitions of those of `keys` that are stored: what their claimed slots
    /// run with (the driver keeps only what arming needs, ADR 0026). One statement per
    /// batch of keys.
    async fn definitions(&self, keys: &[HeartbeatKey]) -> Result<Definitions, StoreError>;

    /// For each query, in order: whether its heartbeat delivered a reply with its digest in
    /// a run that finished at or after its `since` (duplicate suppression). Many at once:
    /// the runs finishing together ask in one read (`driver::dedup_reads`).
    async fn delivered_since(&self, queries: &[DedupQuery]) -> Result<Vec<bool>, StoreError>;

    /// Queues a system event for `agent`'s heartbeat (see [`crate::core::system_events`]):
    /// a consecutive duplicate is not queued, and beyond `SYSTEM_EVENTS_PER_AGENT_MAX`
    /// pending events the oldest are dropped.
    async fn queue_system_event(&self, agent: &AgentId, text: &str, at: Timestamp) -> Result<Queued, StoreError>;

    /// The agent's pending events still within their time to live at `now`, oldest first.
    async fn pending_system_events(&self, agent: &AgentId, now: Timestamp) -> Result<Vec<SystemEvent>, StoreError>;

    /// LLM calls, tokens and cost of `agent`'s runs (every agent's with `None`: the
    /// global cap) recorded as finished at or after `since` (the daily caps), leaving out
    /// the runs named in `excluding`, in one consistent read. The driver names its runs in flight: one may be recorded already
    /// while the driver has not heard yet, and it counts each of them when it hears, so
    /// the store must not count them too.
    async fn spent_since(
        &self,
        agent: Option<&AgentId>,
        since: Timestamp,
        excluding: &[(HeartbeatKey, Timestamp)],
    ) -> Result<DaySpend, StoreError>;

    /// [`Store::spent_since`] for each of `days` (an agent and the start of its day), each
    /// leaving out the runs of `excluding` that are its agent's: one answer per day, in
    /// order. A store that can read them together does (the driver reads every agent it
    /// decides for in a pass, and a dispatch of a thousand agents was a thousand reads);
    /// by default, one read each.
    async fn spent_since_each(
        &self,
        days: &[(AgentId, Timestamp)],
        excluding: &[(HeartbeatKey, Timestamp)],
    ) -> Vec<Result<DaySpend, StoreError>> {
        let mut answers = Vec::with_capacity(days.len());
        for (agent, since) in days {
            let own: Vec<(HeartbeatKey, Timestamp)> =
                excluding.iter().filter(|(key, _)| key.agent == *agent).cloned().collect();
            answers.push(self.spent_since(Some(agent), *since, &own).await);
        }
        answers
    }

    /// The transcript of `key`'s run of `slot`, if it has one (pruned with its row).
    async fn transcript(&self, key: &HeartbeatKey, slot: Timestamp) -> Result<Option<String>, StoreError>;

    /// What each job spent in runs recorded as finished at or after `since` (what status
    /// shows per job): `agent`'s jobs, or every agent's with `None` (status reads all
    /// agents that share a day start at once); jobs that spent nothing are absent.
    async fn spent_by_job(
        &self,
        agent: Option<&AgentId>,
        since: Timestamp,
    ) -> Result<BTreeMap<HeartbeatKey, DaySpend>, StoreError>;

    /// Ends this process's use of the store at a stop, once nothing uses it any more: a
    /// SQLite file then holds every commit itself, with no WAL beside it that a copy of
    /// the file would miss, and a PostgreSQL server sees its sessions end rather than
    /// break. Any use after it fails. A store with nothing to end does nothing.
    async fn close(&self) -> Result<(), StoreError> {
        Ok(())
    }
}
