//! The agent heartbeat's flood guard (field notes, failure 6): whatever wakes it, it starts
//! at least `AGENT_HEARTBEAT_SPACING_SECS_MIN` after its last start and at most
//! `AGENT_HEARTBEAT_STARTS_PER_WINDOW_MAX` times per `AGENT_HEARTBEAT_FLOOD_WINDOW_SECS`.
//! Measured on the monotonic clock: a wall-clock jump neither opens nor closes it.

use std::collections::VecDeque;
use std::time::Duration;

use crate::limits::{
    AGENT_HEARTBEAT_FLOOD_WINDOW_SECS, AGENT_HEARTBEAT_SPACING_SECS_MIN, AGENT_HEARTBEAT_STARTS_PER_WINDOW_MAX,
};
use crate::ports::clock::Mono;

#[derive(Debug, Clone, Default)]
pub struct FloodGuard {
    /// Start times within the window, oldest first.
    starts: VecDeque<Mono>,
}

impl FloodGuard {
    /// `Ok` when a run may start at `now`; else the earliest time one may.
    ///
    /// # Errors
    /// The time at which the guard opens again.
    pub fn check(&self, now: Mono) -> Result<(), Mono> {
        let spacing = Duration::from_secs(AGENT_HEARTBEAT_SPACING_SECS_MIN);
        let window = Duration::from_secs(AGENT_HEARTBEAT_FLOOD_WINDOW_SECS);
        let mut opens = None;
        if let Some(&last) = self.starts.back() {
            if now < last + spacing {
                opens = Some(last + spacing);
            }
        }
        let recent: Vec<Mono> = self.starts.iter().copied().filter(|start| now < *start + window).collect();
        if recent.len() >= AGENT_HEARTBEAT_STARTS_PER_WINDOW_MAX {
            // The window opens when the oldest start that fills it leaves it.
            let leaves = recent[recent.len() - AGENT_HEARTBEAT_STARTS_PER_WINDOW_MAX] + window;
            opens = Some(opens.map_or(leaves, |at: Mono| at.max(leaves)));
        }
        opens.map_or(Ok(()), Err)
    }

    /// Records a start, forgetting those that left the window.
    pub fn started(&mut self, now: Mono) {
        let window = Duration::from_secs(AGENT_HEARTBEAT_FLOOD_WINDOW_SECS);
        while self.starts.front().is_some_and(|start| now >= *start + window) {
            self.starts.pop_front();
        }
        self.starts.push_back(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(secs: u64) -> Mono {
        Mono::from_duration(Duration::from_secs(secs))
    }

    #[test]
    fn starts_are_spaced_by_the_minimum() {
        let mut guard = FloodGuard::default();
        assert_eq!(guard.check(secs(100)), Ok(()));
        guard.started(secs(100));
        assert_eq!(guard.check(secs(110)), Err(secs(130)));
        assert_eq!(guard.check(secs(129)), Err(secs(130)));
        assert_eq!(guard.check(secs(130)), Ok(()));
    }

    #[test]
    fn at_most_the_cap_per_window_even_if_spacing_allowed_more() {
        // With 30 s spacing the cap of 5 per minute cannot be reached by starts the guard
        // allowed; a history that reached it (older limits, a restart) must still close it.
        let mut guard = FloodGuard::default();
        for start in [0, 1, 2, 3, 4] {
            guard.started(secs(start));
        }
        assert_eq!(guard.check(secs(40)), Err(secs(60)));
        assert_eq!(guard.check(secs(60)), Ok(()));
    }

    proptest::proptest! {
        #[test]
        fn a_guarded_sequence_never_breaks_the_caps(gaps in proptest::collection::vec(0u64..90, 1..60)) {
            let mut guard = FloodGuard::default();
            let mut now = 0;
            let mut started: Vec<u64> = Vec::new();
            for gap in gaps {
                now += gap;
                if guard.check(secs(now)).is_ok() {
                    guard.started(secs(now));
                    started.push(now);
                }
            }
            for pair in started.windows(2) {
                proptest::prop_assert!(pair[1] - pair[0] >= AGENT_HEARTBEAT_SPACING_SECS_MIN);
            }
            for (index, start) in started.iter().enumerate() {
                let in_window = started[index..].iter().take_while(|s| **s < start + AGENT_HEARTBEAT_FLOOD_WINDOW_SECS).count();
                proptest::prop_assert!(in_window <= AGENT_HEARTBEAT_STARTS_PER_WINDOW_MAX);
            }
        }
    }
}
