//! Per-heartbeat policies: what happens to slots missed during downtime, to a slot that
//! comes due while the previous run is still going, and how far a job's runs are spread.

use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::core::ids::HeartbeatKey;
use crate::limits::CATCHUP_WINDOW_SECS_DEFAULT;

/// Missed slots (downtime, a forward clock jump, a stalled process).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum CatchUp {
    /// Run none of them; wait for the next slot. A slot that is only a little late
    /// ([`crate::limits::CATCHUP_GRACE_SECS`]) is not missed and still runs, and an `at`
    /// schedule's one slot always runs.
    Skip,
    /// Run the most recent missed slot once.
    #[default]
    Once,
    /// Run each missed slot within the catch-up window, oldest first, one after another,
    /// at most [`crate::limits::CATCHUP_RUNS_MAX`]; the most recent always runs.
    All,
}

/// A slot that comes due while the heartbeat's previous run is still going.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum Overlap {
    /// Skip it (recorded with reason `overlap`).
    #[default]
    Skip,
    /// Hold one such slot and run it when the current run ends; skip any beyond that.
    BufferOne,
    /// Run it alongside.
    AllowAll,
}

/// The policies of one heartbeat or cron job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct RunPolicy {
    pub catch_up: CatchUp,
    /// How old a missed slot may be and still run under [`CatchUp::All`].
    pub catch_up_window: Duration,
    pub overlap: Overlap,
    /// The largest stable offset added to every slot's due time; zero for none.
    pub jitter_max: Duration,
}

impl Default for RunPolicy {
    fn default() -> Self {
        Self {
            catch_up: CatchUp::Once,
            catch_up_window: Duration::from_secs(CATCHUP_WINDOW_SECS_DEFAULT),
            overlap: Overlap::Skip,
            jitter_max: Duration::ZERO,
        }
    }
}

impl CatchUp {
    pub const NAMES: &'static str = "\"skip\", \"once\" or \"all\"";

    pub fn as_str(self) -> &'static str {
        match self {
            CatchUp::Skip => "skip",
            CatchUp::Once => "once",
            CatchUp::All => "all",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [CatchUp::Skip, CatchUp::Once, CatchUp::All].into_iter().find(|policy| policy.as_str() == text)
    }
}

impl Overlap {
    pub const NAMES: &'static str = "\"skip\", \"buffer_one\" or \"allow_all\"";

    pub fn as_str(self) -> &'static str {
        match self {
            Overlap::Skip => "skip",
            Overlap::BufferOne => "buffer_one",
            Overlap::AllowAll => "allow_all",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [Overlap::Skip, Overlap::BufferOne, Overlap::AllowAll].into_iter().find(|policy| policy.as_str() == text)
    }
}

/// What a due slot does while `runs_in_flight` runs of its heartbeat are going and
/// `waiting` slots already wait their turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverlapDecision {
    Run,
    /// Wait until the current run ends.
    Hold,
    Skip,
}

pub fn on_overlap(overlap: Overlap, runs_in_flight: usize, waiting: usize) -> OverlapDecision {
    match overlap {
        _ if runs_in_flight == 0 => OverlapDecision::Run,
        Overlap::AllowAll => OverlapDecision::Run,
        Overlap::BufferOne if waiting == 0 => OverlapDecision::Hold,
        Overlap::BufferOne | Overlap::Skip => OverlapDecision::Skip,
    }
}

/// The stable offset of `key`'s runs: a digest of its id taken modulo `jitter_max`, so
/// jobs that share a cron expression spread out, and each keeps its offset across
/// restarts and builds.
pub fn jitter_offset(key: &HeartbeatKey, jitter_max: Duration) -> Duration {
    let max_ms = u64::try_from(jitter_max.as_millis()).unwrap_or(u64::MAX);
    if max_ms == 0 {
        return Duration::ZERO;
    }
    let digest = Sha256::new()
        .chain_update(key.agent.as_str().as_bytes())
        .chain_update([0u8])
        .chain_update(key.heartbeat.as_str().as_bytes())
        .finalize();
    let mut head = [0u8; 8];
    head.copy_from_slice(&digest[..8]);
    Duration::from_millis(u64::from_le_bytes(head) % max_ms)
}

/// The wait after the `consecutive_failures`-th failure in a row before the next run:
/// the matching step of `steps`, the last step for any failure beyond them.
pub fn backoff_delay(steps: &[Duration], consecutive_failures: u32) -> Duration {
    let index = usize::try_from(consecutive_failures.saturating_sub(1)).unwrap_or(usize::MAX);
    steps.get(index).or(steps.last()).copied().unwrap_or(Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::ids::{AgentId, HeartbeatId};

    fn key(agent: &str, id: &str) -> HeartbeatKey {
        HeartbeatKey { agent: AgentId::new(agent).expect("valid"), heartbeat: HeartbeatId::new(id).expect("valid") }
    }

    #[test]
    fn jitter_is_stable_bounded_and_spreads_jobs() {
        let max = Duration::from_secs(300);
        let offsets: Vec<Duration> = (0..50).map(|n| jitter_offset(&key("main", &format!("job{n}")), max)).collect();
        assert!(offsets.iter().all(|offset| *offset < max));
        let distinct: std::collections::BTreeSet<_> = offsets.iter().collect();
        assert!(distinct.len() > 45, "50 jobs share few offsets: {distinct:?}");
        assert_eq!(jitter_offset(&key("main", "job1"), max), offsets[1], "same id, same offset");
        assert_ne!(jitter_offset(&key("other", "job1"), max), offsets[1], "the agent is part of the id");
        assert_eq!(jitter_offset(&key("main", "job1"), Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn backoff_follows_the_steps_then_holds_the_last() {
        let steps: Vec<Duration> = [30, 60, 300].into_iter().map(Duration::from_secs).collect();
        assert_eq!(backoff_delay(&steps, 1), Duration::from_secs(30));
        assert_eq!(backoff_delay(&steps, 3), Duration::from_secs(300));
        assert_eq!(backoff_delay(&steps, 9), Duration::from_secs(300));
        assert_eq!(backoff_delay(&[], 2), Duration::ZERO);
        assert_eq!(backoff_delay(&steps, 0), Duration::from_secs(30));
    }

    #[test]
    fn overlap_policies_decide_a_slot_due_during_a_run() {
        use OverlapDecision::{Hold, Run, Skip};
        for overlap in [Overlap::Skip, Overlap::BufferOne, Overlap::AllowAll] {
            assert_eq!(on_overlap(overlap, 0, 0), Run, "nothing in flight: {overlap:?} runs");
        }
        assert_eq!(on_overlap(Overlap::Skip, 1, 0), Skip);
        assert_eq!(on_overlap(Overlap::BufferOne, 1, 0), Hold);
        assert_eq!(on_overlap(Overlap::BufferOne, 1, 1), Skip, "only one is held");
        assert_eq!(on_overlap(Overlap::AllowAll, 3, 0), Run);
    }

    #[test]
    fn policy_names_round_trip() {
        for policy in [CatchUp::Skip, CatchUp::Once, CatchUp::All] {
            assert_eq!(CatchUp::parse(policy.as_str()), Some(policy));
        }
        for policy in [Overlap::Skip, Overlap::BufferOne, Overlap::AllowAll] {
            assert_eq!(Overlap::parse(policy.as_str()), Some(policy));
        }
        assert_eq!(CatchUp::parse("ALL"), None);
    }
}
