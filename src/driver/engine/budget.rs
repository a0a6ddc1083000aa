//! The daily caps (LLM calls, tokens, cost) and the "shows nothing" check inside the
//! driver: the guard inputs that need the store or the visibility rules.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::tz::TimeZone;
use jiff::Timestamp;

use super::{Arming, Driver};
use crate::core::budget::{day_start, next_day_start, DayCap, DayCaps, DayLedger, DaySpend};
use crate::core::guard::SkipReason;
use crate::core::heartbeat::JobKind;
use crate::core::ids::{AgentId, HeartbeatKey};
use crate::core::usage::format_micros;
use crate::core::visibility::VisibilityRules;
use crate::driver::events::EngineEvent;
use crate::limits::GLOBAL_SPEND_READ_SECS;
use crate::ports::clock::{Mono, Now};
use crate::ports::messenger::DeliveryKind;
use crate::ports::store::RunRecord;

/// All agents' spending in the engine's day, for the global cap.
pub(super) struct GlobalSpend {
    ledger: DayLedger,
    /// When its day ends (the next day's start).
    day_end: Timestamp,
    /// When it was last read back from the store.
    read_at: Mono,
    /// The global caps reached today that were announced, or found passed when read.
    announced: BTreeSet<DayCap>,
}

impl Driver {
    /// The agents among `agents` whose spending today reached one of their daily caps,
    /// or, for all of them, the global one, with the cap. The day's spending is read from
    /// the store once per agent and local day, then kept up to date as runs are recorded.
    pub(super) async fn spent_budgets(&mut self, agents: BTreeSet<AgentId>, now: Now) -> BTreeMap<AgentId, DayCap> {
        let mut spent = BTreeMap::new();
        if agents.is_empty() {
            return spent;
        }
        let global = self.global_cap_reached(now).await;
        self.read_ledgers(&agents, now).await;
        for agent in agents {
            let settings = self.context.settings(&agent);
            let ledger =
                self.ledgers.get(&agent).filter(|(ledger, day_end)| (ledger.day..*day_end).contains(&now.wall));
            if let Some(cap) = ledger.and_then(|(ledger, _)| ledger.reached(settings.day_caps())).or(global) {
                spent.insert(agent, cap);
            }
        }
        spent
    }

    /// Reads the day's spending of each of `agents` whose ledger is not of its day now (its
    /// first slot today, or a wall clock jump back before its day), all in one store call.
    /// An agent whose read fails goes on unchecked, rather than all runs stopping on a
    /// store hiccup.
    async fn read_ledgers(&mut self, agents: &BTreeSet<AgentId>, now: Now) {
        let mut days = Vec::new();
        let mut day_ends = Vec::new();
        for agent in agents {
            // Still its day (a wall clock jump back before it is a new read).
            if self.ledgers.get(agent).is_some_and(|(ledger, day_end)| (ledger.day..*day_end).contains(&now.wall)) {
                continue;
            }
            let zone = TimeZone::get(&self.context.settings(agent).timezone).unwrap_or(TimeZone::UTC);
            days.push((agent.clone(), day_start(now.wall, &zone)));
            day_ends.push(next_day_start(now.wall, &zone).unwrap_or(Timestamp::MAX));
        }
        if days.is_empty() {
            return;
        }
        // Their runs in flight count when the driver hears of them, even those the store
        // recorded already.
        let in_flight: Vec<(HeartbeatKey, Timestamp)> = {
            let asked: BTreeSet<&AgentId> = days.iter().map(|(agent, _)| agent).collect();
            self.runs.keys().filter(|(key, _)| asked.contains(&key.agent)).cloned().collect()
        };
        let answers = self.context.store.spent_since_each(&days, &in_flight).await;
        for (((agent, day), day_end), answer) in days.into_iter().zip(day_ends).zip(answers) {
            match answer {
                Ok(spent) => {
                    self.ledgers.insert(agent, (DayLedger { day, spent }, day_end));
                }
                Err(error) => {
                    let consequence = "the daily caps are not checked until the store answers";
                    self.store_failed("spent_since", error.to_string(), consequence);
                }
            }
        }
    }

    /// The global cap all agents' spending today reached, if any. All agents' spending is
    /// read back from the store at the start of the engine's day and every
    /// `GLOBAL_SPEND_READ_SECS` (in a cluster, the other nodes' runs reach it only so);
    /// in between, this engine's runs are counted as they are recorded.
    async fn global_cap_reached(&mut self, now: Now) -> Option<DayCap> {
        let caps = Arc::clone(&self.context.global_caps);
        let read_every = Duration::from_secs(GLOBAL_SPEND_READ_SECS);
        // Still the day it was read in (a wall clock jump back is a new read), and recent.
        let fresh = self.global_spend.as_ref().is_some_and(|global| {
            (global.ledger.day..global.day_end).contains(&now.wall) && now.mono < global.read_at + read_every
        });
        if fresh {
            return self.global_spend.as_ref().and_then(|global| global.ledger.reached_global(&caps));
        }
        let zone = TimeZone::get(&caps.timezone).unwrap_or(TimeZone::UTC);
        let day = day_start(now.wall, &zone);
        let day_end = next_day_start(now.wall, &zone).unwrap_or(Timestamp::MAX);
        let in_flight: Vec<(HeartbeatKey, Timestamp)> = self.runs.keys().cloned().collect();
        match self.context.store.spent_since(None, day, &in_flight).await {
            Ok(spent) => {
                let ledger = DayLedger { day, spent };
                let mut announced = match self.global_spend.take() {
                    Some(global) if global.ledger.day == day => global.announced,
                    _ => BTreeSet::new(),
                };
                // A cap already passed when read was reached by runs this engine did
                // not count (another node's, or an earlier life's): not announced here.
                announced.extend(ledger.reached_global(&caps));
                self.global_spend = Some(GlobalSpend { ledger, day_end, read_at: now.mono, announced });
            }
            Err(error) => {
                let consequence = "the global daily cap is checked against the last read until the store answers";
                self.store_failed("spent_since", error.to_string(), consequence);
            }
        }
        let global = self.global_spend.as_ref().filter(|global| global.ledger.day == day)?;
        global.ledger.reached_global(&caps)
    }

