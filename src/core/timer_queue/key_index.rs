//! The timer queue's places by key: a hash table that holds only places (4 bytes each) and
//! reads each place's key from the entry there, so a key is held once, by its entry, and a
//! search hashes the key once and compares it with about one other (ADR 0054). A B-tree of
//! keys compared a dozen keys' texts a search, and held every key a second time.
//!
//! Nothing observable follows the table's order: the queue iterates its entries by place
//! or sorted by key, never by hash (the hash is `core::key_map`'s, its seed fixed).

use hashbrown::HashTable;

use crate::core::ids::HeartbeatKey;
use crate::core::key_map::key_hash as hash;

/// Places by the key of the entry held at each. Every method takes `key_at`, which gives
/// the key of the entry at a place: a place in the table always holds one.
#[derive(Debug, Default)]
pub(super) struct KeyIndex {
    table: HashTable<u32>,
}

impl KeyIndex {
    /// The places of `keyed` by key, or `None` if a key comes twice.
    pub(super) fn build<'a>(
        keyed: impl ExactSizeIterator<Item = (&'a HeartbeatKey, u32)>,
        key_at: impl Fn(u32) -> Option<&'a HeartbeatKey>,
    ) -> Option<Self> {
        let mut index = Self { table: HashTable::with_capacity(keyed.len()) };
        for (key, place) in keyed {
            if index.find(key, &key_at).is_some() {
                return None;
            }
            index.insert(key, place, &key_at);
        }
        Some(index)
    }

    pub(super) fn len(&self) -> usize {
        self.table.len()
    }

    /// The place of `key`'s entry.
    pub(super) fn find<'a>(&self, key: &HeartbeatKey, key_at: impl Fn(u32) -> Option<&'a HeartbeatKey>) -> Option<u32> {
        self.table.find(hash(key), |place| key_at(*place) == Some(key)).copied()
    }

    /// Adds `place` for `key`, which has none (see [`KeyIndex::find`]).
    pub(super) fn insert<'a>(
        &mut self,
        key: &HeartbeatKey,
        place: u32,
        key_at: impl Fn(u32) -> Option<&'a HeartbeatKey>,
    ) {
        // Growing rehashes every place by its entry's key.
        self.table.insert_unique(hash(key), place, |held| key_at(*held).map_or(0, hash));
    }

    /// Takes `key`'s place out, returning it.
    pub(super) fn remove<'a>(
        &mut self,
        key: &HeartbeatKey,
        key_at: impl Fn(u32) -> Option<&'a HeartbeatKey>,
    ) -> Option<u32> {
        let found = self.table.find_entry(hash(key), |place| key_at(*place) == Some(key)).ok()?;
        Some(found.remove().0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::ids::{AgentId, HeartbeatId};

    fn key(agent: usize, heartbeat: usize) -> HeartbeatKey {
        HeartbeatKey {
            agent: AgentId::new(format!("agent-{agent}")).expect("valid"),
            heartbeat: HeartbeatId::new(format!("hb-{heartbeat}")).expect("valid"),
        }
    }

    #[test]
    fn a_place_is_found_by_its_entrys_key_through_growth_and_removal() {
        // Keys by place, as the queue's entries hold them; `None` where a place is free.
        let mut held: Vec<Option<HeartbeatKey>> = Vec::new();
        let mut index = KeyIndex::default();
        for n in 0..5_000 {
            let k = key(n % 37, n);
            let place = u32::try_from(held.len()).expect("few places");
            held.push(Some(k.clone()));
            let key_at = |place: u32| held.get(place as usize).and_then(Option::as_ref);
            assert_eq!(index.find(&k, key_at), None, "not there before it is inserted");
            index.insert(&k, place, key_at);
        }
        let key_at = |place: u32| held.get(place as usize).and_then(Option::as_ref);
        for (place, k) in held.iter().enumerate() {
            let k = k.as_ref().expect("every place held");
            assert_eq!(index.find(k, key_at), Some(place as u32), "after the table grew");
        }
        assert_eq!(index.len(), 5_000);
        for place in (0..5_000).step_by(3) {
            let k = held[place].clone().expect("held");
            let key_at = |place: u32| held.get(place as usize).and_then(Option::as_ref);
            assert_eq!(index.remove(&k, key_at), Some(place as u32));
            held[place] = None;
            let key_at = |place: u32| held.get(place as usize).and_then(Option::as_ref);
            assert_eq!(index.remove(&k, key_at), None, "removed once");
        }
        let key_at = |place: u32| held.get(place as usize).and_then(Option::as_ref);
        for (place, k) in held.iter().enumerate() {
            let found = k.as_ref().and_then(|k| index.find(k, key_at));
            assert_eq!(found, k.as_ref().map(|_| place as u32), "the others stay");
        }
        assert_eq!(index.find(&key(1, 999_999), key_at), None, "a key never held");
    }

    #[test]
    fn a_build_finds_every_key_and_refuses_a_key_given_twice() {
        let keys: Vec<HeartbeatKey> = (0..2_000).map(|n| key(n % 11, n)).collect();
        let key_at = |place: u32| keys.get(place as usize);
        let keyed = keys.iter().enumerate().map(|(place, k)| (k, place as u32));
        let index = KeyIndex::build(keyed, key_at).expect("distinct keys");
        assert_eq!(index.len(), keys.len());
        assert!(keys.iter().enumerate().all(|(place, k)| index.find(k, key_at) == Some(place as u32)));

        let mut twice = keys.clone();
        twice.push(key(5, 5));
        let key_at = |place: u32| twice.get(place as usize);
        let keyed = twice.iter().enumerate().map(|(place, k)| (k, place as u32));
        assert!(KeyIndex::build(keyed, key_at).is_none(), "the load then goes entry by entry");
    }
}
