//! The circuit breaker: a heartbeat that fails too many times in a row is disabled (the
//! breaker opens). After a cooldown it is enabled for one probe run (half-open): a success
//! closes the breaker, a failure opens it again for the next, longer cooldown. An
//! operator's enable closes it at once. Pure; the driver persists what it returns in the
//! same write as the run's result, so restarts never reset the count (field notes,
//! failure 14). See docs/adr/0012-breaker-half-open-recovery.md.

use std::time::Duration;

use jiff::Timestamp;

use crate::core::slots::add;
use crate::ports::clock::{Mono, Now};

/// The breaker's verdict after one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerStep {
    pub consecutive_failures: u32,
    /// The run that was just recorded tripped the breaker: disable the heartbeat.
    pub tripped: bool,
    /// It tripped a closed breaker (the first trip of a run of failures, announced);
    /// a failed probe trips an open one again.
    pub opened: bool,
    /// The run succeeded with the breaker half-open: the probe closed it (announced).
    pub closed: bool,
    /// The run's result moved the breaker. Not when it finished with the breaker open (a
    /// run that started before the trip, beside the one that tripped it: only the probe
    /// after the cooldown speaks for the heartbeat then) or with its heartbeat gone.
    pub counted: bool,
}

impl BreakerStep {
    /// A count with nothing happening to the breaker (no run of it was counted).
    pub fn unchanged(consecutive_failures: u32) -> Self {
        Self { consecutive_failures, tripped: false, opened: false, closed: false, counted: false }
    }
}

/// How a run ended, as the breaker sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Succeeded,
    Failed,
    /// Failed because the model's provider refused the request in a way no retry heals
    /// (a bad key, a spend cap, no access): the breaker opens on the first one, and the
    /// half-open probe finds out when it is fixed, instead of failing all day.
    Refused,
}

/// The breaker state after a run, given the count before it.
pub fn after_run(consecutive_failures: u32, verdict: Verdict, failures_max: u32) -> BreakerStep {
    let was_open = is_half_open(consecutive_failures, failures_max);
    if verdict == Verdict::Succeeded {
        return BreakerStep { closed: was_open, counted: true, ..BreakerStep::unchanged(0) };
    }
    let mut consecutive_failures = consecutive_failures.saturating_add(1);
    if verdict == Verdict::Refused {
        consecutive_failures = consecutive_failures.max(failures_max.max(1));
    }
    let tripped = consecutive_failures >= failures_max;
    BreakerStep { consecutive_failures, tripped, opened: tripped && !was_open, closed: false, counted: true }
}

/// The breaker after a run of a heartbeat disabled meanwhile, not by the breaker (an
/// operator's disable that landed while the run was in flight): the run is counted, but
/// the operator's word stands, as it does during a cooldown (ADR 0012): it neither opens
/// the breaker (whose cooldown would end in a probe that enables the heartbeat again) nor
/// closes it.
pub fn after_run_while_disabled(consecutive_failures: u32, verdict: Verdict, failures_max: u32) -> BreakerStep {
    BreakerStep {
        tripped: false,
        opened: false,
        closed: false,
        ..after_run(consecutive_failures, verdict, failures_max)
    }
}

/// Whether a stored heartbeat's breaker is open: disabled by the breaker, waiting out its
/// cooldown. A run finishing then does not move it ([`BreakerStep::counted`]).
pub fn is_open(enabled: bool, disabled_reason: Option<&str>) -> bool {
    !enabled && disabled_reason == Some(DISABLED_BY_BREAKER)
}

/// The `disabled_reason` the breaker writes.
pub const DISABLED_BY_BREAKER: &str = "circuit-breaker";

/// How long a breaker that opened with `consecutive_failures` stays open: the ladder's
/// step for this trip in a row (the first trip takes the first step, a failed probe the
/// next; the last repeats). `None` when the ladder is empty: it stays open until enabled.
pub fn cooldown_length(ladder: &[Duration], consecutive_failures: u32, failures_max: u32) -> Option<Duration> {
    let step = consecutive_failures.saturating_sub(failures_max.max(1));
    let index = usize::try_from(step).unwrap_or(usize::MAX).min(ladder.len().checked_sub(1)?);
    ladder.get(index).copied()
}

