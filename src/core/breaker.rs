//! The circuit breaker: a heartbeat that fails too many times in a row is disabled until
//! someone re-enables it. Pure; the driver persists what it returns in the same write as
//! the run's result, so restarts never reset the count (field notes, failure 14).

/// The breaker's verdict after one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerStep {
    pub consecutive_failures: u32,
    /// The run that was just recorded tripped the breaker: disable the heartbeat.
    pub tripped: bool,
}

/// The breaker state after a run, given the count before it.
pub fn after_run(consecutive_failures: u32, succeeded: bool, failures_max: u32) -> BreakerStep {
    if succeeded {
        return BreakerStep { consecutive_failures: 0, tripped: false };
    }
    let consecutive_failures = consecutive_failures.saturating_add(1);
    BreakerStep { consecutive_failures, tripped: consecutive_failures >= failures_max }
}

/// The `disabled_reason` the breaker writes.
pub const DISABLED_BY_BREAKER: &str = "circuit-breaker";

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn trips_on_the_third_failure_in_a_row() {
        let first = after_run(0, false, 3);
        let second = after_run(first.consecutive_failures, false, 3);
        let third = after_run(second.consecutive_failures, false, 3);
        assert_eq!((first.tripped, second.tripped, third.tripped), (false, false, true));
        assert_eq!(third.consecutive_failures, 3);
    }

    #[test]
    fn a_success_resets_the_count() {
        assert_eq!(after_run(2, true, 3), BreakerStep { consecutive_failures: 0, tripped: false });
    }

    proptest! {
        /// It trips exactly when the run of failures at the end reaches the limit.
        #[test]
        fn trips_exactly_at_n_in_a_row(outcomes in proptest::collection::vec(any::<bool>(), 0..30), max in 1u32..6) {
            let mut count = 0u32;
            let mut streak = 0u32;
            for succeeded in outcomes {
                let step = after_run(count, succeeded, max);
                streak = if succeeded { 0 } else { streak + 1 };
                prop_assert_eq!(step.consecutive_failures, streak);
                prop_assert_eq!(step.tripped, streak >= max);
                count = step.consecutive_failures;
            }
        }
    }
}
