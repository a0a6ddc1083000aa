//! The agent layer's invariants: an effectively empty `HEARTBEAT.md` never costs an LLM
//! call; the agent heartbeat never starts while a user turn holds the lane; the flood caps
//! hold; a system event is consumed at most once, by a successful run that listed it, and
//! after healing every event is processed.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use jiff::Timestamp;

use systole::core::ids::{AgentId, HeartbeatKey};
use systole::core::system_events::CRON_EVENT_PROMPT;
use systole::core::wake::WakeReason;
use systole::driver::events::EngineEvent;
use systole::limits::{
    AGENT_HEARTBEAT_FLOOD_WINDOW_SECS, AGENT_HEARTBEAT_SPACING_SECS_MIN, AGENT_HEARTBEAT_STARTS_PER_WINDOW_MAX,
};

use super::{fail, Model, Step, DEADLINE_SLACK, SETTLE_SECS};
use crate::agents::EMPTY_FILES;
use crate::trace::Entry;

pub const EMPTY_FILE_NO_CALL: &str = "empty-file-no-call";
pub const USER_GOES_FIRST: &str = "user-goes-first";
pub const FLOOD_CAPS: &str = "flood-caps";
pub const EVENT_CONSUMED_ONCE: &str = "event-consumed-once";
pub const EVENTS_PROCESSED: &str = "events-processed";

/// How long before the end an event queued after healing must have been processed by:
/// the coalescing window, the flood guard's longest wait and a run, with room to spare.
const EVENT_PROCESSING_SECS_MAX: u64 = 300;
const FILE_SECTION: &str = "\n\nHEARTBEAT.md:\n";

#[derive(Debug, Default)]
pub(super) struct AgentModel {
    /// Each agent's `HEARTBEAT.md` as the workload last wrote it.
    files: BTreeMap<AgentId, Option<String>>,
    /// Open user turns per (life, agent).
    user_turns: BTreeMap<(u32, AgentId), usize>,
    /// Agent heartbeat starts per (life, agent), by elapsed time.
    starts: BTreeMap<(u32, AgentId), VecDeque<Duration>>,
    /// The reason of the latest wake decided per agent heartbeat.
    wake_reason: BTreeMap<HeartbeatKey, WakeReason>,
    /// Every queued event: agent, text, when (elapsed).
    queued: BTreeMap<u64, (AgentId, String, Duration)>,
    /// Pending ids per agent, oldest first (overflow drops from the front).
    pending: BTreeMap<AgentId, VecDeque<u64>>,
    /// Events queued while a cap of their agent's day was reached: its heartbeat is held
    /// until the next day.
    queued_over_budget: BTreeSet<u64>,
    consumed: BTreeSet<u64>,
    /// Event texts some LLM prompt listed.
    listed: BTreeSet<String>,
    /// When each agent heartbeat's runs finished (elapsed), and whether each succeeded.
    finished: BTreeMap<HeartbeatKey, Vec<(Duration, bool)>>,
}

impl AgentModel {
    pub(super) fn file_changed(&mut self, agent: &AgentId, content: &Option<String>) {
        self.files.insert(agent.clone(), content.clone());
    }

    pub(super) fn crashed(&mut self, life: u32) {
        self.user_turns.retain(|(turn_life, _), _| *turn_life != life);
    }

    /// Whether the agent's `HEARTBEAT.md` is one of the effectively empty ones.
    pub(super) fn file_is_empty(&self, agent: &AgentId) -> bool {
        self.files.get(agent).cloned().flatten().is_some_and(|file| EMPTY_FILES.contains(&file.as_str()))
    }

    /// The agent heartbeat's starts in `life` still in the flood window, oldest first.
    pub(super) fn starts_in(&self, life: u32, agent: &AgentId) -> Vec<Duration> {
        self.starts.get(&(life, agent.clone())).map(|starts| starts.iter().copied().collect()).unwrap_or_default()
    }

    pub(super) fn user_turns_open(&self, life: u32, agent: &AgentId) -> usize {
        self.user_turns.get(&(life, agent.clone())).copied().unwrap_or(0)
    }

