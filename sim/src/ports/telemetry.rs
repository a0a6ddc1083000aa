//! The simulated twin of the trace exporter (ADR 0022): each finished run's trace goes into
//! the world's record, where the checker holds it to the run it came from.

use std::sync::Arc;

use systole::ports::telemetry::{RunTrace, Telemetry};

use crate::checker::traces::Traced;
use crate::trace::Event;
use crate::world::{Life, World};

pub struct SimTelemetry {
    pub world: Arc<World>,
    pub life: Arc<Life>,
}

impl Telemetry for SimTelemetry {
    fn enabled(&self) -> bool {
        true
    }

    fn export(&self, trace: RunTrace) {
        let completions = trace.completions.iter().map(|span| (span.offset, span.duration));
        let tools = trace.tool_calls.iter().map(|span| (span.offset, span.duration));
        let traced = Traced {
            duration: trace.duration,
            children: completions.chain(tools).collect(),
            completions: trace.completions.len(),
        };
        self.world.record(Event::RunTraced { life: self.life.number, key: trace.key, slot: trace.slot, trace: traced });
    }
}
