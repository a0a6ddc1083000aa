//! What a heartbeat's or cron job's slots are: an elapsed-time interval (`every`), a cron
//! expression in a time zone (`cron`), or one instant (`at`).
//!
//! A schedule only answers "which slot comes after this one"; when a slot is due, and
//! what happens to slots that passed unrun, is decided in [`crate::core::slots`].

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use crate::core::cron::CronSchedule;
use crate::core::duration::{format_duration, parse_duration};
use crate::core::slots::{add, truncate_to_millis};
use crate::limits::{CATCHUP_SCAN_SLOTS_MAX, INTERVAL_SECS_MAX, INTERVAL_SECS_MIN};

// Ordered (kind, then what it holds) so the driver can keep one copy of each (ADR 0026).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Schedule {
    /// Elapsed time: each slot one interval after the previous slot.
    Every(Duration),
    /// Calendar time: the occurrences of a cron expression in an IANA zone. Shared: a
    /// parsed cron is most of a schedule's bytes, and the driver keeps one per armed
    /// heartbeat (an `every` schedule stays 24 bytes instead of 112).
    Cron(Arc<CronSchedule>),
    /// Once, at this instant.
    At(Timestamp),
}

/// The slots that passed unrun up to some instant (see [`Schedule::passed`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Passed {
    /// How many slots passed; a lower bound when a dense cron passed more than the scan limit.
    pub count: u64,
    /// The most recent passed slots, oldest first, the latest last (never empty).
    pub recent: VecDeque<Timestamp>,
    /// The first slot after them, if the schedule has one.
    pub next: Option<Timestamp>,
}

impl Passed {
    pub fn latest(&self) -> Timestamp {
        // `recent` always holds at least the first slot, which had passed.
        self.recent.back().copied().unwrap_or(Timestamp::MIN)
    }
}

/// Lookbacks tried, shortest first, when a dense cron passed too many slots to walk.
const LOOKBACKS_SECS: [i64; 5] = [60, 3_600, 86_400, 32 * 86_400, 366 * 86_400];

impl Schedule {
    /// A cron schedule.
    pub fn cron(cron: CronSchedule) -> Self {
        Schedule::Cron(Arc::new(cron))
    }

    /// `every` from a duration text, checked against the interval limits.
    ///
    /// # Errors
    /// A text that is not a duration, or one out of range; the message says which.
    pub fn every(text: &str) -> Result<Self, String> {
        let interval = parse_duration(text).map_err(|error| error.to_string())?;
        Self::every_duration(interval)
    }

