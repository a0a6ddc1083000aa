//! When a job will next really run: its next slot, walked forward past slots a pause, a
//! backoff or its active hours would skip. What `status` shows as "next run".

use std::time::Duration;

use jiff::Timestamp;

use crate::core::active_hours::ActiveHours;
use crate::core::schedule::Schedule;
use crate::core::slots::add;
use crate::limits::NEXT_RUN_SCAN_SLOTS_MAX;

/// The first slot from `first` on whose due time (slot plus `jitter`) is at or after
/// `not_before` and inside `window`; `None` if the schedule ends or none is found within
/// `NEXT_RUN_SCAN_SLOTS_MAX` slots.
pub fn next_runnable(
    schedule: &Schedule,
    first: Timestamp,
    jitter: Duration,
    window: Option<&ActiveHours>,
    not_before: Option<Timestamp>,
) -> Option<Timestamp> {
    let mut slot = first;
    for _ in 0..NEXT_RUN_SCAN_SLOTS_MAX {
        let due = add(slot, jitter);
        let after_hold = not_before.is_none_or(|not_before| due >= not_before);
        if after_hold && window.is_none_or(|window| window.contains(due)) {
            return Some(due);
        }
        slot = schedule.next_after(slot)?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().expect("RFC 3339")
    }

    #[test]
    fn walks_past_quiet_hours_pauses_and_backoffs() {
        let hourly = Schedule::Every(Duration::from_secs(3_600));
        let first = at("2026-11-23T20:00:00Z");
        let window = ActiveHours::new("09:00", "17:00", "UTC").expect("window");
        assert_eq!(next_runnable(&hourly, first, Duration::ZERO, None, None), Some(first));
        assert_eq!(
            next_runnable(&hourly, first, Duration::ZERO, Some(&window), None),
            Some(at("2026-11-24T09:00:00Z"))
        );
        let paused_until = Some(at("2026-11-23T22:30:00Z"));
        assert_eq!(next_runnable(&hourly, first, Duration::ZERO, None, paused_until), Some(at("2026-11-23T23:00:00Z")));
        let jitter = Duration::from_secs(90);
        assert_eq!(next_runnable(&hourly, first, jitter, None, None), Some(at("2026-11-23T20:01:30Z")));
        let once = Schedule::At(first);
        assert_eq!(next_runnable(&once, first, Duration::ZERO, Some(&window), None), None, "its one slot is skipped");
    }
}
