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
    /// The engine announced an apply that this definition may be the subject of.
    applied: bool,
}

#[derive(Debug, Default)]
pub struct FirstSlotModel {
    /// By key: the definition the engine applied last and those stored since, oldest
    /// first; the engine may arm any of their slots until it applies the newest.
    stored: BTreeMap<HeartbeatKey, Vec<Stored>>,
}

impl FirstSlotModel {
    pub fn put(&mut self, key: &HeartbeatKey, schedule: &Schedule, at: Timestamp) {
        let stored = Stored { schedule: schedule.clone(), at, exempt: false, applied: false };
        self.stored.entry(key.clone()).or_default().push(stored);
    }

    /// The engine applied a definition: the oldest not yet applied, as an operator's or a
    /// model's changes reach it one command each and in order (seed 1927870355663: two
    /// tool calls replaced a heartbeat at one instant, and the engine armed the first
    /// before it applied the second), or the newest, as an adoption reads the store. The
    /// ones older than the oldest candidate go; one that shares a kept one's schedule
    /// lowers its storing time, since the store keeps a next slot written under the same
    /// schedule by an older definition (ADR 0018; seed 1927870299252: a reload kept the
    /// interval, and a claim of the old definition's grid resumed later).
    pub fn applied(&mut self, key: &HeartbeatKey) {
        let Some(stored) = self.stored.get_mut(key) else { return };
        let Some(place) = stored.iter().position(|one| !one.applied).or(stored.len().checked_sub(1)) else { return };
        stored[place].applied = true;
        let older: Vec<Stored> = stored.drain(..place).collect();
        for old in older {
            for kept in stored.iter_mut().filter(|kept| kept.schedule == old.schedule) {
                kept.at = kept.at.min(old.at);
                kept.exempt |= old.exempt;
            }
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
        let mut floor: Option<Timestamp> = None;
        let mut exempt = false;
        for stored in self.stored.get_mut(key)? {
            // Below its storing time the engine's clock gives lower first slots; a slot so
            // armed is stored and may be resumed later, so the definition stays exempt.
            stored.exempt |= wall < stored.at;
            exempt |= stored.exempt;
            // Any of them may arm until the engine applies the newest: the lowest floor.
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
