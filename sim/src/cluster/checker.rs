//! The cluster's invariants, read from the record alone. The grant history is rebuilt
//! here from the `Granted` records, never asked of the store, so a store that forgets to
//! fence is caught rather than trusted.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;

use systole::core::ids::{AgentId, HeartbeatKey};
use systole::core::partition::{partition_of, PARTITIONS_COUNT};

use super::{CallKind, ClusterOptions, Entry, FaultKind, Record};

pub const INVARIANTS: [&str; 16] = [
    "cluster-slot-once",
    "cluster-fenced-writes-refused",
    "cluster-cadence-after-heal",
    "cluster-key-once",
    "cluster-grant-raises-term",
    "cluster-no-effect-after-lease",
    "cluster-frozen-holder-ended",
    "cluster-grant-wait-bounded",
    "cluster-pause-holds",
    "cluster-call-answered-when-settled",
    "cluster-reload-reaches-all",
    "cluster-reload-removes",
    "cluster-breaker-holds",
    "cluster-reminder-runs",
    "cluster-trigger-decided",
    "cluster-disable-holds",
];

/// Slack on the database's idle-session timer: it fires a little after its bound, as
/// PostgreSQL's does.
const IDLE_TIMER_SLACK_MS: u64 = 100;
/// The longest a grant may wait on a row a frozen transaction holds: well inside the
/// shortest renewal period (a third of the shortest lease, 3 s), so the waiting node's
/// loop still renews what it holds.
const GRANT_WAIT_MS_MAX: u64 = 1_000;
/// Slack on a pause's end as another node judges it: the store keeps it in milliseconds.
const PAUSE_END_SLACK_MS: u64 = 1;
/// The longest pause in the workload (an operator's 10 minutes).
const PAUSE_MINUTES_MAX_SIM: Duration = Duration::from_secs(10 * 60);
/// Slack on the cadence bound: the model's slowest answer and a partition engine's start.
const CADENCE_SLACK_SECS: u64 = 15;

#[derive(Debug, Default)]
pub struct Verdict {
    pub checks: BTreeMap<&'static str, u64>,
    pub failure: Option<String>,
    /// Writes the store refused as fenced: proof that a node really wrote past its lease.
    pub refused_writes: u64,
    /// Deliveries the lease's fence dropped: proof that a node woke with a reply in hand.
    pub fenced_effects: u64,
    /// Reloads applied on every node, applied on some, and refused (nothing changed).
    pub reloads: [u64; 3],
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
    let fenced_effects = entries.iter().filter(|(_, _, record)| matches!(record, Record::EffectFenced { .. })).count();
    let mut verdict =
        Verdict { fenced_effects: u64::try_from(fenced_effects).unwrap_or(u64::MAX), ..Verdict::default() };
    slot_once(entries, &mut verdict);
    fenced_writes_refused(entries, &mut verdict);
    grant_raises_term(entries, &mut verdict);
    no_effect_after_lease(options, entries, &mut verdict);
    frozen_holders(options, entries, &mut verdict);
    cadence_after_heal(options, entries, &mut verdict);
    operator_calls(options, entries, &mut verdict);
    reloads(options, entries, &mut verdict);
    breakers(options, entries, &mut verdict);
    agent_pauses(options, entries, &mut verdict);
    reminders(options, entries, &mut verdict);
    verdict
}

