//! A start-up's arming of what the store holds, a page at a time: the store reads the next
//! page while the driver arms this one (a million heartbeats armed after the whole load
//! took a second of a restart on one core, the other idle).

use std::collections::BTreeMap;

use super::{Driver, Entry, NO_MORE_SLOTS};
use crate::core::breaker::{cooldown_length, is_half_open, Cooldown, DISABLED_BY_BREAKER};
use crate::core::heartbeat::Heartbeat;
use crate::core::ids::{AgentId, HeartbeatKey};
use crate::core::pause::{Pause, PauseRecord};
use crate::core::policy::backoff_delay;
use crate::core::schedule::Schedule;
use crate::core::slots::{truncate_to_millis, SlotTimer};
use crate::core::timer_queue::QueueLoad;
use crate::ports::clock::Now;
use crate::ports::store::{Armable, NextSlot};

/// What a start-up's arming gathers across the pages of its load.
pub(crate) struct Loading {
    now: Now,
    /// First slots taken from the clock, written back once all are armed.
    first_slots: Vec<(HeartbeatKey, NextSlot)>,
    loaded: QueueLoad<Entry>,
}

impl Loading {
    fn new(now: Now) -> Self {
        Self { now, first_slots: Vec::new(), loaded: QueueLoad::new() }
    }
}

impl Driver {
    /// Resumes the stored pauses, before the pages of the load are armed
    /// ([`Driver::arm_loaded`]).
    pub(crate) async fn begin_load(&mut self, pauses: Vec<(AgentId, PauseRecord)>) -> Loading {
        let now = self.context.clock.now();
        for (agent, record) in pauses {
            let pause = Pause::resume(now, record, self.context.settings(&agent).pause_minutes_max);
            if pause.holds(now) {
                self.pauses.insert(agent, pause);
            } else if let Err(error) = self.context.store.end_pause(&agent, record.until).await {
                // Over now; left in the store, a later backward jump and restart could revive it.
                let consequence = "a later restart may resume the pause for what is left of it by the wall clock";
                self.store_failed("end_pause", error.to_string(), consequence);
            }
        }
        Loading::new(now)
    }

    /// Arms one heartbeat as a start-up does (a row adopted as the store holds it).
    pub(super) async fn load_one(&mut self, heartbeat: Heartbeat) {
        let now = self.context.clock.now();
        let enabled: Vec<HeartbeatKey> =
            heartbeat.state.enabled.then(|| heartbeat.def.key.clone()).into_iter().collect();
        let latest = match self.context.store.latest_slots(&enabled).await {
            Ok(latest) => latest,
            Err(error) => {
                self.store_failed("latest_slots", error.to_string(), "an armed slot may be found claimed and skipped");
                BTreeMap::new()
            }
        };
        let latest_slot = latest.get(&heartbeat.def.key).copied();
        let mut loading = Loading::new(now);
        self.arm_loaded(&mut loading, vec![Armable { heartbeat, latest_slot }]);
        self.finish_load(loading).await;
    }

