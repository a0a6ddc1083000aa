//! The one ordered structure of due times that the driver sleeps on.
//!
//! Every armed heartbeat has exactly one [`SlotTimer`] here, indexed twice: by wall due
//! time and (for interval heartbeats) by monotonic deadline. Re-arming or removing a heartbeat replaces or drops its one
//! entry, so no update can leave a stray timer behind (field notes, failure 11).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;

use crate::core::ids::HeartbeatKey;
use crate::core::slots::SlotTimer;
use crate::limits::DRIVER_SLEEP_SECS_MAX;
use crate::ports::clock::{Mono, Now};

#[derive(Debug, Default)]
pub struct TimerQueue {
    timers: BTreeMap<HeartbeatKey, PackedTimer>,
    /// By wall due time in nanoseconds since the Unix epoch ([`wall_nanos`]: 8 bytes, not 16).
    by_wall: BTreeSet<(i64, HeartbeatKey)>,
    /// By monotonic deadline in nanoseconds (as [`PackedTimer`] keeps it: 8 bytes, not 16).
    by_mono: BTreeSet<(u64, HeartbeatKey)>,
}

/// A [`SlotTimer`] as the queue keeps it: 32 bytes where the timer is 48 (two durations
/// and an optional one), in a map that holds one per armed heartbeat. The durations are
/// kept in nanoseconds, which saturate past 584 years: beyond any clock's uptime and any
/// jitter a definition may have.
#[derive(Debug, Clone, Copy)]
struct PackedTimer {
    next_slot: Timestamp,
    /// `next_mono` since its clock's origin, or [`PackedTimer::NO_MONO`].
    next_mono_nanos: u64,
    jitter_nanos: u64,
}

/// A duration in nanoseconds, saturated below [`PackedTimer::NO_MONO`].
fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(PackedTimer::NO_MONO - 1).min(PackedTimer::NO_MONO - 1)
}

fn mono_nanos(mono: Mono) -> u64 {
    nanos(mono.since_origin())
}

/// A wall time in nanoseconds since the Unix epoch, saturated to the years 1677-2262: a
/// timer due before them is due now and one due after them never in this engine's life,
/// as they would be unsaturated.
fn wall_nanos(wall: Timestamp) -> i64 {
    i64::try_from(wall.as_nanosecond()).unwrap_or(if wall < Timestamp::UNIX_EPOCH { i64::MIN } else { i64::MAX })
}

impl PackedTimer {
    const NO_MONO: u64 = u64::MAX;

    fn pack(timer: SlotTimer) -> Self {
        Self {
            next_slot: timer.next_slot,
            next_mono_nanos: timer.next_mono.map_or(Self::NO_MONO, mono_nanos),
            jitter_nanos: nanos(timer.jitter),
        }
    }

    fn unpack(self) -> SlotTimer {
        SlotTimer {
            next_slot: self.next_slot,
            next_mono: (self.next_mono_nanos != Self::NO_MONO)
                .then(|| Mono::from_duration(Duration::from_nanos(self.next_mono_nanos))),
            jitter: Duration::from_nanos(self.jitter_nanos),
        }
    }
}

impl TimerQueue {
    pub fn new() -> Self {
        Self::default()
    }

    /// Arms `key` with `timer`, replacing any timer it had.
    pub fn arm(&mut self, key: HeartbeatKey, timer: SlotTimer) {
        self.disarm(&key);
        self.by_wall.insert((wall_nanos(timer.due_wall()), key.clone()));
        if let Some(mono) = timer.next_mono {
            self.by_mono.insert((mono_nanos(mono), key.clone()));
        }
        self.timers.insert(key, PackedTimer::pack(timer));
    }

    /// Drops `key`'s timer, if it has one.
    pub fn disarm(&mut self, key: &HeartbeatKey) -> Option<SlotTimer> {
        let timer = self.timers.remove(key)?.unpack();
        self.by_wall.remove(&(wall_nanos(timer.due_wall()), key.clone()));
        if let Some(mono) = timer.next_mono {
            self.by_mono.remove(&(mono_nanos(mono), key.clone()));
        }
        Some(timer)
    }

