//! The breaker's recovery in the driver: a heartbeat the breaker disabled waits out its
//! cooldown, is then enabled for one probe (half-open), and the probe's result closes the
//! breaker or opens it again for the next step of the ladder. An opening from closed and a
//! close are each announced once, to the heartbeat's target or to `alerts_target`.

use std::sync::Arc;

use jiff::Timestamp;

use super::Driver;
use crate::core::breaker::{cooldown_length, BreakerStep, Cooldown};
use crate::core::delivery_target::DeliveryTarget;
use crate::core::ids::HeartbeatKey;
use crate::driver::events::EngineEvent;
use crate::driver::run::idempotency_key;
use crate::driver::run_events::RunEvent;
use crate::limits::{BREAKER_ANNOUNCEMENT_ERROR_CHARS_MAX, BREAKER_HALF_OPEN_RETRY_SECS};
use crate::ports::clock::{Mono, Now};
use crate::ports::messenger::{Delivery, DeliveryKind};
use crate::ports::store::RunRecord;

impl Driver {
    /// The run in `record` tripped the breaker (the heartbeat is already disabled): start
    /// its cooldown and say so. A probe that failed trips it again quietly: the opening
    /// was announced, and the chat hears next when it recovers.
    pub(super) fn breaker_opened(&mut self, record: &RunRecord, step: BreakerStep, now: Now) {
        let length = cooldown_length(
            &self.context.breaker_cooldown,
            step.consecutive_failures,
            self.context.breaker_failures_max,
        );
        let cooldown = length.map(|length| Cooldown::start(now, record.finished_at, length));
        match cooldown {
            Some(cooldown) => self.cooldowns.insert(record.key.clone(), cooldown),
            None => self.cooldowns.remove(&record.key),
        };
        let probe_at = cooldown.map(|cooldown| cooldown.probe_at());
        let key = record.key.clone();
        let count = step.consecutive_failures;
        self.context
            .events
            .emit(now.wall, &EngineEvent::BreakerTripped { key: key.clone(), consecutive_failures: count, probe_at });
        let next = match probe_at {
            Some(at) => format!("it will try once more at {at}"),
            None => "it stays stopped until it is enabled".to_owned(),
        };
        let reason = if record.provider_refused {
            format!("the model's provider refused the request (no retry heals that); {next}")
        } else {
            format!("{count} failures in a row; {next}")
        };
        self.publish_breaker(&key, record.slot, now, true, reason);
        if !step.opened {
            return;
        }
        let error = record.error.as_deref().unwrap_or(record.status.as_str());
        let error: String = error.chars().take(BREAKER_ANNOUNCEMENT_ERROR_CHARS_MAX).collect();
        let why = if record.provider_refused {
            format!(
                "failed because the model's provider refused the request ({error}): a bad API key, a spend cap or \
                 no access to the model, which no retry heals, so its circuit breaker stopped it at once"
            )
        } else {
            format!("failed {count} times in a row, so its circuit breaker stopped it (last error: {error})")
        };
        let text = format!(
            "systole: heartbeat {key} {why}. {}; `systole heartbeat enable {} --agent {}` starts it again now.",
            capitalized(&next),
            key.heartbeat,
            key.agent,
        );
        self.announce(&key, record.slot, DeliveryKind::BreakerOpened, text);
    }

    /// The probe in `record` succeeded: the store closed the breaker.
    pub(super) fn breaker_closed(&mut self, record: &RunRecord, now: Now) {
        let key = record.key.clone();
        self.context.events.emit(now.wall, &EngineEvent::BreakerClosed { key: key.clone() });
        let reason = "the probe run succeeded; it runs on schedule again".to_owned();
        self.publish_breaker(&key, record.slot, now, false, reason);
        let text = format!(
            "systole: heartbeat {key} recovered: its probe run (slot {}) succeeded, and it runs on schedule again.",
            record.slot
        );
        self.announce(&key, record.slot, DeliveryKind::BreakerClosed, text);
    }

