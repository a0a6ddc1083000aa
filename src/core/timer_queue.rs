//! The one ordered structure of due times that the driver sleeps on, and the entries the
//! timers belong to.
//!
//! Each heartbeat the driver knows has one entry here (the driver's `V`) and, while it is
//! armed, exactly one [`SlotTimer`] beside it, indexed twice: by wall due time and (for
//! interval heartbeats) by monotonic deadline. Re-arming or removing a heartbeat replaces
//! or drops its one timer, so no update can leave a stray timer behind (field notes,
//! failure 11), and a timer cannot outlive its entry. Entry and timer share one element
//! (ADR 0026), held at a numbered place that the indexes name (ADR 0053): a due timer is
//! taken out and its entry found without comparing a key. A key finds its place through a
//! hash table of places (ADR 0054).

mod due;
mod due_index;
mod key_index;
mod packed_timer;
mod places;

use std::time::Duration;

use jiff::Timestamp;

use crate::core::ids::HeartbeatKey;
use crate::core::slots::SlotTimer;
use crate::limits::DRIVER_SLEEP_SECS_MAX;
use crate::ports::clock::{Mono, Now};
use due::Due;
use due_index::DueIndex;
use key_index::KeyIndex;
use packed_timer::{mono_nanos, PackedTimer};
use places::Places;

#[derive(Debug)]
pub struct TimerQueue<V> {
    /// Each entry's place in `placed`, by its key.
    places: KeyIndex,
    /// The entries and their timers, by place.
    placed: Places<Timed<V>>,
    /// How many entries have a timer.
    armed: usize,
    /// By wall due time in nanoseconds since the Unix epoch ([`wall_nanos`]: 8 bytes, not
    /// 16), then by place: equal due times come in the order their entries were placed.
    by_wall: DueIndex,
    /// By monotonic deadline in nanoseconds (as [`PackedTimer`] keeps it: 8 bytes, not 16).
    by_mono: DueIndex,
}

impl<V> Default for TimerQueue<V> {
    fn default() -> Self {
        Self {
            places: KeyIndex::default(),
            placed: Places::default(),
            armed: 0,
            by_wall: DueIndex::default(),
            by_mono: DueIndex::default(),
        }
    }
}

/// One of a timer's two indexes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Index {
    Wall,
    Mono,
}

/// An entry, its key (what a due place answers) and its timer, if it is armed.
#[derive(Debug)]
struct Timed<V> {
    key: HeartbeatKey,
    value: V,
    timer: PackedTimer,
}

/// A wall time in nanoseconds since the Unix epoch, saturated to the years 1677-2262: a
/// timer due before them is due now and one due after them never in this engine's life,
/// as they would be unsaturated.
fn wall_nanos(wall: Timestamp) -> i64 {
    i64::try_from(wall.as_nanosecond()).unwrap_or(if wall < Timestamp::UNIX_EPOCH { i64::MIN } else { i64::MAX })
}

/// Entries a start-up's load must have before its map is built on a thread beside its
/// indexes: fewer are built sooner on one (and the simulator's small loads stay on one).
const LOAD_ENTRIES_PER_THREAD_MIN: usize = 50_000;

