//! The one ordered structure of due times that the driver sleeps on, and the entries the
//! timers belong to.
//!
//! Each heartbeat the driver knows has one entry here (the driver's `V`) and, while it is
//! armed, exactly one [`SlotTimer`] beside it, indexed twice: by wall due time and (for
//! interval heartbeats) by monotonic deadline. Re-arming or removing a heartbeat replaces
//! or drops its one timer, so no update can leave a stray timer behind (field notes,
//! failure 11), and a timer cannot outlive its entry. Entry and timer share one map
//! element: two maps keyed alike held every key twice (ADR 0026).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;

use crate::core::ids::HeartbeatKey;
use crate::core::slots::SlotTimer;
use crate::limits::DRIVER_SLEEP_SECS_MAX;
use crate::ports::clock::{Mono, Now};

#[derive(Debug)]
pub struct TimerQueue<V> {
    entries: BTreeMap<HeartbeatKey, Timed<V>>,
    /// How many entries have a timer.
    armed: usize,
    /// By wall due time in nanoseconds since the Unix epoch ([`wall_nanos`]: 8 bytes, not 16).
    by_wall: BTreeSet<(i64, HeartbeatKey)>,
    /// By monotonic deadline in nanoseconds (as [`PackedTimer`] keeps it: 8 bytes, not 16).
    by_mono: BTreeSet<(u64, HeartbeatKey)>,
}

impl<V> Default for TimerQueue<V> {
    fn default() -> Self {
        Self { entries: BTreeMap::new(), armed: 0, by_wall: BTreeSet::new(), by_mono: BTreeSet::new() }
    }
}

/// One of a timer's two indexes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Index {
    Wall,
    Mono,
}

/// An entry and its timer, if it is armed.
#[derive(Debug)]
struct Timed<V> {
    value: V,
    timer: PackedTimer,
}

/// A [`SlotTimer`] or none, as the queue keeps it: 32 bytes where an optional timer is 48
/// (two durations and an optional one), beside every entry. The durations are kept in
/// nanoseconds, which saturate past 584 years: beyond any clock's uptime and any jitter a
/// definition may have.
#[derive(Debug, Clone, Copy)]
struct PackedTimer {
    next_slot: Timestamp,
    /// `next_mono` since its clock's origin, or [`PackedTimer::NO_MONO`].
    next_mono_nanos: u64,
    /// The jitter, or [`PackedTimer::DISARMED`] for no timer at all.
    jitter_nanos: u64,
}

/// A duration in nanoseconds, saturated below [`PackedTimer::NO_MONO`] (and so below
/// [`PackedTimer::DISARMED`]).
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
    /// No jitter is this long ([`nanos`] saturates below it).
    const DISARMED: u64 = u64::MAX;

    fn none() -> Self {
        Self { next_slot: Timestamp::UNIX_EPOCH, next_mono_nanos: Self::NO_MONO, jitter_nanos: Self::DISARMED }
    }

    fn pack(timer: SlotTimer) -> Self {
        Self {
            next_slot: timer.next_slot,
            next_mono_nanos: timer.next_mono.map_or(Self::NO_MONO, mono_nanos),
            jitter_nanos: nanos(timer.jitter),
        }
    }

    fn unpack(self) -> Option<SlotTimer> {
        (self.jitter_nanos != Self::DISARMED).then(|| SlotTimer {
            next_slot: self.next_slot,
            next_mono: (self.next_mono_nanos != Self::NO_MONO)
                .then(|| Mono::from_duration(Duration::from_nanos(self.next_mono_nanos))),
            jitter: Duration::from_nanos(self.jitter_nanos),
        })
    }
}

/// Entries a start-up's load must have before its map is built on a thread beside its
/// indexes: fewer are built sooner on one (and the simulator's small loads stay on one).
const LOAD_ENTRIES_PER_THREAD_MIN: usize = 50_000;

/// What a start-up loads into a [`TimerQueue`], gathered a page at a time: each page is
/// sorted as it comes, while the store reads the next one, so that building the queue merges
/// sorted runs. Sorting a million keys and due times only once the load had ended took half
/// a second of a restart with the other core idle.
#[derive(Debug)]
pub struct QueueLoad<V> {
    entries: Vec<(HeartbeatKey, Timed<V>)>,
    by_wall: Vec<(i64, HeartbeatKey)>,
    by_mono: Vec<(u64, HeartbeatKey)>,
}

