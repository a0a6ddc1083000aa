//! Lanes: the user always goes first. While a user conversation with an agent is in
//! progress its agent heartbeat does not start (`requests-in-flight`, retried a second
//! later), and a user turn that arrives while the heartbeat runs waits for it to finish,
//! never the other way round.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::core::ids::AgentId;
use crate::driver::events::{EngineEvent, EventSink};
use crate::ports::clock::Clock;

#[derive(Debug, Default, Clone, Copy)]
struct Lane {
    user_turns: usize,
    heartbeat_running: bool,
}

/// Who holds each agent's main lane. Shared by the driver and the embedding application.
pub struct Lanes {
    lanes: Mutex<BTreeMap<AgentId, Lane>>,
    heartbeat_ended: Notify,
    clock: Arc<dyn Clock>,
    events: Arc<dyn EventSink>,
}

impl Lanes {
    pub(crate) fn new(clock: Arc<dyn Clock>, events: Arc<dyn EventSink>) -> Self {
        Self { lanes: Mutex::new(BTreeMap::new()), heartbeat_ended: Notify::new(), clock, events }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<AgentId, Lane>> {
        // Every critical section is a counter update: a poisoned lock is still consistent.
        self.lanes.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes the lane for the agent heartbeat unless a user turn holds it. Decided under
    /// the lock, so a user turn cannot begin between the check and the start.
    pub(crate) fn try_begin_heartbeat(&self, agent: &AgentId) -> bool {
        let mut lanes = self.lock();
        let lane = lanes.entry(agent.clone()).or_default();
        if lane.user_turns > 0 {
            return false;
        }
        lane.heartbeat_running = true;
        true
    }

    /// Gives the lane back; user turns waiting for it go ahead.
    pub(crate) fn end_heartbeat(&self, agent: &AgentId) {
        if let Some(lane) = self.lock().get_mut(agent) {
            lane.heartbeat_running = false;
        }
        self.heartbeat_ended.notify_waiters();
    }

    /// Begins a user turn, after the agent heartbeat that is running (if any) has finished.
    /// The turn holds the lane until the returned guard is dropped.
    pub async fn begin_user_turn(self: &Arc<Self>, agent: &AgentId) -> UserTurn {
        loop {
            let ended = self.heartbeat_ended.notified();
            tokio::pin!(ended);
            // Registered before the check, so an end between the check and the wait is seen.
            ended.as_mut().enable();
            {
                let mut lanes = self.lock();
                let lane = lanes.entry(agent.clone()).or_default();
                if !lane.heartbeat_running {
                    lane.user_turns += 1;
                    // Emitted under the lock: the event order is the lane order.
                    self.events.emit(self.clock.wall(), &EngineEvent::UserTurnStarted { agent: agent.clone() });
                    return UserTurn { lanes: Arc::clone(self), agent: agent.clone() };
                }
            }
            ended.await;
        }
    }
}

/// A user conversation in progress; dropping it ends the turn.
pub struct UserTurn {
    lanes: Arc<Lanes>,
    agent: AgentId,
}

impl Drop for UserTurn {
    fn drop(&mut self) {
        let mut lanes = self.lanes.lock();
        if let Some(lane) = lanes.get_mut(&self.agent) {
            lane.user_turns = lane.user_turns.saturating_sub(1);
        }
        let event = EngineEvent::UserTurnEnded { agent: self.agent.clone() };
        self.lanes.events.emit(self.lanes.clock.wall(), &event);
    }
}