/// What a start-up loads into a [`TimerQueue`], gathered a page at a time: each entry is
/// placed as it comes, and each page's due times are sorted as it comes, while the store
/// reads the next one, so that building the queue merges sorted runs. Sorting a million
/// keys and due times only once the load had ended took half a second of a restart with the
/// other core idle; keys are no longer sorted at all (ADR 0054).
#[derive(Debug)]
pub struct QueueLoad<V> {
    /// The entries in the order they came: each one's place is its index.
    entries: Vec<Timed<V>>,
    by_wall: Vec<Due>,
    by_mono: Vec<Due>,
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
        let (wall_from, mono_from) = (self.by_wall.len(), self.by_mono.len());
        self.entries.reserve(page.len());
        for (key, value, timer) in page {
            let place = places::loaded_place(self.entries.len());
            let (packed, timer) = match timer.map(PackedTimer::kept) {
                Some((packed, kept)) => (packed, Some(kept)),
                None => (PackedTimer::none(), None),
            };
            self.entries.push(Timed { key, value, timer: packed });
            if let Some(timer) = timer {
                self.by_wall.push(Due::wall(wall_nanos(timer.due_wall()), place));
                if let Some(mono) = timer.next_mono {
                    self.by_mono.push(Due::mono(mono_nanos(mono), place));
                }
            }
        }
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
        if let Some(place) = self.place(&key) {
            if let Some(timed) = self.placed.get_mut(place) {
                timed.value = value;
            }
            return;
        }
        let place = self.placed.insert(Timed { key, value, timer: PackedTimer::none() });
        let Self { places, placed, .. } = self;
        if let Some(timed) = placed.get(place) {
            places.insert(&timed.key, place, key_at(placed));
        }
    }

    /// Drops `key`'s entry and its timer.
    pub fn remove(&mut self, key: &HeartbeatKey) -> Option<V> {
        let place = self.places.remove(key, key_at(&self.placed))?;
        let timed = self.placed.remove(place)?;
        if let Some(timer) = timed.timer.unpack() {
            self.armed -= 1;
            unindex(&mut self.by_wall, &mut self.by_mono, place, timer, None);
        }
        Some(timed.value)
    }

    /// The place of `key`'s entry.
    fn place(&self, key: &HeartbeatKey) -> Option<u32> {
        self.places.find(key, key_at(&self.placed))
    }

    fn timed(&self, key: &HeartbeatKey) -> Option<&Timed<V>> {
        self.placed.get(self.place(key)?)
    }

    fn timed_mut(&mut self, key: &HeartbeatKey) -> Option<&mut Timed<V>> {
        self.placed.get_mut(self.place(key)?)
    }

    pub fn get(&self, key: &HeartbeatKey) -> Option<&V> {
        self.timed(key).map(|timed| &timed.value)
    }

    pub fn get_mut(&mut self, key: &HeartbeatKey) -> Option<&mut V> {
        self.timed_mut(key).map(|timed| &mut timed.value)
    }

    /// An entry and its timer, if it is armed, in one search of the map.
    pub fn get_with_timer(&self, key: &HeartbeatKey) -> Option<(&V, Option<SlotTimer>)> {
        self.timed(key).map(|timed| (&timed.value, timed.timer.unpack()))
    }

    /// As [`TimerQueue::get_with_timer`], the entry to change (its timer changes only
    /// through the queue).
    pub fn get_mut_with_timer(&mut self, key: &HeartbeatKey) -> Option<(&mut V, Option<SlotTimer>)> {
        self.timed_mut(key).map(|timed| (&mut timed.value, timed.timer.unpack()))
    }

    pub fn contains_key(&self, key: &HeartbeatKey) -> bool {
        self.place(key).is_some()
    }

    /// Every entry, in key order (sorted for the call: an operator's listing, not a
    /// timer's path).
    pub fn iter(&self) -> impl Iterator<Item = (&HeartbeatKey, &V)> {
        let mut all: Vec<&Timed<V>> = self.placed.iter().collect();
        all.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        all.into_iter().map(|timed| (&timed.key, &timed.value))
    }

    /// Every key, in the order of their places (no order a caller may rely on).
    pub fn keys(&self) -> impl Iterator<Item = &HeartbeatKey> {
        self.placed.iter().map(|timed| &timed.key)
    }

    /// How many entries there are, armed or not.
    pub fn len(&self) -> usize {
        self.places.len()
    }

    pub fn is_empty(&self) -> bool {
        self.places.len() == 0
    }

    /// How many entries have a timer.
    pub fn armed(&self) -> usize {
        self.armed
    }

    /// Arms `key` with `timer`, replacing any timer it had; a key with no entry has no
    /// timer either (returns false).
    pub fn arm(&mut self, key: &HeartbeatKey, timer: SlotTimer) -> bool {
        let Some(place) = self.place(key) else { return false };
        let Some(timed) = self.placed.get_mut(place) else { return false };
        match timed.timer.unpack() {
            Some(old) => unindex(&mut self.by_wall, &mut self.by_mono, place, old, None),
            None => self.armed += 1,
        }
        let (packed, timer) = PackedTimer::kept(timer);
        timed.timer = packed;
        self.by_wall.insert(Due::wall(wall_nanos(timer.due_wall()), place));
        if let Some(mono) = timer.next_mono {
            self.by_mono.insert(Due::mono(mono_nanos(mono), place));
        }
        true
    }

    /// Drops `key`'s timer, if it has one; its entry stays.
    pub fn disarm(&mut self, key: &HeartbeatKey) -> Option<SlotTimer> {
        let place = self.place(key)?;
        self.disarm_popped(place, None).map(|(_, timer)| timer)
    }

    /// Sets each of `loaded`'s entries as [`TimerQueue::insert`] and [`TimerQueue::arm`]
    /// would, in the order its pages came (a timer of `None` leaves the one the key had).
    /// Into an empty queue (a start-up) the indexes are built from the sorted whole, their
    /// blocks full (filled one at a time, blocks split in halves), and the table of places
    /// from the entries as they lie. A key given twice keeps its last entry and timer.
    pub fn load(&mut self, loaded: QueueLoad<V>)
    where
        V: Sync,
    {
        let QueueLoad { entries, by_wall, by_mono } = loaded;
        if !self.is_empty() {
            for Timed { key, value, timer } in entries {
                self.insert(key.clone(), value);
                if let Some(timer) = timer.unpack() {
                    self.arm(&key, timer);
                }
            }
            return;
        }
        // The table of places, unless a key was given twice.
        let build_places = |entries: &[Timed<V>]| {
            let keyed = entries.iter().enumerate().map(|(index, timed)| (&timed.key, places::loaded_place(index)));
            KeyIndex::build(keyed, |place| entries.get(place as usize).map(|timed| &timed.key))
        };
        let build_indexes = |mut by_wall: Vec<Due>, mut by_mono: Vec<Due>| {
            by_wall.sort_unstable();
            by_mono.sort_unstable();
            (DueIndex::from_sorted(&by_wall), DueIndex::from_sorted(&by_mono))
        };
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        let (places, (by_wall, by_mono)) = if cores > 1 && entries.len() >= LOAD_ENTRIES_PER_THREAD_MIN {
            // The table on a thread of its own, the indexes on this one.
            std::thread::scope(|scope| {
                let places = scope.spawn(|| build_places(&entries));
                let indexes = build_indexes(by_wall, by_mono);
                // Sorting and collecting cannot fail; a panic there is a bug, and stays one.
                (places.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)), indexes)
            })
        } else {
            (build_places(&entries), build_indexes(by_wall, by_mono))
        };
        let Some(places) = places else {
            // A key given twice (no store gives one; a start-up must still not lose it): each
            // in turn, the last entry and timer kept, and none where the last had none.
            for Timed { key, value, timer } in entries {
                self.insert(key.clone(), value);
                if let Some(timer) = timer.unpack() {
                    self.arm(&key, timer);
                } else {
                    self.disarm(&key);
                }
            }
            return;
        };
        self.places = places;
        self.placed = Places::loaded(entries);
        self.armed = by_wall.len();
        self.by_wall = by_wall;
        self.by_mono = by_mono;
    }

    pub fn timer(&self, key: &HeartbeatKey) -> Option<SlotTimer> {
        self.timed(key).and_then(|timed| timed.timer.unpack())
    }

    /// Takes up to `max` due timers out, earliest first (equal due times in the order their
    /// entries were placed); the caller fires each and arms what comes next.
    pub fn take_due(&mut self, now: Now, max: usize) -> Vec<(HeartbeatKey, SlotTimer)> {
        let mut due = Vec::new();
        while due.len() < max {
            let Some((place, popped)) = self.take_earliest_due(now) else { break };
            let Some(fired) = self.disarm_popped(place, Some(popped)) else { break };
            due.push(fired);
        }
        due
    }

    /// The place of the earliest due timer, taken out of the index that has it first: its
    /// first element.
    fn take_earliest_due(&mut self, now: Now) -> Option<(u32, Index)> {
        if self.by_mono.first().is_some_and(|due| due.mono_nanos() <= mono_nanos(now.mono)) {
            return self.by_mono.pop_first().map(|due| (due.place(), Index::Mono));
        }
        if self.by_wall.first().is_some_and(|due| due.wall_nanos() <= wall_nanos(now.wall)) {
            return self.by_wall.pop_first().map(|due| (due.place(), Index::Wall));
        }
        None
    }

    /// Disarms the entry at `place`, whose element of the `popped` index, if any, is out
    /// already: its key and the timer it had.
    fn disarm_popped(&mut self, place: u32, popped: Option<Index>) -> Option<(HeartbeatKey, SlotTimer)> {
        let timed = self.placed.get_mut(place)?;
        let timer = timed.timer.unpack()?;
        timed.timer = PackedTimer::none();
        let key = timed.key.clone();
        self.armed -= 1;
        unindex(&mut self.by_wall, &mut self.by_mono, place, timer, popped);
        Some((key, timer))
    }

    /// The monotonic time at which the driver should next wake: the earliest deadline on
    /// either chain, but never more than [`DRIVER_SLEEP_SECS_MAX`] away.
    pub fn next_wake(&self, now: Now) -> Mono {
        let mut wake = now.mono + Duration::from_secs(DRIVER_SLEEP_SECS_MAX);
        if let Some(due) = self.by_mono.first() {
            wake = wake.min(Mono::from_duration(Duration::from_nanos(due.mono_nanos())));
        }
        if let Some(due) = self.by_wall.first() {
            let wall = Timestamp::from_nanosecond(i128::from(due.wall_nanos())).unwrap_or(Timestamp::MAX);
            let ahead = wall.duration_since(now.wall);
            let ahead = if ahead.is_negative() { Duration::ZERO } else { ahead.unsigned_abs() };
            wake = wake.min(now.mono + ahead);
        }
        wake
    }
}