    /// An agent heartbeat's run finished at `at`.
    pub(super) fn run_finished(&mut self, key: &HeartbeatKey, at: Duration, succeeded: bool) {
        if key.heartbeat.is_reserved() {
            self.finished.entry(key.clone()).or_default().push((at, succeeded));
        }
    }

    /// Whether a run of `key` failed at or after `since` and none succeeded after it: its
    /// events stay queued (they leave only with a success), and its next try waits for a
    /// backoff and a wake the model does not follow (seed 1927873415519).
    fn failed_since(&self, key: &HeartbeatKey, since: Duration) -> bool {
        let after = self.finished.get(key).into_iter().flatten().filter(|(at, _)| *at >= since);
        let (mut failed, mut succeeded) = (false, false);
        for (_, ok) in after {
            (failed, succeeded) = (failed || !ok, succeeded || *ok);
        }
        failed && !succeeded
    }

    /// Whether the latest start of this agent heartbeat was asked for explicitly: such a
    /// run goes through a pause, quiet hours and a backoff by design.
    pub(super) fn explicit(&self, key: &HeartbeatKey) -> bool {
        key.heartbeat.is_reserved() && self.wake_reason.get(key).is_some_and(|reason| reason.is_explicit())
    }
}

impl Model<'_> {
    pub(super) fn agent_event(&mut self, entry: &Entry, life: u32, event: &EngineEvent) -> Step {
        match event {
            EngineEvent::UserTurnStarted { agent } => {
                *self.agents.user_turns.entry((life, agent.clone())).or_default() += 1;
            }
            EngineEvent::UserTurnEnded { agent } => {
                if let Some(open) = self.agents.user_turns.get_mut(&(life, agent.clone())) {
                    *open = open.saturating_sub(1);
                }
            }
            EngineEvent::WakeDecided { key, reason, .. } => {
                self.agents.wake_reason.insert(key.clone(), *reason);
            }
            EngineEvent::RunStarted { key, slot } if key.heartbeat.is_reserved() => {
                return self.agent_started(entry, life, key, *slot);
            }
            _ => {}
        }
        Ok(())
    }

    fn agent_started(&mut self, entry: &Entry, life: u32, key: &HeartbeatKey, slot: Timestamp) -> Step {
        self.count(USER_GOES_FIRST);
        let open = self.agents.user_turns.get(&(life, key.agent.clone())).copied().unwrap_or(0);
        if open > 0 {
            return fail(USER_GOES_FIRST, format!("{key} started slot {slot} while {open} user turn(s) held the lane"));
        }
        self.count(FLOOD_CAPS);
        let spacing = Duration::from_secs(AGENT_HEARTBEAT_SPACING_SECS_MIN);
        let window = Duration::from_secs(AGENT_HEARTBEAT_FLOOD_WINDOW_SECS);
        let starts = self.agents.starts.entry((life, key.agent.clone())).or_default();
        if let Some(last) = starts.back() {
            if entry.elapsed + DEADLINE_SLACK < *last + spacing {
                let gap = entry.elapsed - *last;
                return fail(FLOOD_CAPS, format!("{key} started {gap:?} after its previous start"));
            }
        }
        while starts.front().is_some_and(|start| *start + window <= entry.elapsed) {
            starts.pop_front();
        }
        starts.push_back(entry.elapsed);
        if starts.len() > AGENT_HEARTBEAT_STARTS_PER_WINDOW_MAX {
            return fail(FLOOD_CAPS, format!("{key} started {} times within {window:?}", starts.len()));
        }
        Ok(())
    }

    pub(super) fn agent_llm_call(&mut self, prompt: &str) -> Step {
        if let Some((_, file)) = prompt.split_once(FILE_SECTION) {
            self.count(EMPTY_FILE_NO_CALL);
            if EMPTY_FILES.contains(&file) {
                return fail(EMPTY_FILE_NO_CALL, format!("an LLM call for an effectively empty file: {prompt:?}"));
            }
        }
        if let Some(listed) = prompt.strip_suffix(CRON_EVENT_PROMPT) {
            for line in listed.lines() {
                if let Some(text) = line.strip_prefix("- ") {
                    self.agents.listed.insert(text.to_owned());
                }
            }
        }
        Ok(())
    }

    pub(super) fn event_queued(&mut self, entry: &Entry, agent: &AgentId, id: u64, text: &str, dropped: usize) {
        self.agents.queued.insert(id, (agent.clone(), text.to_owned(), entry.elapsed));
        if self.budget_spent_at(agent, entry.wall) {
            self.agents.queued_over_budget.insert(id);
        }
        let pending = self.agents.pending.entry(agent.clone()).or_default();
        pending.push_back(id);
        for _ in 0..dropped {
            pending.pop_front();
        }
    }

    pub(super) fn events_consumed(&mut self, key: &HeartbeatKey, slot: Timestamp, consumed: &[u64]) -> Step {
        for id in consumed {
            self.count(EVENT_CONSUMED_ONCE);
            let Some((agent, text, _)) = self.agents.queued.get(id).cloned() else {
                return fail(EVENT_CONSUMED_ONCE, format!("{key} slot {slot} consumed event {id}, never queued"));
            };
            if !self.agents.consumed.insert(*id) {
                return fail(EVENT_CONSUMED_ONCE, format!("{key} slot {slot} consumed event {id} a second time"));
            }
            if agent != key.agent || !key.heartbeat.is_reserved() {
                return fail(EVENT_CONSUMED_ONCE, format!("{key} consumed event {id} of agent {agent}"));
            }
            if !self.agents.listed.contains(&text) {
                return fail(EVENT_CONSUMED_ONCE, format!("{key} consumed event {id} ({text:?}) no prompt listed"));
            }
            if let Some(pending) = self.agents.pending.get_mut(&agent) {
                pending.retain(|pending| pending != id);
            }
        }
        Ok(())
    }

    /// After healing, every event queued well before the end was processed, where the agent
    /// heartbeat is enabled at the end.
    pub(super) fn events_processed(&mut self, end: Duration, heartbeats: &[(HeartbeatKey, bool)]) -> Step {
        let Some(healed_at) = self.healed_at else { return Ok(()) };
        let from = healed_at + Duration::from_secs(SETTLE_SECS);
        let until = end.saturating_sub(Duration::from_secs(EVENT_PROCESSING_SECS_MAX));
        for (key, _) in heartbeats.iter().filter(|(key, enabled)| *enabled && key.heartbeat.is_reserved()) {
            let pending = self.agents.pending.get(&key.agent).cloned().unwrap_or_default();
            if super::reference::shows_nothing(self.options.visibility) {
                continue; // the heartbeat never runs: `visibility` checks that
            }
            let due: Vec<(u64, String, Duration)> = self
                .agents
                .queued
                .iter()
                .filter(|(_, (agent, _, at))| *agent == key.agent && *at >= from && *at <= until)
                .map(|(id, (_, text, at))| (*id, text.clone(), *at))
                .collect();
            for (id, text, queued_at) in due {
                if self.guards.budget_skipped_after(&key.agent, queued_at) {
                    continue; // a spent budget holds the heartbeat until the next day
                }
                // Spent already when the event came: the wake it asked for, or its retry
                // after the flood guard, is refused quietly (seed 1927873881885).
                if self.agents.queued_over_budget.contains(&id) {
                    continue;
                }
                let ttl = Duration::from_secs(systole::limits::SYSTEM_EVENT_TTL_SECS);
                if self.breaker.open_between(key, queued_at, queued_at + ttl) {
                    continue; // its breaker held the heartbeat while the event could still be listed
                }
                if self.agents.failed_since(key, queued_at) {
                    continue; // its runs since failed (a required tool missing, a model down)
                }
                // While every run place is taken nothing new starts (ADR 0023): an event is
                // owed only if the engine had room for long enough while it could still be
                // listed (before its time to live ran out, and before the end).
                let listable_until = end.min(queued_at + Duration::from_secs(systole::limits::SYSTEM_EVENT_TTL_SECS));
                let full = self.admission.full_within(queued_at, listable_until);
                let room = listable_until.saturating_sub(queued_at).saturating_sub(full);
                if room < Duration::from_secs(EVENT_PROCESSING_SECS_MAX) {
                    continue;
                }
                self.count(EVENTS_PROCESSED);
                if pending.contains(&id) {
                    return fail(EVENTS_PROCESSED, format!("event {id} ({text:?}) for {key} still pending at the end"));
                }
            }
        }
        Ok(())
    }
}