    /// Arms the enabled heartbeats of one page of the load. Each resumes at its stored slot
    /// (a stored definition has its first one from the store, ADR 0028); one without gets
    /// its schedule's first one, written back. A heartbeat that was failing waits out its
    /// backoff again, counted from now.
    pub(crate) fn arm_loaded(&mut self, loading: &mut Loading, page: Vec<Armable>) {
        let now = loading.now;
        let mut armed: Vec<(HeartbeatKey, Entry, Option<SlotTimer>)> = Vec::with_capacity(page.len());
        for Armable { heartbeat, latest_slot } in page {
            let key = heartbeat.def.key.clone();
            let mut entry =
                Entry::new(heartbeat.def, heartbeat.state.enabled, heartbeat.state.next_slot, &mut self.commons);
            let failures_max = self.context.breaker_failures_max;
            let state = &heartbeat.state;
            entry.retired = !state.enabled && state.disabled_reason.as_deref() == Some(NO_MORE_SLOTS);
            if !state.enabled && state.disabled_reason.as_deref() == Some(DISABLED_BY_BREAKER) {
                // Open: the rest of its cooldown (a row from before cooldowns counts from now).
                let ladder = &self.context.breaker_cooldown;
                if let Some(length) = cooldown_length(ladder, state.consecutive_failures, failures_max) {
                    let opened_at = state.breaker_opened_at.unwrap_or(now.wall);
                    self.cooldowns.insert(key.clone(), Cooldown::resume(now, opened_at, length));
                }
            }
            entry.with_rare(|rare| {
                rare.half_open = state.enabled && is_half_open(state.consecutive_failures, failures_max)
            });
            if heartbeat.state.consecutive_failures > 0 && !entry.rare().half_open {
                let delay = backoff_delay(&self.context.error_backoff, heartbeat.state.consecutive_failures);
                entry.with_rare(|rare| rare.backoff_until = Some(now.mono + delay));
            }
            // A one-shot whose stored next slot is past its instant is retrying (a failed
            // run, recorded or not, or a failed claim armed that slot).
            if let (Schedule::At(at), Some(next_slot)) = (entry.def.schedule(), heartbeat.state.next_slot) {
                let retrying = heartbeat.state.consecutive_failures > 0 || next_slot > truncate_to_millis(*at);
                entry.with_rare(|rare| {
                    rare.retrying = retrying;
                    rare.retry_slot = retrying.then_some(next_slot);
                });
            }
            if !entry.enabled {
                armed.push((key, entry, None));
                continue;
            }
            let (schedule, jitter) = (entry.def.schedule(), entry.jitter(&key));
            // A stored slot the schedule cannot have is ignored like a missing one. Every
            // armed slot goes above the latest the heartbeat has decided: a backward wall
            // jump may have put its runs ahead of the wall clock, and a stored next slot
            // lags when its write failed after a skip or a retry.
            let stored = heartbeat.state.next_slot.filter(|slot| schedule.may_resume_at(*slot));
            let timer = match stored {
                Some(next_slot) => {
                    let timer = SlotTimer::resume(now, schedule, jitter, next_slot);
                    match latest_slot {
                        Some(latest) => timer.lifted_above(latest, schedule),
                        None => Some(timer),
                    }
                }
                None => {
                    // No stored next slot (a row an earlier build stored, or a schedule with
                    // no slot after its storing): the schedule's first from now, above its
                    // latest slot.
                    let timer = match (SlotTimer::first(now, schedule, jitter), latest_slot) {
                        (Some(timer), Some(latest)) => timer.lifted_above(latest, schedule),
                        (timer, _) => timer,
                    };
                    if let Some(timer) = timer {
                        let next = NextSlot { at: timer.next_slot, schedule: schedule.clone() };
                        loading.first_slots.push((key.clone(), next));
                    }
                    timer
                }
            };
            match timer {
                Some(timer) => {
                    self.announce_armed(&key, timer.next_slot);
                    // Its floor is its timer's while armed, and a disarm sets it again:
                    // kept, it would put every loaded heartbeat's rare state in memory.
                    entry.with_rare(|rare| rare.next_slot_floor = None);
                }
                None => {
                    entry.exhausted = true;
                    self.exhausted.insert(key.clone());
                }
            }
            armed.push((key, entry, timer));
        }
        loading.loaded.push_page(armed);
    }

    /// Builds the driver's maps from every armed page and writes back the first slots taken
    /// from the clock.
    pub(crate) async fn finish_load(&mut self, loading: Loading) {
        let Loading { now, first_slots, loaded, .. } = loading;
        // A start-up builds its maps from the whole, their nodes full (ADR 0026).
        self.entries.load(loaded);
        if let Err(error) = self.context.store.set_next_slots(&first_slots).await {
            self.store_failed("set_next_slots", error.to_string(), "next_run_at stays unknown until the first run");
        }
        self.wake_for_pending_events(now).await;
    }
}
