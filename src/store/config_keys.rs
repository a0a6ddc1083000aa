//! The keys of a config as a seed applies them, for every store: a key the config names
//! twice keeps its last definition and is reported once.

#[cfg(not(madsim))]
use std::cmp::Ordering;
use std::collections::HashMap;

use crate::core::heartbeat::HeartbeatDef;
use crate::core::ids::HeartbeatKey;
#[cfg(not(madsim))]
use crate::store::seed_threads;

pub(crate) struct ConfigKeys<'d> {
    defs: &'d [HeartbeatDef],
    /// Each key's last place in `defs`. Hashed, not sorted: a million keys took seconds
    /// to order.
    last_place: HashMap<&'d HeartbeatKey, usize>,
}

impl<'d> ConfigKeys<'d> {
    pub(crate) fn of(defs: &'d [HeartbeatDef]) -> Self {
        let last_place = defs.iter().enumerate().map(|(place, def)| (&def.key, place)).collect();
        Self { defs, last_place }
    }

    /// The definitions a seed applies, each with its place in the config, in config order.
    pub(crate) fn kept(&self) -> impl Iterator<Item = (usize, &'d HeartbeatDef)> + '_ {
        self.defs.iter().enumerate().filter(|(place, def)| self.last_place.get(&def.key) == Some(place))
    }

    pub(crate) fn contains(&self, key: &HeartbeatKey) -> bool {
        self.last_place.contains_key(key)
    }
}

/// The places of `defs` in key order, sorted on every core, when the config names no key
/// twice; `None` otherwise. A seed into a store that holds nothing inserts such a config's
/// definitions as they are: nothing to look up or compare first, where the map of
/// [`ConfigKeys`] and the sort after it were a third of a first seed of a million into SQLite.
#[cfg(not(madsim))]
pub(crate) fn distinct_in_key_order(defs: &[HeartbeatDef]) -> Option<Vec<usize>> {
    let sorted =
        seed_threads::map_sorted(defs, || |place, def: &'_ HeartbeatDef| KeyOrder::of(&def.key, place), |order| order);
    if sorted.windows(2).any(|pair| pair[0] == pair[1]) {
        return None;
    }
    Some(sorted.into_iter().map(|order| order.place).collect())
}

/// Bytes of each id a [`KeyOrder`] holds in itself.
#[cfg(not(madsim))]
const ID_PREFIX_BYTES: usize = 16;

/// A key as a sort compares it: the first bytes of its ids held in place, so that most
/// comparisons read no id's text. Sorting the keys themselves read two texts, each in a
/// block of its own, at every comparison: cache misses that were most of the sort's 0.33 s
/// for a million.
#[cfg(not(madsim))]
struct KeyOrder<'d> {
    /// The ids' first bytes, big-endian and zero-padded: an id has no zero byte
    /// (`[a-z0-9-]`), so these compare as the texts' own beginnings do.
    agent: u128,
    heartbeat: u128,
    /// Whether each id is all in its prefix: two such equal prefixes are equal ids.
    agent_whole: bool,
    heartbeat_whole: bool,
    key: &'d HeartbeatKey,
    place: usize,
}

#[cfg(not(madsim))]
impl<'d> KeyOrder<'d> {
    fn of(key: &'d HeartbeatKey, place: usize) -> Self {
        let (agent, agent_whole) = id_prefix(key.agent.as_str());
        let (heartbeat, heartbeat_whole) = id_prefix(key.heartbeat.as_str());
        Self { agent, heartbeat, agent_whole, heartbeat_whole, key, place }
    }
}

/// An id's first [`ID_PREFIX_BYTES`] as a number that orders as they do, and whether that
/// is the whole id.
#[cfg(not(madsim))]
fn id_prefix(id: &str) -> (u128, bool) {
    let mut bytes = [0_u8; ID_PREFIX_BYTES];
    let held = id.len().min(ID_PREFIX_BYTES);
    bytes[..held].copy_from_slice(&id.as_bytes()[..held]);
    (u128::from_be_bytes(bytes), id.len() <= ID_PREFIX_BYTES)
}

#[cfg(not(madsim))]
impl Ord for KeyOrder<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        // Equal prefixes of which one is not the whole id: the texts decide.
        self.agent
            .cmp(&other.agent)
            .then_with(|| match self.agent_whole && other.agent_whole {
                true => Ordering::Equal,
                false => self.key.agent.cmp(&other.key.agent),
            })
            .then_with(|| self.heartbeat.cmp(&other.heartbeat))
            .then_with(|| match self.heartbeat_whole && other.heartbeat_whole {
                true => Ordering::Equal,
                false => self.key.heartbeat.cmp(&other.key.heartbeat),
            })
    }
}

#[cfg(not(madsim))]
impl PartialOrd for KeyOrder<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[cfg(not(madsim))]
impl PartialEq for KeyOrder<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

#[cfg(not(madsim))]
impl Eq for KeyOrder<'_> {}

#[cfg(all(test, not(madsim)))]
mod tests {
    use super::*;
    use crate::core::ids::{AgentId, HeartbeatId};

    fn key(agent: &str, heartbeat: &str) -> HeartbeatKey {
        HeartbeatKey {
            agent: AgentId::new(agent).expect("a valid agent id"),
            heartbeat: HeartbeatId::new(heartbeat).expect("a valid heartbeat id"),
        }
    }

    #[test]
    fn keys_order_by_their_prefixes_as_by_their_texts() {
        // Ids shorter than, as long as and longer than a prefix, sharing their beginnings,
        // and one a prefix of another: every pair must order as the keys themselves do.
        let ids = [
            "a",
            "a-",
            "ab",
            "abcdefghijklmnop",
            "abcdefghijklmnop0",
            "abcdefghijklmnopq",
            "abcdefghijklmnoq",
            "abcdefghijklmnopqrstuvwxyz",
            "b",
            "z9",
            "z9-0",
        ];
        let keys: Vec<HeartbeatKey> =
            ids.iter().flat_map(|agent| ids.iter().map(|heartbeat| key(agent, heartbeat))).collect();
        for (a_place, a) in keys.iter().enumerate() {
            for (b_place, b) in keys.iter().enumerate() {
                let by_prefix = KeyOrder::of(a, a_place).cmp(&KeyOrder::of(b, b_place));
                assert_eq!(by_prefix, a.cmp(b), "{a:?} against {b:?}");
            }
        }
    }
}
