//! A stored definition carries its schedule's first slot after the moment it was stored
//! (ADR 0028): no slot the engine arms for it, in this life or after a restart that
//! resumes at the stored slot, is below that first slot.

use std::collections::BTreeMap;

use jiff::Timestamp;

use systole::core::ids::HeartbeatKey;
use systole::core::schedule::Schedule;

use super::reference::{next_slot, CronCache};
use super::{fail, Step};

pub const FIRST_SLOT_AFTER_STORING: &str = "first-slot-after-storing";

/// One stored definition: its schedule, when it was stored, and whether it may be armed
/// below its first slot for a reason the rule does not model (the wall clock went back
/// below the storing time, so an engine arming from its own clock starts lower).
#[derive(Debug, Clone)]
struct Stored {
    schedule: Schedule,
    at: Timestamp,
    exempt: bool,
}

#[derive(Debug, Default)]
pub struct FirstSlotModel {
    /// By key: the definition stored last, and the one before it while the engine may
    /// still arm that one's slots (until it applies the replacement).
    stored: BTreeMap<HeartbeatKey, (Stored, Option<Stored>)>,
}

impl FirstSlotModel {
    pub fn put(&mut self, key: &HeartbeatKey, schedule: &Schedule, at: Timestamp) {
        let new = Stored { schedule: schedule.clone(), at, exempt: false };
        let previous = self.stored.remove(key).map(|(current, _)| current);
        self.stored.insert(key.clone(), (new, previous));
    }

    pub fn applied(&mut self, key: &HeartbeatKey) {
        if let Some((_, previous)) = self.stored.get_mut(key) {
            *previous = None;
        }
    }

    pub fn deleted(&mut self, key: &HeartbeatKey) {
        self.stored.remove(key);
    }

    /// The engine armed `slot` for `key` at wall time `wall`: `None` when the rule does not
    /// judge it (no stored definition known, or one exempt), else the verdict.
    pub fn armed(
        &mut self,
        crons: &mut CronCache,
        key: &HeartbeatKey,
        slot: Timestamp,
        wall: Timestamp,
    ) -> Option<Step> {
        let (current, previous) = self.stored.get_mut(key)?;
        let mut floor: Option<Timestamp> = None;
        let mut exempt = false;
        for stored in std::iter::once(current).chain(previous.as_mut()) {
            // Below its storing time the engine's clock gives lower first slots; a slot so
            // armed is stored and may be resumed later, so the definition stays exempt.
            stored.exempt |= wall < stored.at;
            exempt |= stored.exempt;
            // Either definition may arm until the engine applies the newer one: the lower floor.
            match first_slot(crons, &stored.schedule, stored.at) {
                Some(first) => floor = Some(floor.map_or(first, |floor| floor.min(first))),
                None => exempt = true,
            }
        }
        let floor = floor.filter(|_| !exempt)?;
        if slot < floor {
            let message =
                format!("{key} was armed for slot {slot}, below {floor}, its schedule's first after it was stored");
            return Some(fail(FIRST_SLOT_AFTER_STORING, message));
        }
        Some(Ok(()))
    }
}

/// The reference's first slot of `schedule` after `at` (to the millisecond): an `at`'s
/// instant, even a past one (it runs once, at once).
fn first_slot(crons: &mut CronCache, schedule: &Schedule, at: Timestamp) -> Option<Timestamp> {
    let at = Timestamp::from_millisecond(at.as_millisecond()).ok()?;
    match schedule {
        Schedule::At(instant) => Timestamp::from_millisecond(instant.as_millisecond()).ok(),
        Schedule::Every(_) | Schedule::Cron(_) => next_slot(crons, schedule, at),
    }
}