/// Whether a heartbeat with this count, enabled, is half-open: its next finished run is
/// the probe (a failure opens the breaker again at once).
pub fn is_half_open(consecutive_failures: u32, failures_max: u32) -> bool {
    consecutive_failures >= failures_max.max(1)
}

/// An open breaker waiting out its cooldown in a running engine. Like a pause (ADR 0005)
/// it ends when either clock says so: a backward wall jump never stretches it, and after a
/// restart what is left is read off the wall clock, at most its whole length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cooldown {
    /// When the failure that opened it was recorded (wall clock, stored).
    pub opened_at: Timestamp,
    pub length: Duration,
    /// When it ends on this process's monotonic clock.
    pub mono_deadline: Mono,
}

impl Cooldown {
    /// A breaker that opened now, for a failure recorded at `opened_at`.
    pub fn start(now: Now, opened_at: Timestamp, length: Duration) -> Self {
        Self { opened_at, length, mono_deadline: now.mono + length }
    }

    /// A stored open breaker picked up after a restart.
    pub fn resume(now: Now, opened_at: Timestamp, length: Duration) -> Self {
        let left = add(opened_at, length).duration_since(now.wall);
        let left = if left.is_negative() { Duration::ZERO } else { left.unsigned_abs() };
        Self { opened_at, length, mono_deadline: now.mono + left.min(length) }
    }

    /// When the probe may run by the wall clock (what status shows).
    pub fn probe_at(&self) -> Timestamp {
        add(self.opened_at, self.length)
    }

    pub fn ended(&self, now: Now) -> bool {
        now.wall >= self.probe_at() || now.mono >= self.mono_deadline
    }

