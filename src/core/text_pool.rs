//! One copy of each distinct prompt and delivery target among a seed's definitions (the
//! memory store's seed) or a config's jobs (its parse, ADR 0064).
//!
//! Heartbeats are mostly made alike (an agent's jobs, a tenant's template), but a config's
//! parse or an API call gives each its own texts, and the memory store holds every
//! definition: a million heartbeats of one 240-byte prompt kept a million copies of it,
//! 256 of a heartbeat's 839 bytes (`docs/performance.md`, "A seed's equal texts kept once").
//! A pool lives for one seed on one thread, or for one parse, so it holds no text after it
//! and needs no bound: it never holds more texts than what it serves.

use std::sync::Arc;

use foldhash::fast::FixedState;

use crate::core::delivery_target::DeliveryTarget;
use crate::core::heartbeat::HeartbeatDef;

#[derive(Default)]
pub(crate) struct TextPool {
    prompts: hashbrown::HashSet<Arc<str>, FixedState>,
    targets: hashbrown::HashSet<DeliveryTarget, FixedState>,
}

impl TextPool {
    /// A copy of `def` whose prompt and target are the pool's, when the pool met equal ones.
    pub fn share(&mut self, def: &HeartbeatDef) -> HeartbeatDef {
        HeartbeatDef { prompt: self.prompt(&def.prompt), target: self.target(&def.target), ..def.clone() }
    }

    fn prompt(&mut self, prompt: &Arc<str>) -> Arc<str> {
        Arc::clone(self.prompts.get_or_insert_with(&**prompt, |_| Arc::clone(prompt)))
    }

    /// The pool's copy of `prompt`, made from it when the pool met no equal one. For the
    /// config's parse, which the simulator's build leaves out.
    #[cfg(not(madsim))]
    pub fn prompt_text(&mut self, prompt: &str) -> Arc<str> {
        Arc::clone(self.prompts.get_or_insert_with(prompt, |text| Arc::from(text)))
    }

    pub fn target(&mut self, target: &DeliveryTarget) -> DeliveryTarget {
        self.targets.get_or_insert_with(target, DeliveryTarget::clone).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::heartbeat::test_def;

    #[test]
    fn equal_texts_come_back_as_the_first_one_met() {
        let mut pool = TextPool::default();
        let first = test_def("main", "a", 60);
        let twin = HeartbeatDef {
            prompt: first.prompt.to_string().into(),
            target: DeliveryTarget::parse(&first.target.to_string()).expect("valid"),
            ..test_def("main", "b", 60)
        };
        let other = HeartbeatDef { prompt: "Something else.".into(), ..test_def("main", "c", 60) };
        let kept = pool.share(&first);
        let shared = pool.share(&twin);
        assert!(Arc::ptr_eq(&kept.prompt, &first.prompt));
        assert!(Arc::ptr_eq(&shared.prompt, &first.prompt), "an equal prompt is the first's");
        assert!(arcstr::ArcStr::ptr_eq(shared.target.text(), first.target.text()), "an equal target is the first's");
        assert_eq!(shared, twin, "nothing else of the definition changes");
        let apart = pool.share(&other);
        assert!(Arc::ptr_eq(&apart.prompt, &other.prompt), "a prompt of its own stays its own");
        assert_eq!(&*apart.prompt, "Something else.");
    }
}
