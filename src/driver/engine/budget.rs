//! The daily caps (LLM calls, tokens, cost) and the "shows nothing" check inside the
//! driver: the guard inputs that need the store or the visibility rules.

use std::collections::{BTreeMap, BTreeSet};

use jiff::tz::TimeZone;
use jiff::Timestamp;

use super::Driver;
use crate::core::budget::{day_start, DayCap, DayCaps, DayLedger, DaySpend};
use crate::core::guard::SkipReason;
use crate::core::heartbeat::{HeartbeatDef, JobKind};
use crate::core::ids::{AgentId, HeartbeatKey};
use crate::core::usage::format_micros;
use crate::driver::events::EngineEvent;
use crate::ports::clock::Now;
use crate::ports::messenger::DeliveryKind;
use crate::ports::store::RunRecord;

impl Driver {
    /// The agents among `agents` whose spending today reached one of their daily caps,
    /// with the cap. The day's spending is read from the store once per agent and local
    /// day, then kept up to date as runs are recorded.
    pub(super) async fn spent_budgets(&mut self, agents: BTreeSet<AgentId>, now: Now) -> BTreeMap<AgentId, DayCap> {
        let mut spent = BTreeMap::new();
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
                    match self.context.store.spent_since(&agent, day, &in_flight).await {
                        Ok(spent) => {
                            let ledger = DayLedger { day, spent };
                            self.ledgers.insert(agent.clone(), ledger);
                            ledger
                        }
                        Err(error) => {
                            // Runs go on unchecked rather than all stopping on a store hiccup.
                            let consequence = "the daily caps are not checked until the store answers";
                            self.store_failed("spent_since", error.to_string(), consequence);
                            continue;
                        }
                    }
                }
            };
            if let Some(cap) = ledger.reached(settings.day_caps()) {
                spent.insert(agent, cap);
            }
        }
        spent
    }

    /// Counts a recorded run's calls, tokens and cost into its agent's day, and announces
    /// a cap that this run's spending reached (once: the ledger is read back already past
    /// it after a restart, and a new day starts below every cap).
    pub(super) fn count_spend(&mut self, record: &RunRecord, now: Now) {
        let Some(ledger) = self.ledgers.get_mut(&record.key.agent) else { return };
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
        let (used, max) = match cap {
            DayCap::Calls => (spent.calls.to_string(), caps.calls.to_string()),
            DayCap::Tokens => (format!("{} tokens", spent.tokens), format!("{} tokens", caps.tokens)),
            DayCap::Cost => (format_micros(spent.cost_micros), format_micros(caps.cost_micros)),
        };
        let text = format!(
            "systole: agent {agent} reached its daily cap {} ({used} of {max} since {day}), so its runs \
             skip with reason {} until its next local day. Raise `{}` in the config to go on today.",
            cap.field(),
            reason.as_str(),
            cap.field(),
        );
        let idempotency_key = format!("{agent}/{day}/{}", reason.as_str());
        self.announce_keyed(&record.key, record.slot, DeliveryKind::CapReached, text, idempotency_key);
    }

    /// Whether a run of `def` would call the LLM for nobody: its target shows nothing.
    /// A `silent` target keeps replies in the run log on purpose, and a main-mode job
    /// calls no LLM.
    pub(super) fn shows_nothing(&self, def: &HeartbeatDef) -> bool {
        !def.target.is_silent()
            && def.kind != JobKind::CronMain
            && self.context.visibility.resolve(&def.target).shows_nothing()
    }

    /// The cap that holds a run of `def`, if its agent reached one (a main-mode job makes
    /// no LLM call and is not held).
    pub(super) fn held_by_cap(def: &HeartbeatDef, spent: &BTreeMap<AgentId, DayCap>) -> Option<DayCap> {
        if def.kind == JobKind::CronMain {
            return None;
        }
        spent.get(&def.key.agent).copied()
    }
}
