//! The cost and visibility guards: no run starts once its agent's LLM calls, tokens or
//! cost of the local day reached their cap (so a cap is passed by at most what was in
//! flight when it was reached), and a target gets only what it shows.

use std::collections::BTreeMap;

use jiff::Timestamp;

use systole::core::heartbeat::JobKind;
use systole::core::ids::{AgentId, HeartbeatKey};
use systole::driver::run::ACK_SHOWN_TEXT;

use super::reference::local_day_start;
use super::{fail, Model, Step};
use crate::trace::Entry;

pub const BUDGET: &str = "budget";
pub const TOKEN_CAP: &str = "token-cap";
pub const COST_CAP: &str = "cost-cap";
/// Every run that got an answer from the model counts its tokens and cost, silent ones
/// included (the simulated model reports usage with every answer, at a price above 0).
pub const USAGE_COUNTED: &str = "usage-counted";
/// A cap reached is announced once per agent, day and cap, and never one not reached.
pub const CAP_ANNOUNCED: &str = "cap-announced";

/// What one recorded run spent, by the checker's own reading of the run's record.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Spent {
    pub calls: u64,
    pub tokens: u64,
    pub cost_micros: u64,
}

/// One of the agents' daily caps, as the checker reads it.
#[derive(Debug, Clone, Copy)]
pub(super) enum Cap {
    Calls,
    Tokens,
    Cost,
}

impl Cap {
    pub(super) const ALL: [Cap; 3] = [Cap::Calls, Cap::Tokens, Cap::Cost];

    fn invariant(self) -> &'static str {
        match self {
            Cap::Calls => BUDGET,
            Cap::Tokens => TOKEN_CAP,
            Cap::Cost => COST_CAP,
        }
    }

    fn of(self, spent: &Spent) -> u64 {
        match self {
            Cap::Calls => spent.calls,
            Cap::Tokens => spent.tokens,
            Cap::Cost => spent.cost_micros,
        }
    }

    pub(super) fn limit(self, options: &crate::options::SimOptions) -> u64 {
        match self {
            Cap::Calls => options.llm_calls_per_day,
            Cap::Tokens => options.daily_tokens_max,
            Cap::Cost => options.daily_cost_max_micros,
        }
    }

    pub(super) fn unit(self) -> &'static str {
        match self {
            Cap::Calls => "LLM calls",
            Cap::Tokens => "tokens",
            Cap::Cost => "micros of cost",
        }
    }
}
pub const VISIBILITY: &str = "visibility";

/// The note the simulated model sometimes adds to `HEARTBEAT_OK`.
pub const ACK_NOTE: &str = "All good, 3 tasks done.";

#[derive(Debug, Default)]
pub(super) struct GuardModel {
    /// Recorded runs per agent: when each finished, and what it spent.
    spent: BTreeMap<AgentId, Vec<(Timestamp, Spent)>>,
    /// Durable runs per agent: when each finished, and what it spent (what a restarted
    /// engine reads back, so what a cap's skip must be justified by).
    durable_spent: BTreeMap<AgentId, Vec<(Timestamp, Spent)>>,
    /// When each agent's runs were last skipped for a daily cap (elapsed).
    budget_skipped: BTreeMap<AgentId, std::time::Duration>,
    /// Caps the engine said were reached (agent, day, reason), and whether each was
    /// announced since.
    caps_reached: BTreeMap<(AgentId, Timestamp, &'static str), bool>,
}

fn sum_since(runs: Option<&Vec<(Timestamp, Spent)>>, since: Timestamp, cap: Cap) -> u64 {
    runs.map(|runs| runs.iter().filter(|(at, _)| *at >= since).map(|(_, spent)| cap.of(spent)).sum()).unwrap_or(0)
}

impl GuardModel {
    pub(super) fn durable_finish(&mut self, agent: &AgentId, finished_at: Timestamp, spent: Spent) {
        self.durable_spent.entry(agent.clone()).or_default().push((finished_at, spent));
    }

    /// What the agent's durable runs that finished at or after `since` spent of `cap`.
    pub(super) fn durable_since(&self, agent: &AgentId, since: Timestamp, cap: Cap) -> u64 {
        sum_since(self.durable_spent.get(agent), since, cap)
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
    pub(super) fn run_recorded(&mut self, key: &HeartbeatKey, finished_at: Timestamp, spent: Spent) {
        self.guards.spent.entry(key.agent.clone()).or_default().push((finished_at, spent));
    }

    /// A recorded run that succeeded after at least one LLM call spent tokens and money.
    pub(super) fn usage_counted(&mut self, key: &HeartbeatKey, slot: Timestamp, succeeded: bool, spent: Spent) -> Step {
        if !succeeded || spent.calls == 0 {
            return Ok(());
        }
        self.count(USAGE_COUNTED);
        if spent.tokens == 0 || spent.cost_micros == 0 {
            let message = format!(
                "{key} slot {slot} succeeded after {} LLM calls but counted {} tokens and {} micros",
                spent.calls, spent.tokens, spent.cost_micros
            );
            return fail(USAGE_COUNTED, message);
        }
        Ok(())
    }

    /// The engine said `agent` reached a cap: once per day and cap.
    pub(super) fn cap_reached(&mut self, agent: &AgentId, day: Timestamp, reason: &'static str) -> Step {
        self.count(CAP_ANNOUNCED);
        if self.guards.caps_reached.insert((agent.clone(), day, reason), false).is_some() {
            return fail(CAP_ANNOUNCED, format!("agent {agent} reached its {reason} of the day from {day} twice"));
        }
        Ok(())
    }

    /// A cap's announcement went out under `idempotency_key` (`agent/day/reason`): one the
    /// engine reached and did not announce yet.
    pub(super) fn cap_announced(&mut self, idempotency_key: &str) -> Step {
        self.count(CAP_ANNOUNCED);
        let owed = self.guards.caps_reached.iter_mut().find(|((agent, day, reason), announced)| {
            !**announced && idempotency_key == format!("{agent}/{day}/{reason}")
        });
        match owed {
            Some((_, announced)) => {
                *announced = true;
                Ok(())
            }
            None => fail(CAP_ANNOUNCED, format!("cap announcement {idempotency_key} with no cap reached owing it")),
        }
    }

    pub(super) fn budget_skip(&mut self, entry: &Entry, key: &HeartbeatKey) {
        self.guards.budget_skipped.insert(key.agent.clone(), entry.elapsed);
    }

    /// At a run's start: what its agent's recorded runs spent since the local day began
    /// (in the agents' zone, by the reference's reading of it) is below every cap.
    pub(super) fn budget_holds(&mut self, entry: &Entry, key: &HeartbeatKey, slot: Timestamp) -> Step {
        if self.defs.get(key).is_some_and(|def| def.kind == JobKind::CronMain) {
            return Ok(()); // no LLM call of its own
        }
        let zone = jiff::tz::TimeZone::get(self.options.budget_zone).unwrap_or(jiff::tz::TimeZone::UTC);
        let day = local_day_start(entry.wall, &zone);
        for cap in Cap::ALL {
            self.count(cap.invariant());
            let today = sum_since(self.guards.spent.get(&key.agent), day, cap);
            let limit = cap.limit(self.options);
            if today >= limit {
                let message =
                    format!("{key} started slot {slot} with {today} {} today; the cap is {limit}", cap.unit());
                return fail(cap.invariant(), message);
            }
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
