//! Test doubles behind the real ports, for driving the engine on virtual time.
#![allow(dead_code)] // each test binary uses its own subset

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use jiff::Timestamp;

use systole::adapters::virtual_clock::VirtualClock;
use systole::core::delivery_target::DeliveryTarget;
use systole::core::heartbeat::{HeartbeatDef, Origin};
use systole::core::ids::{AgentId, HeartbeatId, HeartbeatKey};
use systole::driver::events::{EngineEvent, EventSink};
use systole::ports::clock::Clock;
use systole::ports::llm::{ChatRequest, ChatResponse, Llm, LlmError};
use systole::ports::messenger::{Delivery, DeliveryError, Messenger};

pub const START: &str = "2026-01-05T12:00:00Z";

pub fn start() -> Timestamp {
    START.parse().expect("test timestamp")
}

pub fn key(agent: &str, heartbeat: &str) -> HeartbeatKey {
    HeartbeatKey { agent: AgentId::new(agent).expect("valid"), heartbeat: HeartbeatId::new(heartbeat).expect("valid") }
}

/// A heartbeat whose prompt is its id, so the test LLM can tell heartbeats apart.
pub fn def(agent: &str, heartbeat: &str, every_secs: u64) -> HeartbeatDef {
    HeartbeatDef {
        key: key(agent, heartbeat),
        prompt: heartbeat.to_owned(),
        interval: Duration::from_secs(every_secs),
        target: DeliveryTarget::parse("test:inbox").expect("valid"),
        active_hours: None,
        timeout: Duration::from_secs(120),
        origin: Origin::Config,
    }
}

/// What the test LLM does for a prompt.
#[derive(Debug, Clone)]
pub enum Behaviour {
    Reply(String),
    Silent,
    Fail,
    /// Answers after this much virtual time.
    Slow(Duration, String),
}

pub struct ScriptedByPrompt {
    pub clock: Arc<VirtualClock>,
    pub behaviours: Mutex<BTreeMap<String, Behaviour>>,
    pub calls: Mutex<Vec<(Timestamp, String)>>,
}

impl ScriptedByPrompt {
    pub fn new(clock: Arc<VirtualClock>) -> Arc<Self> {
        Arc::new(Self { clock, behaviours: Mutex::new(BTreeMap::new()), calls: Mutex::new(Vec::new()) })
    }

    pub fn set(&self, prompt: &str, behaviour: Behaviour) {
        self.behaviours.lock().expect("lock").insert(prompt.to_owned(), behaviour);
    }

    pub fn calls_for(&self, prompt: &str) -> usize {
        self.calls.lock().expect("lock").iter().filter(|(_, p)| p == prompt).count()
    }
}

#[async_trait]
impl Llm for ScriptedByPrompt {
    async fn complete(&self, request: ChatRequest) -> Result<ChatResponse, LlmError> {
        let prompt = request.messages.last().map(|m| m.content.clone()).unwrap_or_default();
        self.calls.lock().expect("lock").push((self.clock.wall(), prompt.clone()));
        let behaviour = self.behaviours.lock().expect("lock").get(&prompt).cloned().unwrap_or(Behaviour::Silent);
        match behaviour {
            Behaviour::Reply(text) => Ok(ChatResponse { text: Some(text), tool_calls: Vec::new() }),
            Behaviour::Silent => Ok(ChatResponse::default()),
            Behaviour::Fail => Err(LlmError::Status { status: 500, body: "boom".to_owned() }),
            Behaviour::Slow(delay, text) => {
                self.clock.sleep(delay).await;
                Ok(ChatResponse { text: Some(text), tool_calls: Vec::new() })
            }
        }
    }
}

#[derive(Default)]
pub struct RecordingMessenger {
    pub deliveries: Mutex<Vec<Delivery>>,
}

impl RecordingMessenger {
    pub fn texts(&self) -> Vec<String> {
        self.deliveries.lock().expect("lock").iter().map(|d| d.text.clone()).collect()
    }
}

#[async_trait]
impl Messenger for RecordingMessenger {
    async fn deliver(&self, delivery: &Delivery) -> Result<(), DeliveryError> {
        self.deliveries.lock().expect("lock").push(delivery.clone());
        Ok(())
    }
}

#[derive(Default)]
pub struct RecordingSink {
    pub events: Mutex<Vec<(Timestamp, EngineEvent)>>,
}

impl RecordingSink {
    pub fn matching(&self, pick: impl Fn(&EngineEvent) -> bool) -> Vec<(Timestamp, EngineEvent)> {
        self.events.lock().expect("lock").iter().filter(|(_, e)| pick(e)).cloned().collect()
    }
}

impl EventSink for RecordingSink {
    fn emit(&self, at: Timestamp, event: &EngineEvent) {
        self.events.lock().expect("lock").push((at, event.clone()));
    }
}
