//! The daily LLM budget and the "shows nothing" check inside the driver: the guard inputs
//! that need the store or the visibility rules.

use std::collections::BTreeSet;

use jiff::tz::TimeZone;
use jiff::Timestamp;

use super::Driver;
use crate::core::budget::{day_start, DayLedger};
use crate::core::heartbeat::{HeartbeatDef, JobKind};
use crate::core::ids::{AgentId, HeartbeatKey};
use crate::ports::clock::Now;
use crate::ports::store::RunRecord;

impl Driver {
    /// The agents among `agents` whose LLM calls today reached their daily budget. The
    /// day's count is read from the store once per agent and local day, then kept up to
    /// date as runs are recorded.
    pub(super) async fn spent_budgets(&mut self, agents: BTreeSet<AgentId>, now: Now) -> BTreeSet<AgentId> {
        let mut spent = BTreeSet::new();
        for agent in agents {
            let settings = self.context.settings(&agent);
            let zone = TimeZone::get(&settings.timezone).unwrap_or(TimeZone::UTC);
            let day = day_start(now.wall, &zone);
            let ledger = match self.ledgers.get(&agent) {
                Some(ledger) if ledger.day == day => *ledger,
                _ => {
                    // Its runs in flight count when the driver hears of them (below), even
                    // those the store recorded already.
                    let in_flight: Vec<(HeartbeatKey, Timestamp)> =
                        self.runs.keys().filter(|(key, _)| key.agent == agent).cloned().collect();
                    match self.context.store.llm_calls_since(&agent, day, &in_flight).await {
                        Ok(calls) => {
                            let ledger = DayLedger { day, calls };
                            self.ledgers.insert(agent.clone(), ledger);
                            ledger
                        }
                        Err(error) => {
                            // Runs go on unchecked rather than all stopping on a store hiccup.
                            let consequence = "the daily budget is not checked until the store answers";
                            self.store_failed("llm_calls_since", error.to_string(), consequence);
                            continue;
                        }
                    }
                }
            };
            if !ledger.allows(settings.llm_calls_per_day) {
                spent.insert(agent);
            }
        }
        spent
    }

    /// Counts a recorded run's LLM calls into its agent's day.
    pub(super) fn count_llm_calls(&mut self, record: &RunRecord) {
        if let Some(ledger) = self.ledgers.get_mut(&record.key.agent) {
            ledger.record(record.finished_at, u64::from(record.llm_calls));
        }
    }

    /// Whether a run of `def` would call the LLM for nobody: its target shows nothing.
    /// A `silent` target keeps replies in the run log on purpose, and a main-mode job
    /// calls no LLM.
    pub(super) fn shows_nothing(&self, def: &HeartbeatDef) -> bool {
        !def.target.is_silent()
            && def.kind != JobKind::CronMain
            && self.context.visibility.resolve(&def.target).shows_nothing()
    }

    /// Whether a run of `def` is held by its agent's spent budget (a main-mode job makes
    /// no LLM call and is not).
    pub(super) fn held_by_budget(def: &HeartbeatDef, spent: &BTreeSet<AgentId>) -> bool {
        def.kind != JobKind::CronMain && spent.contains(&def.key.agent)
    }
}