    /// Enables, for one probe, every heartbeat whose cooldown has ended. The store write
    /// changes nothing if an operator disabled or enabled it meanwhile (their change wins).
    pub(super) async fn end_cooldowns(&mut self, now: Now) {
        let ended: Vec<HeartbeatKey> =
            self.cooldowns.iter().filter(|(_, cooldown)| cooldown.ended(now)).map(|(key, _)| key.clone()).collect();
        for key in ended {
            match self.context.store.half_open_breaker(&key).await {
                Ok(true) => {
                    self.cooldowns.remove(&key);
                    let floor = self.slot_floor(&key);
                    let Some(entry) = self.entries.get_mut(&key) else { continue };
                    entry.enabled = true;
                    entry.with_rare(|rare| rare.half_open = true);
                    // The cooldown was the wait: no backoff on top of it.
                    entry.with_rare(|rare| rare.backoff_until = None);
                    self.context.events.emit(now.wall, &EngineEvent::BreakerHalfOpen { key: key.clone() });
                    self.enable_entry(&key, now, floor).await;
                }
                Ok(false) => {
                    // Not open in the store any more, by a write this engine did not make:
                    // another node seeded a changed file and so replaced the definition
                    // (seed 31000032685). The store's row is the truth; run it.
                    self.cooldowns.remove(&key);
                    match self.context.store.heartbeats(std::slice::from_ref(&key)).await {
                        Ok(rows) => match rows.into_iter().next() {
                            Some(row) => self.adopt(row, now).await,
                            None => {
                                self.disarm(&key);
                                self.entries.remove(&key);
                            }
                        },
                        Err(error) => {
                            let retry = std::time::Duration::from_secs(BREAKER_HALF_OPEN_RETRY_SECS);
                            self.cooldowns.insert(key, Cooldown::start(now, now.wall, retry));
                            self.store_failed("heartbeats", error.to_string(), "the probe waits and is tried again");
                        }
                    }
                }
                Err(error) => {
                    let retry = std::time::Duration::from_secs(BREAKER_HALF_OPEN_RETRY_SECS);
                    self.cooldowns.insert(key, Cooldown::start(now, now.wall, retry));
                    self.store_failed("half_open_breaker", error.to_string(), "the probe waits and is tried again");
                }
            }
        }
    }

    /// When the first cooldown ends, for the loop's wake-up.
    pub(super) fn next_cooldown_end(&self, now: Now) -> Option<Mono> {
        self.cooldowns.values().map(|cooldown| now.mono + cooldown.ends_within(now)).min()
    }

    /// When `key`'s breaker will probe, while it is open and has a cooldown.
    pub(super) fn probe_at(&self, key: &HeartbeatKey) -> Option<Timestamp> {
        self.cooldowns.get(key).map(Cooldown::probe_at)
    }

    fn publish_breaker(&self, key: &HeartbeatKey, slot: Timestamp, now: Now, opened: bool, reason: String) {
        let use_indicator = self
            .entries
            .get(key)
            .is_none_or(|entry| self.context.visibility.resolve(&entry.def.common.target).use_indicator);
        let event = RunEvent::breaker(key.clone(), slot, now.wall, opened, reason, use_indicator);
        self.context.run_events.publish(event);
    }

    /// Sends `text` once, in the background (a slow chat must not hold the schedule), under
    /// a key of its own per trip, so a receiver drops a repeat. Not tried again if it fails.
    fn announce(&self, key: &HeartbeatKey, slot: Timestamp, kind: DeliveryKind, text: String) {
        if !self.entries.contains_key(key) {
            return;
        }
        let idempotency_key = format!("{}/{}", idempotency_key(key, slot), kind.as_str());
        self.announce_keyed(key, slot, kind, text, idempotency_key);
    }

    /// Sends `text` once, in the background, to `alerts_target` or `key`'s own target.
    pub(super) fn announce_keyed(
        &self,
        key: &HeartbeatKey,
        slot: Timestamp,
        kind: DeliveryKind,
        text: String,
        idempotency_key: String,
    ) {
        let Some(entry) = self.entries.get(key) else { return };
        let target =
            self.context.alerts_target.clone().unwrap_or_else(|| DeliveryTarget::clone(&entry.def.common.target));
        if target.is_silent() {
            return;
        }
        let delivery = Delivery {
            target,
            text,
            heartbeat: key.clone(),
            scheduled_for: slot,
            idempotency_key,
            kind,
            fence: self.context.fence.clone(),
        };
        let messenger = Arc::clone(&self.context.messenger);
        let events = Arc::clone(&self.context.events);
        let clock = Arc::clone(&self.context.clock);
        tokio::spawn(async move {
            if let Err(error) = messenger.deliver(&delivery).await {
                let event = EngineEvent::AlertFailed { key: delivery.heartbeat.clone(), error: error.to_string() };
                events.emit(clock.wall(), &event);
            }
        });
    }
}

fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map_or_else(String::new, |first| first.to_uppercase().chain(chars).collect())
}
