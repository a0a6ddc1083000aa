//! What the driver keeps of each heartbeat's definition (ADR 0026): what arming and
//! deciding its slots read, and nothing a run alone needs. A claimed slot's run reads the
//! whole definition from the store (prompt, tools, model, timeout, dedup), so a waiting
//! heartbeat's memory grows with none of them.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::core::active_hours::ActiveHours;
use crate::core::delivery_target::DeliveryTarget;
use crate::core::heartbeat::{HeartbeatDef, JobKind, Origin};
use crate::core::policy::RunPolicy;
use crate::core::schedule::Schedule;

/// A heartbeat as its timer and guards see it. Its key is the entries map's.
pub(super) struct Arming {
    /// All of it, shared with every heartbeat made alike ([`Commons`]).
    pub common: Arc<Common>,
}

/// What an arming record says, one copy for all heartbeats that share it: heartbeats are
/// mostly made alike (an agent's jobs run on one schedule, deliver to one place under one
/// policy). Shared, a waiting heartbeat's entry is 24 bytes where the schedule and window
/// inline made it 56; one made unlike any other (a one-shot's instant) has a copy of its
/// own, dropped with the hourly prune once no entry holds it.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Common {
    pub schedule: Schedule,
    pub active_hours: Option<ActiveHours>,
    pub kind: JobKind,
    pub policy: RunPolicy,
    /// The guards and the breaker's alerts read it.
    pub target: DeliveryTarget,
    pub delete_after_run: bool,
    pub origin: Origin,
    /// An agent heartbeat's prompt, which each of its wakes builds on; empty otherwise.
    pub agent_prompt: Box<str>,
}

impl Arming {
    pub fn new(def: HeartbeatDef, commons: &mut Commons) -> Self {
        let agent_prompt = if def.kind == JobKind::Agent { Box::from(&*def.prompt) } else { Box::default() };
        let common = Common {
            schedule: def.schedule,
            active_hours: def.active_hours,
            kind: def.kind,
            policy: def.policy,
            target: def.target,
            delete_after_run: def.delete_after_run,
            origin: def.origin,
            agent_prompt,
        };
        Self { common: commons.share(common) }
    }

    pub fn schedule(&self) -> &Schedule {
        &self.common.schedule
    }

    pub fn active_hours(&self) -> Option<&ActiveHours> {
        self.common.active_hours.as_ref()
    }

    /// Whether this record is what `def` would make (what the rest of a definition says
    /// is read from the store at each run).
    pub fn arms(&self, def: &HeartbeatDef) -> bool {
        let common = &self.common;
        let agent_prompt = if def.kind == JobKind::Agent { &*def.prompt } else { "" };
        common.schedule == def.schedule
            && common.active_hours == def.active_hours
            && common.kind == def.kind
            && common.policy == def.policy
            && common.target == def.target
            && common.delete_after_run == def.delete_after_run
            && common.origin == def.origin
            && *common.agent_prompt == *agent_prompt
    }
}

/// The common parts the driver's entries hold, one copy of each.
#[derive(Default)]
pub(super) struct Commons {
    shared: BTreeSet<Arc<Common>>,
    /// The last one shared: heartbeats come by key, and an agent's are mostly alike, so a
    /// start-up's million lookups mostly end here.
    last: Option<Arc<Common>>,
}

impl Commons {
    /// The shared copy of `common`.
    pub fn share(&mut self, common: Common) -> Arc<Common> {
        if let Some(last) = self.last.as_ref().filter(|last| ***last == common) {
            return Arc::clone(last);
        }
        let shared = match self.shared.get(&common) {
            Some(shared) => Arc::clone(shared),
            None => {
                let shared = Arc::new(common);
                self.shared.insert(Arc::clone(&shared));
                shared
            }
        };
        self.last = Some(Arc::clone(&shared));
        shared
    }

    /// Drops the common parts no entry holds any more (called with the hourly prune): a
    /// runtime job made and deleted with a target of its own leaves nothing behind.
    pub fn forget_unused(&mut self) {
        self.last = None;
        self.shared.retain(|common| Arc::strong_count(common) > 1);
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.shared.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn common(target: &str, kind: JobKind) -> Common {
        Common {
            schedule: Schedule::Every(std::time::Duration::from_secs(60)),
            active_hours: None,
            kind,
            policy: RunPolicy::default(),
            target: DeliveryTarget::parse(target).expect("valid"),
            delete_after_run: false,
            origin: Origin::Config,
            agent_prompt: Box::default(),
        }
    }

    #[test]
    fn one_copy_per_common_part_and_unused_ones_are_forgotten() {
        let mut commons = Commons::default();
        let first = commons.share(common("webhook:ops", JobKind::Heartbeat));
        let second = commons.share(common("webhook:ops", JobKind::Heartbeat));
        assert!(Arc::ptr_eq(&first, &second), "the same common part is shared");
        let other_kind = commons.share(common("webhook:ops", JobKind::Cron));
        assert!(!Arc::ptr_eq(&first, &other_kind), "any field that differs makes another");
        let other_schedule = Common {
            schedule: Schedule::Every(std::time::Duration::from_secs(61)),
            ..common("webhook:ops", JobKind::Heartbeat)
        };
        let other_schedule = commons.share(other_schedule);
        assert!(!Arc::ptr_eq(&first, &other_schedule), "so does another schedule");
        let other = commons.share(common("stdout", JobKind::Heartbeat));
        assert_eq!(commons.len(), 4);
        drop((other, other_kind, other_schedule));
        commons.forget_unused();
        assert_eq!(commons.len(), 1, "a common part nobody holds is dropped");
        drop((first, second));
        commons.forget_unused();
        assert_eq!(commons.len(), 0);
    }

    #[test]
    fn a_record_arms_the_definition_it_was_made_from_and_not_one_timed_otherwise() {
        use std::time::Duration;

        let def = crate::core::heartbeat::test_def("main", "inbox", 60);
        let mut commons = Commons::default();
        let record = Arming::new(def.clone(), &mut commons);
        assert!(record.arms(&def));
        let reworded =
            HeartbeatDef { prompt: "Read the inbox.".into(), model: Some("small".to_owned()), ..def.clone() };
        assert!(record.arms(&reworded), "a run reads its prompt and model from the store: nothing to re-arm");
        let retimed = HeartbeatDef { schedule: Schedule::Every(Duration::from_secs(138)), ..def.clone() };
        assert!(!record.arms(&retimed), "another cadence is another timer");
        let elsewhere = HeartbeatDef { target: DeliveryTarget::parse("webhook:ops").expect("valid"), ..def.clone() };
        assert!(!record.arms(&elsewhere));
        let agent = HeartbeatDef { kind: JobKind::Agent, ..def.clone() };
        let agent_record = Arming::new(agent.clone(), &mut commons);
        let agent_reworded = HeartbeatDef { prompt: "Look around.".into(), ..agent };
        assert!(!agent_record.arms(&agent_reworded), "an agent heartbeat's wakes build on its prompt");
    }
}
