//! Several nodes on one store (ADR 0017). A node holds leases on partitions of the
//! heartbeats and runs one engine per partition it holds, on a store fenced by that
//! partition's lease; the engines are the ordinary ones (`driver::start`), so a partition
//! taken over starts exactly like a process after a crash: its runs left `running` become
//! `interrupted`, its heartbeats resume above every slot the log has decided.
//!
//! The loop here only executes what `core::partition::plan` decides, through the
//! [`Leases`] port and the [`Clock`] port, so the simulator can run several nodes.

pub mod engines;
pub mod reload;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::core::partition::{plan, LeaseView};
use crate::driver::{self, EngineClient, EngineHandle, EngineOptions, Ports, Shared};
use crate::ports::clock::Mono;
use crate::ports::fence::Fence;
use crate::ports::leases::{Lease, Leases};

/// How long a lease lasts unless renewed, by default. A dead node's heartbeats wait at
/// most this long (plus one renewal turn) before another node takes them over.
pub const LEASE_SECS_DEFAULT: u64 = 15;
/// Shortest lease a config may ask for: renewals go out three times per lease.
pub const LEASE_SECS_MIN: u64 = 3;
pub const LEASE_SECS_MAX: u64 = 600;
/// Renewals per lease period: a node misses two in a row before its lease can expire.
const RENEWALS_PER_LEASE: u32 = 3;
/// The longest a lease statement waits for a row lock (PostgreSQL's `lock_timeout` on the
/// lease loop's connections, ADR 0018): a grant that would wait behind a frozen holder's
/// transaction gives up and is tried on the next turn, so the loop keeps renewing.
pub const LEASE_LOCK_WAIT_MS_MAX: u64 = 500;

/// How long the database lets a node's session sit inside a transaction without a
/// statement before it ends it (`idle_in_transaction_session_timeout`, ADR 0018). A node
/// frozen mid-write (a stopped VM, a GC pause) holds its partition's lease row until
/// then, so a takeover waits at most this long beyond the lease: one lease period, since
/// any session idle that long belongs to a node whose lease is in doubt anyway.
pub fn idle_transaction_bound(lease: Duration) -> Option<Duration> {
    Some(lease)
}

/// How long a partition's engine may finish its runs when the partition is given back
/// in a rebalance (another node is waiting for it).
const RELEASE_GRACE_SECS: u64 = 5;

/// Who this node is and how long its leases last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterSettings {
    pub node: String,
    pub lease: Duration,
    /// Where this node's API answers for the other nodes (ADR 0024): announced with the
    /// node, so a call for one of its agents made on another node is forwarded here.
    /// `None` when it serves no API.
    pub api_url: Option<String>,
}

/// Lease counters of this node, for `/metrics` and the status.
#[derive(Debug, Default)]
pub struct LeaseStats {
    /// Grants of a free partition (first start, a rebalance, a clean leave of another node).
    pub acquired: AtomicU64,
    /// Grants of a partition whose lease had expired under another owner: a takeover.
    pub taken_over: AtomicU64,
    /// Leases this node lost: taken over by another, or not renewed within their period.
    pub lost: AtomicU64,
    /// Leases given back (rebalance, shutdown).
    pub released: AtomicU64,
}

/// What the node holds now, for the API.
#[derive(Default)]
pub struct ClusterView {
    /// The engine of each partition held.
    pub engines: BTreeMap<u32, (Lease, EngineClient)>,
    /// The lease table as last read (every node's leases).
    pub table: Vec<LeaseView>,
}

/// The node loop's turns, counted. A reload waits for the turn under way to end: a
/// partition that turn takes may have loaded its heartbeats before the reload's seed, and
/// is re-armed only once the turn publishes it.
#[derive(Default)]
pub struct Turns {
    begun: AtomicU64,
    ended: AtomicU64,
    turned: tokio::sync::Notify,
}

impl Turns {
    fn begin(&self) -> u64 {
        self.begun.fetch_add(1, Ordering::SeqCst) + 1
    }

    fn end(&self, turn: u64) {
        self.ended.store(turn, Ordering::SeqCst);
        self.turned.notify_waiters();
    }

    /// Returns once the turn under way now (if any) has ended, or after `bound`.
    pub async fn wait_for_current(&self, clock: &dyn crate::ports::clock::Clock, bound: Duration) {
        let current = self.begun.load(Ordering::SeqCst);
        let give_up = clock.monotonic() + bound;
        loop {
            let turned = self.turned.notified();
            tokio::pin!(turned);
            turned.as_mut().enable();
            if self.ended.load(Ordering::SeqCst) >= current {
                return;
            }
            tokio::select! {
                biased;
                () = turned => {}
                () = clock.sleep_until(give_up) => return,
            }
        }
    }
}

