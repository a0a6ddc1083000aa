//! A batch of results through the breaker, as the SQL stores apply it: given each
//! heartbeat's stored breaker state, step it through the batch's runs in order. Pure; how
//! the rows are read and written is each store's (sqlx statements, or SQLite's direct
//! writer).

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;

use crate::core::breaker::{self, BreakerStep};
use crate::core::ids::HeartbeatKey;
use crate::ports::store::RunRecord;

/// A heartbeat's breaker columns as stored.
pub(crate) struct StoredBreaker {
    pub consecutive_failures: u32,
    pub enabled: bool,
    pub disabled_reason: Option<String>,
}

/// Per heartbeat of a batch: its final count, whether any of its runs tripped, and when
/// the breaker opened if the batch opened (`Some(Some)`) or closed (`Some(None)`) it.
pub(crate) type BreakerUpdate = (HeartbeatKey, BreakerStep, Option<Option<Timestamp>>);

/// Steps the breaker through `runs` in order from `stored` (heartbeats missing there were
/// deleted while they ran). Returns each run's step, and the update of each heartbeat.
pub(crate) fn step_batch(
    runs: &[RunRecord],
    stored: BTreeMap<HeartbeatKey, StoredBreaker>,
    breaker_failures_max: u32,
) -> (Vec<BreakerStep>, Vec<BreakerUpdate>) {
    let mut counts: BTreeMap<HeartbeatKey, BreakerStep> = BTreeMap::new();
    let mut opened: BTreeMap<HeartbeatKey, Option<Timestamp>> = BTreeMap::new();
    // Heartbeats whose breaker is open (stored, or tripped earlier in this batch).
    let mut open: BTreeSet<HeartbeatKey> = BTreeSet::new();
    // Heartbeats disabled, not by the breaker: an operator's word stands.
    let mut disabled: BTreeSet<HeartbeatKey> = BTreeSet::new();
    for (key, row) in stored {
        if breaker::is_open(row.enabled, row.disabled_reason.as_deref()) {
            open.insert(key.clone());
        } else if !row.enabled {
            disabled.insert(key.clone());
        }
        counts.insert(key, BreakerStep::unchanged(row.consecutive_failures));
    }
    let mut steps = Vec::with_capacity(runs.len());
    for run in runs {
        let Some(current) = counts.get_mut(&run.key) else {
            // Deleted while it ran: nothing left to count against.
            steps.push(BreakerStep::unchanged(0));
            continue;
        };
        if open.contains(&run.key) {
            steps.push(BreakerStep::unchanged(current.consecutive_failures));
            continue;
        }
        let after_run =
            if disabled.contains(&run.key) { breaker::after_run_while_disabled } else { breaker::after_run };
        let step = after_run(current.consecutive_failures, run.verdict(), breaker_failures_max);
        *current = BreakerStep {
            tripped: current.tripped || step.tripped,
            ..BreakerStep::unchanged(step.consecutive_failures)
        };
        if step.tripped {
            open.insert(run.key.clone());
            opened.insert(run.key.clone(), Some(run.finished_at));
        } else if step.consecutive_failures == 0 {
            opened.insert(run.key.clone(), None);
        }
        steps.push(step);
    }
    let updates = counts
        .into_iter()
        .map(|(key, step)| {
            let opened_at = opened.get(&key).copied();
            (key, step, opened_at)
        })
        .collect();
    (steps, updates)
}