/// The key of the entry at a place of `placed`, as the table of places reads it.
fn key_at<'a, V>(placed: &'a Places<Timed<V>>) -> impl Fn(u32) -> Option<&'a HeartbeatKey> + 'a {
    move |place| placed.get(place).map(|timed| &timed.key)
}

/// Drops the index elements of `timer`, at `place`, but the `popped` one's, which is out
/// already (the entry's own timer is the caller's to change).
fn unindex(by_wall: &mut DueIndex, by_mono: &mut DueIndex, place: u32, timer: SlotTimer, popped: Option<Index>) {
    if popped != Some(Index::Wall) {
        by_wall.remove(&Due::wall(wall_nanos(timer.due_wall()), place));
    }
    if let Some(mono) = timer.next_mono.filter(|_| popped != Some(Index::Mono)) {
        by_mono.remove(&Due::mono(mono_nanos(mono), place));
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
    fn a_placed_entry_is_its_own_size_placed_or_free() {
        // So a start-up's load becomes its places without a copy (`Places::loaded`).
        assert_eq!(std::mem::size_of::<Option<Timed<u64>>>(), std::mem::size_of::<Timed<u64>>());
    }

    #[test]
    fn a_timer_is_indexed_and_handed_back_as_kept() {
        // A jitter finer than a millisecond (none that `jitter_offset` gives) is kept to the
        // millisecond below: the due time indexed is the kept one's, so a removal finds it.
        let fine = SlotTimer { jitter: Duration::from_micros(1_500), ..timer(at(0), 10) };
        let mut queue = TimerQueue::new();
        arm(&mut queue, "x", fine);
        let kept = SlotTimer { jitter: Duration::from_millis(1), ..fine };
        assert_eq!(queue.timer(&key("x")), Some(kept));
        assert_eq!(queue.disarm(&key("x")), Some(kept));
        assert_eq!((queue.armed(), queue.by_wall.len(), queue.by_mono.len()), (0, 0, 0), "no stray index element");
        arm(&mut queue, "x", fine);
        arm(&mut queue, "x", timer(at(0), 20));
        assert_eq!((queue.armed(), queue.by_wall.len(), queue.by_mono.len()), (1, 1, 1), "re-armed, not added");
        let mut loaded = TimerQueue::new();
        loaded.load(one_page(vec![(key("y"), (), Some(fine))]));
        assert_eq!(loaded.take_due(at(10), 10), vec![(key("y"), kept)]);
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
        paged_load_is_one_at_a_time(6, 10, Repeats::Some);
        paged_load_is_one_at_a_time(6, 10, Repeats::None);
    }

    /// A load as large as a start-up's builds its map on a thread beside its indexes.
    #[test]
    fn a_large_load_in_pages_is_inserting_and_arming_each_in_turn() {
        paged_load_is_one_at_a_time(7, (LOAD_ENTRIES_PER_THREAD_MIN / 6) as u64, Repeats::Some);
        paged_load_is_one_at_a_time(7, (LOAD_ENTRIES_PER_THREAD_MIN / 6) as u64, Repeats::None);
    }

    /// An index's elements with the key each place holds.
    fn named<V>(queue: &TimerQueue<V>, index: &DueIndex) -> Vec<(Due, HeartbeatKey)> {
        // The place left out: places may be numbered otherwise.
        let named = |due: &Due| (due.without_place(), queue.placed.get(due.place()).expect("placed").key.clone());
        index.iter().map(named).collect()
    }

    /// Whether a load gives some keys twice (a store never does; the load must still keep
    /// the last) or each key once (a start-up's way, built from the sorted pages).
    #[derive(Clone, Copy, PartialEq)]
    enum Repeats {
        Some,
        None,
    }

    /// `pages` pages of `per_page` rows each (and, with repeats, one more each), loaded, are
    /// the queue that inserting and arming each in turn builds.
    fn paged_load_is_one_at_a_time(pages: u64, per_page: u64, repeats: Repeats) {
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
                if repeats == Repeats::Some {
                    rows.push((key(&name(page)), 1_000_000 + page, (page % 2 == 0).then(|| timer(at(0), 2))));
                }
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
        // Places may be numbered otherwise; the keys they name are the same, in the same order.
        let (paged_wall, one_wall) = (named(&paged, &paged.by_wall), named(&one_at_a_time, &one_at_a_time.by_wall));
        assert_eq!(paged_wall, one_wall, "one index entry per armed key, by due time");
        assert_eq!(named(&paged, &paged.by_mono), named(&one_at_a_time, &one_at_a_time.by_mono));
        for secs in [0, 1, 2, 3, 5, 8] {
            assert_eq!(fire(&mut paged, at(secs), 7, 1), fire(&mut one_at_a_time, at(secs), 7, 1), "at {secs} s");
        }
    }

    #[test]
    fn equal_due_times_come_in_the_order_their_entries_were_placed() {
        let mut queue = TimerQueue::new();
        for name in ["c", "a", "b"] {
            arm(&mut queue, name, timer(at(0), 10));
        }
        assert_eq!(queue.remove(&key("a")), Some(()));
        arm(&mut queue, "d", timer(at(0), 10));
        assert_eq!(fire(&mut queue, at(10), 100, 10), vec![key("c"), key("d"), key("b")], "d took a's place");
        assert_eq!((queue.len(), queue.armed(), queue.by_wall.len(), queue.by_mono.len()), (3, 3, 3, 3));
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
