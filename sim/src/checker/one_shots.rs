//! A one-shot (`at`) is retired as out of slots only once its instant has a decision: a
//! claim or a skip of that instant or a later slot of its id in the run log (what the
//! engine lifts a timer above, ADR 0018), or a decision the engine announced. Before its
//! instant, with nothing decided there, it still has its slot. A replace that armed a
//! one-shot no lower than the old definition's timer found one whose instant lay below
//! that timer out of slots at once, and it never ran (seed 1927871251589, found through a
//! retry it then armed before the instant).
//!
//! An operator's trigger is not such a decision, before the instant or after it (ADR
//! 0049): an enable, or a restart, after a trigger that came before a jittered one-shot's
//! own run retired it unrun (seed 1927871700685). Nor is a disable that dropped the own slot
//! waiting behind a trigger: the engine "retired" the disabled one-shot over its operator's
//! reason, and an enable armed the instant again (seed 1927871742970, ADR 0050).
//!
//! A one-shot whose run succeeded has done its work: it never runs again on its own (an
//! operator's trigger may run it), until its id is stored afresh. An enable of a one-shot,
//! enabled already, while its only run was going armed a "retry" as if that run had failed,
//! and it ran twice (found with the held one-shot scenario).

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;

use systole::core::heartbeat::HeartbeatDef;
use systole::core::ids::HeartbeatKey;
use systole::core::schedule::Schedule;

use super::{fail, Step};

pub const AT_NOT_RETIRED_EARLY: &str = "at-not-retired-early";
pub const AT_RUNS_ONCE: &str = "at-runs-once";

#[derive(Debug, Default)]
pub struct OneShotModel {
    /// The latest slot of each id that was claimed, recorded or decided, an operator's
    /// triggers left out: the store keeps a deleted predecessor's rows under the id, so
    /// nothing here is forgotten.
    latest_decided: BTreeMap<HeartbeatKey, Timestamp>,
    /// The same of the operator's triggers (not backfills: those are the schedule's slots).
    latest_trigger_decided: BTreeMap<HeartbeatKey, Timestamp>,
    /// The slots operators triggered, by id: decided, or waiting in a live process.
    triggers: BTreeSet<(HeartbeatKey, Timestamp)>,
    /// Those of `triggers` decided (claimed, recorded or skipped).
    triggers_decided: BTreeSet<(HeartbeatKey, Timestamp)>,
    /// Those of `triggers_decided` decided before their job's schedule changed: the new
    /// schedule's slots were not known to the trigger, which could not keep off them.
    triggers_before_new_schedule: BTreeSet<(HeartbeatKey, Timestamp)>,
    /// The one-shots (by their instant) that a run of theirs finished with success, in the
    /// store, since their id was last stored.
    succeeded: BTreeMap<HeartbeatKey, Timestamp>,
}

impl OneShotModel {
    /// An operator triggered `key` under `slot` (`backfill`: asked for a passed slot of
    /// its schedule instead, which is the schedule's).
    pub fn triggered(&mut self, key: &HeartbeatKey, slot: Timestamp, backfill: bool) {
        if backfill {
            self.triggers.remove(&(key.clone(), slot));
        } else {
            self.triggers.insert((key.clone(), slot));
        }
    }

    /// A slot of `key` claimed, recorded (run or skip) or decided by the engine.
    pub fn decided(&mut self, key: &HeartbeatKey, slot: Timestamp) {
        let latest = if self.triggers.contains(&(key.clone(), slot)) {
            self.triggers_decided.insert((key.clone(), slot));
            &mut self.latest_trigger_decided
        } else {
            &mut self.latest_decided
        };
        raise(latest, key, slot);
    }

    /// The engine skipped `key`'s `slot`, deciding an operator's trigger when `trigger`.
    /// The engine's own skip decides the schedule's slot even where the run log's row is
    /// a trigger's: a reload made the job a one-shot for the instant a trigger had taken,
    /// to the millisecond, and both were skipped (seed 1927871874215). A skip is a row of
    /// the run log, an operator's trigger's too (seed 1927871442722).
    pub fn skipped(&mut self, key: &HeartbeatKey, slot: Timestamp, trigger: bool) {
        if trigger {
            self.decided(key, slot);
        } else {
            raise(&mut self.latest_decided, key, slot);
        }
    }

    /// Whether an operator triggered `key` under `slot` (not a backfill of it), decided or
    /// not.
    pub fn is_operator_trigger(&self, key: &HeartbeatKey, slot: Timestamp) -> bool {
        self.triggers.contains(&(key.clone(), slot))
    }

    /// The latest slot of `key` decided, an operator's triggers left out.
    pub fn latest_decided(&self, key: &HeartbeatKey) -> Option<Timestamp> {
        self.latest_decided.get(key).copied()
    }

    /// Whether an operator's trigger of `key` decided `slot` (the run log's row there is
    /// the trigger's).
    pub fn decided_as_trigger(&self, key: &HeartbeatKey, slot: Timestamp) -> bool {
        self.triggers_decided.contains(&(key.clone(), slot))
    }

    /// `key`'s schedule changed: the triggers of it decided so far were made off the old
    /// schedule's slots only.
    pub fn schedule_changed(&mut self, key: &HeartbeatKey) {
        let decided = self.triggers_decided.iter().filter(|(decided, _)| decided == key).cloned();
        self.triggers_before_new_schedule.extend(decided);
    }

    /// Whether an operator's trigger of `key` decided `slot` before `key`'s schedule last
    /// changed.
    pub fn decided_as_trigger_before_new_schedule(&self, key: &HeartbeatKey, slot: Timestamp) -> bool {
        self.triggers_before_new_schedule.contains(&(key.clone(), slot))
    }

