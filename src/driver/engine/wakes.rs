//! The agent heartbeat's wake layer inside the driver: requests merge per agent
//! ([`PendingWake`]); a due wake reads the pending system events and `HEARTBEAT.md`, runs
//! the guard chain (lane and flood guard included) and becomes a claim or a skip.

use std::collections::BTreeSet;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use super::Driver;
use crate::core::budget::DayCap;
use crate::core::guard::{self, GuardInput, SkipReason};
use crate::core::heartbeat::JobKind;
use crate::core::heartbeat_file::{agent_prompt, is_effectively_empty};
use crate::core::ids::{AgentId, HeartbeatKey};
use crate::core::system_events::{cron_event_prompt, SystemEvent};
use crate::core::wake::{PendingWake, WakeReason};
use crate::driver::events::EngineEvent;
use crate::driver::run_events::RunEvent;
use crate::limits::WAKE_SLOT_READ_RETRY_SECS;
use crate::ports::clock::{Mono, Now};
use crate::ports::store::{NextSlot, SkipRecord, SlotClaim};

/// What a woken agent heartbeat runs with, fixed when its guards passed: the prompt holds
/// exactly the file content and events that were checked.
pub(super) struct Prepared {
    pub(super) prompt: String,
    /// The system events listed in the prompt, consumed if the run succeeds.
    pub(super) consumes: Vec<u64>,
}

impl Driver {
    /// Adds a wake request for `agent`'s heartbeat. Returns whether the agent has one.
    pub(super) fn request_wake(
        &mut self,
        agent: &AgentId,
        reason: WakeReason,
        slot: Option<Timestamp>,
        now: Now,
    ) -> bool {
        let key = HeartbeatKey::agent_heartbeat(agent);
        if self.entries.get(&key).is_none_or(|entry| entry.def.common.kind != JobKind::Agent) {
            self.context.events.emit(now.wall, &EngineEvent::WakeIgnored { agent: agent.clone(), reason });
            return false;
        }
        self.context.events.emit(now.wall, &EngineEvent::WakeRequested { agent: agent.clone(), reason });
        let pending = self.wakes.remove(agent);
        self.wakes.insert(agent.clone(), PendingWake::request(pending, reason, slot, now.mono));
        true
    }

    /// When the next pending wake is due, among agents whose heartbeat is not running (one
    /// run per agent at a time: a request made during a run waits for its end).
    pub(super) fn next_agent_wake(&self) -> Option<Mono> {
        self.wakes.iter().filter(|(agent, _)| !self.agent_heartbeat_running(agent)).map(|(_, wake)| wake.due).min()
    }

    fn agent_heartbeat_running(&self, agent: &AgentId) -> bool {
        self.entries.get(&HeartbeatKey::agent_heartbeat(agent)).is_some_and(|entry| entry.runs_in_flight() > 0)
    }

    /// Decides every due wake: a claim (its lane taken, its prompt prepared) or a skip. A
    /// busy lane or a closed flood guard keeps the wake pending for a retry; any other
    /// skip drops it until the next request.
    /// At most `room` wakes are decided (admission before the claim); the others stay due.
    pub(super) async fn decide_wakes(
        &mut self,
        now: Now,
        room: usize,
        claims: &mut Vec<SlotClaim>,
        skips: &mut Vec<SkipRecord>,
    ) {
        let ready: Vec<AgentId> = self
            .wakes
            .iter()
            .filter(|(agent, wake)| wake.due <= now.mono && !self.agent_heartbeat_running(agent))
            .map(|(agent, _)| agent.clone())
            .take(room)
            .collect();
        for agent in ready {
            let Some(wake) = self.wakes.remove(&agent) else { continue };
            let key = HeartbeatKey::agent_heartbeat(&agent);
            let Some(schedule) = self.entries.get(&key).map(|entry| entry.def.schedule().clone()) else {
                self.context.events.emit(now.wall, &EngineEvent::WakeIgnored { agent, reason: wake.reason });
                continue;
            };
            let Some(slot) = self.wake_slot(&key, wake.slot.unwrap_or(now.wall)).await else {
                let not_before = now.mono + Duration::from_secs(WAKE_SLOT_READ_RETRY_SECS);
                self.wakes.insert(agent, wake.retry(now.mono, Some(not_before)));
                continue;
            };
            let events = self.pending_events(&agent, now).await;
            let file = if events.is_empty() { self.heartbeat_file(&agent, now).await } else { None };
            let cap_reached = self.spent_budgets(BTreeSet::from([agent.clone()]), now).await.remove(&agent);
            let decision = self.guard_wake(&key, &wake, &events, file.as_deref(), cap_reached, now);
            if !wake.quiet || decision.is_ok() {
                let event = EngineEvent::WakeDecided { key: key.clone(), slot, reason: wake.reason };
                self.context.events.emit(now.wall, &event);
            }
            let next_slot = NextSlot { at: self.entries.timer(&key).map_or(slot, |timer| timer.next_slot), schedule };
            match decision {
                Ok(()) => {
                    let prepared = if events.is_empty() {
                        let prompt = self
                            .entries
                            .get(&key)
                            .map(|entry| entry.def.common.agent_prompt.to_string())
                            .unwrap_or_default();
                        Prepared { prompt: agent_prompt(&prompt, file.as_deref()), consumes: Vec::new() }
                    } else {
                        let consumes = events.iter().map(|event| event.id).collect();
                        Prepared { prompt: cron_event_prompt(&events), consumes }
                    };
                    self.prepared.insert(key.clone(), prepared);
                    // A wake, even one an operator asked for, is not a job's trigger.
                    claims.push(SlotClaim { key, slot, claimed_at: now.wall, next_slot, triggered: false });
                }
                Err((reason, retry_at)) => {
                    if !wake.quiet {
                        self.context.events.emit(now.wall, &EngineEvent::Skipped { key: key.clone(), slot, reason });
                        self.context.run_events.publish(RunEvent::skipped(key.clone(), slot, now.wall, reason));
                        // A wake is not a job's trigger (as at its claim).
                        skips.push(SkipRecord { key, slot, at: now.wall, reason, next_slot, triggered: false });
                    }
                    if matches!(reason, SkipReason::RequestsInFlight | SkipReason::FloodGuard) {
                        // Not lost: it runs once the lane is free or the guard opens. Its
                        // slot is recorded as skipped, so the run takes the time it starts.
                        let retry = PendingWake { slot: None, quiet: true, ..wake }.retry(now.mono, retry_at);
                        self.wakes.insert(agent, retry);
                    }
                }
            }
        }
    }

