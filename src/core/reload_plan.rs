//! What a reload of a cluster's nodes applies (ADR 0024), decided without IO: whether two
//! nodes' files hold the same heartbeats (a digest), what changed between the heartbeats a
//! node runs and its file's, and the part of that about one partition.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use crate::core::heartbeat::HeartbeatDef;
use crate::core::ids::HeartbeatKey;
use crate::core::partition::{partition_of, PARTITIONS_COUNT};
use crate::ports::store::SeedReport;

/// A digest of the heartbeats a file defines, in a canonical order: two nodes' files agree
/// on what a reload applies when their digests are equal.
pub fn heartbeats_digest(defs: &[HeartbeatDef]) -> String {
    let mut fingerprints: Vec<(String, String)> =
        defs.iter().map(|def| (def.key.to_string(), def.fingerprint())).collect();
    fingerprints.sort();
    let mut hasher = Sha256::new();
    for (key, fingerprint) in &fingerprints {
        hasher.update((key.len() as u64).to_le_bytes());
        hasher.update(key.as_bytes());
        hasher.update(fingerprint.as_bytes());
    }
    crate::core::hex::lower_hex(&hasher.finalize())
}

/// What changed between the heartbeats a node runs and its file's, as a seed reports it.
pub fn changes(running: &[HeartbeatDef], new: &[HeartbeatDef]) -> SeedReport {
    let before: BTreeMap<&HeartbeatKey, String> = running.iter().map(|def| (&def.key, def.fingerprint())).collect();
    let after: BTreeMap<&HeartbeatKey, String> = new.iter().map(|def| (&def.key, def.fingerprint())).collect();
    let mut report = SeedReport::default();
    for (key, fingerprint) in &after {
        match before.get(key) {
            None => report.inserted.push((*key).clone()),
            Some(old) if old != fingerprint => report.updated.push((*key).clone()),
            Some(_) => report.unchanged.push((*key).clone()),
        }
    }
    report.removed = before.keys().filter(|key| !after.contains_key(*key)).map(|key| (*key).clone()).collect();
    report
}

/// The part of `report` about the heartbeats of `partition`.
pub fn in_partition(report: &SeedReport, partition: u32) -> SeedReport {
    let mine = |keys: &[HeartbeatKey]| {
        keys.iter().filter(|key| partition_of(&key.agent, PARTITIONS_COUNT) == partition).cloned().collect()
    };
    SeedReport {
        inserted: mine(&report.inserted),
        updated: mine(&report.updated),
        unchanged: mine(&report.unchanged),
        removed: mine(&report.removed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::heartbeat::test_def as def;

    #[test]
    fn two_files_agree_when_they_define_the_same_heartbeats_in_any_order() {
        let (a, b) = (def("ops", "inbox", 60), def("main", "news", 3_600));
        assert_eq!(heartbeats_digest(&[a.clone(), b.clone()]), heartbeats_digest(&[b.clone(), a.clone()]));
        assert_ne!(heartbeats_digest(&[a.clone(), b.clone()]), heartbeats_digest(std::slice::from_ref(&a)));
        assert_ne!(heartbeats_digest(&[a, b.clone()]), heartbeats_digest(&[def("ops", "inbox", 61), b]));
    }

    #[test]
    fn a_node_re_arms_what_changed_and_each_partition_its_own() {
        let running = [def("ops", "inbox", 60), def("ops", "gone", 60), def("main", "news", 60)];
        let new = [def("ops", "inbox", 60), def("main", "news", 120), def("main", "fresh", 60)];
        let report = changes(&running, &new);
        let keys = |keys: &[HeartbeatKey]| keys.iter().map(ToString::to_string).collect::<Vec<_>>();
        assert_eq!(keys(&report.inserted), ["main/fresh"]);
        assert_eq!(keys(&report.updated), ["main/news"]);
        assert_eq!(keys(&report.unchanged), ["ops/inbox"]);
        assert_eq!(keys(&report.removed), ["ops/gone"]);
        // "ops" is in partition 6 and "main" in 9 (core::partition's vectors).
        let ops = in_partition(&report, 6);
        assert_eq!((keys(&ops.removed), ops.updated.len(), ops.inserted.len()), (vec!["ops/gone".to_owned()], 0, 0));
        let main = in_partition(&report, 9);
        assert_eq!(
            (keys(&main.inserted), keys(&main.updated)),
            (vec!["main/fresh".to_owned()], vec!["main/news".to_owned()])
        );
        assert_eq!(in_partition(&report, 0), SeedReport::default());
    }
}