/// A pause an engine applied (its model's, or an operator's on the owner) holds across the
/// cluster like an operator's call: no run of the agent starts on any node from when the
/// engine applied it until it ends (less the clocks' spread), unless a later call or pause
/// about the agent, after it was stored, replaced it. The event may come late (an operator's forward stores the
/// pause, then waits for a stopped engine to apply it), so the pause's times are read from
/// it: it was set `minutes` before `until`, both by the clock of the node that set it.
fn agent_pauses(options: &ClusterOptions, entries: &[Entry], verdict: &mut Verdict) {
    let triggered = triggered_slots(entries);
    let calls = pause_calls(entries);
    // Each node judges the end by its own wall clock: the one furthest ahead sees it first.
    let ahead = options.nodes.iter().map(|(_, skew, _)| *skew).max().unwrap_or_default();
    let true_time = |wall: Timestamp, skew: jiff::SignedDuration| {
        Duration::try_from(wall.duration_since(options.start) - skew).unwrap_or_default()
    };
    let skew_of = |node: &str| {
        options.nodes.iter().find(|(name, _, _)| name == node).map(|(_, skew, _)| *skew).unwrap_or_default()
    };
    let set_at = |node: &str, minutes: u32, until: Timestamp| {
        let set = until.checked_sub(jiff::SignedDuration::from_mins(i64::from(minutes))).unwrap_or(until);
        true_time(set, skew_of(node))
    };
    for (sequence, at, record) in entries {
        let Record::AgentPaused { node, agent, minutes, until } = record else { continue };
        // Its end is on the clock of the node that stored it, which applied it first; another
        // node applies it later, from the store (seed 31450387320: node-2's skew put a pause
        // node-3 stored at 871 s after node-3's replacement at 897 s).
        let writer = entries.iter().find_map(|(_, _, record)| match record {
            Record::AgentPaused { node: first, agent: again, minutes: length, until: end }
                if again == agent && length == minutes && end == until =>
            {
                Some(first.as_str())
            }
            _ => None,
        });
        let set = set_at(writer.unwrap_or(node), *minutes, *until);
        let ends = true_time(*until, ahead).saturating_sub(Duration::from_millis(PAUSE_END_SLACK_MS));
        let replaced = entries.iter().find_map(|(_, later, record)| match record {
            Record::OperatorAsked { agent: again, kind, .. }
                if again == agent && matches!(kind, CallKind::Pause | CallKind::Resume) && *later > set =>
            {
                Some(*later)
            }
            Record::AgentPaused { node, agent: again, minutes, until } if again == agent => {
                let later = set_at(node, *minutes, *until);
                (later > set).then_some(later)
            }
            _ => None,
        });
        // A resume on its way when the pause was stored may land after it (its write frozen
        // in its transaction, say), and delete it; not one whose write came before.
        let resumed = calls.iter().any(|call| {
            call.agent == agent
                && call.kind == CallKind::Resume
                && call.asked_at <= set
                && call.answered_at > set
                && call.written.is_none_or(|(_, written_at)| written_at >= set)
        });
        let replaced = if resumed { Some(set) } else { replaced };
        let ends = replaced.map_or(ends, |replaced| ends.min(replaced));
        // Runs are judged from when the engine applied it (a slot may fire between the
        // store's write and the apply: the call has not returned yet); a replacement from
        // when it was stored.
        let started = entries.iter().find(|(_, started_at, record)| {
            *started_at > *at
                && *started_at < ends
                && matches!(record, Record::RunStarted { key, slot, .. } if key.agent == *agent && !triggered.contains(&(key, *slot)))
        });
        verdict.check("cluster-pause-holds", started.is_none(), || {
            let (later, started_at, record) = offending(started);
            format!(
                "#{sequence}: {node} applied a pause of {agent} for {minutes} min at {}ms (set at {}ms); #{later} at \
                 {}ms: {record:?}",
                at.as_millis(),
                set.as_millis(),
                started_at.as_millis()
            )
        });
    }
}

/// A reminder a model set (and the store took) runs: claimed on some node by the end, once
/// it is due with time to spare (an owner's takeover, a backoff and a breaker's cooldown),
/// unless a pause of its agent may have skipped it.
fn reminders(options: &ClusterOptions, entries: &[Entry], verdict: &mut Verdict) {
    let end = entries.last().map_or(Duration::ZERO, |(_, at, _)| *at);
    let spread = options.skew_spread();
    let spare = options.lease * 4
        + spread
        + Duration::from_secs(CADENCE_SLACK_SECS + super::BREAKER_COOLDOWN_SECS + super::MODEL_HANG_SECS)
        + Duration::from_secs(super::ERROR_BACKOFF_SECS.into_iter().sum());
    let start = options.start.as_second();
    for (sequence, _, record) in entries {
        let Record::ReminderSet { node, key } = record else { continue };
        let Some(due) =
            key.heartbeat.as_str().strip_prefix(super::REMINDER_PREFIX).and_then(|due| due.parse::<i64>().ok())
        else {
            continue;
        };
        let due = Duration::from_secs(u64::try_from(due - start).unwrap_or(0));
        if due + spare > end {
            continue;
        }
        // A pause of the agent, operator's or model's, from when it may begin to its end.
        let paused_near = entries.iter().any(|(_, at, record)| match record {
            Record::OperatorAsked { agent, .. } | Record::AgentPaused { agent, .. } if *agent == key.agent => {
                *at <= due + spread + spare && *at + PAUSE_MINUTES_MAX_SIM + spread + spare >= due
            }
            _ => false,
        });
        if paused_near {
            continue;
        }
        let claimed = entries
            .iter()
            .any(|(_, _, record)| matches!(record, Record::Claimed { key: claimed, .. } if claimed == key));
        verdict.check("cluster-reminder-runs", claimed, || {
            format!(
                "#{sequence}: {node} set {key}, due at {}s; no node claimed it by the end ({}s)",
                due.as_secs(),
                end.as_secs()
            )
        });
    }
}

