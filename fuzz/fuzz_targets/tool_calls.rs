//! Arbitrary tool names and argument strings, as a model might send them, through the
//! real tool layer of a running engine: never a panic, always an answer the model can
//! read (an error starts with "error:").
#![no_main]

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use systole::adapters::scripted_llm::ScriptedLlm;
use systole::adapters::system_clock::SystemClock;
use systole::agent::settings::AgentSettings;
use systole::agent::tools::{ToolBox, ToolContext};
use systole::core::ids::AgentId;
use systole::driver::{self, EngineHandle, EngineOptions, Ports};
use systole::ports::messenger::{Delivery, DeliveryError, Messenger};
use systole::store::memory::MemoryStore;

struct Nowhere;

#[async_trait::async_trait]
impl Messenger for Nowhere {
    async fn deliver(&self, _delivery: &Delivery) -> Result<(), DeliveryError> {
        Ok(())
    }
}

struct Harness {
    runtime: tokio::runtime::Runtime,
    context: ToolContext,
    toolbox: ToolBox,
    _engine: EngineHandle,
}

fn harness() -> &'static Harness {
    static HARNESS: OnceLock<Harness> = OnceLock::new();
    HARNESS.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let ports = Ports::new(
            Arc::new(SystemClock::new()),
            Arc::new(ScriptedLlm::new(Vec::new())),
            Arc::new(Nowhere),
            Arc::new(MemoryStore::new()),
        );
        let engine = runtime.block_on(driver::start(ports, EngineOptions::default())).expect("engine");
        let context = ToolContext {
            agent: AgentId::new("fuzz").expect("valid id"),
            settings: Arc::new(AgentSettings::default()),
            control: engine.control().clone(),
        };
        Harness { runtime, context, toolbox: ToolBox::standard(), _engine: engine }
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (name, arguments) = text.split_once('\n').unwrap_or((text, ""));
    // Aim most inputs at the real tools, so their argument parsing is what gets fuzzed.
    let name = match name {
        "p" => "pause_heartbeats",
        "h" => "heartbeat",
        other => other,
    };
    let harness = harness();
    let outcome = harness.runtime.block_on(harness.toolbox.call(&harness.context, name, arguments));
    assert!(!outcome.content.is_empty());
    assert_eq!(outcome.is_error, outcome.content.starts_with("error:"));
});
