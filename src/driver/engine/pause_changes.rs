//! An operator's pause or resume writes the store, then tells the engine (ADR 0005). Two
//! such calls about one agent may cross: one's write lands first, the other's command
//! comes first (a write whose answer is slow, a transaction stalled). Applied as the
//! commands say, the engine would end up holding what the store no longer holds, and the
//! next process or the partition's next owner would do otherwise. So the engine applies
//! the agent's pause as the store holds it in its own turn, after both writes.

use super::Driver;
use crate::core::ids::AgentId;
use crate::core::pause::Pause;
use crate::driver::events::EngineEvent;
use crate::ports::clock::Now;

impl Driver {
    /// Applies a call's pause of `agent` (`asked`, as the call stored it) or its resume
    /// (`None`) as the store holds the agent's pause now. If the read fails, the call is
    /// applied as asked, as before this read existed.
    pub(super) async fn apply_pause_change(&mut self, agent: AgentId, asked: Option<Pause>, now: Now) {
        let pause = match self.context.store.load_pauses().await {
            Ok(pauses) => {
                let stored = pauses.into_iter().find_map(|(paused, record)| (paused == agent).then_some(record));
                match (stored, asked) {
                    // The call's own pause keeps the deadline it was given on this process's clock.
                    (Some(record), Some(pause)) if record == pause.record => Some(pause),
                    (Some(record), _) if self.pauses.get(&agent).is_some_and(|held| held.record == record) => {
                        self.pauses.get(&agent).copied()
                    }
                    (Some(record), _) => {
                        Some(Pause::resume(now, record, self.context.settings(&agent).pause_minutes_max))
                    }
                    (None, _) => None,
                }
            }
            Err(error) => {
                let consequence =
                    "the call is applied as asked; a pause or resume that crossed it may differ in the store";
                self.store_failed("load_pauses", error.to_string(), consequence);
                asked
            }
        };
        match pause.filter(|pause| pause.holds(now)) {
            Some(pause) => {
                let changed = self.pauses.get(&agent).is_none_or(|held| held.record != pause.record);
                if changed || asked.is_some() {
                    let event = EngineEvent::Paused {
                        agent: agent.clone(),
                        minutes: pause.record.minutes,
                        until: pause.record.until,
                    };
                    self.context.events.emit(now.wall, &event);
                }
                self.pauses.insert(agent, pause);
            }
            None => {
                if self.pauses.remove(&agent).is_some() {
                    self.context.events.emit(now.wall, &EngineEvent::Resumed { agent });
                }
            }
        }
    }
}
