//! Pruning the run log (and the driver's unused shared targets) on a timer. The prune runs in a task of its own, so no slot waits
//! for it (on a big log it holds the store's write lock for a moment).

use std::sync::Arc;
use std::time::Duration;

use super::Driver;
use crate::driver::events::EngineEvent;
use crate::limits::RUNS_PRUNE_INTERVAL_SECS;
use crate::ports::clock::Now;

impl Driver {
    /// Starts a prune when one is due, and sets the next one an interval later.
    pub(super) fn prune_if_due(&mut self, now: Now) {
        if now.mono < self.next_prune {
            return;
        }
        self.next_prune = now.mono + Duration::from_secs(RUNS_PRUNE_INTERVAL_SECS);
        self.commons.forget_unused();
        let store = Arc::clone(&self.context.store);
        let events = Arc::clone(&self.context.events);
        let clock = Arc::clone(&self.context.clock);
        let retention = self.context.run_retention;
        tokio::spawn(async move {
            match store.prune_runs(now.wall, retention).await {
                Ok(0) => {}
                Ok(deleted) => events.emit(clock.wall(), &EngineEvent::RunsPruned { deleted }),
                Err(error) => {
                    let consequence = "the log keeps those rows until the next prune";
                    let event =
                        EngineEvent::StoreFailed { operation: "prune_runs", error: error.to_string(), consequence };
                    events.emit(clock.wall(), &event);
                }
            }
        });
    }
}
