//! The cluster's invariants, read from the record alone. The grant history is rebuilt
//! here from the `Granted` records, never asked of the store, so a store that forgets to
//! fence is caught rather than trusted.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;

use systole::core::ids::HeartbeatKey;

use super::{ClusterOptions, Entry, Record};

pub const INVARIANTS: [&str; 4] =
    ["cluster-slot-once", "cluster-fenced-writes-refused", "cluster-cadence-after-heal", "cluster-key-once"];

/// Slack on the cadence bound: the model's slowest answer and a partition engine's start.
const CADENCE_SLACK_SECS: u64 = 15;

#[derive(Debug, Default)]
pub struct Verdict {
    pub checks: BTreeMap<&'static str, u64>,
    pub failure: Option<String>,
    /// Writes the store refused as fenced: proof that a node really wrote past its lease.
    pub refused_writes: u64,
}

impl Verdict {
    fn check(&mut self, name: &'static str, holds: bool, explain: impl FnOnce() -> String) {
        *self.checks.entry(name).or_default() += 1;
        if !holds && self.failure.is_none() {
            self.failure = Some(format!("invariant `{name}` broken: {}", explain()));
        }
    }
}

pub fn check(options: &ClusterOptions, entries: &[Entry]) -> Verdict {
    let mut verdict = Verdict::default();
    slot_once(entries, &mut verdict);
    fenced_writes_refused(entries, &mut verdict);
    cadence_after_heal(options, entries, &mut verdict);
    verdict
}

/// A slot starts at most once across the cluster: one claim, one run, one delivery.
fn slot_once(entries: &[Entry], verdict: &mut Verdict) {
    let mut claimed: BTreeMap<(HeartbeatKey, Timestamp), &str> = BTreeMap::new();
    let mut started: BTreeMap<(HeartbeatKey, Timestamp), &str> = BTreeMap::new();
    let mut delivered: BTreeMap<&str, &str> = BTreeMap::new();
    for (sequence, _, record) in entries {
        match record {
            Record::Claimed { node, key, slot } => {
                let earlier = claimed.insert((key.clone(), *slot), node);
                verdict.check("cluster-slot-once", earlier.is_none(), || {
                    format!("#{sequence}: {node} claimed {key} @ {slot}, claimed before by {}", earlier.unwrap_or("?"))
                });
            }
            Record::RunStarted { node, key, slot } => {
                let earlier = started.insert((key.clone(), *slot), node);
                verdict.check("cluster-slot-once", earlier.is_none(), || {
                    format!("#{sequence}: {node} started {key} @ {slot}, started before by {}", earlier.unwrap_or("?"))
                });
            }
            Record::Delivered { node, idempotency_key, .. } => {
                let earlier = delivered.insert(idempotency_key, node);
                verdict.check("cluster-key-once", earlier.is_none(), || {
                    format!(
                        "#{sequence}: {node} delivered {idempotency_key}, delivered before by {}",
                        earlier.unwrap_or("?")
                    )
                });
            }
            _ => {}
        }
    }
}

/// Every write the store accepted carried its partition's newest term at that moment;
/// a write of an older term was refused.
fn fenced_writes_refused(entries: &[Entry], verdict: &mut Verdict) {
    let mut current: BTreeMap<u32, (u64, &str)> = BTreeMap::new();
    for (sequence, _, record) in entries {
        match record {
            Record::Granted { node, partition, term } => {
                current.insert(*partition, (*term, node));
            }
            Record::Released { node, partition, term } if current.get(partition) == Some(&(*term, node.as_str())) => {
                current.insert(*partition, (*term, "nobody"));
            }
            Record::Write { node, partition, term, kind, accepted } => {
                verdict.refused_writes += u64::from(!*accepted);
                let newest = current.get(partition).copied();
                let current_holder = newest == Some((*term, node.as_str()));
                verdict.check("cluster-fenced-writes-refused", *accepted == current_holder, || {
                    let (newest_term, holder) = newest.unwrap_or((0, "nobody"));
                    let verb = if *accepted { "accepted" } else { "refused" };
                    format!(
                        "#{sequence}: {kind} of {node} under term {term} of partition {partition} was {verb}; the \
                         newest grant was term {newest_term} to {holder}"
                    )
                });
            }
            _ => {}
        }
    }
}

/// Once every fault is over, each heartbeat is claimed again within one lease, one
/// renewal turn, its interval and the skew between the nodes' clocks, and keeps that pace.
fn cadence_after_heal(options: &ClusterOptions, entries: &[Entry], verdict: &mut Verdict) {
    let Some(healed) = entries.iter().find(|(_, _, record)| *record == Record::Healed).map(|(_, at, _)| *at) else {
        return;
    };
    let end = entries.last().map_or(healed, |(_, at, _)| *at).max(healed + options.liveness);
    let skews: Vec<i64> = options.nodes.iter().map(|(_, skew, _)| skew.as_secs()).collect();
    let spread = skews.iter().max().copied().unwrap_or(0) - skews.iter().min().copied().unwrap_or(0);
    let spread = Duration::from_secs(u64::try_from(spread).unwrap_or(0));
    for def in &options.heartbeats {
        let systole::core::schedule::Schedule::Every(interval) = def.schedule else { continue };
        let bound = options.lease + options.lease / 3 + interval + spread + Duration::from_secs(CADENCE_SLACK_SECS);
        let mut last = healed;
        let claims = entries.iter().filter_map(|(_, at, record)| match record {
            Record::Claimed { key, .. } if *key == def.key && *at >= healed => Some(*at),
            _ => None,
        });
        for at in claims.chain(std::iter::once(end)) {
            let gap = at.saturating_sub(last);
            verdict.check("cluster-cadence-after-heal", gap <= bound, || {
                format!(
                    "{} (every {}s) went {}s without a claim after the heal, from {}s; the bound is {}s",
                    def.key,
                    interval.as_secs(),
                    gap.as_secs(),
                    last.as_secs(),
                    bound.as_secs()
                )
            });
            last = at;
        }
    }
}