    /// Arms each of `armed` as [`TimerQueue::arm`] would. Into an empty queue (a start-up)
    /// the indexes are built from the sorted whole, their nodes full: filled one timer at
    /// a time, a B-tree's nodes split and stay half full in key order, two-thirds in due
    /// order. A key given twice keeps its last timer.
    pub fn arm_all(&mut self, armed: Vec<(HeartbeatKey, SlotTimer)>) {
        if !self.timers.is_empty() {
            for (key, timer) in armed {
                self.arm(key, timer);
            }
            return;
        }
        // Sorted before they are collected: a set sorts what it is built from with a stable
        // sort, slower on these than an unstable one (no two are equal), and then only
        // checks that it is sorted.
        let mut by_wall: Vec<_> =
            armed.iter().map(|(key, timer)| (wall_nanos(timer.due_wall()), key.clone())).collect();
        by_wall.sort_unstable();
        let mut by_mono: Vec<_> =
            armed.iter().filter_map(|(key, timer)| Some((mono_nanos(timer.next_mono?), key.clone()))).collect();
        by_mono.sort_unstable();
        self.timers = armed.into_iter().map(|(key, timer)| (key, PackedTimer::pack(timer))).collect();
        // A key given twice keeps its last timer: its other index entries go.
        if self.timers.len() < by_wall.len() {
            let timers = &self.timers;
            by_wall.retain(|(due, key)| {
                timers.get(key).is_some_and(|timer| wall_nanos(timer.unpack().due_wall()) == *due)
            });
            by_mono.retain(|(mono, key)| timers.get(key).is_some_and(|timer| timer.next_mono_nanos == *mono));
        }
        self.by_wall = by_wall.into_iter().collect();
        self.by_mono = by_mono.into_iter().collect();
    }

    pub fn timer(&self, key: &HeartbeatKey) -> Option<SlotTimer> {
        self.timers.get(key).map(|timer| timer.unpack())
    }

    pub fn len(&self) -> usize {
        self.timers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.timers.is_empty()
    }

    /// Takes up to `max` due timers out, earliest first; the caller fires each and arms
    /// what comes next.
    pub fn take_due(&mut self, now: Now, max: usize) -> Vec<(HeartbeatKey, SlotTimer)> {
        let mut due = Vec::new();
        while due.len() < max {
            let Some(key) = self.earliest_due(now) else { break };
            let Some(timer) = self.disarm(&key) else { break };
            due.push((key, timer));
        }
        due
    }

    fn earliest_due(&self, now: Now) -> Option<HeartbeatKey> {
        let by_mono = self.by_mono.first().filter(|(mono, _)| *mono <= mono_nanos(now.mono));
        let by_wall = self.by_wall.first().filter(|(wall, _)| *wall <= wall_nanos(now.wall));
        by_mono.map(|(_, key)| key).or(by_wall.map(|(_, key)| key)).cloned()
    }

