//! The keys of a config as a seed applies them, for every store: a key the config names
//! twice keeps its last definition and is reported once.

use std::collections::HashMap;

use crate::core::heartbeat::HeartbeatDef;
use crate::core::ids::HeartbeatKey;

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
