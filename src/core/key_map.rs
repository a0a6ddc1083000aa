//! Maps by heartbeat that are only looked up, never walked in an order: a hash of the key
//! and about one comparison, where a B-tree compares a dozen keys' texts (ADR 0054).
//!
//! A `KeyMap`'s iteration order is its hash table's. Nothing the engine decides or says may
//! follow it: walk one only to count, or to collect into an ordered set first.

use std::hash::BuildHasher;

use foldhash::fast::FixedState;

use crate::core::ids::HeartbeatKey;

/// Any fixed number: a table is laid out alike in every process, so that a replay of a
/// simulator's seed is alike in its profile too (no order depends on it).
const KEY_HASH_SEED: u64 = 0x7379_7374_6f6c_6531;

/// The hasher of heartbeat keys.
pub fn key_hasher() -> FixedState {
    FixedState::with_seed(KEY_HASH_SEED)
}

/// `key`'s hash, as every table by heartbeat key takes it.
pub fn key_hash(key: &HeartbeatKey) -> u64 {
    key_hasher().hash_one(key)
}

/// A map by heartbeat for lookups (see the module's comment).
pub type KeyMap<V> = hashbrown::HashMap<HeartbeatKey, V, FixedState>;

/// An empty [`KeyMap`].
pub fn key_map<V>() -> KeyMap<V> {
    KeyMap::with_hasher(key_hasher())
}
