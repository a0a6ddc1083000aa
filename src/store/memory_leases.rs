//! Partition leases and fencing in the memory store, with PostgreSQL's semantics (ADR
//! 0017), so the simulator's nodes share them: expiry by the store's own clock, a term
//! that grows with every grant, and every write of a partition's engine refused once its
//! term is no longer current. Grants and writes hold the store's one lock, as PostgreSQL's
//! row lock serialises a takeover with the fenced writes in flight.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use jiff::{SignedDuration, Timestamp};

use crate::core::ids::AgentId;
use crate::core::partition::{partition_of, LeaseView, PARTITIONS_COUNT};
use crate::ports::leases::{Lease, Leases};
use crate::ports::store::{Store, StoreError};
use crate::store::memory::{LeaseRow, MemoryState, MemoryStore, NodeRow};

impl MemoryStore {
    /// Refuses a write of a partition's store whose lease is no longer current, or that
    /// touches another partition's agent (as `PostgresStore::fence`).
    pub(super) fn fence<'a>(
        &self,
        state: &MemoryState,
        mut agents: impl Iterator<Item = &'a AgentId>,
    ) -> Result<(), StoreError> {
        let Some(lease) = &self.fence else { return Ok(()) };
        let refused = StoreError::Fenced { partition: lease.partition, term: lease.term };
        if agents.any(|agent| !self.owns(agent)) {
            return Err(refused);
        }
        match state.leases.get(&lease.partition) {
            Some(row) if row.owner.as_deref() == Some(lease.node.as_str()) && row.term == lease.term => Ok(()),
            _ => Err(refused),
        }
    }

    pub(super) fn owns(&self, agent: &AgentId) -> bool {
        self.fence.as_ref().is_none_or(|lease| partition_of(agent, PARTITIONS_COUNT) == lease.partition)
    }

    fn store_now(&self) -> Result<Timestamp, StoreError> {
        self.clock.as_ref().map(|clock| clock.wall()).ok_or_else(|| {
            StoreError::Backend("this memory store has no lease clock (MemoryStore::with_lease_clock)".into())
        })
    }
}

fn plus(now: Timestamp, ttl: Duration) -> Timestamp {
    now.saturating_add(SignedDuration::try_from(ttl).unwrap_or(SignedDuration::MAX)).unwrap_or(Timestamp::MAX)
}

#[async_trait]
impl Leases for MemoryStore {
    async fn announce(&self, node: &str, api_url: Option<&str>, ttl: Duration) -> Result<BTreeSet<String>, StoreError> {
        let now = self.store_now()?;
        let mut state = self.lock();
        for partition in 0..PARTITIONS_COUNT {
            state.leases.entry(partition).or_insert(LeaseRow { owner: None, term: 0, expires_at: Timestamp::MIN });
        }
        state
            .nodes
            .insert(node.to_owned(), NodeRow { expires_at: plus(now, ttl), api_url: api_url.map(str::to_owned) });
        Ok(state.nodes.iter().filter(|(_, row)| row.expires_at > now).map(|(node, _)| node.clone()).collect())
    }

    async fn lease_table(&self) -> Result<Vec<LeaseView>, StoreError> {
        let now = self.store_now()?;
        let state = self.lock();
        Ok(state
            .leases
            .iter()
            .map(|(partition, row)| LeaseView {
                partition: *partition,
                owner: row.owner.clone(),
                // As PostgreSQL's join: the address of an owner still in the node table.
                owner_url: row.owner.as_ref().and_then(|owner| state.nodes.get(owner)).and_then(|n| n.api_url.clone()),
                term: row.term,
                expired: row.expires_at <= now,
            })
            .collect())
    }

    async fn acquire(&self, node: &str, partition: u32, ttl: Duration) -> Result<Option<Lease>, StoreError> {
        let now = self.store_now()?;
        let mut state = self.lock();
        let Some(row) = state.leases.get_mut(&partition) else { return Ok(None) };
        if row.owner.is_some() && row.expires_at > now {
            return Ok(None);
        }
        row.owner = Some(node.to_owned());
        row.term += 1;
        row.expires_at = plus(now, ttl);
        Ok(Some(Lease { partition, node: node.to_owned(), term: row.term }))
    }

    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<bool, StoreError> {
        let now = self.store_now()?;
        let mut state = self.lock();
        match state.leases.get_mut(&lease.partition) {
            Some(row) if row.owner.as_deref() == Some(lease.node.as_str()) && row.term == lease.term => {
                row.expires_at = plus(now, ttl);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        let now = self.store_now()?;
        let mut state = self.lock();
        if let Some(row) = state.leases.get_mut(&lease.partition) {
            if row.owner.as_deref() == Some(lease.node.as_str()) && row.term == lease.term {
                row.owner = None;
                row.expires_at = now;
            }
        }
        Ok(())
    }

    async fn leave(&self, node: &str) -> Result<(), StoreError> {
        self.lock().nodes.remove(node);
        Ok(())
    }

    fn partition_store(&self, lease: &Lease) -> Arc<dyn Store> {
        Arc::new(MemoryStore { state: Arc::clone(&self.state), clock: self.clock.clone(), fence: Some(lease.clone()) })
    }
}