    /// How long until it ends at the latest, from `now` (for the driver's wake-up).
    pub fn ends_within(&self, now: Now) -> Duration {
        let by_mono = self.mono_deadline.saturating_since(now.mono);
        let by_wall = self.probe_at().duration_since(now.wall);
        let by_wall = if by_wall.is_negative() { Duration::ZERO } else { by_wall.unsigned_abs() };
        by_mono.min(by_wall)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn trips_on_the_third_failure_in_a_row() {
        let first = after_run(0, Verdict::Failed, 3);
        let second = after_run(first.consecutive_failures, Verdict::Failed, 3);
        let third = after_run(second.consecutive_failures, Verdict::Failed, 3);
        assert_eq!((first.tripped, second.tripped, third.tripped), (false, false, true));
        assert_eq!(third.consecutive_failures, 3);
    }

    #[test]
    fn a_success_resets_the_count() {
        assert_eq!(after_run(2, Verdict::Succeeded, 3), BreakerStep { counted: true, ..BreakerStep::unchanged(0) });
    }

    #[test]
    fn a_run_finishing_after_an_operators_disable_counts_but_neither_opens_nor_closes() {
        let refused = after_run_while_disabled(0, Verdict::Refused, 3);
        assert_eq!(refused, BreakerStep { counted: true, ..BreakerStep::unchanged(3) });
        let third = after_run_while_disabled(2, Verdict::Failed, 3);
        assert_eq!((third.consecutive_failures, third.tripped, third.opened), (3, false, false));
        let probe = after_run_while_disabled(3, Verdict::Succeeded, 3);
        assert_eq!(probe, BreakerStep { counted: true, ..BreakerStep::unchanged(0) }, "no close announced");
    }

    #[test]
    fn only_the_first_trip_opens_and_only_a_probe_success_closes() {
        let first = after_run(2, Verdict::Failed, 3);
        assert!(first.tripped && first.opened);
        let failed_probe = after_run(3, Verdict::Failed, 3);
        assert!(failed_probe.tripped && !failed_probe.opened, "a failed probe opens it again, quietly");
        assert!(after_run(4, Verdict::Succeeded, 3).closed);
        assert!(!after_run(1, Verdict::Succeeded, 3).closed, "a success with the breaker closed closes nothing");
    }

    #[test]
    fn a_refusal_opens_the_breaker_on_the_first_failure_and_a_refused_probe_climbs_the_ladder() {
        let first = after_run(0, Verdict::Refused, 5);
        assert!(first.tripped && first.opened);
        assert_eq!(first.consecutive_failures, 5, "the first step of the cooldown ladder");
        let probe = after_run(first.consecutive_failures, Verdict::Refused, 5);
        assert!(probe.tripped && !probe.opened);
        assert_eq!(probe.consecutive_failures, 6, "the next step");
        assert!(after_run(probe.consecutive_failures, Verdict::Succeeded, 5).closed);
    }

    fn ladder() -> Vec<Duration> {
        [3_600, 4 * 3_600, 24 * 3_600].into_iter().map(Duration::from_secs).collect()
    }

    #[test]
    fn each_trip_in_a_row_waits_the_next_step_and_the_last_repeats() {
        let steps: Vec<_> = (3..=7).map(|count| cooldown_length(&ladder(), count, 3)).collect();
        let hours = |h: u64| Some(Duration::from_secs(h * 3_600));
        assert_eq!(steps, vec![hours(1), hours(4), hours(24), hours(24), hours(24)]);
        assert_eq!(cooldown_length(&[], 3, 3), None, "an empty ladder never recovers by itself");
    }

    #[test]
    fn half_open_is_a_count_at_the_limit_on_an_enabled_heartbeat() {
        assert!(!is_half_open(2, 3));
        assert!(is_half_open(3, 3));
        assert!(is_half_open(9, 3));
    }

    fn at(wall_secs: i64, mono_secs: u64) -> Now {
        let wall = Timestamp::from_second(1_800_000_000 + wall_secs).expect("in range");
        Now { wall, mono: Mono::ZERO + Duration::from_secs(mono_secs) }
    }

    #[test]
    fn a_cooldown_ends_by_whichever_clock_gets_there_first() {
        let start = at(0, 0);
        let cooldown = Cooldown::start(start, start.wall, Duration::from_secs(3_600));
        assert!(!cooldown.ended(at(3_599, 3_599)));
        assert!(cooldown.ended(at(3_600, 10)), "the wall clock reached the probe time");
        assert!(cooldown.ended(at(-7_200, 3_600)), "a backward wall jump does not stretch it");
        assert_eq!(cooldown.ends_within(at(-7_200, 600)), Duration::from_secs(3_000));
    }

    #[test]
    fn after_a_restart_what_is_left_comes_from_the_wall_clock_at_most_the_whole_length() {
        let opened = at(0, 0).wall;
        let length = Duration::from_secs(3_600);
        let half_way = Cooldown::resume(at(1_800, 50), opened, length);
        assert_eq!(half_way.mono_deadline, Mono::ZERO + Duration::from_secs(50 + 1_800));
        let jumped_back = Cooldown::resume(at(-86_400, 50), opened, length);
        assert_eq!(jumped_back.mono_deadline, Mono::ZERO + Duration::from_secs(50 + 3_600));
        assert!(Cooldown::resume(at(4_000, 50), opened, length).ended(at(4_000, 50)));
    }

    proptest! {
        /// It trips exactly when the run of failures at the end reaches the limit.
        #[test]
        fn trips_exactly_at_n_in_a_row(outcomes in proptest::collection::vec(any::<bool>(), 0..30), max in 1u32..6) {
            let mut count = 0u32;
            let mut streak = 0u32;
            for succeeded in outcomes {
                let verdict = if succeeded { Verdict::Succeeded } else { Verdict::Failed };
                let step = after_run(count, verdict, max);
                streak = if succeeded { 0 } else { streak + 1 };
                prop_assert_eq!(step.consecutive_failures, streak);
                prop_assert_eq!(step.tripped, streak >= max);
                count = step.consecutive_failures;
            }
        }
    }
}
