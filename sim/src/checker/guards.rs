//! The cost and visibility guards: no run starts once its agent's LLM calls, tokens or
//! cost of the local day reached their cap (so a cap is passed by at most what was in
//! flight when it was reached), and a target gets only what it shows.

use std::cell::RefCell;
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
/// No run starts once all agents' tokens (cost) of the engine's day reached the global cap.
pub const GLOBAL_TOKEN_CAP: &str = "global-token-cap";
pub const GLOBAL_COST_CAP: &str = "global-cost-cap";
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
    /// All agents' tokens together, in the engine's day.
    GlobalTokens,
    GlobalCost,
}

impl Cap {
    pub(super) const ALL: [Cap; 5] = [Cap::Calls, Cap::Tokens, Cap::Cost, Cap::GlobalTokens, Cap::GlobalCost];

    fn invariant(self) -> &'static str {
        match self {
            Cap::Calls => BUDGET,
            Cap::Tokens => TOKEN_CAP,
            Cap::Cost => COST_CAP,
            Cap::GlobalTokens => GLOBAL_TOKEN_CAP,
            Cap::GlobalCost => GLOBAL_COST_CAP,
        }
    }

    fn of(self, spent: &Spent) -> u64 {
        match self {
            Cap::Calls => spent.calls,
            Cap::Tokens | Cap::GlobalTokens => spent.tokens,
            Cap::Cost | Cap::GlobalCost => spent.cost_micros,
        }
    }

    pub(super) fn limit(self, options: &crate::options::SimOptions) -> u64 {
        match self {
            Cap::Calls => options.llm_calls_per_day,
            Cap::Tokens => options.daily_tokens_max,
            Cap::Cost => options.daily_cost_max_micros,
            Cap::GlobalTokens => options.global_tokens_max,
            Cap::GlobalCost => options.global_cost_max_micros,
        }
    }

    pub(super) fn is_global(self) -> bool {
        matches!(self, Cap::GlobalTokens | Cap::GlobalCost)
    }

    /// The zone whose days the cap counts in: the agents' or the engine's.
    pub(super) fn zone(self, options: &crate::options::SimOptions) -> &'static str {
        if self.is_global() {
            options.global_zone
        } else {
            options.budget_zone
        }
    }

    pub(super) fn unit(self) -> &'static str {
        match self {
            Cap::Calls => "LLM calls",
            Cap::Tokens | Cap::GlobalTokens => "tokens",
            Cap::Cost | Cap::GlobalCost => "micros of cost",
        }
    }
}