impl<V> Default for QueueLoad<V> {
    fn default() -> Self {
        Self { entries: Vec::new(), by_wall: Vec::new(), by_mono: Vec::new() }
    }
}

impl<V> QueueLoad<V> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one page's entries, each with its timer or none, after those of the pages before.
    pub fn push_page(&mut self, page: Vec<(HeartbeatKey, V, Option<SlotTimer>)>) {
        let (entries_from, wall_from, mono_from) = (self.entries.len(), self.by_wall.len(), self.by_mono.len());
        self.entries.reserve(page.len());
        for (key, value, timer) in page {
            if let Some(timer) = timer {
                self.by_wall.push((wall_nanos(timer.due_wall()), key.clone()));
                if let Some(mono) = timer.next_mono {
                    self.by_mono.push((mono_nanos(mono), key.clone()));
                }
            }
            let timer = timer.map_or(PackedTimer::none(), PackedTimer::pack);
            self.entries.push((key, Timed { value, timer }));
        }
        // Stable, so a key the page gives twice keeps its order; the indexes' elements are
        // distinct but for such a key, whose extra ones the build drops.
        self.entries[entries_from..].sort_by(|(a, _), (b, _)| a.cmp(b));
        self.by_wall[wall_from..].sort_unstable();
        self.by_mono[mono_from..].sort_unstable();
    }
}

