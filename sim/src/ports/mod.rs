//! The simulated implementations of systole's ports, and the event sink that feeds the
//! engine's own events into the trace.

pub mod http;
pub mod llm;
pub mod messenger;
pub mod store;
pub mod telemetry;
pub mod tools;

use std::sync::Arc;

use jiff::Timestamp;

use systole::driver::events::{EngineEvent, EventSink};

use crate::trace::Event;
use crate::world::{Life, World};

pub struct TraceSink {
    pub world: Arc<World>,
    pub life: Arc<Life>,
}

impl EventSink for TraceSink {
    fn emit(&self, _at: Timestamp, event: &EngineEvent) {
        // A dead process reports nothing; its node is killed a moment later.
        if self.life.is_alive() {
            self.world.record(Event::Engine { life: self.life.number, event: event.clone() });
        }
    }
}
