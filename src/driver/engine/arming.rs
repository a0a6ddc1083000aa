//! What the driver keeps of each heartbeat's definition (ADR 0026): what arming and
//! deciding its slots read, and nothing a run alone needs. A claimed slot's run reads the
//! whole definition from the store (prompt, tools, model, timeout, dedup), so a waiting
//! heartbeat's memory grows with none of them.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::core::active_hours::ActiveHours;
use crate::core::delivery_target::DeliveryTarget;
use crate::core::heartbeat::{HeartbeatDef, JobKind, Origin};
use crate::core::ids::HeartbeatKey;
use crate::core::policy::RunPolicy;
use crate::core::schedule::Schedule;

/// A heartbeat as its timer and guards see it.
pub(super) struct Arming {
    pub key: HeartbeatKey,
    pub kind: JobKind,
    pub schedule: Schedule,
    pub policy: RunPolicy,
    /// Boxed: most heartbeats have none, and the window is 40 bytes inline.
    pub active_hours: Option<Box<ActiveHours>>,
    /// Shared by every heartbeat with the same target ([`Targets`]): the guards and the
    /// breaker's alerts read it, and most heartbeats of an agent deliver to one place.
    pub target: Arc<DeliveryTarget>,
    pub delete_after_run: bool,
    pub origin: Origin,
    /// An agent heartbeat's prompt, which each of its wakes builds on; empty otherwise.
    pub agent_prompt: Box<str>,
}

impl Arming {
    pub fn new(def: HeartbeatDef, targets: &mut Targets) -> Self {
        let agent_prompt = if def.kind == JobKind::Agent { def.prompt.into_boxed_str() } else { Box::default() };
        Self {
            key: def.key,
            kind: def.kind,
            schedule: def.schedule,
            policy: def.policy,
            active_hours: def.active_hours.map(Box::new),
            target: targets.share(def.target),
            delete_after_run: def.delete_after_run,
            origin: def.origin,
            agent_prompt,
        }
    }
}

/// The delivery targets the driver's entries hold, one copy of each.
#[derive(Default)]
pub(super) struct Targets {
    shared: BTreeSet<Arc<DeliveryTarget>>,
}

impl Targets {
    /// The shared copy of `target`.
    pub fn share(&mut self, target: DeliveryTarget) -> Arc<DeliveryTarget> {
        if let Some(shared) = self.shared.get(&target) {
            return Arc::clone(shared);
        }
        let shared = Arc::new(target);
        self.shared.insert(Arc::clone(&shared));
        shared
    }

    /// Drops the targets no entry holds any more (called with the hourly prune): a
    /// runtime job made and deleted with a target of its own leaves nothing behind.
    pub fn forget_unused(&mut self) {
        self.shared.retain(|target| Arc::strong_count(target) > 1);
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.shared.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_copy_per_target_and_unused_ones_are_forgotten() {
        let mut targets = Targets::default();
        let ops = DeliveryTarget::parse("webhook:ops").expect("valid");
        let first = targets.share(ops.clone());
        let second = targets.share(ops);
        assert!(Arc::ptr_eq(&first, &second), "the same target is shared");
        let other = targets.share(DeliveryTarget::parse("stdout").expect("valid"));
        assert_eq!(targets.len(), 2);
        drop(other);
        targets.forget_unused();
        assert_eq!(targets.len(), 1, "a target nobody holds is dropped");
        drop((first, second));
        targets.forget_unused();
        assert_eq!(targets.len(), 0);
    }
}