impl<V> TimerQueue<V> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `key`'s entry, keeping the timer it had, if any.
    pub fn insert(&mut self, key: HeartbeatKey, value: V) {
        match self.entries.get_mut(&key) {
            Some(timed) => timed.value = value,
            None => {
                self.entries.insert(key, Timed { value, timer: PackedTimer::none() });
            }
        }
    }

    /// Drops `key`'s entry and its timer.
    pub fn remove(&mut self, key: &HeartbeatKey) -> Option<V> {
        self.disarm(key);
        self.entries.remove(key).map(|timed| timed.value)
    }

    pub fn get(&self, key: &HeartbeatKey) -> Option<&V> {
        self.entries.get(key).map(|timed| &timed.value)
    }

    pub fn get_mut(&mut self, key: &HeartbeatKey) -> Option<&mut V> {
        self.entries.get_mut(key).map(|timed| &mut timed.value)
    }

    /// An entry and its timer, if it is armed, in one search of the map.
    pub fn get_with_timer(&self, key: &HeartbeatKey) -> Option<(&V, Option<SlotTimer>)> {
        self.entries.get(key).map(|timed| (&timed.value, timed.timer.unpack()))
    }

    /// As [`TimerQueue::get_with_timer`], the entry to change (its timer changes only
    /// through the queue).
    pub fn get_mut_with_timer(&mut self, key: &HeartbeatKey) -> Option<(&mut V, Option<SlotTimer>)> {
        self.entries.get_mut(key).map(|timed| (&mut timed.value, timed.timer.unpack()))
    }

    pub fn contains_key(&self, key: &HeartbeatKey) -> bool {
        self.entries.contains_key(key)
    }

    /// Every entry, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&HeartbeatKey, &V)> {
        self.entries.iter().map(|(key, timed)| (key, &timed.value))
    }

    pub fn keys(&self) -> impl Iterator<Item = &HeartbeatKey> {
        self.entries.keys()
    }

    /// How many entries there are, armed or not.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many entries have a timer.
    pub fn armed(&self) -> usize {
        self.armed
    }

    /// Arms `key` with `timer`, replacing any timer it had; a key with no entry has no
    /// timer either (returns false).
    pub fn arm(&mut self, key: &HeartbeatKey, timer: SlotTimer) -> bool {
        let Some(timed) = self.entries.get_mut(key) else { return false };
        match timed.timer.unpack() {
            Some(old) => unindex(&mut self.by_wall, &mut self.by_mono, key, old, None),
            None => self.armed += 1,
        }
        timed.timer = PackedTimer::pack(timer);
        self.by_wall.insert((wall_nanos(timer.due_wall()), key.clone()));
        if let Some(mono) = timer.next_mono {
            self.by_mono.insert((mono_nanos(mono), key.clone()));
        }
        true
    }

    /// Drops `key`'s timer, if it has one; its entry stays.
    pub fn disarm(&mut self, key: &HeartbeatKey) -> Option<SlotTimer> {
        self.disarm_popped(key, None)
    }

    /// Sets each of `loaded`'s entries as [`TimerQueue::insert`] and [`TimerQueue::arm`]
    /// would, in the order its pages came (a timer of `None` leaves the one the key had).
    /// Into an empty queue (a start-up) the map and its indexes are built from the sorted
    /// whole, their nodes full: filled one at a time, a B-tree's nodes split and stay half
    /// full in key order, two-thirds in due order. A key given twice keeps its last entry
    /// and timer.
    pub fn load(&mut self, loaded: QueueLoad<V>)
    where
        V: Send,
    {
        let QueueLoad { entries, by_wall, by_mono } = loaded;
        if !self.entries.is_empty() {
            for (key, timed) in entries {
                self.insert(key.clone(), timed.value);
                if let Some(timer) = timed.timer.unpack() {
                    self.arm(&key, timer);
                }
            }
            return;
        }
        let given = entries.len();
        // Each page's run came sorted: a stable sort merges the runs (a key given twice
        // stays in the order it came, and the map keeps the last of equal keys).
        let build_entries = |mut entries: Vec<(HeartbeatKey, Timed<V>)>| -> BTreeMap<HeartbeatKey, Timed<V>> {
            entries.sort_by(|(a, _), (b, _)| a.cmp(b));
            entries.into_iter().collect()
        };
        let build_indexes = |mut by_wall: Vec<(i64, HeartbeatKey)>, mut by_mono: Vec<(u64, HeartbeatKey)>| {
            by_wall.sort();
            by_mono.sort();
            (by_wall.into_iter().collect::<BTreeSet<_>>(), by_mono.into_iter().collect::<BTreeSet<_>>())
        };
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        let (entries, (mut by_wall, mut by_mono)) = if cores > 1 && given >= LOAD_ENTRIES_PER_THREAD_MIN {
            // The map on a thread of its own, the indexes on this one: the two halves took
            // about as long as each other, one after the other, on one core (2026-12-02).
            std::thread::scope(|scope| {
                let entries = scope.spawn(move || build_entries(entries));
                let indexes = build_indexes(by_wall, by_mono);
                // Sorting and collecting cannot fail; a panic there is a bug, and stays one.
                (entries.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)), indexes)
            })
        } else {
            (build_entries(entries), build_indexes(by_wall, by_mono))
        };
        // A key given twice keeps its last timer: its other index entries go.
        if entries.len() < given {
            let timer = |key: &HeartbeatKey| entries.get(key).and_then(|timed| timed.timer.unpack());
            by_wall.retain(|(due, key)| timer(key).is_some_and(|timer| wall_nanos(timer.due_wall()) == *due));
            by_mono.retain(|(mono, key)| {
                timer(key).is_some_and(|timer| timer.next_mono.is_some_and(|next| mono_nanos(next) == *mono))
            });
        }
        self.entries = entries;
        self.armed = by_wall.len();
        self.by_wall = by_wall;
        self.by_mono = by_mono;
    }

    pub fn timer(&self, key: &HeartbeatKey) -> Option<SlotTimer> {
        self.entries.get(key).and_then(|timed| timed.timer.unpack())
    }

    /// Takes up to `max` due timers out, earliest first; the caller fires each and arms
    /// what comes next.
    pub fn take_due(&mut self, now: Now, max: usize) -> Vec<(HeartbeatKey, SlotTimer)> {
        let mut due = Vec::new();
        while due.len() < max {
            let Some((key, popped)) = self.take_earliest_due(now) else { break };
            let Some(timer) = self.disarm_popped(&key, Some(popped)) else { break };
            due.push((key, timer));
        }
        due
    }

    /// The key of the earliest due timer, taken out of the index that has it first: its
    /// first element, reached without a key comparison.
    fn take_earliest_due(&mut self, now: Now) -> Option<(HeartbeatKey, Index)> {
        if self.by_mono.first().is_some_and(|(mono, _)| *mono <= mono_nanos(now.mono)) {
            return self.by_mono.pop_first().map(|(_, key)| (key, Index::Mono));
        }
        if self.by_wall.first().is_some_and(|(wall, _)| *wall <= wall_nanos(now.wall)) {
            return self.by_wall.pop_first().map(|(_, key)| (key, Index::Wall));
        }
        None
    }

    /// [`TimerQueue::disarm`] of a key whose element of the `popped` index, if any, is
    /// out already.
    fn disarm_popped(&mut self, key: &HeartbeatKey, popped: Option<Index>) -> Option<SlotTimer> {
        let timed = self.entries.get_mut(key)?;
        let timer = timed.timer.unpack()?;
        timed.timer = PackedTimer::none();
        self.armed -= 1;
        unindex(&mut self.by_wall, &mut self.by_mono, key, timer, popped);
        Some(timer)
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

/// Drops `timer`'s entries from the indexes but the `popped` one, whose element is out
/// already (the map's element is the caller's to change).
fn unindex(
    by_wall: &mut BTreeSet<(i64, HeartbeatKey)>,
    by_mono: &mut BTreeSet<(u64, HeartbeatKey)>,
    key: &HeartbeatKey,
    timer: SlotTimer,
    popped: Option<Index>,
) {
    if popped != Some(Index::Wall) {
        by_wall.remove(&(wall_nanos(timer.due_wall()), key.clone()));
    }
    if let Some(mono) = timer.next_mono.filter(|_| popped != Some(Index::Mono)) {
        by_mono.remove(&(mono_nanos(mono), key.clone()));
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
    fn fire<V>(queue: &mut TimerQueue<V>, now: Now, max: usize, secs: u64) -> Vec<HeartbeatKey> {
        let due = queue.take_due(now, max);
        for (key, timer) in &due {
            let fired = timer.fire(now, &every(secs), &RunPolicy::default());
            if let Some(next) = fired.next {
                assert!(queue.arm(key, next), "a due timer's entry stays");
            }
        }
        due.into_iter().map(|(key, _)| key).collect()
    }

    /// An entry for `name`, armed with `timer`.
    fn arm(queue: &mut TimerQueue<()>, name: &str, timer: SlotTimer) {
        queue.insert(key(name), ());
        assert!(queue.arm(&key(name), timer));
    }

    #[test]
    fn rearming_replaces_instead_of_adding() {
        let mut queue = TimerQueue::new();
        for _ in 0..3 {
            arm(&mut queue, "x", timer(at(0), 10));
        }
        assert_eq!((queue.len(), queue.armed()), (1, 1));
        assert_eq!(fire(&mut queue, at(10), 100, 10).len(), 1, "three updates must not give three fires");
        queue.disarm(&key("x"));
        assert_eq!((queue.len(), queue.armed()), (1, 0), "disarmed, its entry stays");
        assert!(queue.take_due(at(1_000), 100).is_empty(), "a disarmed heartbeat never fires");
    }

    #[test]
    fn a_timer_lives_and_dies_with_its_entry() {
        let mut queue = TimerQueue::new();
        assert!(!queue.arm(&key("ghost"), timer(at(0), 1)), "no entry, no timer");
        assert!(queue.take_due(at(10), 10).is_empty());
        arm(&mut queue, "x", timer(at(0), 10));
        queue.insert(key("x"), ());
        assert_eq!(queue.timer(&key("x")), Some(timer(at(0), 10)), "a new entry keeps the timer");
        assert_eq!(queue.remove(&key("x")), Some(()));
        assert_eq!((queue.len(), queue.armed(), queue.by_wall.len(), queue.by_mono.len()), (0, 0, 0, 0));
        assert!(queue.take_due(at(1_000), 100).is_empty(), "a removed heartbeat never fires");
    }

    #[test]
    fn pops_in_order_and_sleeps_until_the_earliest() {
        let mut queue = TimerQueue::new();
        arm(&mut queue, "slow", timer(at(0), 20));
        arm(&mut queue, "fast", timer(at(0), 5));
        assert_eq!(queue.next_wake(at(0)), at(5).mono);
        assert_eq!(fire(&mut queue, at(5), 100, 5), vec![key("fast")]);
        assert_eq!(queue.next_wake(at(5)), at(10).mono);
    }

    #[test]
    fn a_wall_only_timer_wakes_by_its_wall_time() {
        let mut queue = TimerQueue::new();
        let schedule = Schedule::At(at(100).wall);
        arm(&mut queue, "once", SlotTimer::first(at(0), &schedule, Duration::ZERO).expect("future"));
        assert_eq!(queue.next_wake(at(0)), at(DRIVER_SLEEP_SECS_MAX).mono, "capped, then read the wall again");
        assert_eq!(queue.next_wake(at(90)), at(100).mono);
        assert!(queue.take_due(at(99), 10).is_empty());
        assert_eq!(queue.take_due(at(100), 10).len(), 1);
    }

    #[test]
    fn wakes_at_least_every_cap() {
        let mut queue = TimerQueue::new();
        assert_eq!(queue.next_wake(at(0)), at(DRIVER_SLEEP_SECS_MAX).mono);
        arm(&mut queue, "daily", timer(at(0), 86_400));
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
        arm(&mut queue, "far", far);
        assert!(queue.take_due(at(10_000), 10).is_empty());
        assert_eq!(queue.next_wake(at(0)), at(DRIVER_SLEEP_SECS_MAX).mono);
        assert_eq!(queue.disarm(&key("far")), Some(far));
    }

    #[test]
    fn a_packed_timer_is_32_bytes_and_unpacks_as_it_was() {
        assert_eq!(std::mem::size_of::<PackedTimer>(), 32);
        assert_eq!(std::mem::size_of::<Option<SlotTimer>>(), 48);
        let every = timer(at(7), 5);
        assert!(every.next_mono.is_some());
        assert_eq!(PackedTimer::pack(every).unpack(), Some(every));
        let wall_only = SlotTimer { next_mono: None, jitter: Duration::from_millis(1_234), ..every };
        assert_eq!(PackedTimer::pack(wall_only).unpack(), Some(wall_only));
        let longest = SlotTimer { jitter: Duration::MAX, ..every };
        assert!(PackedTimer::pack(longest).unpack().is_some(), "no jitter reads as disarmed");
        assert_eq!(PackedTimer::none().unpack(), None);
    }

    /// `loaded` as one page.
    fn one_page<V>(loaded: Vec<(HeartbeatKey, V, Option<SlotTimer>)>) -> QueueLoad<V> {
        let mut load = QueueLoad::new();
        load.push_page(loaded);
        load
    }

    #[test]
    fn loading_all_at_once_is_inserting_and_arming_each() {
        let mut queue = TimerQueue::new();
        let mut loaded: Vec<_> =
            (0..50).map(|index| (key(&format!("h{index:02}")), index, Some(timer(at(0), 1 + index % 7)))).collect();
        loaded.push((key("h00"), 0, Some(timer(at(0), 1))));
        // Given again with another timer: the last one counts, and the first leaves no trace.
        loaded.push((key("h03"), 103, Some(timer(at(0), 1))));
        // Given again with none: it is not armed.
        loaded.push((key("h05"), 105, None));
        loaded.push((key("off"), 200, None));
        queue.load(one_page(loaded));
        assert_eq!((queue.len(), queue.armed()), (51, 49), "a key given twice is there once");
        assert_eq!((queue.get(&key("h03")), queue.timer(&key("h03"))), (Some(&103), Some(timer(at(0), 1))));
        assert_eq!((queue.get(&key("h05")), queue.timer(&key("h05"))), (Some(&105), None));
        assert_eq!((queue.by_wall.len(), queue.by_mono.len()), (49, 49), "one index entry each");
        queue.load(one_page(vec![(key("h01"), 1, Some(timer(at(0), 5))), (key("late"), 300, Some(timer(at(0), 9)))]));
        assert_eq!((queue.len(), queue.armed()), (52, 50), "into a queue that has entries, each replaces or adds one");
        queue.disarm(&key("late"));
        queue.load(one_page(vec![(key("h01"), 1, Some(timer(at(0), 2))), (key("h02"), 2, None)]));
        assert_eq!(queue.timer(&key("h02")), Some(timer(at(0), 3)), "no timer given: the one it had stays");
        assert_eq!(queue.next_wake(at(0)), at(1).mono);
        let due = fire(&mut queue, at(1), 100, 1);
        assert_eq!(due.len(), 9, "those every 1 s: h00, h03 (its last timer), h07, .., h49");
        assert!(due.iter().all(|key| key.heartbeat.as_str()[1..].parse::<u64>().is_ok_and(|n| n % 7 == 0 || n == 3)));
        assert_eq!(queue.armed(), 49, "each fired one is armed again");
    }

    /// A start-up's pages come in the store's order, not by key or due time: loaded page by
    /// page, the queue is the one that inserting and arming each in turn builds.
    #[test]
    fn loading_in_pages_is_inserting_and_arming_each_in_turn() {
        paged_load_is_one_at_a_time(6, 10);
    }

    /// A load as large as a start-up's builds its map on a thread beside its indexes.
    #[test]
    fn a_large_load_in_pages_is_inserting_and_arming_each_in_turn() {
        paged_load_is_one_at_a_time(7, (LOAD_ENTRIES_PER_THREAD_MIN / 6) as u64);
    }

    /// `pages` pages of `per_page` rows each and one more, loaded, are the queue that
    /// inserting and arming each in turn builds.
    fn paged_load_is_one_at_a_time(pages: u64, per_page: u64) {
        // Keys out of order within and across pages, due times that tie, a key given again in
        // a later page (with another timer, then with none) and within one page. 37 and the
        // number of keys share no factor, so each index names another key.
        let keys = pages * per_page;
        assert!(!keys.is_multiple_of(37));
        let name = |index: u64| format!("h{:06}", (index * 37) % keys);
        let given: Vec<Vec<(HeartbeatKey, u64, Option<SlotTimer>)>> = (0..pages)
            .map(|page| {
                let mut rows: Vec<_> = (page * per_page..(page + 1) * per_page)
                    .map(|index| {
                        let timer = (index % 5 != 0).then(|| timer(at(index % 3), 1 + index % 4));
                        (key(&name(index)), index, timer)
                    })
                    .collect();
                rows.push((key(&name(page)), 1_000_000 + page, (page % 2 == 0).then(|| timer(at(0), 2))));
                rows
            })
            .collect();
        let mut one_at_a_time = TimerQueue::new();
        let mut paged_load = QueueLoad::new();
        for page in &given {
            for (key, value, timer) in page.iter().cloned() {
                one_at_a_time.insert(key.clone(), value);
                if let Some(timer) = timer {
                    one_at_a_time.arm(&key, timer);
                } else {
                    // A start-up's entry given without a timer has none, whatever came before.
                    one_at_a_time.disarm(&key);
                }
            }
            paged_load.push_page(page.clone());
        }
        let mut paged = TimerQueue::new();
        paged.load(paged_load);
        let contents = |queue: &TimerQueue<u64>| -> Vec<(HeartbeatKey, u64, Option<SlotTimer>)> {
            queue.iter().map(|(key, value)| (key.clone(), *value, queue.timer(key))).collect()
        };
        assert_eq!(contents(&paged), contents(&one_at_a_time));
        assert_eq!((paged.len(), paged.armed()), (one_at_a_time.len(), one_at_a_time.armed()));
        assert_eq!(paged.by_wall, one_at_a_time.by_wall, "one index entry per armed key, by due time");
        assert_eq!(paged.by_mono, one_at_a_time.by_mono);
        for secs in [0, 1, 2, 3, 5, 8] {
            assert_eq!(fire(&mut paged, at(secs), 7, 1), fire(&mut one_at_a_time, at(secs), 7, 1), "at {secs} s");
        }
    }

    #[test]
    fn caps_work_per_wake() {
        let mut queue = TimerQueue::new();
        for index in 0..10 {
            arm(&mut queue, &format!("h{index}"), timer(at(0), 1));
        }
        assert_eq!(fire(&mut queue, at(1), 4, 1).len(), 4);
        assert_eq!(fire(&mut queue, at(1), 100, 1).len(), 6);
    }
}
