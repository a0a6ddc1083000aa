//! A cluster's reload hands each partition's engine the rows it changed (ADR 0024). The
//! reload read them before the engine takes them; an operator's enable, disable or delete
//! that the engine took in between would be undone by the rows as read. So the engine reads
//! them again in its own turn, after every change it took before (ADR 0056).

use super::Driver;
use crate::core::heartbeat::Heartbeat;
use crate::core::ids::HeartbeatKey;
use crate::driver::events::EngineEvent;
use crate::ports::clock::Now;

impl Driver {
    /// Runs each of `read` (rows a reload read) as the store holds it now. One that the
    /// store no longer holds was deleted since: its delete stops it, not this. If the read
    /// fails, the rows as the reload read them are taken, as before this read existed.
    pub(super) async fn adopt_as_stored(&mut self, read: Vec<Heartbeat>, now: Now) {
        let keys: Vec<HeartbeatKey> = read.iter().map(|heartbeat| heartbeat.def.key.clone()).collect();
        let rows = match self.context.store.heartbeats(&keys).await {
            Ok(rows) => rows,
            Err(error) => {
                let consequence = "rows a reload read are adopted as read; an operator's change since may be undone";
                self.store_failed("heartbeats", error.to_string(), consequence);
                read
            }
        };
        for heartbeat in rows {
            self.adopt(heartbeat, now).await;
        }
    }

    /// Runs `heartbeat` as the store holds it, as a start-up loads it: what the old
    /// definition armed, queued or cooled goes; the row's own state (an open breaker, a
    /// backoff, its next slot) comes with it.
    pub(super) async fn adopt(&mut self, heartbeat: Heartbeat, now: Now) {
        let key = heartbeat.def.key.clone();
        let runs_in_flight = self.runs.keys().filter(|(run_key, _)| *run_key == key).count();
        self.unqueue(&key);
        self.cooldowns.remove(&key);
        self.disarm(&key);
        self.entries.remove(&key);
        self.load_one(heartbeat).await;
        if let Some(entry) = self.entries.get_mut(&key) {
            entry.set_runs_in_flight(runs_in_flight);
        }
        self.context.events.emit(now.wall, &EngineEvent::DefinitionApplied { key });
    }
}