    /// The guard chain for a wake. On success the agent's lane is taken (the caller gives
    /// it back if the run does not start). On a skip, the time the flood guard opens.
    fn guard_wake(
        &mut self,
        key: &HeartbeatKey,
        wake: &PendingWake,
        events: &[SystemEvent],
        file: Option<&str>,
        cap_reached: Option<DayCap>,
        now: Now,
    ) -> Result<(), (SkipReason, Option<Mono>)> {
        let agent = &key.agent;
        // Explicit requests go through a pause, quiet hours and a backoff: those hold the
        // agent's own timed runs only.
        let explicit = wake.reason.is_explicit();
        let paused = !explicit && self.pauses.get(agent).is_some_and(|pause| pause.holds(now));
        let flood = self.floods.get(agent).map_or(Ok(()), |flood| flood.check(now.mono));
        let Some(entry) = self.entries.get(key) else { return Err((SkipReason::Disabled, None)) };
        let lane_taken = self.context.lanes.try_begin_heartbeat(agent);
        let input = GuardInput {
            enabled: entry.enabled,
            paused,
            active_hours: if explicit { None } else { entry.def.active_hours() },
            heartbeat_file_empty: events.is_empty() && is_effectively_empty(file),
            user_busy: !lane_taken,
            alerts_disabled: self.shows_nothing(&entry.def),
            flooded: flood.is_err(),
            cap_reached,
            in_backoff: !explicit && entry.rare().backoff_until.is_some_and(|until| now.mono < until),
            run_in_flight: false,
            wall_now: now.wall,
        };
        let decision = guard::check(input);
        if decision.is_err() && lane_taken {
            self.context.lanes.end_heartbeat(agent);
        }
        decision.map_err(|reason| (reason, flood.err()))
    }

    /// The slot a wake is recorded under: its interval slot or the time it is decided,
    /// raised above the agent heartbeat's latest recorded slot, so its slots only move
    /// forward (also after a backward wall jump) and a retry never collides with the skip
    /// recorded before it. None when that slot is unknown (the read of the log failed): a
    /// slot below it would break that order after a backward wall jump.
    async fn wake_slot(&mut self, key: &HeartbeatKey, candidate: Timestamp) -> Option<Timestamp> {
        let latest = match self.agent_slots.get(&key.agent) {
            Some(latest) => Some(*latest),
            None => match self.context.store.executions(key, 1).await {
                Ok(latest) => latest.first().map(|execution| execution.slot),
                Err(error) => {
                    let consequence = "the wake waits and is decided again a few seconds later";
                    self.store_failed("executions", error.to_string(), consequence);
                    return None;
                }
            },
        };
        let candidate = Timestamp::from_millisecond(candidate.as_millisecond()).unwrap_or(candidate);
        let floor = latest.and_then(|latest| latest.checked_add(SignedDuration::from_millis(1)).ok());
        let slot = floor.map_or(candidate, |floor| candidate.max(floor));
        self.agent_slots.insert(key.agent.clone(), slot);
        Some(slot)
    }

    async fn pending_events(&mut self, agent: &AgentId, now: Now) -> Vec<SystemEvent> {
        match self.context.store.pending_system_events(agent, now.wall).await {
            Ok(events) => events,
            Err(error) => {
                let consequence = "the heartbeat runs without its pending system events; they stay queued";
                self.store_failed("pending_system_events", error.to_string(), consequence);
                Vec::new()
            }
        }
    }

    async fn heartbeat_file(&mut self, agent: &AgentId, now: Now) -> Option<String> {
        match self.context.workspace.heartbeat_file(agent).await {
            Ok(file) => file,
            Err(error) => {
                let event = EngineEvent::WorkspaceFailed { agent: agent.clone(), error: error.to_string() };
                self.context.events.emit(now.wall, &event);
                None
            }
        }
    }

    /// At start-up: agents with system events still queued (a crash before their heartbeat
    /// ran) are woken as a main-mode cron job would have.
    pub(super) async fn wake_for_pending_events(&mut self, now: Now) {
        let agents: Vec<AgentId> = self
            .entries
            .iter()
            .filter(|(_, entry)| entry.def.common.kind == JobKind::Agent && entry.enabled)
            .map(|(key, _)| key.agent.clone())
            .collect();
        for agent in agents {
            if !self.pending_events(&agent, now).await.is_empty() {
                self.request_wake(&agent, WakeReason::Cron, None, now);
            }
        }
    }
}
