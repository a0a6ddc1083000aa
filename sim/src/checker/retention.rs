//! Pruning the run log, judged by the checker's own reading of the documented rule
//! (`docs/simulation.md`, ADR 0015), written out again here rather than borrowed from the
//! engine: of each heartbeat's rows, newest slot first, the newest, the newest that is not
//! an operator's trigger (the floor a start-up arms above, ADR 0049) and any still running
//! stay; a row that finished more than `kept_days` (at least two) ago goes; beyond the
//! newest `kept_per_heartbeat` (at least one), a skip goes, and a run goes once it
//! finished more than 48 hours ago. Exactly those rows must go, no more and no fewer.

use std::collections::{BTreeMap, BTreeSet};

use jiff::{SignedDuration, Timestamp};
use systole::core::ids::HeartbeatKey;

use super::{fail, Step};
use crate::trace::LoggedRow;

pub const PRUNE_EXACT: &str = "prune-exact";

/// What dedup (a day of digests) and the budget (a local day of LLM calls) read back.
const PROTECTED_HOURS: i64 = 48;
const KEPT_DAYS_FLOOR: u32 = 2;

/// The rows the rule lets go, by the checker's reading.
fn prunable(
    now: Timestamp,
    kept_days: u32,
    kept_per_heartbeat: u32,
    before: &[LoggedRow],
) -> BTreeSet<(HeartbeatKey, i64)> {
    let aged_before = now - SignedDuration::from_hours(i64::from(kept_days.max(KEPT_DAYS_FLOOR)) * 24);
    let protected_from = now - SignedDuration::from_hours(PROTECTED_HOURS);
    let keep = kept_per_heartbeat.max(1) as usize;
    let mut by_heartbeat: BTreeMap<&HeartbeatKey, Vec<&LoggedRow>> = BTreeMap::new();
    for row in before {
        by_heartbeat.entry(&row.key).or_default().push(row);
    }
    let mut out = BTreeSet::new();
    for (key, mut rows) in by_heartbeat {
        rows.sort_by_key(|row| std::cmp::Reverse(row.slot));
        let floor = rows.iter().find(|row| !row.triggered).map(|row| row.slot);
        for (rank, row) in rows.iter().enumerate().skip(1) {
            let Some(finished_at) = row.finished_at else { continue };
            if Some(row.slot) == floor {
                continue;
            }
            let aged = finished_at < aged_before;
            let beyond = rank >= keep && (row.skip || finished_at < protected_from);
            if aged || beyond {
                out.insert(((*key).clone(), row.slot.as_millisecond()));
            }
        }
    }
    out
}

pub fn judge(
    now: Timestamp,
    kept_days: u32,
    kept_per_heartbeat: u32,
    before: &[LoggedRow],
    pruned: &[(HeartbeatKey, Timestamp)],
) -> Step {
    let expected = prunable(now, kept_days, kept_per_heartbeat, before);
    let went: BTreeSet<(HeartbeatKey, i64)> =
        pruned.iter().map(|(key, slot)| (key.clone(), slot.as_millisecond())).collect();
    if let Some((key, slot)) = went.difference(&expected).next() {
        let message = format!("the prune at {now} deleted {key} slot {slot} ms, which the retention rule keeps");
        return fail(PRUNE_EXACT, message);
    }
    if let Some((key, slot)) = expected.difference(&went).next() {
        let message = format!("the prune at {now} kept {key} slot {slot} ms, which the retention rule lets go");
        return fail(PRUNE_EXACT, message);
    }
    Ok(())
}
