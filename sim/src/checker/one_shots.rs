//! A one-shot (`at`) is retired as out of slots only once its instant has a decision: a
//! claim or a skip of that instant or a later slot of its id in the run log (what the
//! engine lifts a timer above, ADR 0018), or a decision the engine announced. Before its
//! instant, with nothing decided there, it still has its slot. A replace that armed a
//! one-shot no lower than the old definition's timer found one whose instant lay below
//! that timer out of slots at once, and it never ran (seed 1927871251589, found through a
//! retry it then armed before the instant).

use std::collections::BTreeMap;

use jiff::Timestamp;

use systole::core::heartbeat::HeartbeatDef;
use systole::core::ids::HeartbeatKey;
use systole::core::schedule::Schedule;

use super::{fail, Step};

pub const AT_NOT_RETIRED_EARLY: &str = "at-not-retired-early";

#[derive(Debug, Default)]
pub struct OneShotModel {
    /// The latest slot of each id that was claimed, recorded or decided: the store keeps
    /// a deleted predecessor's rows under the id, so nothing here is forgotten.
    latest_decided: BTreeMap<HeartbeatKey, Timestamp>,
}

impl OneShotModel {
    /// A slot of `key` claimed, recorded (run or skip) or decided by the engine.
    pub fn decided(&mut self, key: &HeartbeatKey, slot: Timestamp) {
        let latest = self.latest_decided.entry(key.clone()).or_insert(slot);
        *latest = (*latest).max(slot);
    }

    /// The engine retired `key`, running under `def`, as out of slots at `wall`.
    pub fn retired(&self, key: &HeartbeatKey, def: Option<&HeartbeatDef>, wall: Timestamp) -> Step {
        let Some(Schedule::At(at)) = def.map(|def| &def.schedule) else { return Ok(()) };
        // Its one slot: the instant to the millisecond, as stored.
        let Ok(instant) = Timestamp::from_millisecond(at.as_millisecond()) else { return Ok(()) };
        let decided = self.latest_decided.get(key).is_some_and(|latest| *latest >= instant);
        if wall < instant && !decided {
            return fail(
                AT_NOT_RETIRED_EARLY,
                format!("{key} (at {instant}) was retired as out of slots at {wall}, before its instant, with no slot of it decided"),
            );
        }
        Ok(())
    }
}
