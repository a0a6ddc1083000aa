//! Wake requests for an agent's heartbeat (`request_now`): requests close together become
//! one run, the most important reason wins, and a busy agent is retried without losing
//! the request to a normal tick.

use std::time::Duration;

use jiff::Timestamp;

use crate::limits::{WAKE_BUSY_RETRY_MS, WAKE_COALESCE_MS};
use crate::ports::clock::Mono;

/// Why the agent heartbeat should run now, least important first: when requests coalesce,
/// the highest wins (`exec-event`, `manual` and `hook` rank the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WakeReason {
    /// The previous attempt found the agent busy.
    Retry,
    /// Its schedule's slot came.
    Interval,
    /// A main-mode cron job queued a system event.
    Cron,
    /// An async command the agent started has finished.
    ExecEvent,
    /// Someone asked for a run (CLI, API).
    Manual,
    /// An external hook asked for a run.
    Hook,
}

impl WakeReason {
    pub const ALL: [WakeReason; 6] = [
        WakeReason::Retry,
        WakeReason::Interval,
        WakeReason::Cron,
        WakeReason::ExecEvent,
        WakeReason::Manual,
        WakeReason::Hook,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            WakeReason::Retry => "retry",
            WakeReason::Interval => "interval",
            WakeReason::Cron => "cron",
            WakeReason::ExecEvent => "exec-event",
            WakeReason::Manual => "manual",
            WakeReason::Hook => "hook",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|reason| reason.as_str() == text)
    }

    pub fn priority(self) -> u8 {
        match self {
            WakeReason::Retry => 0,
            WakeReason::Interval => 1,
            WakeReason::Cron => 2,
            WakeReason::ExecEvent | WakeReason::Manual | WakeReason::Hook => 3,
        }
    }

    /// Reasons somebody asked for explicitly: they go through a pause and quiet hours,
    /// which hold only the agent's own timed runs.
    pub fn is_explicit(self) -> bool {
        !matches!(self, WakeReason::Retry | WakeReason::Interval)
    }
}

/// A wake that has been asked for and not yet decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingWake {
    pub reason: WakeReason,
    /// When it is decided: the end of the coalescing window, or a retry's time.
    pub due: Mono,
    /// The schedule slot it carries, if an interval tick is part of it: the run is
    /// recorded under that slot, so the slot counts as decided.
    pub slot: Option<Timestamp>,
    /// It already recorded its skip (busy lane, flood guard) and is only waiting to run:
    /// later attempts that must wait again are not recorded again.
    pub quiet: bool,
}

impl PendingWake {
    /// Adds a request to what is pending. A new request is decided at most
    /// `WAKE_COALESCE_MS` from now; one already pending keeps its earlier time, so a
    /// stream of requests cannot postpone a run forever.
    pub fn request(pending: Option<PendingWake>, reason: WakeReason, slot: Option<Timestamp>, now: Mono) -> Self {
        let due = now + Duration::from_millis(WAKE_COALESCE_MS);
        match pending {
            None => PendingWake { reason, due, slot, quiet: false },
            Some(pending) => PendingWake {
                reason: higher(pending.reason, reason),
                due: pending.due.min(due),
                slot: pending.slot.or(slot),
                // A schedule slot joining a wake that waits quietly is a new decision: its
                // skip, if it must wait too, is recorded.
                quiet: pending.quiet && slot.is_none(),
            },
        }
    }

    /// The same wake, tried again after `WAKE_BUSY_RETRY_MS` (the agent was busy), or at
    /// `not_before` when that is later (the flood guard's next opening). Its reason is
    /// kept unless it was only a retry: a cron wake that found the agent busy is still a
    /// cron wake.
    pub fn retry(self, now: Mono, not_before: Option<Mono>) -> Self {
        let due = now + Duration::from_millis(WAKE_BUSY_RETRY_MS);
        PendingWake { due: not_before.map_or(due, |at| at.max(due)), ..self }
    }
}

fn higher(a: WakeReason, b: WakeReason) -> WakeReason {
    // On equal rank the first stays: which of two equal reasons names the run is arbitrary
    // but must be stable for replay.
    if b.priority() > a.priority() {
        b
    } else {
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Mono {
        Mono::from_duration(Duration::from_millis(ms))
    }

    #[test]
    fn requests_within_the_window_coalesce_and_the_highest_wins() {
        let first = PendingWake::request(None, WakeReason::Interval, None, at(1_000));
        assert_eq!(first.due, at(1_250));
        let second = PendingWake::request(Some(first), WakeReason::Manual, None, at(1_100));
        assert_eq!((second.reason, second.due), (WakeReason::Manual, at(1_250)));
        let third = PendingWake::request(Some(second), WakeReason::Cron, None, at(1_200));
        assert_eq!((third.reason, third.due), (WakeReason::Manual, at(1_250)));
    }

    #[test]
    fn priorities_are_ordered_as_the_spec_says() {
        let ranks: Vec<u8> = WakeReason::ALL.iter().map(|reason| reason.priority()).collect();
        assert_eq!(ranks, [0, 1, 2, 3, 3, 3]);
        let hook_then_manual = PendingWake::request(
            Some(PendingWake::request(None, WakeReason::Hook, None, at(0))),
            WakeReason::Manual,
            None,
            at(1),
        );
        assert_eq!(hook_then_manual.reason, WakeReason::Hook);
    }

    #[test]
    fn a_retry_is_not_lost_to_a_tick_and_keeps_its_reason() {
        let cron = PendingWake::request(None, WakeReason::Cron, None, at(0));
        let retry = cron.retry(at(250), None);
        assert_eq!((retry.reason, retry.due), (WakeReason::Cron, at(1_250)));
        let slot: Timestamp = "2026-01-01T00:00:00Z".parse().expect("test timestamp");
        let merged = PendingWake::request(Some(retry), WakeReason::Interval, Some(slot), at(1_200));
        assert_eq!((merged.reason, merged.due, merged.slot), (WakeReason::Cron, at(1_250), Some(slot)));
        assert_eq!(cron.retry(at(250), Some(at(30_000))).due, at(30_000));
        let quiet = PendingWake { slot: None, quiet: true, ..retry };
        assert!(PendingWake::request(Some(quiet), WakeReason::Manual, None, at(1_300)).quiet);
        assert!(!PendingWake::request(Some(quiet), WakeReason::Interval, Some(slot), at(1_300)).quiet);
    }

    #[test]
    fn names_round_trip() {
        for reason in WakeReason::ALL {
            assert_eq!(WakeReason::parse(reason.as_str()), Some(reason));
        }
    }
}