/// A running node's loop.
pub struct ClusterHandle {
    pub view: Arc<RwLock<ClusterView>>,
    pub stats: Arc<LeaseStats>,
    pub shared: Shared,
    pub settings: ClusterSettings,
    /// The lease port the loop uses (a reload reads the table fresh through it).
    pub leases: Arc<dyn Leases>,
    pub turns: Arc<Turns>,
    stop: oneshot::Sender<Duration>,
    task: JoinHandle<()>,
}

impl ClusterHandle {
    /// Stops every partition's engine (in-flight runs get `grace`), gives the leases back
    /// and leaves, so the other nodes take over at once instead of after the lease.
    pub async fn shutdown(self, grace: Duration) {
        if self.stop.send(grace).is_ok() {
            let _ = self.task.await;
        }
    }
}

struct Held {
    lease: Lease,
    engine: EngineHandle,
    /// When the last successful renewal was sent: the lease is surely valid until this
    /// plus the lease period, by this node's own monotonic clock.
    renewed_at: Mono,
    /// The same bound, shared with the engine: every delivery checks it (ADR 0018).
    fence: Fence,
}

struct Node {
    settings: ClusterSettings,
    leases: Arc<dyn Leases>,
    ports: Ports,
    options: EngineOptions,
    shared: Shared,
    held: BTreeMap<u32, Held>,
    /// The lease table as last read: published again when a partition is lost between reads.
    table: Vec<LeaseView>,
    view: Arc<RwLock<ClusterView>>,
    stats: Arc<LeaseStats>,
    turns: Arc<Turns>,
}

/// Starts the node's loop: its first turn takes its share of the partitions.
pub fn start(
    settings: ClusterSettings,
    leases: Arc<dyn Leases>,
    ports: Ports,
    options: EngineOptions,
) -> ClusterHandle {
    let shared = Shared::new(&ports);
    let view = Arc::new(RwLock::new(ClusterView::default()));
    let stats = Arc::new(LeaseStats::default());
    let turns = Arc::new(Turns::default());
    let node = Node {
        settings: settings.clone(),
        leases: Arc::clone(&leases),
        turns: Arc::clone(&turns),
        ports,
        options,
        shared: shared.clone(),
        held: BTreeMap::new(),
        table: Vec::new(),
        view: Arc::clone(&view),
        stats: Arc::clone(&stats),
    };
    let (stop, stopped) = oneshot::channel();
    let task = tokio::spawn(node.run(stopped));
    ClusterHandle { view, stats, shared, settings, leases, turns, stop, task }
}

impl Node {
    async fn run(mut self, mut stopped: oneshot::Receiver<Duration>) {
        let clock = Arc::clone(&self.ports.clock);
        let period = self.settings.lease / RENEWALS_PER_LEASE;
        loop {
            let turn = self.turns.begin();
            self.turn().await;
            self.turns.end(turn);
            let wake = clock.monotonic() + period;
            tokio::select! {
                biased;
                grace = &mut stopped => {
                    self.leave(grace.unwrap_or(Duration::ZERO)).await;
                    return;
                }
                () = clock.sleep_until(wake) => {}
            }
        }
    }

    /// One turn: renew what is held, announce this node, then take and give back
    /// partitions as the plan says.
    async fn turn(&mut self) {
        if self.renew_all().await {
            // The API must stop routing to an engine that stopped, even if the table
            // cannot be read this turn.
            self.publish(self.table.clone());
        }
        let announced =
            self.leases.announce(&self.settings.node, self.settings.api_url.as_deref(), self.settings.lease);
        let live = match announced.await {
            Ok(live) => live,
            Err(error) => {
                tracing::warn!(%error, node = %self.settings.node, "cannot announce this node; holding what it has");
                return;
            }
        };
        let table = match self.leases.lease_table().await {
            Ok(table) => table,
            Err(error) => {
                tracing::warn!(%error, "cannot read the lease table; holding what this node has");
                return;
            }
        };
        let planned = plan(&self.settings.node, &table, &live);
        // Taking partitions may wait on the store; what this node holds must still be
        // renewed on time, so the acquisitions of one turn stop at half a renewal period.
        let acquire_until = self.ports.clock.monotonic() + self.settings.lease / (2 * RENEWALS_PER_LEASE);
        for partition in planned.release {
            if let Some(held) = self.held.remove(&partition) {
                held.engine.shutdown(Duration::from_secs(RELEASE_GRACE_SECS)).await;
                held.fence.revoke();
                if let Err(error) = self.leases.release(&held.lease).await {
                    tracing::warn!(%error, partition, "cannot release the lease; it expires on its own");
                }
                self.stats.released.fetch_add(1, Ordering::Relaxed);
                tracing::info!(partition, node = %self.settings.node, "partition given back for a rebalance");
            }
        }
        for partition in planned.acquire {
            if self.ports.clock.monotonic() >= acquire_until {
                break;
            }
            let previous =
                table.iter().find(|lease| lease.partition == partition).and_then(|lease| lease.owner.clone());
            self.acquire(partition, previous).await;
        }
        self.publish(table);
    }

