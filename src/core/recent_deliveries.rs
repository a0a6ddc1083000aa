//! A bounded index of the replies heartbeats delivered lately, that a store keeps true so a
//! duplicate check is answered without a read (ADR 0066). Pure: the store fills it from a
//! read, records each delivery it commits, and forgets it all when it deletes runs.
//!
//! What it claims: every stored delivery that finished at or after its *floor* is in it,
//! as the latest finish of its heartbeat and reply. A check whose `since` is at or after
//! the floor is answered here; an earlier one (a clock set back, a floor raised by
//! eviction) and every check while it is cold (no floor: just opened, or it forgot) goes
//! to the store. A write or a fill that began before the index forgot cannot vouch for
//! what the store holds now: the write makes the index forget again, the fill is dropped.

use std::collections::HashMap;

use crate::core::ids::HeartbeatKey;

#[derive(Debug)]
pub struct RecentDeliveries {
    /// The latest finish (Unix ms) of each delivered reply the index holds, by heartbeat
    /// and digest (looked up by reference: a check allocates nothing).
    latest: HashMap<HeartbeatKey, HashMap<Box<str>, i64>>,
    entries: usize,
    /// Where the last fill made the index whole; `None` while cold.
    filled_from_ms: Option<i64>,
    /// Raised past every entry evicted to stay within `entries_max`.
    evicted_through_ms: Option<i64>,
    /// Counts forgets: a write or fill that saw another count is older than the last.
    generation: u64,
    entries_max: usize,
}

/// What a read for a fill brought: the latest finish of each delivered reply that
/// finished at or after `from_ms`, newest first, at most the index's bound of them.
#[derive(Debug, Default)]
pub struct Fill {
    pub from_ms: i64,
    pub delivered: Vec<(HeartbeatKey, String, i64)>,
    /// The read stopped at its bound: older deliveries may exist that it did not bring.
    pub truncated: bool,
}

impl Fill {
    /// A fill of the latest finish of each delivered reply at or after `from_ms`: the
    /// newest `entries_max` of `delivered`, marked truncated if there were more.
    #[must_use]
    pub fn newest(from_ms: i64, mut delivered: Vec<(HeartbeatKey, String, i64)>, entries_max: usize) -> Self {
        delivered.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(&b.0)).then_with(|| a.1.cmp(&b.1)));
        let truncated = delivered.len() > entries_max;
        delivered.truncate(entries_max);
        Self { from_ms, delivered, truncated }
    }
}

impl RecentDeliveries {
    /// A cold index that holds at most `entries_max` (at least one) delivered replies.
    #[must_use]
    pub fn new(entries_max: usize) -> Self {
        Self {
            latest: HashMap::new(),
            entries: 0,
            filled_from_ms: None,
            evicted_through_ms: None,
            generation: 0,
            entries_max: entries_max.max(1),
        }
    }

    /// How many delivered replies a fill may bring.
    #[must_use]
    pub fn entries_max(&self) -> usize {
        self.entries_max
    }

    /// The count a write or a fill takes before it begins, and hands back after.
    #[must_use]
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// From when the index answers, if it does at all.
    #[must_use]
    pub fn floor_ms(&self) -> Option<i64> {
        let filled = self.filled_from_ms?;
        Some(self.evicted_through_ms.map_or(filled, |evicted| filled.max(evicted.saturating_add(1))))
    }

    #[must_use]
    pub fn len(&self) -> usize {
        self.entries
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// Whether `key` delivered `digest` in a run that finished at or after `since_ms`;
    /// `None` when the index cannot say (the store must be read).
    #[must_use]
    pub fn answer(&self, key: &HeartbeatKey, digest: &str, since_ms: i64) -> Option<bool> {
        let floor = self.floor_ms()?;
        if since_ms < floor {
            return None;
        }
        let finished = self.latest.get(key).and_then(|replies| replies.get(digest));
        Some(finished.is_some_and(|&finished| finished >= since_ms))
    }

    /// A delivery the store committed, by a write that began at `generation`.
    pub fn record(&mut self, key: &HeartbeatKey, digest: &str, finished_ms: i64, generation: u64) {
        if generation != self.generation {
            // The store deleted runs while this write went on: what it holds is unknown.
            self.forget();
            return;
        }
        self.keep(key, digest, finished_ms);
        self.evict_beyond_bound();
    }

    /// A read's deliveries, made from `generation`: the index answers from its `from_ms`
    /// on (or from just after the oldest it brought, when it stopped at its bound).
    /// Returns whether it was taken; a fill older than a forget is not.
    pub fn fill(&mut self, fill: Fill, generation: u64) -> bool {
        if generation != self.generation {
            return false;
        }
        let mut from_ms = fill.from_ms;
        if fill.truncated {
            let oldest = fill.delivered.iter().map(|(_, _, finished)| *finished).min();
            from_ms = from_ms.max(oldest.map_or(i64::MAX, |oldest| oldest.saturating_add(1)));
        }
        for (key, digest, finished_ms) in &fill.delivered {
            self.keep(key, digest, *finished_ms);
        }
        self.filled_from_ms = Some(self.filled_from_ms.map_or(from_ms, |filled| filled.min(from_ms)));
        self.evict_beyond_bound();
        true
    }

    /// The store deleted delivered runs (or may have): nothing here is vouched for any
    /// more, and writes and fills in flight are older than this.
    pub fn forget(&mut self) {
        self.latest = HashMap::new();
        self.entries = 0;
        self.filled_from_ms = None;
        self.evicted_through_ms = None;
        self.generation = self.generation.wrapping_add(1);
    }

    fn keep(&mut self, key: &HeartbeatKey, digest: &str, finished_ms: i64) {
        let replies = match self.latest.get_mut(key) {
            Some(replies) => replies,
            None => self.latest.entry(key.clone()).or_default(),
        };
        match replies.get_mut(digest) {
            Some(latest) => *latest = (*latest).max(finished_ms),
            None => {
                replies.insert(Box::from(digest), finished_ms);
                self.entries += 1;
            }
        }
    }

    /// Beyond the bound, the older half goes and the floor rises past it: an eviction
    /// every `entries_max / 2` records, not one for each.
    fn evict_beyond_bound(&mut self) {
        if self.entries <= self.entries_max {
            return;
        }
        let mut finishes: Vec<i64> = self.latest.values().flat_map(|replies| replies.values().copied()).collect();
        let middle = finishes.len() / 2;
        let (_, &mut through, _) = finishes.select_nth_unstable(middle.saturating_sub(1));
        for replies in self.latest.values_mut() {
            replies.retain(|_, finished| *finished > through);
        }
        self.latest.retain(|_, replies| !replies.is_empty());
        self.entries = self.latest.values().map(HashMap::len).sum();
        self.evicted_through_ms = Some(self.evicted_through_ms.map_or(through, |evicted| evicted.max(through)));
    }
}

#[cfg(test)]
#[path = "recent_deliveries_tests.rs"]
mod tests;
