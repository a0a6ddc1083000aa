//! One delivery decision at a time per heartbeat and reply: two runs of one heartbeat that
//! overlap (`allow_all`) and produce the same reply must not both pass the dedup check
//! before either has recorded its delivery. The second waits until the first's result is
//! in the store, then checks again.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::OwnedMutexGuard;

use crate::core::ids::HeartbeatKey;

type GateId = (HeartbeatKey, String);

#[derive(Default)]
pub struct DedupGate {
    locks: Mutex<BTreeMap<GateId, Arc<tokio::sync::Mutex<()>>>>,
}

/// Held from the dedup check until the run's result is recorded.
pub struct DedupHold {
    gate: Arc<DedupGate>,
    id: GateId,
    guard: Option<OwnedMutexGuard<()>>,
}

impl DedupGate {
    /// Waits for the turn of `key`'s reply with `digest`.
    pub async fn hold(self: &Arc<Self>, key: &HeartbeatKey, digest: &str) -> DedupHold {
        let id = (key.clone(), digest.to_owned());
        let lock = {
            let mut locks = self.locks.lock().unwrap_or_else(PoisonError::into_inner);
            Arc::clone(locks.entry(id.clone()).or_default())
        };
        let guard = lock.lock_owned().await;
        DedupHold { gate: Arc::clone(self), id, guard: Some(guard) }
    }

    #[cfg(test)]
    fn held_count(&self) -> usize {
        self.locks.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

impl Drop for DedupHold {
    fn drop(&mut self) {
        drop(self.guard.take());
        let mut locks = self.gate.locks.lock().unwrap_or_else(PoisonError::into_inner);
        // Only the map holds it now: nobody waits, so the entry goes (the map stays small).
        if locks.get(&self.id).is_some_and(|lock| Arc::strong_count(lock) == 1) {
            locks.remove(&self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::ids::{AgentId, HeartbeatId};

    fn key() -> HeartbeatKey {
        HeartbeatKey { agent: AgentId::new("a").expect("id"), heartbeat: HeartbeatId::new("h").expect("id") }
    }

    #[tokio::test]
    async fn a_second_holder_of_the_same_reply_waits_and_the_map_empties() {
        let gate = Arc::new(DedupGate::default());
        let first = gate.hold(&key(), "d").await;
        let other_reply = gate.hold(&key(), "e").await;
        let waiting = tokio::spawn({
            let gate = Arc::clone(&gate);
            async move { gate.hold(&key(), "d").await }
        });
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(!waiting.is_finished(), "the same reply waits for the first holder");
        drop(first);
        let second = waiting.await.expect("task");
        drop((second, other_reply));
        assert_eq!(gate.held_count(), 0);
    }
}
