//! A node frozen inside a store transaction, with what the real database does about it
//! (ADR 0018). The fault asks for a freeze; the node's next fenced write takes its
//! partition's lease row (as the fence's `FOR SHARE` read does in PostgreSQL) and waits,
//! stopped, until the fault thaws it. Meanwhile a grant of that partition waits for the
//! row, within the lease loop's lock bound; the database ends the idle session after the
//! node's idle bound, releasing the row, and the write then fails when the node wakes.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;

use systole::core::ids::AgentId;
use systole::ports::clock::Clock;

use super::{ClusterWorld, Record};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Freeze {
    /// The fault waits for the node's next fenced write.
    Requested,
    /// A write of the node holds `partition`'s lease row; `ended` once the database
    /// ended its session.
    Holding { partition: u32, ended: bool },
}

/// Every node's freeze, the lease rows frozen transactions hold, and the signals between
/// the fault and the write.
pub struct Freezes {
    state: Mutex<State>,
    /// A write took its row (to the fault); the fault is over (to the write).
    froze: BTreeMap<String, Notify>,
    thawed: BTreeMap<String, Notify>,
    /// A pause's end of the agent asked for took its row, on the node `State` names.
    froze_at_pause_end: Notify,
}

#[derive(Default)]
struct State {
    freezes: BTreeMap<String, Freeze>,
    /// Lease rows held by a frozen transaction, by partition: the node holding each.
    rows: BTreeMap<u32, String>,
    /// A freeze asked for at the next end of this agent's pause, on whichever node writes
    /// it (inside its transaction, or once it committed); then the node whose write took it.
    at_pause_end: Option<(AgentId, Moment)>,
    frozen_at_pause_end: Option<String>,
}

/// Where a write of a pause's end stops its node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moment {
    /// Inside its transaction: it commits when the node wakes.
    InTransaction,
    /// Just after its commit, before the node sees the answer: a slow answer.
    AfterCommit,
}

/// What a fenced write does about a freeze.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    No,
    InTransaction,
    AfterCommit,
}

/// What the frozen write finds when its node wakes.
pub enum Thawed {
    /// Its transaction is alive: the write goes on and commits.
    Alive { partition: u32 },
    /// The database ended the session while the node was stopped: nothing was written.
    Ended,
}

