//! Slot arithmetic for interval heartbeats.
//!
//! A heartbeat's runs are labelled by *slots*: wall-clock instants one interval apart,
//! each computed from the previous slot, never from when a run finished. Two chains decide
//! when the next slot is due, and it is due when either says so:
//!
//! - the wall chain: the wall clock has reached the slot. After downtime or a forward
//!   wall jump this fires once, for the most recent slot that has passed (missed ones are
//!   counted, not run);
//! - the monotonic chain: one interval of elapsed time has passed. A backward wall jump
//!   therefore never delays a run, and never makes a slot come round again, because slots
//!   only move forward.
//!
//! Everything here is pure: `now` comes in as an argument.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use crate::ports::clock::{Mono, Now};

/// When a heartbeat's next slot is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotTimer {
    pub interval: Duration,
    /// The next slot, on the wall clock.
    pub next_slot: Timestamp,
    /// The monotonic deadline that fires `next_slot` even if the wall clock lags.
    pub next_mono: Mono,
}

/// A slot that came due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FiredSlot {
    /// The slot this run stands for.
    pub slot: Timestamp,
    /// Older slots that passed unrun (downtime, a forward jump, a stalled process).
    pub missed: u64,
}

impl SlotTimer {
    /// A new heartbeat waits one full interval before its first run.
    pub fn first(now: Now, interval: Duration) -> Self {
        let next_slot = add(truncate_to_millis(now.wall), interval);
        Self { interval, next_slot, next_mono: now.mono + interval }
    }

    /// A heartbeat armed again (enabled, updated) waits one full interval, but its slots
    /// never go below `floor`, the next slot it had: after a backward wall jump, slot
    /// labels run ahead of the wall clock, and starting again from the wall clock would
    /// walk back into slots that were already claimed.
    pub fn rearm(now: Now, interval: Duration, floor: Option<Timestamp>) -> Self {
        let mut timer = Self::first(now, interval);
        if let Some(floor) = floor.map(truncate_to_millis) {
            timer.next_slot = timer.next_slot.max(floor);
        }
        timer
    }

    /// The same timer, its next slot moved to one interval after `claimed` if it was not
    /// already later. For a slot found claimed already: the next try will not collide.
    pub fn lifted_above(self, claimed: Timestamp) -> Self {
        let next_slot = self.next_slot.max(add(truncate_to_millis(claimed), self.interval));
        Self { next_slot, ..self }
    }

    /// A heartbeat that already had a slot armed (before a restart, say) keeps it, so a
    /// restart neither runs it again early nor pushes it back.
    pub fn resume(now: Now, interval: Duration, next_slot: Timestamp) -> Self {
        let next_slot = truncate_to_millis(next_slot);
        Self { interval, next_slot, next_mono: mono_deadline(now, next_slot, interval) }
    }

    /// Whether the next slot is due at `now`.
    pub fn is_due(&self, now: Now) -> bool {
        now.wall >= self.next_slot || now.mono >= self.next_mono
    }

    /// Takes the due slot and arms the one after it. Call only when [`Self::is_due`].
    pub fn fire(&mut self, now: Now) -> FiredSlot {
        let (slot, missed) = if now.wall >= self.next_slot {
            let behind = now.wall.duration_since(self.next_slot);
            let missed = whole_intervals(behind, self.interval);
            (add(self.next_slot, mul(self.interval, missed)), missed)
        } else {
            (self.next_slot, 0)
        };
        self.next_slot = add(slot, self.interval);
        self.next_mono = mono_deadline(now, self.next_slot, self.interval);
        FiredSlot { slot, missed }
    }
}

/// The monotonic deadline of `next_slot`: the wall-clock distance to it, but never more
/// than one interval (a lagging wall clock must not delay a run) and never negative.
fn mono_deadline(now: Now, next_slot: Timestamp, interval: Duration) -> Mono {
    let ahead = next_slot.duration_since(now.wall);
    let ahead = if ahead.is_negative() { Duration::ZERO } else { ahead.unsigned_abs() };
    now.mono + ahead.min(interval)
}

