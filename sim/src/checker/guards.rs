//! The cost and visibility guards: no run starts once its agent's LLM calls of the local
//! day reached the budget, and a target gets only what it shows.

use std::collections::BTreeMap;

use jiff::Timestamp;

use systole::core::heartbeat::JobKind;
use systole::core::ids::{AgentId, HeartbeatKey};
use systole::driver::run::ACK_SHOWN_TEXT;

use super::reference::local_day_start;
use super::{fail, Model, Step};
use crate::trace::Entry;

pub const BUDGET: &str = "budget";
pub const VISIBILITY: &str = "visibility";

/// The note the simulated model sometimes adds to `HEARTBEAT_OK`.
pub const ACK_NOTE: &str = "All good, 3 tasks done.";

#[derive(Debug, Default)]
pub(super) struct GuardModel {
    /// Recorded runs per agent: when each finished, and its LLM calls.
    calls: BTreeMap<AgentId, Vec<(Timestamp, u64)>>,
    /// Durable runs per agent: when each finished, and its LLM calls (what a restarted
    /// engine reads back, so what a budget skip must be justified by).
    durable_calls: BTreeMap<AgentId, Vec<(Timestamp, u64)>>,
    /// When each agent's runs were last skipped for the budget (elapsed).
    budget_skipped: BTreeMap<AgentId, std::time::Duration>,
}

impl GuardModel {
    pub(super) fn durable_finish(&mut self, agent: &AgentId, finished_at: Timestamp, llm_calls: u32) {
        self.durable_calls.entry(agent.clone()).or_default().push((finished_at, u64::from(llm_calls)));
    }

    /// LLM calls of the agent's durable runs that finished at or after `since`.
    pub(super) fn durable_calls_since(&self, agent: &AgentId, since: Timestamp) -> u64 {
        self.durable_calls
            .get(agent)
            .map(|runs| runs.iter().filter(|(at, _)| *at >= since).map(|(_, calls)| calls).sum())
            .unwrap_or(0)
    }

    pub(super) fn budget_skipped_after(&self, agent: &AgentId, since: std::time::Duration) -> bool {
        self.budget_skipped.get(agent).is_some_and(|at| *at >= since)
    }
}

/// Whether a delivered text is a shown acknowledgement (never deduplicated: every one was asked for).
pub fn is_ack_text(text: &str) -> bool {
    text == ACK_SHOWN_TEXT || text == ACK_NOTE
}

impl Model<'_> {
    pub(super) fn run_recorded(&mut self, key: &HeartbeatKey, finished_at: Timestamp, llm_calls: u32) {
        self.guards.calls.entry(key.agent.clone()).or_default().push((finished_at, u64::from(llm_calls)));
    }

    pub(super) fn budget_skip(&mut self, entry: &Entry, key: &HeartbeatKey) {
        self.guards.budget_skipped.insert(key.agent.clone(), entry.elapsed);
    }

    /// At a run's start: the calls its agent's recorded runs made since the local day began
    /// (in the agents' zone, by the reference's reading of it) are below the budget.
    pub(super) fn budget_holds(&mut self, entry: &Entry, key: &HeartbeatKey, slot: Timestamp) -> Step {
        if self.defs.get(key).is_some_and(|def| def.kind == JobKind::CronMain) {
            return Ok(()); // no LLM call of its own
        }
        self.count(BUDGET);
        let zone = jiff::tz::TimeZone::get(self.options.budget_zone).unwrap_or(jiff::tz::TimeZone::UTC);
        let day = local_day_start(entry.wall, &zone);
        let calls: u64 = self
            .guards
            .calls
            .get(&key.agent)
            .map(|runs| runs.iter().filter(|(at, _)| *at >= day).map(|(_, calls)| calls).sum())
            .unwrap_or(0);
        let budget = self.options.llm_calls_per_day;
        if calls >= budget {
            return fail(
                BUDGET,
                format!("{key} started slot {slot} with {calls} LLM calls today; the budget is {budget}"),
            );
        }
        Ok(())
    }

    /// A started run's target shows something; a delivery is what the target shows.
    pub(super) fn visibility_at_start(&mut self, key: &HeartbeatKey, slot: Timestamp) -> Step {
        let Some(def) = self.defs.get(key) else { return Ok(()) };
        if super::reference::is_silent(&def.target) || def.kind == JobKind::CronMain {
            return Ok(());
        }
        self.count(VISIBILITY);
        if super::reference::shows_nothing(self.options.visibility) {
            return fail(VISIBILITY, format!("{key} started slot {slot} for a target that shows nothing"));
        }
        Ok(())
    }

    pub(super) fn visibility_of_delivery(&mut self, key: &HeartbeatKey, text: &str) -> Step {
        self.count(VISIBILITY);
        let visibility = self.options.visibility;
        let ack = is_ack_text(text);
        if ack && !visibility.show_ok {
            return fail(VISIBILITY, format!("{key} delivered the acknowledgement {text:?}; show_ok is off"));
        }
        if !ack && !visibility.show_alerts {
            return fail(VISIBILITY, format!("{key} delivered the alert {text:?}; show_alerts is off"));
        }
        Ok(())
    }
}
