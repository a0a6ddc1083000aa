//! A claimed run fails as unreadable (its definition not read, ADR 0026) only for a
//! reason the world gave: a definitions read that failed asking for its heartbeat, or a
//! delete of its heartbeat, after its claim. So two runs of one heartbeat claimed in one
//! pass each get the definition (under `allow-all`, the engine once failed the second as
//! "no longer stored"), and a failed read of other heartbeats excuses none of its runs.

use std::collections::BTreeMap;

use jiff::Timestamp;

use systole::core::ids::HeartbeatKey;
use systole::driver::run::{DEFINITION_GONE, DEFINITION_UNREADABLE};

use super::{fail, Step};

pub const UNREADABLE_JUSTIFIED: &str = "unreadable-justified";

/// What the checker remembers, each as its place in the order the model saw them (one
/// instant of simulated time holds a claim and the read after it).
#[derive(Debug, Default)]
pub struct UnreadableModel {
    seen: u64,
    /// When each slot still to finish was claimed.
    claimed_at: BTreeMap<(HeartbeatKey, Timestamp), u64>,
    /// The last definitions read that failed by injection, by each heartbeat it asked for.
    read_failed_at: BTreeMap<HeartbeatKey, u64>,
    /// The last delete of each heartbeat that reached the store.
    deleted_at: BTreeMap<HeartbeatKey, u64>,
}

impl UnreadableModel {
    fn next(&mut self) -> u64 {
        self.seen += 1;
        self.seen
    }

    pub fn claimed(&mut self, key: &HeartbeatKey, slot: Timestamp) {
        let at = self.next();
        self.claimed_at.insert((key.clone(), slot), at);
    }

    /// A definitions read asking for `keys` failed by injection.
    pub fn read_failed(&mut self, keys: &[HeartbeatKey]) {
        let at = self.next();
        for key in keys {
            self.read_failed_at.insert(key.clone(), at);
        }
    }

    /// A delete of `key` reached the store.
    pub fn deleted(&mut self, key: &HeartbeatKey) {
        let at = self.next();
        self.deleted_at.insert(key.clone(), at);
    }

    /// A run's result reached the store; `count` is called when the rule judges it.
    pub fn finished(
        &mut self,
        mut count: impl FnMut(&'static str),
        key: &HeartbeatKey,
        slot: Timestamp,
        error: Option<&str>,
    ) -> Step {
        let claimed = self.claimed_at.remove(&(key.clone(), slot));
        let Some(why) = error.and_then(|error| error.strip_prefix(DEFINITION_UNREADABLE)) else { return Ok(()) };
        // A slot whose claim the trace does not show (a crash between the write and its
        // answer leaves no run) is not judged; every run the engine starts was claimed.
        let Some(claimed) = claimed else { return Ok(()) };
        count(UNREADABLE_JUSTIFIED);
        let since_claim = |at: Option<u64>| at.is_some_and(|at| at > claimed);
        let justified = if why.ends_with(DEFINITION_GONE) {
            since_claim(self.deleted_at.get(key).copied())
        } else {
            since_claim(self.read_failed_at.get(key).copied())
        };
        if justified {
            return Ok(());
        }
        fail(
            UNREADABLE_JUSTIFIED,
            format!("{key} slot {slot} failed as unreadable ({why:?}) with no read of it failing, nor a delete, since its claim"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> HeartbeatKey {
        use systole::core::ids::{AgentId, HeartbeatId};
        let agent = AgentId::new("main").expect("a valid id");
        HeartbeatKey { agent, heartbeat: HeartbeatId::new("tick").expect("a valid id") }
    }

    fn slot() -> Timestamp {
        Timestamp::from_second(60).expect("in range")
    }

    fn finish(model: &mut UnreadableModel, why: &str) -> Step {
        let error = format!("{DEFINITION_UNREADABLE}: {why}");
        model.finished(|_| {}, &key(), slot(), Some(&error))
    }

    fn other_key() -> HeartbeatKey {
        use systole::core::ids::HeartbeatId;
        HeartbeatKey { heartbeat: HeartbeatId::new("other").expect("a valid id"), ..key() }
    }

    #[test]
    fn a_read_fault_excuses_only_the_runs_claimed_before_it() {
        let mut model = UnreadableModel::default();
        model.read_failed(&[key()]);
        model.claimed(&key(), slot());
        assert!(finish(&mut model, "injected store error in definitions").is_err(), "the fault came first");
        model.claimed(&key(), slot());
        model.read_failed(&[key()]);
        assert!(finish(&mut model, "injected store error in definitions").is_ok());
    }

    #[test]
    fn a_read_fault_excuses_only_the_heartbeats_it_asked_for() {
        let mut model = UnreadableModel::default();
        model.claimed(&key(), slot());
        model.read_failed(&[other_key()]);
        assert!(finish(&mut model, "injected store error in definitions").is_err(), "another heartbeat's read");
        model.claimed(&key(), slot());
        model.read_failed(&[other_key(), key()]);
        assert!(finish(&mut model, "injected store error in definitions").is_ok());
    }

    #[test]
    fn gone_needs_a_delete_after_the_claim_and_a_read_fault_does_not_stand_for_it() {
        let mut model = UnreadableModel::default();
        model.claimed(&key(), slot());
        model.read_failed(&[key()]);
        assert!(finish(&mut model, DEFINITION_GONE).is_err(), "the store still held it");
        model.claimed(&key(), slot());
        model.deleted(&key());
        assert!(finish(&mut model, DEFINITION_GONE).is_ok());
    }

    #[test]
    fn other_failures_and_successes_are_not_judged() {
        let mut model = UnreadableModel::default();
        model.claimed(&key(), slot());
        let mut judged = 0;
        assert!(model.finished(|_| judged += 1, &key(), slot(), Some("run exceeded its 20 s budget")).is_ok());
        assert!(model.finished(|_| judged += 1, &key(), slot(), None).is_ok());
        assert_eq!(judged, 0);
    }
}
