//! The one ordered structure of due times that the driver sleeps on.
//!
//! Every armed heartbeat has exactly one [`SlotTimer`] here, indexed twice: by wall slot
//! and by monotonic deadline. Re-arming or removing a heartbeat replaces or drops its one
//! entry, so no update can leave a stray timer behind (field notes, failure 11).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;

use crate::core::ids::HeartbeatKey;
use crate::core::slots::{FiredSlot, SlotTimer};
use crate::limits::DRIVER_SLEEP_SECS_MAX;
use crate::ports::clock::{Mono, Now};

#[derive(Debug, Default)]
pub struct Schedule {
    timers: BTreeMap<HeartbeatKey, SlotTimer>,
    by_wall: BTreeSet<(Timestamp, HeartbeatKey)>,
    by_mono: BTreeSet<(Mono, HeartbeatKey)>,
}

impl Schedule {
    pub fn new() -> Self {
        Self::default()
    }

    /// Arms `key` with `timer`, replacing any timer it had.
    pub fn arm(&mut self, key: HeartbeatKey, timer: SlotTimer) {
        self.disarm(&key);
        self.by_wall.insert((timer.next_slot, key.clone()));
        self.by_mono.insert((timer.next_mono, key.clone()));
        self.timers.insert(key, timer);
    }

    /// Drops `key`'s timer, if it has one.
    pub fn disarm(&mut self, key: &HeartbeatKey) -> Option<SlotTimer> {
        let timer = self.timers.remove(key)?;
        self.by_wall.remove(&(timer.next_slot, key.clone()));
        self.by_mono.remove(&(timer.next_mono, key.clone()));
        Some(timer)
    }

    pub fn timer(&self, key: &HeartbeatKey) -> Option<&SlotTimer> {
        self.timers.get(key)
    }

    pub fn len(&self) -> usize {
        self.timers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.timers.is_empty()
    }

    /// Fires up to `max` due timers, earliest first, re-arming each for its next slot.
    pub fn pop_due(&mut self, now: Now, max: usize) -> Vec<(HeartbeatKey, FiredSlot)> {
        let mut fired = Vec::new();
        while fired.len() < max {
            let Some(key) = self.earliest_due(now) else { break };
            let Some(mut timer) = self.disarm(&key) else { break };
            let slot = timer.fire(now);
            self.arm(key.clone(), timer);
            fired.push((key, slot));
        }
        fired
    }

    fn earliest_due(&self, now: Now) -> Option<HeartbeatKey> {
        let by_mono = self.by_mono.first().filter(|(mono, _)| *mono <= now.mono);
        let by_wall = self.by_wall.first().filter(|(wall, _)| *wall <= now.wall);
        by_mono.map(|(_, key)| key).or(by_wall.map(|(_, key)| key)).cloned()
    }

    /// The monotonic time at which the driver should next wake: the earliest deadline on
    /// either chain, but never more than [`DRIVER_SLEEP_SECS_MAX`] away.
    pub fn next_wake(&self, now: Now) -> Mono {
        let mut wake = now.mono + Duration::from_secs(DRIVER_SLEEP_SECS_MAX);
        if let Some((mono, _)) = self.by_mono.first() {
            wake = wake.min(*mono);
        }
        if let Some((wall, _)) = self.by_wall.first() {
            let ahead = wall.duration_since(now.wall);
            let ahead = if ahead.is_negative() { Duration::ZERO } else { ahead.unsigned_abs() };
            wake = wake.min(now.mono + ahead);
        }
        wake
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::ids::{AgentId, HeartbeatId};

    fn key(name: &str) -> HeartbeatKey {
        HeartbeatKey { agent: AgentId::new("a").expect("valid"), heartbeat: HeartbeatId::new(name).expect("valid") }
    }

    fn at(secs: u64) -> Now {
        let wall = Timestamp::from_second(1_767_225_600 + secs as i64).expect("in range");
        Now { wall, mono: Mono::from_duration(Duration::from_secs(secs)) }
    }

    #[test]
    fn rearming_replaces_instead_of_adding() {
        let mut schedule = Schedule::new();
        for _ in 0..3 {
            schedule.arm(key("x"), SlotTimer::first(at(0), Duration::from_secs(10)));
        }
        assert_eq!(schedule.len(), 1);
        assert_eq!(schedule.pop_due(at(10), 100).len(), 1, "three updates must not give three fires");
        schedule.disarm(&key("x"));
        assert!(schedule.pop_due(at(1_000), 100).is_empty(), "a removed heartbeat never fires");
    }

    #[test]
    fn pops_in_order_and_sleeps_until_the_earliest() {
        let mut schedule = Schedule::new();
        schedule.arm(key("slow"), SlotTimer::first(at(0), Duration::from_secs(20)));
        schedule.arm(key("fast"), SlotTimer::first(at(0), Duration::from_secs(5)));
        assert_eq!(schedule.next_wake(at(0)), at(5).mono);
        let fired: Vec<_> = schedule.pop_due(at(20), 100).into_iter().map(|(k, _)| k).collect();
        assert_eq!(fired, vec![key("fast"), key("slow")], "fast is due at 5 and fires once for its latest slot");
        assert_eq!(schedule.next_wake(at(20)), at(25).mono);
    }

    #[test]
    fn wakes_at_least_every_cap() {
        let mut schedule = Schedule::new();
        assert_eq!(schedule.next_wake(at(0)), at(DRIVER_SLEEP_SECS_MAX).mono);
        schedule.arm(key("daily"), SlotTimer::first(at(0), Duration::from_secs(86_400)));
        assert_eq!(schedule.next_wake(at(0)), at(DRIVER_SLEEP_SECS_MAX).mono);
    }

    #[test]
    fn caps_work_per_wake() {
        let mut schedule = Schedule::new();
        for index in 0..10 {
            schedule.arm(key(&format!("h{index}")), SlotTimer::first(at(0), Duration::from_secs(1)));
        }
        assert_eq!(schedule.pop_due(at(1), 4).len(), 4);
        assert_eq!(schedule.pop_due(at(1), 100).len(), 6);
    }
}