/// An open breaker holds its heartbeat across the cluster: once it opened on one node, no
/// run of the heartbeat starts on any node (a later owner included, which learns of it
/// from the store) before its cooldown has passed, less the clocks' spread (each node
/// judges the cooldown's end by its own wall clock) and a second. A reload that may
/// change the heartbeat ends the hold (a new definition starts afresh): one asked after
/// the breaker opened, or one asked before and answered after, whose write may have come
/// after the trip (then ending the hold at its answer; seed 31450004518). The write itself
/// ends it where it came before the answer: a seed that changed the heartbeat's definition
/// (`Seeded`), which another node may adopt and run before the answer is recorded (seed
/// 31450119390).
fn breakers(options: &ClusterOptions, entries: &[Entry], verdict: &mut Verdict) {
    let slack = options.skew_spread() + Duration::from_secs(1);
    // Once a reload has changed the files, a node that starts seeds its file: a definition
    // it changes starts afresh, its breaker closed (seed 31000032975).
    let files_changed = entries.iter().position(|(_, _, record)| matches!(record, Record::ReloadAsked { .. }));
    let seeds_anew = |index: usize, record: &Record| match record {
        Record::ReloadAsked { .. } | Record::Reloaded { .. } => true,
        Record::Fault { kind: FaultKind::Joined | FaultKind::Restarted, .. } => {
            files_changed.is_some_and(|changed| changed < index)
        }
        _ => false,
    };
    for (index, (sequence, at, record)) in entries.iter().enumerate() {
        let Record::BreakerTripped { node, key, cooldown } = record else { continue };
        let hold = cooldown.map_or(Duration::MAX, |cooldown| *at + cooldown.saturating_sub(slack));
        let seeded = |record: &Record| matches!(record, Record::Seeded { keys, .. } if keys.contains(key));
        let started = entries[index + 1..]
            .iter()
            .enumerate()
            .take_while(|(offset, (_, later, record))| {
                *later < hold && !seeds_anew(index + 1 + offset, record) && !seeded(record)
            })
            .map(|(_, entry)| entry)
            .find(|(_, _, record)| matches!(record, Record::RunStarted { key: started, .. } if started == key));
        verdict.check("cluster-breaker-holds", started.is_none(), || {
            let (later, started_at, record) = offending(started);
            format!(
                "#{sequence}: {node} opened the breaker of {key} at {}ms for {cooldown:?}; #{later} at {}ms: {record:?}",
                at.as_millis(),
                started_at.as_millis()
            )
        });
    }
}