    /// Counts a recorded run's calls, tokens and cost into its agent's day and the
    /// engine's, and announces a cap that this run's spending reached (once: the ledger
    /// is read back already past it after a restart, and a new day starts below every cap).
    pub(super) fn count_spend(&mut self, record: &RunRecord, now: Now) {
        if let Some(global) = self.global_spend.as_mut() {
            let caps = Arc::clone(&self.context.global_caps);
            global.ledger.record(record.finished_at, record.spend());
            let day = global.ledger.day;
            if let Some(cap) = global.ledger.reached_global(&caps) {
                if global.announced.insert(cap) {
                    let (spent, agent_caps) =
                        (global.ledger.spent, self.context.settings(&record.key.agent).day_caps());
                    self.cap_reached(record, cap, day, spent, agent_caps, now);
                }
            }
        }
        let Some((ledger, _)) = self.ledgers.get_mut(&record.key.agent) else { return };
        let caps = self.context.settings(&record.key.agent).day_caps();
        let before = ledger.reached(caps);
        ledger.record(record.finished_at, record.spend());
        let after = ledger.reached(caps);
        let (day, spent) = (ledger.day, ledger.spent);
        if let (None, Some(cap)) = (before, after) {
            self.cap_reached(record, cap, day, spent, caps, now);
        }
    }

    fn cap_reached(&self, record: &RunRecord, cap: DayCap, day: Timestamp, spent: DaySpend, caps: DayCaps, now: Now) {
        let agent = &record.key.agent;
        let reason = SkipReason::for_cap(cap);
        self.context.events.emit(now.wall, &EngineEvent::CapReached { agent: agent.clone(), reason, day });
        let global = &self.context.global_caps;
        let (used, max) = match cap {
            DayCap::Calls => (spent.calls.to_string(), caps.calls.to_string()),
            DayCap::Tokens => (format!("{} tokens", spent.tokens), format!("{} tokens", caps.tokens)),
            DayCap::Cost => (format_micros(spent.cost_micros), format_micros(caps.cost_micros)),
            DayCap::GlobalTokens => (format!("{} tokens", spent.tokens), format!("{} tokens", global.tokens)),
            DayCap::GlobalCost => (format_micros(spent.cost_micros), format_micros(global.cost_micros)),
        };
        let (text, idempotency_key) = if cap.is_global() {
            let text = format!(
                "systole: all agents together reached the global daily cap {} ({used} of {max} since {day}), so \
                 every agent's runs skip with reason {} until the engine's next day ({}). Raise `{}` in the config \
                 to go on today.",
                cap.field(),
                reason.as_str(),
                global.timezone,
                cap.field(),
            );
            (text, format!("systole/{day}/{}", reason.as_str()))
        } else {
            let text = format!(
                "systole: agent {agent} reached its daily cap {} ({used} of {max} since {day}), so its runs \
                 skip with reason {} until its next local day. Raise `{}` in the config to go on today.",
                cap.field(),
                reason.as_str(),
                cap.field(),
            );
            (text, format!("{agent}/{day}/{}", reason.as_str()))
        };
        self.announce_keyed(&record.key, record.slot, DeliveryKind::CapReached, text, idempotency_key);
    }

    /// Whether a run of `def` would call the LLM for nobody: its target shows nothing.
    /// A `silent` target keeps replies in the run log on purpose, and a main-mode job
    /// calls no LLM.
    pub(super) fn shows_nothing(&self, def: &Arming) -> bool {
        shows_nothing(&self.context.visibility, def)
    }

    /// The cap that holds a run of `def`, if its `agent` reached one (a main-mode job makes
    /// no LLM call and is not held).
    pub(super) fn held_by_cap(agent: &AgentId, def: &Arming, spent: &BTreeMap<AgentId, DayCap>) -> Option<DayCap> {
        if def.common.kind == JobKind::CronMain {
            return None;
        }
        spent.get(agent).copied()
    }
}

/// Whether `def`'s target shows nothing at all, so its run would be for no one (a silent
/// target and a main-mode job are meant to show nothing, and run).
pub(super) fn shows_nothing(visibility: &VisibilityRules, def: &Arming) -> bool {
    !def.common.target.is_silent()
        && def.common.kind != JobKind::CronMain
        && visibility.resolve(&def.common.target).shows_nothing()
}
