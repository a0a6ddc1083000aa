//! Which partition an agent belongs to, and which partitions a node should hold (ADR 0017).
//!
//! Pure: the lease table comes in as a snapshot (expiry already judged by the database's
//! clock), the plan goes out; the cluster loop executes it through the store.

use std::collections::BTreeSet;

use sha2::{Digest, Sha256};

use crate::core::ids::AgentId;

/// Partitions the heartbeats are split into. Every agent's heartbeats sit in one, so the
/// per-agent state (pause, budget, system events, flood guard, user lane) has one owner.
/// Changing it moves agents between partitions: only with every node stopped.
pub const PARTITIONS_COUNT: u32 = 16;

/// The partition of `agent`: the first four bytes of the SHA-256 of its id, big-endian,
/// modulo `partitions`. A cryptographic hash and not a std hasher, so every build and
/// every node agree, and PostgreSQL can compute the same (`systole_partition`).
pub fn partition_of(agent: &AgentId, partitions: u32) -> u32 {
    let digest = Sha256::digest(agent.as_str().as_bytes());
    let head = u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]);
    head % partitions.max(1)
}

/// One row of the lease table as a node sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseView {
    pub partition: u32,
    /// `None` when released or never granted.
    pub owner: Option<String>,
    /// The API address the owner announced (`[cluster] advertise_url`), where a call for
    /// one of its agents is forwarded (`core::routing`).
    pub owner_url: Option<String>,
    pub term: u64,
    /// Judged by the database's clock when the snapshot was read.
    pub expired: bool,
}

/// What a node should do with the lease table this turn.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeasePlan {
    /// Free or expired partitions to take, lowest first.
    pub acquire: Vec<u32>,
    /// Partitions held beyond this node's fair share, to give back for a newcomer.
    pub release: Vec<u32>,
}

/// The most partitions one node should hold with `live_nodes` nodes alive: an even split,
/// rounded up, so every partition has a taker.
pub fn fair_share(partitions: u32, live_nodes: usize) -> usize {
    let nodes = u32::try_from(live_nodes.max(1)).unwrap_or(u32::MAX);
    usize::try_from(partitions.div_ceil(nodes)).unwrap_or(usize::MAX)
}

/// Plans one turn for node `me` given the lease table and the nodes alive (`me` among
/// them). A node takes free or expired partitions up to its fair share and releases what
/// it holds beyond it (its highest partitions first), so a joining node gets partitions
/// within one turn of the others and no partition is ever left without a taker: the
/// shares add up to at least the partition count.
pub fn plan(me: &str, leases: &[LeaseView], live_nodes: &BTreeSet<String>) -> LeasePlan {
    let live = live_nodes.len() + usize::from(!live_nodes.contains(me));
    let partitions = u32::try_from(leases.len()).unwrap_or(u32::MAX);
    let share = fair_share(partitions, live);
    let held: Vec<u32> = leases
        .iter()
        .filter(|lease| lease.owner.as_deref() == Some(me) && !lease.expired)
        .map(|lease| lease.partition)
        .collect();
    let mut plan = LeasePlan::default();
    if held.len() > share {
        plan.release = held.iter().rev().take(held.len() - share).copied().collect();
        plan.release.sort_unstable();
        return plan;
    }
    let room = share - held.len();
    plan.acquire = leases
        .iter()
        .filter(|lease| lease.owner.is_none() || lease.expired)
        .map(|lease| lease.partition)
        .take(room)
        .collect();
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(owners: &[Option<&str>]) -> Vec<LeaseView> {
        owners
            .iter()
            .enumerate()
            .map(|(index, owner)| LeaseView {
                partition: u32::try_from(index).expect("small"),
                owner: owner.map(str::to_owned),
                owner_url: None,
                term: 1,
                expired: false,
            })
            .collect()
    }

    fn nodes(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|name| (*name).to_owned()).collect()
    }

    #[test]
    fn partitions_are_stable_spread_and_in_range() {
        // Vectors from Python's hashlib (int.from_bytes(sha256(id)[:4], "big") % n): a
        // changed hash would move every agent of a running cluster.
        for (id, of_16, of_7) in [("ops", 6, 3), ("agent-1", 13, 4), ("main", 9, 1)] {
            let agent = AgentId::new(id).expect("valid");
            assert_eq!((partition_of(&agent, 16), partition_of(&agent, 7)), (of_16, of_7), "{id}");
        }
        let agent = AgentId::new("ops").expect("valid");
        let mut seen = BTreeSet::new();
        for index in 0..400 {
            let agent = AgentId::new(format!("agent-{index}")).expect("valid");
            let partition = partition_of(&agent, PARTITIONS_COUNT);
            assert!(partition < PARTITIONS_COUNT);
            seen.insert(partition);
        }
        assert_eq!(seen.len(), usize::try_from(PARTITIONS_COUNT).expect("small"), "400 agents reach every partition");
        assert_eq!(partition_of(&agent, 1), 0);
    }

    #[test]
    fn a_lone_node_takes_everything() {
        let plan = plan("a", &table(&[None; 4]), &nodes(&["a"]));
        assert_eq!(plan, LeasePlan { acquire: vec![0, 1, 2, 3], release: vec![] });
    }

    #[test]
    fn a_node_takes_only_its_share_and_gives_back_the_rest_when_one_joins() {
        let leases = table(&[Some("a"), Some("a"), Some("a"), Some("a"), None]);
        // Two nodes, five partitions: three each at most.
        let for_a = plan("a", &leases, &nodes(&["a", "b"]));
        assert_eq!(for_a, LeasePlan { acquire: vec![], release: vec![3] });
        let for_b = plan("b", &leases, &nodes(&["a", "b"]));
        assert_eq!(for_b, LeasePlan { acquire: vec![4], release: vec![] });
        // A node not yet in the live set counts itself.
        assert_eq!(plan("c", &leases, &nodes(&["a"])).acquire, vec![4]);
    }

    #[test]
    fn expired_leases_are_taken_over_and_never_counted_as_held() {
        let mut leases = table(&[Some("dead"), Some("dead"), Some("a"), Some("a")]);
        leases[0].expired = true;
        leases[1].expired = true;
        let plan_a = plan("a", &leases, &nodes(&["a", "b"]));
        assert_eq!(plan_a, LeasePlan { acquire: vec![], release: vec![] });
        assert_eq!(plan("b", &leases, &nodes(&["a", "b"])).acquire, vec![0, 1]);
        // An expired lease of my own is no longer mine: I take it again like anyone.
        let mut mine = table(&[Some("a")]);
        mine[0].expired = true;
        assert_eq!(plan("a", &mine, &nodes(&["a"])).acquire, vec![0]);
    }

    #[test]
    fn fair_shares_cover_every_partition() {
        for partitions in 1..40 {
            for live in 1..8 {
                let share = fair_share(partitions, live);
                assert!(share * live >= usize::try_from(partitions).expect("small"));
                assert!(share >= 1);
            }
        }
    }
}