/// A reload that every node applied holds on every node: from its answer until the next
/// reload is asked, the slots claimed of a heartbeat, whichever node claims them, are at
/// least its new interval apart (less the clocks' spread, by which a new owner's first
/// slot may come early, and a second's rounding). A node that kept the old heartbeats
/// claims them at the old pace. And once the cluster has settled, a reload is applied
/// everywhere.
fn reloads(options: &ClusterOptions, entries: &[Entry], verdict: &mut Verdict) {
    let triggered = triggered_slots(entries);
    let settled = settled_at(options, entries);
    let slack = options.skew_spread() + Duration::from_secs(1);
    let mut asked: BTreeMap<usize, Duration> = BTreeMap::new();
    for (index, (sequence, at, record)) in entries.iter().enumerate() {
        match record {
            Record::ReloadAsked { op, .. } => {
                asked.insert(*op, *at);
            }
            Record::ReloadRefused { op, why } => {
                verdict.reloads[2] += 1;
                if settled.is_some_and(|settled| asked.get(op).is_some_and(|asked_at| *asked_at >= settled)) {
                    verdict.check("cluster-call-answered-when-settled", false, || {
                        format!("#{sequence}: reload {op}, asked once the cluster had settled, was refused: {why}")
                    });
                }
            }
            Record::EnginesHold { op, node, keys } => {
                // A heartbeat an earlier file had and the reload's lacks runs nowhere once
                // it is applied everywhere: a node that missed the reload adding it runs it
                // from the store, though its own file never had it.
                let Some(reload) = options.reloads.get(*op) else { continue };
                let kept: BTreeSet<&HeartbeatKey> = reload.heartbeats.iter().map(|def| &def.key).collect();
                let removed: BTreeSet<&HeartbeatKey> = std::iter::once(&options.heartbeats)
                    .chain(options.reloads[..*op].iter().map(|earlier| &earlier.heartbeats))
                    .flatten()
                    .map(|def| &def.key)
                    .filter(|key| !kept.contains(key))
                    .collect();
                let held: Vec<&HeartbeatKey> = keys.iter().filter(|key| removed.contains(key)).collect();
                verdict.check("cluster-reload-removes", held.is_empty(), || {
                    format!("#{sequence}: after reload {op}, applied everywhere, {node} still runs {held:?}")
                });
            }
            Record::Reloaded { op, everywhere, answers } => {
                verdict.reloads[usize::from(!*everywhere)] += 1;
                if settled.is_some_and(|settled| asked.get(op).is_some_and(|asked_at| *asked_at >= settled)) {
                    verdict.check("cluster-call-answered-when-settled", *everywhere, || {
                        format!("#{sequence}: reload {op}, asked once the cluster had settled, was not applied everywhere: {answers}")
                    });
                }
                if !*everywhere {
                    continue;
                }
                let Some(reload) = options.reloads.get(*op) else { continue };
                let later = &entries[index + 1..];
                let until = later
                    .iter()
                    .find(|(_, _, record)| matches!(record, Record::ReloadAsked { .. }))
                    .map_or(Duration::MAX, |(_, at, _)| *at);
                for def in &reload.heartbeats {
                    let systole::core::schedule::Schedule::Every(interval) = def.schedule else { continue };
                    let mut slots: Vec<(u64, &str, Timestamp)> = later
                        .iter()
                        .filter(|(_, claimed_at, _)| *claimed_at < until)
                        .filter_map(|(claim, _, record)| match record {
                            // An operator's trigger runs off the schedule.
                            Record::Claimed { node, key, slot }
                                if *key == def.key && !triggered.contains(&(key, *slot)) =>
                            {
                                Some((*claim, node.as_str(), *slot))
                            }
                            _ => None,
                        })
                        .collect();
                    slots.sort_by_key(|(_, _, slot)| *slot);
                    for pair in slots.windows(2) {
                        let (_, first_node, first) = pair[0];
                        let (claim, node, second) = pair[1];
                        let gap = second.duration_since(first).unsigned_abs();
                        verdict.check("cluster-reload-reaches-all", gap + slack >= interval, || {
                            format!(
                                "#{claim}: {node} claimed {} @ {second}, {}s after {first_node}'s slot {first}; reload \
                                 {op} (applied everywhere at #{sequence}, {}s) made it every {}s: {answers}",
                                def.key,
                                gap.as_secs(),
                                at.as_secs(),
                                interval.as_secs()
                            )
                        });
                    }
                }
            }
            _ => {}
        }
    }
}