    /// # Errors
    /// An interval out of range.
    pub fn every_duration(interval: Duration) -> Result<Self, String> {
        if interval < Duration::from_secs(INTERVAL_SECS_MIN) || interval > Duration::from_secs(INTERVAL_SECS_MAX) {
            return Err(format!(
                "{} is out of range; allowed from {INTERVAL_SECS_MIN}s to {INTERVAL_SECS_MAX}s",
                format_duration(interval)
            ));
        }
        Ok(Schedule::Every(interval))
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Schedule::Every(_) => "every",
            Schedule::Cron(_) => "cron",
            Schedule::At(_) => "at",
        }
    }

    /// The elapsed-time interval that also makes a slot due (the monotonic chain), for
    /// `every` only: cron and `at` slots are calendar times and wait for the wall clock.
    pub fn interval(&self) -> Option<Duration> {
        match self {
            Schedule::Every(interval) => Some(*interval),
            Schedule::Cron(_) | Schedule::At(_) => None,
        }
    }

    /// The first slot of a schedule armed at `wall`: one interval away for `every`, the
    /// next occurrence for `cron`, the instant itself for `at` (even if it has passed: a
    /// past `at` runs once, at once). `None` when there is none.
    pub fn first_slot(&self, wall: Timestamp) -> Option<Timestamp> {
        let wall = truncate_to_millis(wall);
        match self {
            Schedule::Every(interval) => Some(add(wall, *interval)),
            Schedule::Cron(cron) => cron.next_after(wall),
            Schedule::At(at) => Some(truncate_to_millis(*at)),
        }
    }

    /// The slot after `slot`, or `None` when the schedule has no more.
    pub fn next_after(&self, slot: Timestamp) -> Option<Timestamp> {
        match self {
            Schedule::Every(interval) => Some(add(slot, *interval)),
            Schedule::Cron(cron) => cron.next_after(slot),
            Schedule::At(at) => (truncate_to_millis(*at) > slot).then(|| truncate_to_millis(*at)),
        }
    }

    /// The first slot at or after `at`; for `every`, `at` itself (its grid starts wherever
    /// it is armed).
    pub fn at_or_after(&self, at: Timestamp) -> Option<Timestamp> {
        match self {
            Schedule::Every(_) => Some(at),
            Schedule::Cron(_) | Schedule::At(_) => {
                let before = at.checked_sub(SignedDuration::from_millis(1)).unwrap_or(at);
                self.next_after(before)
            }
        }
    }

    /// Whether a stored next slot can be this schedule's: any instant for `every` (its grid
    /// starts wherever it is armed) and for `at` (a retry's slot lies past the instant), only
    /// an occurrence for `cron`. A cron's stored slot that is not one was written for a
    /// definition since replaced (a decision of the old one landing after the replace).
    pub fn may_resume_at(&self, slot: Timestamp) -> bool {
        match self {
            Schedule::Every(_) | Schedule::At(_) => true,
            Schedule::Cron(_) => {
                let slot = truncate_to_millis(slot);
                self.at_or_after(slot) == Some(slot)
            }
        }
    }

    /// The slots from `first` (a slot that has passed) up to `until`, keeping the `keep`
    /// most recent. Bounded work whatever the gap: `every` is arithmetic, a cron walks at
    /// most [`CATCHUP_SCAN_SLOTS_MAX`] slots, then finds the latest by looking back.
    pub fn passed(&self, first: Timestamp, until: Timestamp, keep: usize) -> Passed {
        let keep = keep.max(1);
        match self {
            Schedule::Every(interval) => {
                let interval_ms = i128::try_from(interval.as_millis().max(1)).unwrap_or(i128::MAX);
                let behind_ms = until.duration_since(first).as_millis().max(0);
                let extra = u64::try_from(behind_ms / interval_ms).unwrap_or(u64::MAX);
                let mut recent = VecDeque::new();
                let kept = extra.min(keep as u64 - 1);
                for back in (0..=kept).rev() {
                    recent.push_back(add(first, mul(*interval, extra - back)));
                }
                let next = recent.back().map(|latest| add(*latest, *interval));
                Passed { count: extra.saturating_add(1), recent, next }
            }
            Schedule::Cron(_) | Schedule::At(_) => self.walk(first, until, keep),
        }
    }

    fn walk(&self, first: Timestamp, until: Timestamp, keep: usize) -> Passed {
        let mut recent = VecDeque::from([first]);
        let mut count: u64 = 1;
        let mut next = self.next_after(first);
        while let Some(slot) = next.filter(|slot| *slot <= until) {
            if count >= CATCHUP_SCAN_SLOTS_MAX {
                return self.jump_to_latest(slot, until, keep, count);
            }
            count += 1;
            recent.push_back(slot);
            if recent.len() > keep {
                recent.pop_front();
            }
            next = self.next_after(slot);
        }
        Passed { count, recent, next }
    }

    /// Too many slots to walk: find the latest slot at or before `until` from a short
    /// lookback (a schedule this dense has one within a minute or an hour).
    fn jump_to_latest(&self, walked_to: Timestamp, until: Timestamp, keep: usize, walked: u64) -> Passed {
        for lookback in LOOKBACKS_SECS {
            let Ok(from) = until.checked_sub(SignedDuration::from_secs(lookback)) else { continue };
            let Some(start) = self.next_after(from.max(walked_to)) else { continue };
            if start <= until {
                let tail = self.walk(start, until, keep);
                return Passed { count: walked.saturating_add(tail.count), ..tail };
            }
        }
        Passed { count: walked, recent: VecDeque::from([walked_to]), next: self.next_after(walked_to) }
    }
}

fn mul(interval: Duration, times: u64) -> Duration {
    let times = u32::try_from(times).unwrap_or(u32::MAX);
    interval.checked_mul(times).unwrap_or(Duration::MAX)
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Schedule::Every(interval) => write!(f, "every {}", format_duration(*interval)),
            Schedule::Cron(cron) => write!(f, "cron \"{}\" in {}", cron.expression(), cron.zone_name()),
            Schedule::At(at) => write!(f, "at {at}"),
        }
    }
}

#[cfg(test)]
#[path = "schedule_tests.rs"]
mod tests;
