//! The engines an API reaches: the one engine of a single node, or, on a node of a
//! cluster, the engine of the partition an agent's heartbeats belong to, when this node
//! holds it. A change for an agent another node holds is refused with that node's name
//! (`EngineError::NotOwner`): it must be made where the agent's engine runs, or it would be
//! stored but not applied until the partition moves. The API forwards such a call to the
//! owner first (`api::forward`, ADR 0024), so this refusal is what a call meets only
//! between owners.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::cluster::{ClusterHandle, ClusterView, LeaseStats, Turns};
use crate::core::ids::{AgentId, HeartbeatKey};
use crate::core::partition::{partition_of, LeaseView, PARTITIONS_COUNT};
use crate::core::routing::{route, Route};
use crate::driver::lanes::Lanes;
use crate::driver::run_events::RunEvents;
use crate::driver::{EnabledCounts, EngineClient, EngineError, JobView, Shared};
use crate::ports::leases::Leases;

#[derive(Clone)]
pub enum Engines {
    One(EngineClient),
    Cluster(ClusterRoute),
}

/// A node's partitions, as its cluster loop last published them.
#[derive(Clone)]
pub struct ClusterRoute {
    pub node: String,
    view: Arc<RwLock<ClusterView>>,
    shared: Shared,
    pub stats: Arc<LeaseStats>,
    pub lease: Duration,
    pub leases: Arc<dyn Leases>,
    pub turns: Arc<Turns>,
}

impl ClusterRoute {
    pub fn new(handle: &ClusterHandle) -> Self {
        Self {
            node: handle.settings.node.clone(),
            view: Arc::clone(&handle.view),
            shared: handle.shared.clone(),
            stats: Arc::clone(&handle.stats),
            lease: handle.settings.lease,
            leases: Arc::clone(&handle.leases),
            turns: Arc::clone(&handle.turns),
        }
    }

    /// Every partition's lease as last read, and the partitions this node runs.
    pub fn leases(&self) -> (Vec<LeaseView>, Vec<u32>) {
        let view = self.view.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        (view.table.clone(), view.engines.keys().copied().collect())
    }

    /// The engine of each partition this node runs now.
    pub fn engines(&self) -> Vec<(u32, EngineClient)> {
        let view = self.view.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        view.engines.iter().map(|(partition, (_, engine))| (*partition, engine.clone())).collect()
    }

    /// Where a call for `agent` is answered (`core::routing`), by the lease table as last
    /// read: a call forwarded to a node that has just lost the partition is answered
    /// `not-owner` there, and a forwarded call is never forwarded again.
    pub fn route(&self, agent: &AgentId) -> Route {
        let view = self.view.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        route(agent, &self.node, |partition| view.engines.contains_key(&partition), &view.table)
    }
}

impl Engines {
    /// The engine `agent`'s heartbeats run on.
    ///
    /// # Errors
    /// `NotOwner` when another node (or, between owners, none) holds the agent's partition.
    pub fn for_agent(&self, agent: &AgentId) -> Result<EngineClient, EngineError> {
        match self {
            Engines::One(engine) => Ok(engine.clone()),
            Engines::Cluster(route) => {
                let partition = partition_of(agent, PARTITIONS_COUNT);
                let view = route.view.read().unwrap_or_else(std::sync::PoisonError::into_inner);
                if let Some((_, engine)) = view.engines.get(&partition) {
                    return Ok(engine.clone());
                }
                let owner = view
                    .table
                    .iter()
                    .find(|lease| lease.partition == partition && !lease.expired)
                    .and_then(|lease| lease.owner.clone());
                Err(EngineError::NotOwner { partition, owner })
            }
        }
    }

    /// The jobs with a run going on the engines of this node, in key order: what a stop
    /// waits for.
    ///
    /// # Errors
    /// When an engine has stopped.
    pub async fn keys_in_flight(&self) -> Result<Vec<HeartbeatKey>, EngineError> {
        match self {
            Engines::One(engine) => engine.keys_in_flight().await,
            Engines::Cluster(route) => {
                let mut keys = Vec::new();
                for (_, engine) in route.engines() {
                    // A partition lost since the list was taken answers `Stopped`: skip it.
                    if let Ok(theirs) = engine.keys_in_flight().await {
                        keys.extend(theirs);
                    }
                }
                keys.sort();
                Ok(keys)
            }
        }
    }

    /// Those of `keys` that the engines of this node run, as `EngineClient::inspect` sees them,
    /// ordered by key: each engine is asked for its own partitions' keys only.
    ///
    /// # Errors
    /// When an engine has stopped.
    pub async fn inspect_keys(&self, keys: &[HeartbeatKey]) -> Result<Vec<JobView>, EngineError> {
        match self {
            Engines::One(engine) => engine.inspect_keys(keys.to_vec()).await,
            Engines::Cluster(route) => {
                let mut by_partition: BTreeMap<u32, Vec<HeartbeatKey>> = BTreeMap::new();
                for key in keys {
                    by_partition.entry(partition_of(&key.agent, PARTITIONS_COUNT)).or_default().push(key.clone());
                }
                let mut views = Vec::new();
                for (partition, engine) in route.engines() {
                    let Some(keys) = by_partition.remove(&partition) else { continue };
                    // A partition lost since the list was taken answers `Stopped`: skip it.
                    if let Ok(jobs) = engine.inspect_keys(keys).await {
                        views.extend(jobs);
                    }
                }
                views.sort_by(|a, b| a.key.cmp(&b.key));
                Ok(views)
            }
        }
    }

    /// Each agent's jobs, enabled and disabled, of the engines this node runs.
    ///
    /// # Errors
    /// When an engine has stopped.
    pub async fn enabled_counts(&self) -> Result<BTreeMap<AgentId, EnabledCounts>, EngineError> {
        match self {
            Engines::One(engine) => engine.enabled_counts().await,
            Engines::Cluster(route) => {
                let mut counts = BTreeMap::new();
                for (_, engine) in route.engines() {
                    // An agent lives in one partition: the engines' counts do not overlap.
                    if let Ok(theirs) = engine.enabled_counts().await {
                        counts.extend(theirs);
                    }
                }
                Ok(counts)
            }
        }
    }

    pub fn run_events(&self) -> Arc<RunEvents> {
        match self {
            Engines::One(engine) => engine.run_events_shared(),
            Engines::Cluster(route) => Arc::clone(&route.shared.run_events),
        }
    }

    pub fn lanes(&self) -> Arc<Lanes> {
        match self {
            Engines::One(engine) => engine.lanes(),
            Engines::Cluster(route) => Arc::clone(&route.shared.lanes),
        }
    }

    pub fn cluster(&self) -> Option<&ClusterRoute> {
        match self {
            Engines::One(_) => None,
            Engines::Cluster(route) => Some(route),
        }
    }
}