/// A pause one node routed to another holds across the cluster: once acknowledged, no
/// run of the agent starts on any node (a later owner included) until it ends, give or
/// take the spread of the nodes' clocks (each judges the end by its own). And once the
/// cluster has settled after the heal, every call is answered by the agent's owner.
fn operator_calls(options: &ClusterOptions, entries: &[Entry], verdict: &mut Verdict) {
    let triggered = triggered_slots(entries);
    let spread = options.skew_spread();
    let settled = settled_at(options, entries);
    let mut asked: BTreeMap<usize, (Duration, &str)> = BTreeMap::new();
    let calls = pause_calls(entries);
    for (index, (sequence, at, record)) in entries.iter().enumerate() {
        match record {
            Record::OperatorAsked { op, asked: node, .. } => {
                asked.insert(*op, (*at, node.as_str()));
            }
            Record::OperatorRefused { op, why, .. } => {
                let Some((asked_at, node)) = asked.get(op).copied() else { continue };
                if settled.is_some_and(|settled| asked_at >= settled) {
                    verdict.check("cluster-call-answered-when-settled", false, || {
                        format!("#{sequence}: op {op} asked of {node} at {}s was refused: {why}", asked_at.as_secs())
                    });
                }
            }
            Record::OperatorResumed { op, .. }
            | Record::OperatorTriggered { op, .. }
            | Record::OperatorSetEnabled { op, .. }
                if asked.get(op).is_some_and(|(asked_at, _)| settled.is_some_and(|settled| *asked_at >= settled)) =>
            {
                verdict.check("cluster-call-answered-when-settled", true, String::new);
                // A trigger taken once the cluster has settled is decided: its slot is
                // claimed, or skipped with a reason the log shows.
                if let Record::OperatorTriggered { answered_by, key, slot: Some(slot), .. } = record {
                    // It may be decided before the answer reaches the caller.
                    let decided = entries.iter().any(|(_, _, record)| match record {
                        Record::Claimed { key: claimed, slot: at, .. }
                        | Record::Skipped { key: claimed, slot: at, .. } => claimed == key && at == slot,
                        _ => false,
                    });
                    verdict.check("cluster-trigger-decided", decided, || {
                        format!("#{sequence}: {answered_by} took op {op}'s trigger of {key} for slot {slot}; it was never decided")
                    });
                }
            }
            Record::OperatorSetEnabled { answered_by, key, enabled: false, .. } => {
                disable_holds(entries, index, answered_by, key, &triggered, verdict);
            }
            Record::OperatorPaused { op, answered_by, agent, minutes } => {
                if asked.get(op).is_some_and(|(asked_at, _)| settled.is_some_and(|settled| *asked_at >= settled)) {
                    verdict.check("cluster-call-answered-when-settled", true, String::new);
                }
                // The pause was set between the ask and the answer: its end is sure from the
                // ask on (a node may store it, then stall before it answers). Less a moment:
                // the store keeps the end in milliseconds.
                let set_from = asked.get(op).map_or(*at, |(asked_at, _)| *asked_at);
                // Another pause or a resume of the agent replaces this one (one pause per
                // agent): from when it is asked, if it is asked after this one (even one
                // refused may have been stored); from this one's ask, if it was still on its
                // way then (its write may land after this one's: a resume frozen in its
                // transaction while this pause was stored deletes it).
                let ask = calls.iter().find(|call| call.op == *op).map_or(index, |call| call.asked);
                let replaced = calls
                    .iter()
                    .filter(|call| call.op != *op && call.agent == agent)
                    .filter_map(|call| match (call.asked > ask, call.answered > ask && !call.written_before(ask)) {
                        (true, _) => Some(call.asked_at),
                        (false, true) => Some(set_from),
                        (false, false) => None,
                    })
                    .min();
                let until = (set_from + Duration::from_secs(u64::from(*minutes) * 60))
                    .saturating_sub(spread + Duration::from_millis(PAUSE_END_SLACK_MS));
                let until = replaced.map_or(until, |replaced| until.min(replaced));
                // An operator's trigger runs through a pause (an explicit request).
                let started = entries[index + 1..].iter().find(|(_, started_at, record)| {
                    *started_at < until
                        && matches!(record, Record::RunStarted { key, slot, .. } if key.agent == *agent && !triggered.contains(&(key, *slot)))
                });
                verdict.check("cluster-pause-holds", started.is_none(), || {
                    let (later, started_at, record) = offending(started);
                    format!(
                        "#{sequence}: {answered_by} paused {agent} for {minutes} min at {}s; #{later} at {}s: {record:?}",
                        at.as_secs(),
                        started_at.as_secs()
                    )
                });
            }
            _ => {}
        }
    }
}