    /// The process died: a trigger it had not decided went with it, and a later decision of
    /// its slot is the schedule's (seed 1927871804321: a reload made the job a one-shot whose
    /// instant was the trigger's slot, and after a restart the own run claimed that slot).
    pub fn process_died(&mut self) {
        let decided = &self.triggers_decided;
        self.triggers.retain(|trigger| decided.contains(trigger));
    }

    /// Whether a slot of `key` at or above `instant` was decided, an operator's trigger
    /// left out: what a start-up reads from the run log as a one-shot's instant decided.
    pub fn instant_decided(&self, key: &HeartbeatKey, instant: Timestamp) -> bool {
        self.latest_decided.get(key).is_some_and(|latest| *latest >= instant)
    }

    /// Whether an operator's trigger of `key` at or above `instant` was decided.
    fn trigger_decided(&self, key: &HeartbeatKey, instant: Timestamp) -> bool {
        self.latest_trigger_decided.get(key).is_some_and(|latest| *latest >= instant)
    }

    /// `key` was stored afresh (a create, a replace, a reload): a new job.
    pub fn stored(&mut self, key: &HeartbeatKey) {
        self.succeeded.remove(key);
    }

    /// A run of `key` at `slot`, which the driver ran under `driven` and which read `read`
    /// at its claim, was recorded as a success. The one-shot's own when the driver ran it as
    /// the one-shot, at or after its instant, and it ran the one-shot's prompt: a slot of the
    /// old schedule claimed after the store took the one-shot in its place runs the
    /// one-shot's definition too (ADR 0026), below the instant or above it, but is not the
    /// one-shot's run (seed 1927871506694: a catch-up backlog of the old schedule).
    pub fn succeeded(
        &mut self,
        key: &HeartbeatKey,
        slot: Timestamp,
        driven: Option<&HeartbeatDef>,
        read: Option<&HeartbeatDef>,
    ) {
        let Some(Schedule::At(at)) = driven.map(|def| &def.schedule) else { return };
        if read.map(|def| &def.schedule) != Some(&Schedule::At(*at)) {
            return;
        }
        let Ok(instant) = Timestamp::from_millisecond(at.as_millisecond()) else { return };
        if slot >= instant {
            self.succeeded.insert(key.clone(), *at);
        }
    }

    /// A run of `key`'s own (not an operator's trigger) started at `slot`, the driver running
    /// it under `def`.
    pub fn started(&self, key: &HeartbeatKey, slot: Timestamp, def: Option<&HeartbeatDef>) -> Step {
        let Some(Schedule::At(at)) = def.map(|def| &def.schedule) else { return Ok(()) };
        if self.succeeded.get(key) == Some(at) {
            return fail(
                AT_RUNS_ONCE,
                format!("{key} (at {at}) started slot {slot} of its own after a run of it succeeded"),
            );
        }
        Ok(())
    }

    /// The engine retired `key`, running under `def`, as out of slots at `wall`.
    pub fn retired(&self, key: &HeartbeatKey, def: Option<&HeartbeatDef>, wall: Timestamp) -> Step {
        let Some(Schedule::At(at)) = def.map(|def| &def.schedule) else { return Ok(()) };
        // Its one slot: the instant to the millisecond, as stored.
        let Ok(instant) = Timestamp::from_millisecond(at.as_millisecond()) else { return Ok(()) };
        if wall < instant && !self.instant_decided(key, instant) {
            return fail(
                AT_NOT_RETIRED_EARLY,
                format!("{key} (at {instant}) was retired as out of slots at {wall}, before its instant, with no slot of it decided"),
            );
        }
        if !self.instant_decided(key, instant) && self.trigger_decided(key, instant) {
            return fail(
                AT_NOT_RETIRED_EARLY,
                format!(
                    "{key} (at {instant}) was retired as out of slots at {wall} with no slot of its own decided at or \
                     after its instant, only an operator's trigger"
                ),
            );
        }
        Ok(())
    }
}

/// Raises `key`'s latest slot in `latest` to `slot`.
fn raise(latest: &mut BTreeMap<HeartbeatKey, Timestamp>, key: &HeartbeatKey, slot: Timestamp) {
    let latest = latest.entry(key.clone()).or_insert(slot);
    *latest = (*latest).max(slot);
}

#[cfg(test)]
mod tests {
    use systole::core::ids::{AgentId, HeartbeatId};

    use super::*;

    fn key() -> HeartbeatKey {
        HeartbeatKey {
            agent: AgentId::new("agent-0").expect("an id"),
            heartbeat: HeartbeatId::new("hb-0").expect("an id"),
        }
    }

    #[test]
    fn an_own_skip_at_a_decided_triggers_slot_decides_the_instant() {
        let (key, instant) = (key(), Timestamp::from_second(1_000).expect("a time"));
        let mut model = OneShotModel::default();
        model.triggered(&key, instant, false);
        model.skipped(&key, instant, true);
        assert!(!model.instant_decided(&key, instant), "the trigger's skip decides nothing of the schedule");
        assert!(model.decided_as_trigger(&key, instant));
        model.skipped(&key, instant, false);
        assert!(model.instant_decided(&key, instant), "the engine's own skip decided the instant");
    }

    #[test]
    fn a_claim_lost_at_a_triggers_slot_decides_nothing_of_the_schedule() {
        let (key, instant) = (key(), Timestamp::from_second(1_000).expect("a time"));
        let mut model = OneShotModel::default();
        model.triggered(&key, instant, false);
        model.decided(&key, instant);
        model.decided(&key, instant);
        assert!(!model.instant_decided(&key, instant), "the row there is the trigger's");
    }
}