    /// The monotonic time at which the driver should next wake: the earliest deadline on
    /// either chain, but never more than [`DRIVER_SLEEP_SECS_MAX`] away.
    pub fn next_wake(&self, now: Now) -> Mono {
        let mut wake = now.mono + Duration::from_secs(DRIVER_SLEEP_SECS_MAX);
        if let Some((mono, _)) = self.by_mono.first() {
            wake = wake.min(Mono::from_duration(Duration::from_nanos(*mono)));
        }
        if let Some((wall, _)) = self.by_wall.first() {
            let wall = Timestamp::from_nanosecond(i128::from(*wall)).unwrap_or(Timestamp::MAX);
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
    use crate::core::policy::RunPolicy;
    use crate::core::schedule::Schedule;
    use jiff::SignedDuration;

    fn key(name: &str) -> HeartbeatKey {
        HeartbeatKey { agent: AgentId::new("a").expect("valid"), heartbeat: HeartbeatId::new(name).expect("valid") }
    }

    fn at(secs: u64) -> Now {
        let wall = Timestamp::from_second(1_767_225_600 + secs as i64).expect("in range");
        Now { wall, mono: Mono::from_duration(Duration::from_secs(secs)) }
    }

    fn every(secs: u64) -> Schedule {
        Schedule::Every(Duration::from_secs(secs))
    }

    fn timer(now: Now, secs: u64) -> SlotTimer {
        SlotTimer::first(now, &every(secs), Duration::ZERO).expect("every has a first slot")
    }

    /// Takes the due timers and arms each one's next, as the driver does.
    fn fire(queue: &mut TimerQueue, now: Now, max: usize, secs: u64) -> Vec<HeartbeatKey> {
        let due = queue.take_due(now, max);
        for (key, timer) in &due {
            let fired = timer.fire(now, &every(secs), &RunPolicy::default());
            if let Some(next) = fired.next {
                queue.arm(key.clone(), next);
            }
        }
        due.into_iter().map(|(key, _)| key).collect()
    }

    #[test]
    fn rearming_replaces_instead_of_adding() {
        let mut queue = TimerQueue::new();
        for _ in 0..3 {
            queue.arm(key("x"), timer(at(0), 10));
        }
        assert_eq!(queue.len(), 1);
        assert_eq!(fire(&mut queue, at(10), 100, 10).len(), 1, "three updates must not give three fires");
        queue.disarm(&key("x"));
        assert!(queue.take_due(at(1_000), 100).is_empty(), "a removed heartbeat never fires");
    }

    #[test]
    fn pops_in_order_and_sleeps_until_the_earliest() {
        let mut queue = TimerQueue::new();
        queue.arm(key("slow"), timer(at(0), 20));
        queue.arm(key("fast"), timer(at(0), 5));
        assert_eq!(queue.next_wake(at(0)), at(5).mono);
        assert_eq!(fire(&mut queue, at(5), 100, 5), vec![key("fast")]);
        assert_eq!(queue.next_wake(at(5)), at(10).mono);
    }

    #[test]
    fn a_wall_only_timer_wakes_by_its_wall_time() {
        let mut queue = TimerQueue::new();
        let schedule = Schedule::At(at(100).wall);
        queue.arm(key("once"), SlotTimer::first(at(0), &schedule, Duration::ZERO).expect("future"));
        assert_eq!(queue.next_wake(at(0)), at(DRIVER_SLEEP_SECS_MAX).mono, "capped, then read the wall again");
        assert_eq!(queue.next_wake(at(90)), at(100).mono);
        assert!(queue.take_due(at(99), 10).is_empty());
        assert_eq!(queue.take_due(at(100), 10).len(), 1);
    }

    #[test]
    fn wakes_at_least_every_cap() {
        let mut queue = TimerQueue::new();
        assert_eq!(queue.next_wake(at(0)), at(DRIVER_SLEEP_SECS_MAX).mono);
        queue.arm(key("daily"), timer(at(0), 86_400));
        assert_eq!(queue.next_wake(at(0)), at(DRIVER_SLEEP_SECS_MAX).mono);
    }

    #[test]
    fn wall_times_order_as_nanoseconds_and_saturate_outside_their_years() {
        let now = at(0).wall;
        assert!(wall_nanos(now) < wall_nanos(now + SignedDuration::from_nanos(1)));
        assert_eq!(Timestamp::from_nanosecond(i128::from(wall_nanos(now))).ok(), Some(now));
        assert_eq!(wall_nanos(Timestamp::MAX), i64::MAX);
        assert_eq!(wall_nanos(Timestamp::MIN), i64::MIN);
        // A timer due in the year 9999 is armed, not due, and wakes the driver at its cap.
        let mut queue = TimerQueue::new();
        let far = SlotTimer::first(at(0), &Schedule::At(Timestamp::MAX), Duration::ZERO).expect("future");
        queue.arm(key("far"), far);
        assert!(queue.take_due(at(10_000), 10).is_empty());
        assert_eq!(queue.next_wake(at(0)), at(DRIVER_SLEEP_SECS_MAX).mono);
        assert_eq!(queue.disarm(&key("far")), Some(far));
    }

    #[test]
    fn a_packed_timer_is_32_bytes_and_unpacks_as_it_was() {
        assert_eq!(std::mem::size_of::<PackedTimer>(), 32);
        let every = timer(at(7), 5);
        assert!(every.next_mono.is_some());
        assert_eq!(PackedTimer::pack(every).unpack(), every);
        let wall_only = SlotTimer { next_mono: None, jitter: Duration::from_millis(1_234), ..every };
        assert_eq!(PackedTimer::pack(wall_only).unpack(), wall_only);
    }

    #[test]
    fn arming_all_at_once_is_arming_each() {
        let mut queue = TimerQueue::new();
        let mut armed: Vec<_> =
            (0..50).map(|index| (key(&format!("h{index:02}")), timer(at(0), 1 + index % 7))).collect();
        armed.push((key("h00"), timer(at(0), 1)));
        // Given again with another timer: the last one counts, and the first leaves no trace.
        armed.push((key("h03"), timer(at(0), 1)));
        queue.arm_all(armed);
        assert_eq!(queue.len(), 50, "a key given twice is armed once");
        assert_eq!(queue.timer(&key("h03")), Some(timer(at(0), 1)));
        assert_eq!((queue.by_wall.len(), queue.by_mono.len()), (50, 50), "one index entry each");
        queue.arm_all(vec![(key("h01"), timer(at(0), 5)), (key("late"), timer(at(0), 9))]);
        assert_eq!(queue.len(), 51, "into a queue that has timers, each replaces or adds one");
        queue.disarm(&key("late"));
        queue.arm_all(vec![(key("h01"), timer(at(0), 2))]);
        assert_eq!(queue.next_wake(at(0)), at(1).mono);
        let due = fire(&mut queue, at(1), 100, 1);
        assert_eq!(due.len(), 9, "those every 1 s: h00, h03 (its last timer), h07, .., h49");
        assert!(due.iter().all(|key| key.heartbeat.as_str()[1..].parse::<u64>().is_ok_and(|n| n % 7 == 0 || n == 3)));
        assert_eq!(queue.len(), 50, "each fired one is armed again");
    }

    #[test]
    fn caps_work_per_wake() {
        let mut queue = TimerQueue::new();
        for index in 0..10 {
            queue.arm(key(&format!("h{index}")), timer(at(0), 1));
        }
        assert_eq!(fire(&mut queue, at(1), 4, 1).len(), 4);
        assert_eq!(fire(&mut queue, at(1), 100, 1).len(), 6);
    }
}