/// An operator's disable holds across the cluster, whichever node runs the heartbeat and
/// whatever reload was being applied when it came: once acknowledged, no run of it starts
/// (but an operator's trigger) until an enable is asked, or a node's seed of a reloaded file
/// writes it afresh after the disable was asked (a replaced definition starts enabled).
/// A run that started before the disable may still be going.
fn disable_holds(
    entries: &[Entry],
    index: usize,
    answered_by: &str,
    key: &HeartbeatKey,
    triggered: &BTreeSet<(&HeartbeatKey, Timestamp)>,
    verdict: &mut Verdict,
) {
    let (sequence, at, _) = &entries[index];
    // The disable's ask: a seed after it may have written the heartbeat afresh.
    let asked = entries[..index]
        .iter()
        .rposition(|(_, _, record)| {
            matches!(record, Record::OperatorAsked { agent, kind: CallKind::Disable, .. } if *agent == key.agent)
        })
        .unwrap_or(index);
    let ends = entries[asked..].iter().position(|(_, _, record)| match record {
        Record::OperatorAsked { agent, kind: CallKind::Enable, .. } => *agent == key.agent,
        Record::Seeded { keys, .. } => keys.contains(key),
        _ => false,
    });
    let until = ends.map_or(entries.len(), |position| asked + position);
    let started = entries[index + 1..until.max(index + 1)].iter().find(|(_, _, record)| {
        matches!(record, Record::RunStarted { key: started, slot, .. } if started == key && !triggered.contains(&(key, *slot)))
    });
    verdict.check("cluster-disable-holds", started.is_none(), || {
        let (later, started_at, record) = offending(started);
        format!(
            "#{sequence}: {answered_by} disabled {key} at {}s; #{later} at {}s: {record:?}",
            at.as_secs(),
            started_at.as_secs()
        )
    });
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
            Record::Granted { node, partition, term, .. } => {
                current.insert(*partition, (*term, node));
            }
            Record::Released { node, partition, term } if current.get(partition) == Some(&(*term, node.as_str())) => {
                current.insert(*partition, (*term, "nobody"));
            }
            Record::Write { node, partition, term, kind, accepted, .. } => {
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

/// Every grant of a partition carries a term above every earlier grant of it, by the
/// checker's own record of grants: a re-grant that kept its term would let a fenced write
/// of the old holder pass as the new one's.
fn grant_raises_term(entries: &[Entry], verdict: &mut Verdict) {
    let mut highest: BTreeMap<u32, (u64, &str)> = BTreeMap::new();
    for (sequence, _, record) in entries {
        if let Record::Granted { node, partition, term, .. } = record {
            let earlier = highest.get(partition).copied();
            verdict.check("cluster-grant-raises-term", earlier.is_none_or(|(before, _)| *term > before), || {
                let (before, holder) = earlier.unwrap_or((0, "nobody"));
                format!("#{sequence}: {node} was granted partition {partition} under term {term}; term {before} was granted to {holder} before")
            });
            highest.insert(*partition, (*term, node));
        }
    }
}

/// No part is posted for a partition after its lease ran out by the posting node's own
/// clock: the last grant or renewal the node had sent for it, plus the lease, is past.
fn no_effect_after_lease(options: &ClusterOptions, entries: &[Entry], verdict: &mut Verdict) {
    // The latest send time of a grant or renewal that went through, by node and partition.
    let mut sure_since: BTreeMap<(&str, u32), Duration> = BTreeMap::new();
    for (sequence, at, record) in entries {
        match record {
            Record::Granted { node, partition, sent, .. } | Record::Renewed { node, partition, sent, .. } => {
                let latest = sure_since.entry((node.as_str(), *partition)).or_default();
                *latest = (*latest).max(*sent);
            }
            Record::Delivered { node, agent, idempotency_key } => {
                let partition = partition_of(agent, PARTITIONS_COUNT);
                let since = sure_since.get(&(node.as_str(), partition)).copied();
                let held = since.is_some_and(|since| *at < since + options.lease);
                verdict.check("cluster-no-effect-after-lease", held, || {
                    let last = since.map_or_else(|| "never".to_owned(), |since| format!("at {}ms", since.as_millis()));
                    format!(
                        "#{sequence}: {node} posted {idempotency_key} at {}ms for partition {partition}, whose \
                         lease it last had granted or renewed by a request sent {last} (lease {}s)",
                        at.as_millis(),
                        options.lease.as_secs()
                    )
                });
            }
            _ => {}
        }
    }
}

/// A transaction left open by a frozen node holds its partition's lease row for at most
/// one lease (the database ends the idle session), and a grant never waits on such a row
/// for long (its loop must still renew what it holds).
fn frozen_holders(options: &ClusterOptions, entries: &[Entry], verdict: &mut Verdict) {
    let end = entries.last().map_or(Duration::ZERO, |(_, at, _)| *at);
    let hold_bound = options.lease + Duration::from_millis(IDLE_TIMER_SLACK_MS);
    let mut open: BTreeMap<(&str, u32), Duration> = BTreeMap::new();
    for (sequence, at, record) in entries {
        match record {
            Record::TxFrozen { node, partition } => {
                open.insert((node.as_str(), *partition), *at);
            }
            Record::TxEnded { node, partition, by_database } => {
                let since = open.remove(&(node.as_str(), *partition)).unwrap_or(*at);
                let held = at.saturating_sub(since);
                verdict.check("cluster-frozen-holder-ended", held <= hold_bound, || {
                    let how = if *by_database { "until the database ended it" } else { "until the node woke" };
                    format!(
                        "#{sequence}: {node}'s frozen transaction held partition {partition}'s lease row for {}ms \
                         ({how}); the bound is the lease, {}s",
                        held.as_millis(),
                        options.lease.as_secs()
                    )
                });
            }
            Record::LockWaited { node, partition, waited, .. } => {
                let bound = Duration::from_millis(GRANT_WAIT_MS_MAX);
                verdict.check("cluster-grant-wait-bounded", *waited <= bound, || {
                    format!(
                        "#{sequence}: {node}'s grant of partition {partition} waited {}ms on a frozen holder; the \
                         bound is {GRANT_WAIT_MS_MAX}ms",
                        waited.as_millis()
                    )
                });
            }
            _ => {}
        }
    }
    for ((node, partition), since) in open {
        let held = end.saturating_sub(since);
        verdict.check("cluster-frozen-holder-ended", held <= hold_bound, || {
            format!(
                "{node}'s frozen transaction still held partition {partition}'s lease row after {}ms",
                held.as_millis()
            )
        });
    }
}

/// Once every fault is over, each heartbeat is claimed again within one lease, one
/// renewal turn, its interval and the skew between the nodes' clocks, and keeps that pace.
fn cadence_after_heal(options: &ClusterOptions, entries: &[Entry], verdict: &mut Verdict) {
    let Some(healed) = entries.iter().find(|(_, _, record)| *record == Record::Healed).map(|(_, at, _)| *at) else {
        return;
    };
    let end = entries.last().map_or(healed, |(_, at, _)| *at).max(healed + options.liveness);
    let spread = options.skew_spread();
    // An operator's pause holds an agent's claims back: a gap may be as much longer as the
    // pauses it overlaps (each to its end by the slowest clock). A pause refused but maybe
    // applied (stored before its engine stopped, or a forward that timed out) counts too,
    // from when it was asked to at most a node pause (four leases) and the forward's
    // timeout later.
    let late = options.lease * 4 + Duration::from_secs(super::FORWARD_TIMEOUT_SECS);
    let mut pauses: Vec<(&systole::core::ids::AgentId, Duration, Duration)> = entries
        .iter()
        .filter_map(|(_, at, record)| match record {
            Record::OperatorPaused { agent, minutes, .. } => {
                Some((agent, *at, *at + Duration::from_secs(u64::from(*minutes) * 60) + spread))
            }
            Record::OperatorRefused { agent, minutes, maybe_applied: true, .. } => {
                Some((agent, *at, *at + late + Duration::from_secs(u64::from(*minutes) * 60) + spread))
            }
            Record::AgentPaused { agent, until, .. } => {
                let ends = Duration::try_from(until.duration_since(options.start)).unwrap_or_default();
                Some((agent, *at, ends + spread))
            }
            _ => None,
        })
        .collect();
    // An operator's disable holds the heartbeat's claims back as a pause does, from when it
    // is asked (it may be applied even if refused) to when it is enabled again (or the end).
    let mut disabled: Vec<(&systole::core::ids::AgentId, Duration, Duration)> = Vec::new();
    for (_, at, record) in entries {
        match record {
            Record::OperatorAsked { agent, kind: CallKind::Disable, .. } => disabled.push((agent, *at, end)),
            Record::OperatorSetEnabled { key, enabled: true, .. } => {
                for window in disabled.iter_mut().filter(|(agent, _, ends)| **agent == key.agent && *ends == end) {
                    window.2 = *at + spread;
                }
            }
            _ => {}
        }
    }
    pauses.extend(disabled);
    // Reloads, from when each was asked to when it was answered (or the end).
    let mut reloads: Vec<(Duration, Duration)> = Vec::new();
    for (_, at, record) in entries {
        match record {
            Record::ReloadAsked { .. } => reloads.push((*at, end)),
            Record::Reloaded { .. } | Record::ReloadRefused { .. } => {
                if let Some(last) = reloads.last_mut() {
                    last.1 = *at;
                }
            }
            _ => {}
        }
    }
    // Failed runs and opened breakers, by heartbeat: when, and whether a breaker opened.
    let troubles: Vec<(&HeartbeatKey, Duration, bool)> = entries
        .iter()
        .filter_map(|(_, at, record)| match record {
            Record::RunFailed { key, .. } => Some((key, *at, false)),
            Record::BreakerTripped { key, .. } => Some((key, *at, true)),
            _ => None,
        })
        .collect();
    let backoff_max = Duration::from_secs(super::ERROR_BACKOFF_SECS.into_iter().max().unwrap_or(0));
    let cooldown = Duration::from_secs(super::BREAKER_COOLDOWN_SECS);
    let hung = Duration::from_secs(super::MODEL_HANG_SECS);
    for def in &options.heartbeats {
        // A reload may change the interval: the longest the heartbeat ever has bounds it.
        let Some(interval) = options.longest_interval(&def.key) else { continue };
        let bound = options.lease + options.lease / 3 + interval + spread + Duration::from_secs(CADENCE_SLACK_SECS);
        let paused_within = |from: Duration, to: Duration| -> Duration {
            pauses
                .iter()
                .filter(|(agent, ..)| **agent == def.key.agent)
                .map(|(_, start, end)| (*end).min(to).saturating_sub((*start).max(from)))
                .sum()
        };
        let mut last = healed;
        let claims = entries.iter().filter_map(|(_, at, record)| match record {
            Record::Claimed { key, .. } if *key == def.key && *at >= healed => Some(*at),
            _ => None,
        });
        for at in claims.chain(std::iter::once(end)) {
            let gap = at.saturating_sub(last);
            // After a pause, the next slot on the grid is up to one interval further; a
            // reload re-arms a changed heartbeat a whole interval after it is applied.
            let paused = paused_within(last, at);
            let bound = if paused.is_zero() { bound } else { bound + paused + interval };
            let reloaded = reloads.iter().any(|(asked, answered)| *asked < at && *answered > last);
            let bound = if reloaded { bound + interval } else { bound };
            // A failure makes the next run wait its backoff; an open breaker its cooldown
            // (then a probe, at most a hung call long).
            let failed = troubles.iter().any(|(key, trouble, _)| {
                **key == def.key && *trouble < at && *trouble + backoff_max + interval >= last
            });
            let tripped = troubles.iter().any(|(key, trouble, tripped)| {
                *tripped && **key == def.key && *trouble < at && *trouble + cooldown + spread + interval >= last
            });
            // A failure may be a hung call, whose run held the slots (skipped as overlap)
            // until its timeout (seed 31200015297: hung just before the heal).
            let bound = bound
                + if failed { backoff_max + hung } else { Duration::ZERO }
                + if tripped { cooldown + spread + hung } else { Duration::ZERO };
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

/// The slots operators' triggers asked for: they run off the schedule and through pauses.
/// Those an engine took count too: a trigger whose answer was lost may still have been
/// applied (seed 31450006472).
fn triggered_slots(entries: &[Entry]) -> std::collections::BTreeSet<(&HeartbeatKey, Timestamp)> {
    entries
        .iter()
        .filter_map(|(_, _, record)| match record {
            Record::OperatorTriggered { key, slot: Some(slot), .. } | Record::SlotTriggered { key, slot, .. } => {
                Some((key, *slot))
            }
            _ => None,
        })
        .collect()
}

/// An operator's pause or resume of an agent, from its ask to its answer (the end of the
/// record if none came). Its write may land anywhere in between, so calls whose spans
/// overlap may land in either order and the store keeps the last (ADR 0005), unless the
/// record shows where its write landed (`written`: the store's accepted write of that
/// agent's pause, of the call's kind, on the node that answered it).
struct PauseCall<'a> {
    op: usize,
    agent: &'a AgentId,
    kind: CallKind,
    asked: usize,
    asked_at: Duration,
    answered: usize,
    answered_at: Duration,
    written: Option<(usize, Duration)>,
}

impl PauseCall<'_> {
    /// Whether its write surely landed before entry `index`.
    fn written_before(&self, index: usize) -> bool {
        self.written.is_some_and(|(written, _)| written < index)
    }
}

fn pause_calls(entries: &[Entry]) -> Vec<PauseCall<'_>> {
    let end = entries.last().map_or(Duration::ZERO, |(_, at, _)| *at);
    let mut calls: Vec<PauseCall<'_>> = Vec::new();
    for (index, (_, at, record)) in entries.iter().enumerate() {
        match record {
            Record::OperatorAsked { op, agent, kind, .. } if matches!(kind, CallKind::Pause | CallKind::Resume) => {
                let (answered, answered_at, written) = (entries.len(), end, None);
                let asked = index;
                calls.push(PauseCall {
                    op: *op,
                    agent,
                    kind: *kind,
                    asked,
                    asked_at: *at,
                    answered,
                    answered_at,
                    written,
                });
            }
            Record::OperatorPaused { op, answered_by, .. } | Record::OperatorResumed { op, answered_by, .. } => {
                let Some(call) = calls.iter_mut().rev().find(|call| call.op == *op) else { continue };
                (call.answered, call.answered_at) = (index, *at);
                let kind = if call.kind == CallKind::Pause { "set_pause" } else { "clear_pause" };
                // Its write: the only one of its kind about the agent on that node while it went.
                let writes: Vec<(usize, Duration)> = entries[call.asked..index]
                    .iter()
                    .enumerate()
                    .filter(|(_, (_, _, record))| {
                        matches!(record, Record::Write { node, kind: written, agent: Some(agent), accepted: true, .. }
                            if node == answered_by && *written == kind && agent == call.agent)
                    })
                    .map(|(offset, (_, at, _))| (call.asked + offset, *at))
                    .collect();
                call.written = match writes[..] {
                    [only] => Some(only),
                    _ => None,
                };
            }
            Record::OperatorRefused { op, .. } => {
                if let Some(call) = calls.iter_mut().rev().find(|call| call.op == *op) {
                    (call.answered, call.answered_at) = (index, *at);
                }
            }
            _ => {}
        }
    }
    calls
}

/// When the cluster has settled: half the healed phase after the heal.
fn settled_at(options: &ClusterOptions, entries: &[Entry]) -> Option<Duration> {
    let healed = entries.iter().find(|(_, _, record)| *record == Record::Healed).map(|(_, at, _)| *at);
    healed.map(|healed| healed + options.liveness / 2)
}

/// The sequence, time and record of an entry that broke an invariant, for its message.
fn offending(entry: Option<&Entry>) -> (u64, Duration, Option<&Record>) {
    entry.map_or((0, Duration::ZERO, None), |(sequence, at, record)| (*sequence, *at, Some(record)))
}