impl Freezes {
    pub fn new(nodes: impl Iterator<Item = String>) -> Self {
        let nodes: Vec<String> = nodes.collect();
        Self {
            state: Mutex::default(),
            froze: nodes.iter().map(|node| (node.clone(), Notify::new())).collect(),
            thawed: nodes.iter().map(|node| (node.clone(), Notify::new())).collect(),
            froze_at_pause_end: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn request(&self, node: &str) {
        self.lock().freezes.insert(node.to_owned(), Freeze::Requested);
    }

    /// Returns once a write of `node` holds its row (a stale signal of an earlier freeze
    /// is passed over).
    pub async fn holding(&self, node: &str) {
        let Some(froze) = self.froze.get(node) else { return std::future::pending().await };
        loop {
            froze.notified().await;
            if matches!(self.lock().freezes.get(node), Some(Freeze::Holding { .. })) {
                return;
            }
        }
    }

    /// Withdraws a request no write took; `false` when a write took it meanwhile.
    pub fn withdraw(&self, node: &str) -> bool {
        let mut state = self.lock();
        if state.freezes.get(node) == Some(&Freeze::Requested) {
            state.freezes.remove(node);
            return true;
        }
        false
    }

    /// Asks for a freeze at the next deletion of `agent`'s pause that a node writes (the
    /// end of a pause, or a resume), at `moment`.
    pub fn request_at_pause_end(&self, agent: &AgentId, moment: Moment) {
        let mut state = self.lock();
        state.at_pause_end = Some((agent.clone(), moment));
        state.frozen_at_pause_end = None;
    }

    /// Returns the node whose write of a pause's end holds its row.
    pub async fn holding_at_pause_end(&self) -> String {
        loop {
            self.froze_at_pause_end.notified().await;
            if let Some(node) = self.lock().frozen_at_pause_end.clone() {
                return node;
            }
        }
    }

    /// Withdraws a request for a pause's end; `false` when a write took it meanwhile.
    pub fn withdraw_at_pause_end(&self) -> bool {
        self.lock().at_pause_end.take().is_some()
    }

    /// Called by a fenced write of `node` on `partition` (a deletion of `pause_end_of`'s
    /// pause, if it is one): whether it must freeze, and where. One that freezes after its
    /// commit calls [`Self::stop_after_commit`] once committed.
    pub fn take(&self, world: &ClusterWorld, node: &str, partition: u32, pause_end_of: Option<&AgentId>) -> Taken {
        let at_pause_end = {
            let mut state = self.lock();
            let requested = state.freezes.get(node) == Some(&Freeze::Requested);
            let at_pause_end = match (&state.at_pause_end, pause_end_of) {
                (Some((asked, moment)), Some(agent)) if !requested && !state.freezes.contains_key(node) => {
                    (asked == agent).then_some(*moment)
                }
                _ => None,
            };
            if !requested && at_pause_end.is_none() {
                return Taken::No;
            }
            if at_pause_end.is_some() {
                state.at_pause_end = None;
                state.frozen_at_pause_end = Some(node.to_owned());
            }
            if at_pause_end == Some(Moment::AfterCommit) {
                // No transaction stays open: the node stops once the write committed.
                return Taken::AfterCommit;
            }
            state.freezes.insert(node.to_owned(), Freeze::Holding { partition, ended: false });
            state.rows.insert(partition, node.to_owned());
            at_pause_end
        };
        world.record(Record::TxFrozen { node: node.to_owned(), partition });
        if at_pause_end.is_some() {
            self.froze_at_pause_end.notify_one();
        } else if let Some(froze) = self.froze.get(node) {
            froze.notify_one();
        }
        Taken::InTransaction
    }

    /// A write of `node` that froze after its commit: the fault stops the node now, and the
    /// write's answer comes once it is thawed.
    pub async fn stop_after_commit(&self, node: &str) {
        self.froze_at_pause_end.notify_one();
        if let Some(thawed) = self.thawed.get(node) {
            thawed.notified().await;
        }
    }

    /// The frozen write waits here until its node is thawed.
    pub async fn wait_thawed(&self, node: &str) -> Thawed {
        if let Some(thawed) = self.thawed.get(node) {
            thawed.notified().await;
        }
        let mut state = self.lock();
        match state.freezes.remove(node) {
            Some(Freeze::Holding { partition, ended: false }) => Thawed::Alive { partition },
            _ => Thawed::Ended,
        }
    }

    /// The alive transaction committed or failed: its row is free.
    pub fn release(&self, world: &ClusterWorld, node: &str, partition: u32) {
        self.lock().rows.remove(&partition);
        world.record(Record::TxEnded { node: node.to_owned(), partition, by_database: false });
    }

    /// The database ends the idle session of `node`: its row is free, its write lost.
    pub fn end_session(&self, world: &ClusterWorld, node: &str) {
        let partition = {
            let mut state = self.lock();
            let Some(Freeze::Holding { partition, ended: false }) = state.freezes.get(node).copied() else { return };
            state.freezes.insert(node.to_owned(), Freeze::Holding { partition, ended: true });
            state.rows.remove(&partition);
            partition
        };
        world.record(Record::TxEnded { node: node.to_owned(), partition, by_database: true });
    }

    /// The node's process ended (killed, or restarted over a running one): the database
    /// ends its sessions at once, so a transaction it left open, frozen, holds its row no
    /// longer (seed 31450339256: a late joiner started early by a kill's restart was frozen
    /// at a pause's end when its join time restarted it, and the row stayed held for good).
    pub fn end_with_process(&self, world: &ClusterWorld, node: &str) {
        let partition = {
            let mut state = self.lock();
            if state.frozen_at_pause_end.as_deref() == Some(node) {
                state.frozen_at_pause_end = None;
            }
            let Some(Freeze::Holding { partition, ended }) = state.freezes.get(node).copied() else { return };
            state.freezes.remove(node);
            if ended {
                return;
            }
            state.rows.remove(&partition);
            partition
        };
        world.record(Record::TxEnded { node: node.to_owned(), partition, by_database: true });
    }

    pub fn thaw(&self, node: &str) {
        // Only a freeze still on has a write waiting: a node whose process ended meanwhile
        // has none, and a signal kept for it would let its next freeze pass at once.
        let waiting = {
            let state = self.lock();
            state.freezes.contains_key(node) || state.frozen_at_pause_end.as_deref() == Some(node)
        };
        if let Some(thawed) = self.thawed.get(node).filter(|_| waiting) {
            thawed.notify_one();
        }
    }

    /// Whether `partition`'s lease row is held by another node's frozen transaction.
    pub fn row_held_by_other(&self, partition: u32, node: &str) -> bool {
        self.lock().rows.get(&partition).is_some_and(|holder| holder != node)
    }
}

/// How often a waiting grant looks at the row again.
pub const LOCK_POLL_MS: u64 = 10;

/// A grant's wait for a row a frozen transaction holds, bounded as the lease loop's
/// connections bound it; returns how long it waited and whether it gave up.
pub async fn wait_for_row(world: &ClusterWorld, node: &str, partition: u32, bound: Duration) -> (Duration, bool) {
    let start = world.clock.monotonic();
    loop {
        let waited = world.clock.monotonic().saturating_since(start);
        if !world.freezes.row_held_by_other(partition, node) {
            return (waited, false);
        }
        if waited >= bound {
            return (waited, true);
        }
        world.clock.sleep(Duration::from_millis(LOCK_POLL_MS)).await;
    }
}
