//! The lease port: which node holds which partition of the heartbeats (ADR 0017). A lease
//! has an owner, a term that grows with every grant, and an expiry judged by the store's
//! clock (PostgreSQL's `now()`), never a node's. Every write of a partition's engine
//! carries the lease, and the store refuses it once a newer term exists.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::core::partition::LeaseView;
use crate::ports::store::{Store, StoreError};

/// A partition held by a node under a term.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lease {
    pub partition: u32,
    pub node: String,
    pub term: u64,
}

#[async_trait]
pub trait Leases: Send + Sync + 'static {
    /// Records that `node` is alive for `ttl` more (from the store's clock) and where its API
    /// answers (`api_url`, `None` when it serves none), making sure the lease table has its
    /// partitions, and returns the nodes alive now (`node` among them).
    async fn announce(&self, node: &str, api_url: Option<&str>, ttl: Duration) -> Result<BTreeSet<String>, StoreError>;

    /// Every partition's lease, expiry judged now by the store's clock, with the API
    /// address its owner last announced.
    async fn lease_table(&self) -> Result<Vec<LeaseView>, StoreError>;

    /// Grants `partition` to `node` for `ttl` if it is free or expired, under the next
    /// term. A grant waits for writes in flight under the old term to commit, so none of
    /// them can land after it. `None` when another node holds it.
    async fn acquire(&self, node: &str, partition: u32, ttl: Duration) -> Result<Option<Lease>, StoreError>;

    /// Extends a lease still held under its term; `false` when it was lost.
    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<bool, StoreError>;

    /// Gives a lease back (a clean shutdown, a rebalance); its term is never granted again.
    async fn release(&self, lease: &Lease) -> Result<(), StoreError>;

    /// Forgets `node` (a clean shutdown), so the others count it gone at once.
    async fn leave(&self, node: &str) -> Result<(), StoreError>;

    /// The store a partition's engine runs on: it loads and recovers only the partition's
    /// heartbeats and pauses, and every claim, skip, result and armed slot it writes is
    /// refused with [`StoreError::Fenced`] once `lease` is no longer current.
    fn partition_store(&self, lease: &Lease) -> Arc<dyn Store>;
}
