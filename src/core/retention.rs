//! Which rows of the run log may go. The log would grow without bound (a heartbeat in
//! quiet hours writes a skip every slot), so old rows are pruned by age and by count per
//! heartbeat, but never a row the engine still reads:
//! - the newest row of each heartbeat, and its newest that is not an operator's trigger
//!   (slots are armed above that one, ADR 0049, so a pruned slot is never claimed again,
//!   even after a backward clock jump);
//! - a `running` row (its run's result has yet to land; recovery marks it interrupted);
//! - by count, a run (not a skip) that finished within [`RUNS_PROTECTED_HOURS`]: dedup
//!   reads the last day's delivered digests and the budget a local day's LLM calls. A skip
//!   holds neither, so the count rule prunes skips at any age.
//!
//! The age rule's minimum ([`RUNS_KEPT_DAYS_MIN`]) is above that protection, so it never
//! prunes what dedup or the budget read either.

use jiff::{SignedDuration, Timestamp};

use crate::limits::{
    RUNS_KEPT_DAYS_DEFAULT, RUNS_KEPT_DAYS_MIN, RUNS_KEPT_PER_HEARTBEAT_DEFAULT, RUNS_PROTECTED_HOURS,
};

/// What a row of the log is, as far as pruning cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogRow {
    /// Claimed, its result not written yet.
    Running,
    /// A decided slot that did not run: no reply, no LLM call.
    Skip,
    /// A finished run (or one recovery marked interrupted).
    Run,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunRetention {
    /// Rows that finished longer ago than this go (at least [`RUNS_KEPT_DAYS_MIN`]).
    pub kept_days: u32,
    /// Rows beyond this many per heartbeat, newest first, go (at least 1).
    pub kept_per_heartbeat: u32,
}

impl Default for RunRetention {
    fn default() -> Self {
        Self { kept_days: RUNS_KEPT_DAYS_DEFAULT, kept_per_heartbeat: RUNS_KEPT_PER_HEARTBEAT_DEFAULT }
    }
}

/// The instants a prune at `now` compares finish times with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PruneCutoffs {
    /// Rows that finished before this go by age.
    pub aged_before: Timestamp,
    /// Runs that finished before this may go by count (skips at any age).
    pub protected_from: Timestamp,
    /// Rows ranked at or beyond this (0 = newest) may go by count.
    pub kept_per_heartbeat: u32,
}

impl RunRetention {
    pub fn cutoffs(&self, now: Timestamp) -> PruneCutoffs {
        let days = i64::from(self.kept_days.max(RUNS_KEPT_DAYS_MIN));
        let protected_hours = i64::try_from(RUNS_PROTECTED_HOURS).unwrap_or(i64::MAX);
        let back = |duration: SignedDuration| now.checked_sub(duration).unwrap_or(Timestamp::MIN);
        PruneCutoffs {
            aged_before: back(SignedDuration::from_hours(days * 24)),
            protected_from: back(SignedDuration::from_hours(protected_hours)),
            kept_per_heartbeat: self.kept_per_heartbeat.max(1),
        }
    }
}

impl PruneCutoffs {
    /// Whether a row goes: `rank` is its place among its heartbeat's rows by slot, newest
    /// first (0 = newest); `floor`, whether it is the newest of them that is not an
    /// operator's trigger (what a start-up arms above); `finished_at` is `None` while it runs.
    pub fn prunes(&self, rank: usize, floor: bool, row: LogRow, finished_at: Option<Timestamp>) -> bool {
        let Some(finished_at) = finished_at else { return false };
        if rank == 0 || floor || row == LogRow::Running {
            return false;
        }
        let aged = finished_at < self.aged_before;
        let over_count = rank >= self.kept_per_heartbeat as usize;
        let readable = row == LogRow::Run && finished_at >= self.protected_from;
        aged || (over_count && !readable)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        "2026-06-01T12:00:00Z".parse().expect("valid")
    }

    fn hours_ago(hours: i64) -> Option<Timestamp> {
        Some(now() - SignedDuration::from_hours(hours))
    }

    #[test]
    fn the_newest_row_and_running_rows_always_stay() {
        let cutoffs = RunRetention { kept_days: 2, kept_per_heartbeat: 1 }.cutoffs(now());
        assert!(!cutoffs.prunes(0, false, LogRow::Skip, hours_ago(24 * 400)));
        assert!(!cutoffs.prunes(5, false, LogRow::Running, None));
        assert!(cutoffs.prunes(1, false, LogRow::Run, hours_ago(24 * 3)));
        assert!(!cutoffs.prunes(1, true, LogRow::Skip, hours_ago(24 * 400)), "the floor below a newer trigger");
    }

    #[test]
    fn by_count_skips_go_at_any_age_and_recent_runs_stay() {
        let cutoffs = RunRetention { kept_days: 30, kept_per_heartbeat: 3 }.cutoffs(now());
        assert!(!cutoffs.prunes(2, false, LogRow::Skip, hours_ago(1)), "within the count");
        assert!(cutoffs.prunes(3, false, LogRow::Skip, hours_ago(1)), "a skip beyond the count");
        assert!(!cutoffs.prunes(3, false, LogRow::Run, hours_ago(47)), "dedup and the budget read it");
        assert!(cutoffs.prunes(3, false, LogRow::Run, hours_ago(49)), "past the protection");
    }

    #[test]
    fn by_age_everything_but_the_newest_goes_and_the_minimum_covers_the_protection() {
        let cutoffs = RunRetention { kept_days: 30, kept_per_heartbeat: 1_000 }.cutoffs(now());
        assert!(cutoffs.prunes(1, false, LogRow::Run, hours_ago(24 * 30 + 1)));
        assert!(!cutoffs.prunes(1, false, LogRow::Run, hours_ago(24 * 30 - 1)));
        let floor = RunRetention { kept_days: 0, kept_per_heartbeat: 0 }.cutoffs(now());
        assert!(floor.aged_before <= floor.protected_from, "a config cannot age out what is protected");
        assert_eq!(floor.kept_per_heartbeat, 1);
    }
}
