//! The keys of a config as a seed applies them, for every store: a key the config names
//! twice keeps its last definition and is reported once.

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
    let places: Vec<(&HeartbeatKey, usize)> = defs.iter().enumerate().map(|(place, def)| (&def.key, place)).collect();
    let sorted = seed_threads::map_sorted(&places, || |place: &(&HeartbeatKey, usize)| *place, |place| place.0);
    if sorted.windows(2).any(|pair| pair[0].0 == pair[1].0) {
        return None;
    }
    Some(sorted.into_iter().map(|(_, place)| place).collect())
}
