//! Slot arithmetic: when a heartbeat's next slot is due and what a due timer runs.
//!
//! A heartbeat's runs are labelled by *slots*: instants of its [`Schedule`], each computed
//! from the previous slot, never from when a run finished. Two chains decide when the
//! next slot is due, and it is due when either says so:
//!
//! - the wall chain: the wall clock has reached the slot (plus the job's stable jitter).
//!   After downtime or a forward wall jump the catch-up policy decides which of the slots
//!   that passed run; the others are counted as missed;
//! - the monotonic chain, for `every` only: one interval of elapsed time has passed. A
//!   backward wall jump therefore never delays an interval heartbeat. Cron and `at` slots
//!   are calendar times and wait for the wall clock.
//!
//! Slots only move forward, so no clock jump makes a slot come round again.
//! Everything here is pure: `now` comes in as an argument.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use crate::core::policy::{CatchUp, RunPolicy};
use crate::core::schedule::Schedule;
use crate::limits::{CATCHUP_GRACE_SECS, CATCHUP_RUNS_MAX};
use crate::ports::clock::{Mono, Now};

/// When a heartbeat's next slot is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotTimer {
    /// The next slot, on the wall clock.
    pub next_slot: Timestamp,
    /// The monotonic deadline that fires `next_slot` even if the wall clock lags
    /// (`every` only).
    pub next_mono: Option<Mono>,
    /// The job's stable offset: each slot is due this long after its label.
    pub jitter: Duration,
}

/// What a due timer runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fired {
    /// The slots to run, oldest first; empty when the catch-up policy runs none.
    pub run: Vec<Timestamp>,
    /// Slots that passed and do not run (downtime, a forward jump, a stalled process).
    pub missed: u64,
    /// The timer for the slot after them; `None` when the schedule has no more slots.
    pub next: Option<SlotTimer>,
}

impl SlotTimer {
    /// A newly armed heartbeat: its schedule's first slot (one full interval away for
    /// `every`), or `None` when the schedule has no future slot.
    pub fn first(now: Now, schedule: &Schedule, jitter: Duration) -> Option<Self> {
        Self::rearm(now, schedule, jitter, None)
    }

    /// A heartbeat armed again (enabled, updated): like [`Self::first`], but its slots
    /// never go below `floor`, the next slot it had. After a backward wall jump, slot
    /// labels run ahead of the wall clock, and starting again from the wall clock would
    /// walk back into slots that were already claimed.
    pub fn rearm(now: Now, schedule: &Schedule, jitter: Duration, floor: Option<Timestamp>) -> Option<Self> {
        let first = schedule.first_slot(now.wall)?;
        let next_slot = match floor.map(truncate_to_millis) {
            Some(floor) if floor > first => schedule.at_or_after(floor)?,
            _ => first,
        };
        let next_mono = schedule.interval().map(|interval| now.mono + interval + jitter);
        Some(Self { next_slot, next_mono, jitter })
    }

    /// A heartbeat that already had a slot armed (before a restart, say) keeps it, so a
    /// restart neither runs it again early nor pushes it back.
    pub fn resume(now: Now, schedule: &Schedule, jitter: Duration, next_slot: Timestamp) -> Self {
        Self::following(now, schedule, jitter, truncate_to_millis(next_slot))
    }

    fn following(now: Now, schedule: &Schedule, jitter: Duration, next_slot: Timestamp) -> Self {
        let due = add(next_slot, jitter);
        let next_mono = schedule.interval().map(|interval| mono_deadline(now, due, interval + jitter));
        Self { next_slot, next_mono, jitter }
    }

    /// The same timer, moved to the first slot after `claimed` if it was not already
    /// later: for a slot found claimed already, so the next try does not collide.
    pub fn lifted_above(self, claimed: Timestamp, schedule: &Schedule) -> Option<Self> {
        if self.next_slot > claimed {
            return Some(self);
        }
        let next_slot = schedule.next_after(truncate_to_millis(claimed))?;
        Some(Self { next_slot, ..self })
    }

