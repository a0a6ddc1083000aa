//! A reload asked of one node of a cluster reaches every node, or none (ADR 0024).
//!
//! The node asked first has every other node check that its own file holds the same
//! heartbeats (a digest of them) and goes on only if all say yes; then it seeds the store
//! and re-arms its own partitions, and has every other node re-arm theirs. Each node
//! re-arms what changed between the heartbeats it runs and its file's.
//!
//! The other nodes are reached through [`ReloadPeers`]: the daemon's calls them over HTTP
//! at the address the lease table gives, the simulator's calls their engines directly, so
//! the order of this exchange is the same code in both.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use crate::cluster::engines::ClusterRoute;
use crate::core::heartbeat::{Heartbeat, HeartbeatDef};
use crate::core::ids::HeartbeatKey;
use crate::core::partition::{partition_of, LeaseView, PARTITIONS_COUNT};
use crate::core::reload_plan::{changes, in_partition};
use crate::ports::clock::Clock;
use crate::ports::store::{SeedReport, Store, StoreError};

/// The other nodes of a cluster, as a reload reaches them.
#[async_trait]
pub trait ReloadPeers: Send + Sync {
    /// Asks `node`, at `url`, to check (`check_only`) or apply a reload of heartbeats
    /// with `digest`: its answer, or why there is none (a refusal included).
    async fn ask(&self, node: &str, url: &str, digest: &str, check_only: bool) -> Result<Value, String>;
}

/// Why a cluster's reload did nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterReloadError {
    /// Another node's file holds other heartbeats, or it did not answer the check.
    Disagrees(String),
    /// This node could not seed the store.
    Unavailable(String),
}

/// What a reload changed here, and each other node's answer to the apply.
#[derive(Debug, Clone)]
pub struct ClusterReloaded {
    pub report: SeedReport,
    pub nodes: BTreeMap<String, Result<Value, String>>,
}

/// Every other node that runs a partition by `table`, with its API address. A node that
/// runs no partition has nothing to re-arm: when it takes one it loads the store.
pub fn other_owners_in(table: &[LeaseView], node: &str) -> BTreeMap<String, String> {
    let mut owners = BTreeMap::new();
    for lease in table.iter().filter(|lease| !lease.expired) {
        if let (Some(owner), Some(url)) = (&lease.owner, &lease.owner_url) {
            if owner != node {
                owners.insert(owner.clone(), url.clone());
            }
        }
    }
    owners
}

/// Every other node that runs a partition, by the lease table as this node last read it.
pub fn other_owners(route: &ClusterRoute) -> BTreeMap<String, String> {
    other_owners_in(&route.leases().0, &route.node)
}

/// One node's side of a reload.
#[derive(Clone)]
pub struct NodeReload {
    pub route: ClusterRoute,
    /// The store without a fence: the seed writes every partition's definitions.
    pub store: Arc<dyn Store>,
    pub clock: Arc<dyn Clock>,
}

impl NodeReload {
    /// Seeds the store with `new` and re-arms, in each partition this node runs, what
    /// changed between `running` (the heartbeats it runs) and `new`.
    ///
    /// # Errors
    /// When the seed fails (nothing is re-armed).
    pub async fn apply_here(&self, running: &[HeartbeatDef], new: &[HeartbeatDef]) -> Result<SeedReport, StoreError> {
        let report = changes(running, new);
        // Every node seeds the same file: the first changes the store, the rest find it
        // unchanged.
        self.store.seed_config(new, self.clock.wall()).await?;
        // A partition the loop's turn under way takes may have loaded its heartbeats
        // before the seed; it is among the engines once that turn ends. One taken later
        // loads the seeded store.
        self.route.turns.wait_for_current(self.clock.as_ref(), self.route.lease).await;
        // Each engine takes its changed heartbeats as the store holds them now: a row
        // another node's seed already wrote keeps its state (seed 31000030529: a half-open
        // breaker's row, taken for a fresh definition, was left disarmed for good).
        let mut stored: BTreeMap<u32, Vec<Heartbeat>> = BTreeMap::new();
        for row in self.store.load_heartbeats().await? {
            stored.entry(partition_of(&row.def.key.agent, PARTITIONS_COUNT)).or_default().push(row);
        }
        for (partition, engine) in self.route.engines() {
            let part = in_partition(&report, partition);
            let changed: BTreeSet<&HeartbeatKey> = part.inserted.iter().chain(&part.updated).collect();
            let (rows, others): (Vec<_>, Vec<_>) = stored
                .remove(&partition)
                .unwrap_or_default()
                .into_iter()
                .partition(|row| changed.contains(&row.def.key));
            // A partition lost meanwhile answers `Stopped`; its next owner loads the store.
            if engine.adopt_stored(rows, &part.removed).await.is_err() {
                continue;
            }
            // `running` is this node's file as it last applied it, but a partition it took
            // since (after a reload it was not asked to apply: not an owner then) runs what
            // the store held when it took it. Rows the engine arms otherwise are adopted
            // too, or a change back to this file's old heartbeats would look like none
            // (seed 31450017450).
            let _ = engine.adopt_changed(others).await;
            // Neither does the diff name a heartbeat such a partition took from the store
            // that this file lacks as its old one did: whatever the file did not seed goes,
            // as the seed removed its row.
            let in_file: BTreeSet<HeartbeatKey> = new
                .iter()
                .filter(|def| partition_of(&def.key.agent, PARTITIONS_COUNT) == partition)
                .map(|def| def.key.clone())
                .collect();
            let _ = engine.keep_config_only(in_file).await;
        }
        Ok(report)
    }

    /// The operator's reload of the cluster, asked of this node: every other node checks
    /// its file holds heartbeats with `digest` (those of `new`); if all do, this node
    /// applies, then has every other node apply.
    ///
    /// # Errors
    /// `Disagrees` when a node refused or did not answer the check (nothing changed
    /// anywhere); `Unavailable` when this node's seed failed.
    pub async fn reload_all(
        &self,
        peers: &dyn ReloadPeers,
        digest: &str,
        running: &[HeartbeatDef],
        new: &[HeartbeatDef],
    ) -> Result<ClusterReloaded, ClusterReloadError> {
        let refusals: Vec<String> = self
            .ask_all(peers, digest, true)
            .await
            .into_iter()
            .filter_map(|(node, answer)| answer.err().map(|problem| format!("node {node}: {problem}")))
            .collect();
        if !refusals.is_empty() {
            return Err(ClusterReloadError::Disagrees(refusals.join("; ")));
        }
        let report =
            self.apply_here(running, new).await.map_err(|error| ClusterReloadError::Unavailable(error.to_string()))?;
        // The owners as the table says after the seed, read afresh: this node's own copy
        // may miss a partition taken a moment ago, with the heartbeats before the seed.
        let nodes = self.ask_all(peers, digest, false).await;
        Ok(ClusterReloaded { report, nodes })
    }

    /// Asks every other owner, by the lease table read now, at once; each one's answer.
    async fn ask_all(
        &self,
        peers: &dyn ReloadPeers,
        digest: &str,
        check_only: bool,
    ) -> BTreeMap<String, Result<Value, String>> {
        let owners = match self.route.leases.lease_table().await {
            Ok(table) => other_owners_in(&table, &self.route.node),
            Err(_) => other_owners(&self.route),
        };
        let calls = owners.into_iter().map(|(node, url)| async move {
            let answer = peers.ask(&node, &url, digest, check_only).await;
            (node, answer)
        });
        futures_util::future::join_all(calls).await.into_iter().collect()
    }
}
