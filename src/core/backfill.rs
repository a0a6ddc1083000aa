//! Which slots a backfill runs: the calendar slots a past window held, oldest first,
//! bounded (each one costs an LLM run). Slots already decided are left to the store's
//! claim, which refuses them, so a backfill never runs a slot twice.

use jiff::Timestamp;

use crate::core::schedule::Schedule;
use crate::limits::BACKFILL_SLOTS_MAX;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackfillError {
    #[error("`from` must be before `to`")]
    Empty,
    #[error("`to` is in the future; a backfill runs slots that have passed")]
    Future,
    #[error("an `every` schedule has no fixed slots to fill; backfill needs a cron or `at` schedule")]
    NoCalendar,
    #[error("the window holds more than {BACKFILL_SLOTS_MAX} slots; backfill a shorter one")]
    TooMany,
}

/// The slots of `schedule` in `[from, to]`, oldest first, at most `BACKFILL_SLOTS_MAX`.
///
/// # Errors
/// An empty or future window, an `every` schedule, or too many slots.
pub fn window_slots(
    schedule: &Schedule,
    from: Timestamp,
    to: Timestamp,
    now: Timestamp,
) -> Result<Vec<Timestamp>, BackfillError> {
    if from >= to {
        return Err(BackfillError::Empty);
    }
    if to > now {
        return Err(BackfillError::Future);
    }
    let mut slots = Vec::new();
    match schedule {
        Schedule::Every(_) => return Err(BackfillError::NoCalendar),
        Schedule::At(at) => {
            if (from..=to).contains(at) {
                slots.push(*at);
            }
        }
        Schedule::Cron(_) => {
            // The first occurrence at or after `from`: the one after the instant just before it.
            let mut next = schedule.next_after(from.checked_sub(jiff::SignedDuration::from_nanos(1)).unwrap_or(from));
            while let Some(slot) = next.filter(|slot| *slot <= to) {
                if slots.len() == BACKFILL_SLOTS_MAX {
                    return Err(BackfillError::TooMany);
                }
                slots.push(slot);
                next = schedule.next_after(slot);
            }
        }
    }
    Ok(slots)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::cron::CronSchedule;

    fn at(text: &str) -> Timestamp {
        text.parse().expect("RFC 3339")
    }

    fn hourly() -> Schedule {
        Schedule::cron(CronSchedule::parse("0 * * * *", "UTC").expect("valid"))
    }

    #[test]
    fn the_window_s_slots_oldest_first_bounds_included() {
        let slots =
            window_slots(&hourly(), at("2026-11-23T10:00:00Z"), at("2026-11-23T13:00:00Z"), at("2026-11-23T15:00:00Z"));
        let expected: Vec<Timestamp> =
            ["10:00", "11:00", "12:00", "13:00"].iter().map(|t| at(&format!("2026-11-23T{t}:00Z"))).collect();
        assert_eq!(slots, Ok(expected));
        let inside =
            window_slots(&hourly(), at("2026-11-23T10:30:00Z"), at("2026-11-23T10:59:59Z"), at("2026-11-24T00:00:00Z"));
        assert_eq!(inside, Ok(Vec::new()));
    }

    #[test]
    fn refuses_empty_future_interval_and_huge_windows() {
        let now = at("2026-11-23T15:00:00Z");
        let (from, to) = (at("2026-11-23T10:00:00Z"), at("2026-11-23T12:00:00Z"));
        assert_eq!(window_slots(&hourly(), to, from, now), Err(BackfillError::Empty));
        assert_eq!(window_slots(&hourly(), from, at("2026-11-23T16:00:00Z"), now), Err(BackfillError::Future));
        let every = Schedule::Every(std::time::Duration::from_secs(60));
        assert_eq!(window_slots(&every, from, to, now), Err(BackfillError::NoCalendar));
        let year = window_slots(&hourly(), at("2025-11-23T10:00:00Z"), to, now);
        assert_eq!(year, Err(BackfillError::TooMany));
        let one_shot = Schedule::At(at("2026-11-23T11:15:00Z"));
        assert_eq!(window_slots(&one_shot, from, to, now), Ok(vec![at("2026-11-23T11:15:00Z")]));
    }
}