    /// The wall-clock instant the next slot is due.
    pub fn due_wall(&self) -> Timestamp {
        add(self.next_slot, self.jitter)
    }

    /// Whether the next slot is due at `now`.
    pub fn is_due(&self, now: Now) -> bool {
        now.wall >= self.due_wall() || self.next_mono.is_some_and(|mono| now.mono >= mono)
    }

    /// What the due timer runs, by the catch-up policy, and the timer after it. Call only
    /// when [`Self::is_due`].
    pub fn fire(&self, now: Now, schedule: &Schedule, policy: &RunPolicy) -> Fired {
        if now.wall < self.due_wall() {
            // Due by elapsed time while the wall clock lags: this slot, on time.
            let next =
                schedule.next_after(self.next_slot).map(|next| Self::following(now, schedule, self.jitter, next));
            return Fired { run: vec![self.next_slot], missed: 0, next };
        }
        let until = now.wall.checked_sub(signed(self.jitter)).unwrap_or(now.wall);
        let keep = if policy.catch_up == CatchUp::All { CATCHUP_RUNS_MAX } else { 1 };
        let passed = schedule.passed(self.next_slot, until, keep);
        let latest = passed.latest();
        let age = |slot: Timestamp| now.wall.duration_since(add(slot, self.jitter)).unsigned_abs();
        // An `at` has one slot, and a past one runs once, at once, whatever the policy.
        let one_shot = matches!(schedule, Schedule::At(_));
        let run: Vec<Timestamp> = match policy.catch_up {
            CatchUp::Skip if !one_shot && age(latest) > Duration::from_secs(CATCHUP_GRACE_SECS) => Vec::new(),
            CatchUp::Skip | CatchUp::Once => vec![latest],
            CatchUp::All => passed
                .recent
                .iter()
                .copied()
                .filter(|slot| *slot == latest || age(*slot) <= policy.catch_up_window)
                .collect(),
        };
        let missed = passed.count.saturating_sub(run.len() as u64);
        let next = passed.next.map(|next| Self::following(now, schedule, self.jitter, next));
        Fired { run, missed, next }
    }
}

/// The monotonic deadline of a slot due at `due`: the wall-clock distance to it, but never
/// more than one interval plus the jitter (a lagging wall clock must not delay a run) and
/// never negative.
fn mono_deadline(now: Now, due: Timestamp, interval: Duration) -> Mono {
    let ahead = due.duration_since(now.wall);
    let ahead = if ahead.is_negative() { Duration::ZERO } else { ahead.unsigned_abs() };
    now.mono + ahead.min(interval)
}

fn signed(duration: Duration) -> SignedDuration {
    SignedDuration::try_from(duration).unwrap_or(SignedDuration::MAX)
}

/// `at + duration`, saturating at the largest timestamp instead of failing.
pub fn add(at: Timestamp, duration: Duration) -> Timestamp {
    at.checked_add(signed(duration)).unwrap_or(Timestamp::MAX)
}

/// The first millisecond from `slot` on that `taken` leaves free: `slot` itself when it is.
/// The run log holds one row a slot, so two decisions must not share one millisecond (an
/// operator's trigger and a slot of the schedule, ADR 0049 and ADR 0052).
pub fn first_free_millisecond(mut slot: Timestamp, taken: impl Fn(Timestamp) -> bool) -> Timestamp {
    while taken(slot) {
        match slot.checked_add(SignedDuration::from_millis(1)) {
            Ok(next) => slot = next,
            Err(_) => break,
        }
    }
    slot
}

/// Slots are kept to whole milliseconds: that is what the store keeps.
pub fn truncate_to_millis(at: Timestamp) -> Timestamp {
    Timestamp::from_millisecond(at.as_millisecond()).unwrap_or(at)
}

#[cfg(test)]
#[path = "slots_tests.rs"]
mod tests;
