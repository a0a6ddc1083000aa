//! A stored definition carries its schedule's first slot after the moment it was stored
//! (ADR 0028): no slot the engine arms for it, in this life or after a restart that
//! resumes at the stored slot, is below that first slot.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;

use systole::core::ids::HeartbeatKey;
use systole::core::schedule::Schedule;

use super::reference::{next_slot, CronCache};
use super::{fail, Step};

pub const FIRST_SLOT_AFTER_STORING: &str = "first-slot-after-storing";
/// A definition applied with a new schedule is armed, at once, no later than that schedule's
/// first slot after the apply or the one after its id's latest decided slot, whichever is
/// later: the old timer's armed slot, never decided, is no floor for it (ADR 0051; an
/// hourly cron made one of every five minutes ran first at the old hour).
pub const NEW_SCHEDULE_ARMED_AT_ONCE: &str = "new-schedule-armed-at-once";

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
    /// The schedules the definition the engine applied last may have, by key (an apply
    /// may be of any definition stored since the one before, see `applied`).
    last_applied: BTreeMap<HeartbeatKey, Vec<Schedule>>,
    /// Applies of a schedule new to the id, by key: when (elapsed), and the schedules the
    /// applied definition may have (see [`FirstSlotModel::applied`]); judged by the arming
    /// that comes at that same instant.
    changed: BTreeMap<HeartbeatKey, (Duration, Vec<Schedule>)>,
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
    ///
    /// The apply at `elapsed` is judged by [`NEW_SCHEDULE_ARMED_AT_ONCE`] when none of the
    /// definitions it may be (the oldest not yet applied, or a newer one) has a schedule
    /// the one applied last may have had, nor is a one-shot (seed 1927871825577: a put whose
    /// apply was never announced stayed the oldest, and the check took an unchanged
    /// schedule for a new one).
    pub fn applied(&mut self, key: &HeartbeatKey, elapsed: Duration) {
        self.changed.remove(key);
        let Some(stored) = self.stored.get_mut(key) else { return };
        let Some(place) = stored.iter().position(|one| !one.applied).or(stored.len().checked_sub(1)) else { return };
        let candidates: Vec<Schedule> = stored[place..].iter().map(|one| one.schedule.clone()).collect();
        if let Some(before) = self.last_applied.insert(key.clone(), candidates.clone()) {
            let new = |schedule: &Schedule| !before.contains(schedule) && !matches!(schedule, Schedule::At(_));
            if candidates.iter().all(new) {
                self.changed.insert(key.clone(), (elapsed, candidates));
            }
        }
        stored[place].applied = true;
        let older: Vec<Stored> = stored.drain(..place).collect();
        for old in older {
            for kept in stored.iter_mut().filter(|kept| kept.schedule == old.schedule) {
                kept.at = kept.at.min(old.at);
                kept.exempt |= old.exempt;
            }
        }
    }

    /// A start-up loaded `key` with `schedule`, the store's: what it runs from then on.
    pub fn loaded(&mut self, key: &HeartbeatKey, schedule: &Schedule) {
        self.last_applied.insert(key.clone(), vec![schedule.clone()]);
        self.changed.remove(key);
    }

    pub fn deleted(&mut self, key: &HeartbeatKey) {
        self.stored.remove(key);
        self.last_applied.remove(key);
        self.changed.remove(key);
    }

    /// The engine armed `key` for `slot` at `elapsed` (`wall`); `latest_decided`: the latest
    /// slot of its id decided, an operator's triggers left out. Judged only for the arming
    /// of an apply with a new schedule, at the apply's instant: a breaker the store tripped
    /// leaves the entry disarmed, and its probe arms later from the old floor.
    pub fn armed_after_change(
        &mut self,
        crons: &mut CronCache,
        key: &HeartbeatKey,
        slot: Timestamp,
        (elapsed, wall): (Duration, Timestamp),
        latest_decided: Option<Timestamp>,
    ) -> Option<Step> {
        let (applied, schedules) = self.changed.remove(key)?;
        if applied != elapsed {
            return None;
        }
        // The latest bound of the definitions it may be.
        let mut bound = None;
        for schedule in &schedules {
            let first = first_slot(crons, schedule, wall)?;
            let above_decided = latest_decided.and_then(|latest| next_slot(crons, schedule, latest));
            let own = above_decided.map_or(first, |above| above.max(first));
            bound = Some(bound.map_or(own, |bound: Timestamp| bound.max(own)));
        }
        let bound = bound?;
        if slot > bound {
            let message = format!(
                "{key} was armed for slot {slot} when its new schedule was applied at {wall}, after {bound}, \
                 that schedule's first slot then (or the one after its latest decided slot)"
            );
            return Some(fail(NEW_SCHEDULE_ARMED_AT_ONCE, message));
        }
        Some(Ok(()))
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