    async fn acquire(&mut self, partition: u32, previous_owner: Option<String>) {
        let sent = self.ports.clock.monotonic();
        let lease = match self.leases.acquire(&self.settings.node, partition, self.settings.lease).await {
            Ok(Some(lease)) => lease,
            Ok(None) => return,
            Err(error) => {
                tracing::warn!(%error, partition, "cannot acquire the partition");
                return;
            }
        };
        let ports = Ports { store: self.leases.partition_store(&lease), ..self.ports.clone() };
        let fence = Fence::lease(Arc::clone(&self.ports.clock), partition, lease.term, sent + self.settings.lease);
        let options = EngineOptions { fence: fence.clone(), ..self.options.clone() };
        match driver::start_sharing(ports, options, self.shared.clone()).await {
            Ok(engine) => {
                let counter = if previous_owner.is_some() { &self.stats.taken_over } else { &self.stats.acquired };
                counter.fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    partition,
                    term = lease.term,
                    node = %self.settings.node,
                    from = previous_owner.as_deref().unwrap_or("nobody"),
                    "partition acquired"
                );
                self.held.insert(partition, Held { lease, engine, renewed_at: sent, fence });
            }
            Err(error) => {
                fence.revoke();
                // Fenced already, or the store failed: give it back for another try.
                tracing::warn!(%error, partition, "the partition's engine did not start; releasing it");
                let _ = self.leases.release(&lease).await;
            }
        }
    }

    /// Renews every lease. A lease refused (taken over) or not renewed within its period
    /// by this node's clock stops its engine at once: the store fences its writes anyway,
    /// and stopping it early spares a receiver the deliveries it could still send.
    /// Returns whether a partition was lost.
    async fn renew_all(&mut self) -> bool {
        let mut any_lost = false;
        let clock = Arc::clone(&self.ports.clock);
        let partitions: Vec<u32> = self.held.keys().copied().collect();
        for partition in partitions {
            let Some(held) = self.held.get(&partition) else { continue };
            let deadline = held.renewed_at + self.settings.lease;
            let sent = clock.monotonic();
            let outcome = if sent >= deadline {
                // Lapsed by this node's own clock before it could ask (it was paused or
                // starved): even if no one took the partition over, the other nodes counted
                // it gone meanwhile, and a reload did not wait for it (ADR 0024; seed
                // 31400002574). Its engine stops; the partition is taken again, from the store.
                None
            } else {
                tokio::select! {
                    biased;
                    renewed = self.leases.renew(&held.lease, self.settings.lease) => Some(renewed),
                    () = clock.sleep_until(deadline) => None,
                }
            };
            let lost = match outcome {
                Some(Ok(true)) => {
                    if let Some(held) = self.held.get_mut(&partition) {
                        held.renewed_at = sent;
                        held.fence.extend(sent + self.settings.lease);
                    }
                    None
                }
                Some(Ok(false)) => Some("taken over by another node"),
                Some(Err(error)) if clock.monotonic() >= deadline => {
                    tracing::warn!(%error, partition, "renewal failed past the lease's end");
                    Some("not renewed within its lease")
                }
                Some(Err(error)) => {
                    tracing::warn!(%error, partition, "renewal failed; retrying next turn");
                    None
                }
                None => Some("not renewed within its lease"),
            };
            if let Some(why) = lost {
                if let Some(held) = self.held.remove(&partition) {
                    self.stats.lost.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(partition, term = held.lease.term, why, "partition lost; its engine stops now");
                    held.fence.revoke();
                    held.engine.shutdown(Duration::ZERO).await;
                    any_lost = true;
                }
            }
        }
        any_lost
    }

    fn publish(&mut self, table: Vec<LeaseView>) {
        self.table.clone_from(&table);
        let engines = self
            .held
            .iter()
            .map(|(partition, held)| (*partition, (held.lease.clone(), held.engine.client())))
            .collect();
        let mut view = self.view.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        *view = ClusterView { engines, table };
    }

    async fn leave(&mut self, grace: Duration) {
        let held = std::mem::take(&mut self.held);
        for (partition, held) in held {
            held.engine.shutdown(grace).await;
            held.fence.revoke();
            if let Err(error) = self.leases.release(&held.lease).await {
                tracing::warn!(%error, partition, "cannot release the lease at shutdown; it expires on its own");
            }
            self.stats.released.fetch_add(1, Ordering::Relaxed);
        }
        if let Err(error) = self.leases.leave(&self.settings.node).await {
            tracing::warn!(%error, "cannot leave the cluster cleanly; the others count this node gone after its lease");
        }
        self.publish(Vec::new());
    }
}
