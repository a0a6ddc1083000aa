//! A heartbeat's timer goes above the latest slot the run log holds for it (a lost claim,
//! a new definition): after a backward wall jump, or for an id made again, the clock
//! alone arms slots the store decided already, or slots below ones already run. When that
//! read fails the timer is held, disarmed, and the read is tried again at a later turn:
//! armed unlifted, a slot below one already run ran out of order (seed 1927872822302).

use std::time::Duration;

use super::Driver;
use crate::core::ids::HeartbeatKey;
use crate::core::slots::SlotTimer;
use crate::limits::LATEST_SLOT_READ_RETRY_SECS;
use crate::ports::clock::{Mono, Now};

impl Driver {
    /// Holds `key`'s timer until a later read of the log's latest slot lifts it.
    pub(super) fn hold_unlifted(&mut self, key: &HeartbeatKey) {
        if let Some(timer) = self.entries.timer(key) {
            self.unlifted.insert(key.clone(), timer);
            self.disarm(key);
        }
    }

    /// `key`'s timer, armed or held: a trigger keeps off a held slot as off an armed one,
    /// and a one-shot's re-arm knows its own slot either way (seed 1927872856178: a trigger
    /// took a held own slot's millisecond, and an enable retired the one-shot unrun).
    pub(super) fn armed_or_held(&self, key: &HeartbeatKey) -> Option<SlotTimer> {
        self.entries.timer(key).or_else(|| self.unlifted.get(key).copied())
    }

    /// When held timers are tried again, if any are held.
    pub(super) fn next_lift_retry(&self) -> Option<Mono> {
        (!self.unlifted.is_empty()).then_some(self.next_lift_retry)
    }

    /// Reads the latest slots of the held timers' heartbeats, at most once every
    /// `LATEST_SLOT_READ_RETRY_SECS`, and arms each above its own. A heartbeat armed,
    /// disabled, exhausted or dropped since is not held any more: what did that decided
    /// its timer.
    pub(super) async fn retry_lifts(&mut self, now: Now) {
        if self.unlifted.is_empty() || now.mono < self.next_lift_retry {
            return;
        }
        self.next_lift_retry = now.mono + Duration::from_secs(LATEST_SLOT_READ_RETRY_SECS);
        let held: Vec<(HeartbeatKey, SlotTimer)> = std::mem::take(&mut self.unlifted)
            .into_iter()
            .filter(|(key, _)| {
                self.entries.get(key).is_some_and(|entry| entry.enabled && !entry.exhausted)
                    && self.entries.timer(key).is_none()
            })
            .collect();
        if held.is_empty() {
            return;
        }
        let keys: Vec<HeartbeatKey> = held.iter().map(|(key, _)| key.clone()).collect();
        let latest = match self.context.store.latest_slots(&keys).await {
            Ok(latest) => latest,
            Err(error) => {
                self.store_failed("latest_slots", error.to_string(), "the held timers are tried again later");
                self.unlifted.extend(held);
                return;
            }
        };
        for (key, timer) in held {
            let Some(entry) = self.entries.get_mut(&key) else { continue };
            // A one-shot's timer below the latest slot (its retry's too) has no slot left:
            // the retirement reads how its last run ended, and retries above the log's
            // latest slot or retires it (seed 1927872860319: placed above the instant only,
            // a retry ran below a slot of the schedule the one-shot replaced; resumed above
            // the latest slot instead, a retry ran a one-shot that had succeeded, seed
            // 1927872902774).
            let lifted = match latest.get(&key) {
                Some(latest) => timer.lifted_above(*latest, entry.def.schedule()),
                None => Some(timer),
            };
            match lifted {
                Some(lifted) => {
                    self.arm(key.clone(), lifted);
                    self.store_next_slot(key, lifted.next_slot).await;
                }
                None => {
                    entry.exhausted = true;
                    self.exhausted.insert(key);
                }
            }
        }
    }
}
