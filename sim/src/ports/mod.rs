//! The simulated implementations of systole's ports, and the event sink that feeds the
//! engine's own events into the trace.

pub mod http;
pub mod llm;
pub mod messenger;
pub mod store;
pub mod telemetry;
pub mod tools;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use jiff::Timestamp;

use systole::core::ids::HeartbeatKey;
use systole::driver::events::{EngineEvent, EventSink};

use crate::trace::Event;
use crate::world::{Life, RarePath, World};

pub struct TraceSink {
    pub world: Arc<World>,
    pub life: Arc<Life>,
    triggers: Mutex<BTreeMap<HeartbeatKey, Triggers>>,
}

/// A heartbeat's triggers not started yet, and the latest one that started.
#[derive(Default)]
struct Triggers {
    pending: BTreeSet<Timestamp>,
    started: Option<Timestamp>,
}

impl TraceSink {
    pub fn new(world: Arc<World>, life: Arc<Life>) -> Self {
        Self { world, life, triggers: Mutex::default() }
    }

    /// Counts a grid slot that started after a later trigger of its heartbeat: the two
    /// waited for places together and the trigger went first.
    fn note_start(&self, event: &EngineEvent) {
        let mut triggers = self.triggers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match event {
            EngineEvent::Triggered { key, slot, .. } => {
                triggers.entry(key.clone()).or_default().pending.insert(*slot);
            }
            EngineEvent::RunStarted { key, slot } => {
                let Some(triggers) = triggers.get_mut(key) else { return };
                if triggers.pending.remove(slot) {
                    triggers.started = triggers.started.max(Some(*slot));
                } else if triggers.started.is_some_and(|trigger| trigger > *slot) {
                    triggers.started = None;
                    self.world.took(RarePath::TriggerAheadOfWaitingSlot);
                }
            }
            _ => {}
        }
    }
}

impl EventSink for TraceSink {
    fn emit(&self, _at: Timestamp, event: &EngineEvent) {
        // A dead process reports nothing; its node is killed a moment later.
        if self.life.is_alive() {
            self.note_start(event);
            self.world.record(Event::Engine { life: self.life.number, event: event.clone() });
        }
    }
}
