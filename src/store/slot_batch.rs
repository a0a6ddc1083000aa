//! What the SQL stores' claim and skip writes compute from a batch before writing it: the
//! claims that won and move their heartbeat's row (the shared statements and SQLite's
//! direct writer alike, ADR 0033), and
//! each heartbeat's highest logged slot (the shared statements; SQLite's direct writer
//! raises it a claim at a time, in the claim's own statement).

use std::collections::BTreeMap;

use jiff::Timestamp;

use crate::core::ids::HeartbeatKey;
use crate::ports::store::{ClaimOutcome, SlotClaim};

/// The claims of a batch that won their slot and are the schedule's, in the batch's order:
/// what moves a heartbeat's next and latest slot. An operator's trigger moves neither
/// (ADR 0049).
pub(crate) fn scheduled_won<'c>(claims: &'c [SlotClaim], outcomes: &[ClaimOutcome]) -> Vec<&'c SlotClaim> {
    claims
        .iter()
        .zip(outcomes)
        .filter(|(claim, outcome)| **outcome == ClaimOutcome::Claimed && !claim.triggered)
        .map(|(claim, _)| claim)
        .collect()
}

/// Each heartbeat's highest slot of `logged`, once per heartbeat, in key order: its row's
/// latest logged slot is raised to it (ADR 0031).
pub(crate) fn highest_slots<'k>(
    logged: impl Iterator<Item = (&'k HeartbeatKey, Timestamp)>,
) -> Vec<(&'k HeartbeatKey, Timestamp)> {
    let mut highest: BTreeMap<&HeartbeatKey, Timestamp> = BTreeMap::new();
    for (key, slot) in logged {
        let kept = highest.entry(key).or_insert(slot);
        *kept = (*kept).max(slot);
    }
    highest.into_iter().collect()
}