fn whole_intervals(behind: SignedDuration, interval: Duration) -> u64 {
    let interval_ms = interval.as_millis().max(1);
    let behind_ms = u128::try_from(behind.as_millis()).unwrap_or(0);
    u64::try_from(behind_ms / interval_ms).unwrap_or(u64::MAX)
}

fn mul(interval: Duration, times: u64) -> Duration {
    let times = u32::try_from(times).unwrap_or(u32::MAX);
    interval.checked_mul(times).unwrap_or(Duration::MAX)
}

/// `at + duration`, saturating at the largest timestamp instead of failing.
pub fn add(at: Timestamp, duration: Duration) -> Timestamp {
    SignedDuration::try_from(duration).ok().and_then(|signed| at.checked_add(signed).ok()).unwrap_or(Timestamp::MAX)
}

/// Slots are kept to whole milliseconds: that is what the store keeps.
pub fn truncate_to_millis(at: Timestamp) -> Timestamp {
    Timestamp::from_millisecond(at.as_millisecond()).unwrap_or(at)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    fn now(wall: &str, mono_secs: u64) -> Now {
        Now { wall: wall.parse().expect("test timestamp"), mono: Mono::from_duration(Duration::from_secs(mono_secs)) }
    }

    fn ts(text: &str) -> Timestamp {
        text.parse().expect("test timestamp")
    }

    #[test]
    fn first_slot_is_one_interval_away() {
        let timer = SlotTimer::first(now("2026-01-01T00:00:00Z", 0), 30 * MINUTE);
        assert_eq!(timer.next_slot, ts("2026-01-01T00:30:00Z"));
        assert!(!timer.is_due(now("2026-01-01T00:29:59Z", 1_799)));
        assert!(timer.is_due(now("2026-01-01T00:30:00Z", 1_800)));
    }

    #[test]
    fn next_slot_follows_the_slot_not_the_finish() {
        let mut timer = SlotTimer::first(now("2026-01-01T00:00:00Z", 0), 30 * MINUTE);
        // The driver woke 7 s late: the slot keeps its label and the cadence does not drift.
        let fired = timer.fire(now("2026-01-01T00:30:07Z", 1_807));
        assert_eq!(fired, FiredSlot { slot: ts("2026-01-01T00:30:00Z"), missed: 0 });
        assert_eq!(timer.next_slot, ts("2026-01-01T01:00:00Z"));
        assert_eq!(timer.next_mono, Mono::from_duration(Duration::from_secs(3_600)));
    }

    #[test]
    fn downtime_runs_the_latest_missed_slot_once() {
        let mut timer = SlotTimer::resume(now("2026-01-01T03:10:00Z", 0), 30 * MINUTE, ts("2026-01-01T01:00:00Z"));
        assert!(timer.is_due(now("2026-01-01T03:10:00Z", 0)));
        let fired = timer.fire(now("2026-01-01T03:10:00Z", 0));
        assert_eq!(fired, FiredSlot { slot: ts("2026-01-01T03:00:00Z"), missed: 4 });
        assert_eq!(timer.next_slot, ts("2026-01-01T03:30:00Z"));
        assert!(!timer.is_due(now("2026-01-01T03:10:01Z", 1)));
    }

    #[test]
    fn restart_before_the_slot_neither_runs_early_nor_late() {
        // Field notes, failure 1: a restart must not add a run.
        let timer = SlotTimer::resume(now("2026-01-01T22:30:00Z", 5), 24 * 60 * MINUTE, ts("2026-01-02T22:00:00Z"));
        assert!(!timer.is_due(now("2026-01-02T21:59:59Z", 5 + 84_599)));
        assert!(timer.is_due(now("2026-01-02T22:00:00Z", 5 + 84_600)));
    }

    #[test]
    fn backward_wall_jump_does_not_delay_the_run() {
        let mut timer = SlotTimer::first(now("2026-01-01T00:00:00Z", 0), 30 * MINUTE);
        // The wall clock steps back two hours after ten minutes.
        let jumped = now("2025-12-31T22:10:00Z", 600);
        assert!(!timer.is_due(jumped));
        let at_interval = now("2025-12-31T22:30:00Z", 1_800);
        assert!(timer.is_due(at_interval));
        let fired = timer.fire(at_interval);
        assert_eq!(fired.slot, ts("2026-01-01T00:30:00Z"), "the slot label keeps moving forward");
        assert_eq!(timer.next_mono, Mono::from_duration(Duration::from_secs(3_600)));
    }

    #[test]
    fn rearming_never_goes_below_the_previous_next_slot() {
        // Labels ran two hours ahead of the wall clock after a backward jump.
        let floor = ts("2026-01-01T02:00:00Z");
        let timer = SlotTimer::rearm(now("2026-01-01T00:00:00Z", 500), 30 * MINUTE, Some(floor));
        assert_eq!(timer.next_slot, floor);
        assert_eq!(timer.next_mono, Mono::from_duration(Duration::from_secs(500 + 1_800)), "still one interval away");
        let fresh = SlotTimer::rearm(now("2026-01-01T00:00:00Z", 500), 30 * MINUTE, Some(ts("2025-12-31T00:00:00Z")));
        assert_eq!(fresh.next_slot, ts("2026-01-01T00:30:00Z"), "an old floor changes nothing");
    }

    #[test]
    fn lifting_moves_only_forward() {
        let timer = SlotTimer::first(now("2026-01-01T00:00:00Z", 0), 30 * MINUTE);
        assert_eq!(timer.lifted_above(ts("2026-01-01T05:00:00Z")).next_slot, ts("2026-01-01T05:30:00Z"));
        assert_eq!(timer.lifted_above(ts("2025-01-01T00:00:00Z")).next_slot, timer.next_slot);
        assert_eq!(timer.lifted_above(ts("2026-01-01T05:00:00Z")).next_mono, timer.next_mono);
    }

    #[test]
    fn resume_with_a_slot_far_ahead_waits_at_most_one_interval() {
        let timer = SlotTimer::resume(now("2026-01-01T00:00:00Z", 100), 30 * MINUTE, ts("2026-01-01T05:00:00Z"));
        assert_eq!(timer.next_mono, Mono::from_duration(Duration::from_secs(100 + 1_800)));
    }

    proptest! {
        /// Whatever the clocks do, slots strictly increase and each fire is on the grid.
        #[test]
        fn slots_strictly_increase_on_the_grid(
            interval_secs in 1u64..100_000,
            steps in proptest::collection::vec((-200_000i64..200_000, 0u64..200_000), 1..40),
        ) {
            let interval = Duration::from_secs(interval_secs);
            let start = ts("2026-01-01T00:00:00Z");
            let mut timer = SlotTimer::first(Now { wall: start, mono: Mono::ZERO }, interval);
            let first_slot = timer.next_slot;
            let mut wall = start;
            let mut mono = Mono::ZERO;
            let mut last_slot: Option<Timestamp> = None;
            for (wall_step_secs, mono_step_secs) in steps {
                mono = mono + Duration::from_secs(mono_step_secs);
                wall = wall.checked_add(SignedDuration::from_secs(wall_step_secs + mono_step_secs as i64)).unwrap_or(wall);
                let now = Now { wall, mono };
                while timer.is_due(now) {
                    let fired = timer.fire(now);
                    if let Some(last) = last_slot {
                        prop_assert!(fired.slot > last);
                    }
                    let offset_ms = fired.slot.duration_since(first_slot).as_millis();
                    prop_assert_eq!(offset_ms % interval.as_millis() as i128, 0);
                    prop_assert!(!timer.is_due(now), "a fire never leaves the timer due: no spin");
                    last_slot = Some(fired.slot);
                }
            }
        }
    }
}