/// The agent part of a cap's announcement key: the agent's, or `systole` for a global cap.
fn announced_as<'a>(agent: &'a AgentId, reason: &str) -> &'a str {
    if reason.starts_with("global-") {
        "systole"
    } else {
        agent.as_str()
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
    caps_reached: BTreeMap<(String, Timestamp, &'static str), bool>,
    /// All agents' recorded and durable spending since a day's start, kept as runs come
    /// (summing every run at every start would make a seed's check quadratic).
    all_recorded: RefCell<Option<DayTotal>>,
    all_durable: RefCell<Option<DayTotal>>,
    /// The last day start found per zone, with its date: the reference walks back minute
    /// by minute to find one, too slow to repeat at every run.
    day_starts: RefCell<BTreeMap<&'static str, (Timestamp, jiff::civil::Date)>>,
}

/// What all agents spent since `day`.
#[derive(Debug, Clone, Copy)]
struct DayTotal {
    day: Timestamp,
    spent: Spent,
}

fn sum_since(runs: Option<&Vec<(Timestamp, Spent)>>, since: Timestamp, cap: Cap) -> u64 {
    runs.map(|runs| runs.iter().filter(|(at, _)| *at >= since).map(|(_, spent)| cap.of(spent)).sum()).unwrap_or(0)
}

/// What every agent's `runs` spent of `cap` since `day`, from `cache` when it holds that day.
fn all_since(
    runs: &BTreeMap<AgentId, Vec<(Timestamp, Spent)>>,
    cache: &RefCell<Option<DayTotal>>,
    day: Timestamp,
    cap: Cap,
) -> u64 {
    let mut cache = cache.borrow_mut();
    let total = match *cache {
        Some(total) if total.day == day => total,
        _ => {
            let mut spent = Spent::default();
            for (at, run) in runs.values().flatten() {
                if *at >= day {
                    spent.add(*run);
                }
            }
            let total = DayTotal { day, spent };
            *cache = Some(total);
            total
        }
    };
    cap.of(&total.spent)
}

/// Counts a run into a cached day total it belongs to.
fn count_into(cache: &RefCell<Option<DayTotal>>, finished_at: Timestamp, spent: Spent) {
    if let Some(total) = cache.borrow_mut().as_mut().filter(|total| finished_at >= total.day) {
        total.spent.add(spent);
    }
}

impl Spent {
    fn add(&mut self, other: Spent) {
        self.calls += other.calls;
        self.tokens += other.tokens;
        self.cost_micros += other.cost_micros;
    }
}

impl GuardModel {
    /// The start of the local day `at` falls in, in `zone`, by the reference's reading.
    pub(super) fn day_start(&self, zone: &'static str, at: Timestamp) -> Timestamp {
        let tz = jiff::tz::TimeZone::get(zone).unwrap_or(jiff::tz::TimeZone::UTC);
        let date = tz.to_datetime(at).date();
        let mut starts = self.day_starts.borrow_mut();
        if let Some((start, _)) = starts.get(zone).copied().filter(|(start, day)| *day == date && at >= *start) {
            return start;
        }
        let start = local_day_start(at, &tz);
        starts.insert(zone, (start, date));
        start
    }

    pub(super) fn durable_finish(&mut self, agent: &AgentId, finished_at: Timestamp, spent: Spent) {
        self.durable_spent.entry(agent.clone()).or_default().push((finished_at, spent));
        count_into(&self.all_durable, finished_at, spent);
    }

    /// What the agent's durable runs (every agent's, for a global cap) that finished at
    /// or after `since` spent of `cap`.
    pub(super) fn durable_since(&self, agent: &AgentId, since: Timestamp, cap: Cap) -> u64 {
        if cap.is_global() {
            return all_since(&self.durable_spent, &self.all_durable, since, cap);
        }
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
        count_into(&self.guards.all_recorded, finished_at, spent);
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
        // A global cap is reached once a day, whichever agent's run reached it.
        let owner = announced_as(agent, reason).to_owned();
        if self.guards.caps_reached.insert((owner.clone(), day, reason), false).is_some() {
            return fail(CAP_ANNOUNCED, format!("{owner} reached its {reason} of the day from {day} twice"));
        }
        Ok(())
    }

    /// Whether a cap held `agent` at `at`: its own, reached in the budget day `at` falls
    /// in, or the global one in its day.
    pub(super) fn budget_spent_at(&self, agent: &AgentId, at: Timestamp) -> bool {
        let agent_day = self.guards.day_start(self.options.budget_zone, at);
        let global_day = self.guards.day_start(self.options.global_zone, at);
        self.guards.caps_reached.keys().any(|(owner, day, reason)| {
            if reason.starts_with("global-") {
                *day == global_day
            } else {
                owner == agent.as_str() && *day == agent_day
            }
        })
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
        let agent_day = self.guards.day_start(self.options.budget_zone, entry.wall);
        let global_day = self.guards.day_start(self.options.global_zone, entry.wall);
        for cap in Cap::ALL {
            self.count(cap.invariant());
            let day = if cap.is_global() { global_day } else { agent_day };
            let today = if cap.is_global() {
                all_since(&self.guards.spent, &self.guards.all_recorded, day, cap)
            } else {
                sum_since(self.guards.spent.get(&key.agent), day, cap)
            };
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
