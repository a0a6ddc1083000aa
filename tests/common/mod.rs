//! Test doubles behind the real ports, for driving the engine on virtual time.
#![allow(dead_code)] // each test binary uses its own subset

pub mod late_answers;
pub mod postgres_server;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use jiff::Timestamp;

use systole::adapters::memory_workspace::MemoryWorkspace;
use systole::adapters::virtual_clock::VirtualClock;
use systole::core::cron::CronSchedule;
use systole::core::delivery_target::DeliveryTarget;
use systole::core::heartbeat::{HeartbeatDef, JobKind, Origin};
use systole::core::ids::{AgentId, HeartbeatId, HeartbeatKey};
use systole::core::policy::RunPolicy;
use systole::core::schedule::Schedule;
use systole::driver::events::{EngineEvent, EventSink};
use systole::driver::{self, EngineHandle, EngineOptions, Ports};
use systole::ports::clock::Clock;
use systole::ports::llm::{ChatRequest, ChatResponse, Llm, LlmError, Role, ToolCall};
use systole::ports::messenger::{Delivery, DeliveryError, Messenger};
use systole::ports::store::{ExecutionStatus, Store};
use systole::store::memory::MemoryStore;

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
        kind: JobKind::Heartbeat,
        prompt: heartbeat.into(),
        schedule: Schedule::Every(Duration::from_secs(every_secs)),
        policy: RunPolicy::default(),
        delete_after_run: false,
        dedup: true,
        target: DeliveryTarget::parse("test:inbox").expect("valid"),
        active_hours: None,
        timeout: Duration::from_secs(120),
        origin: Origin::Config,
        tools: Default::default(),
        model: None,
    }
}

/// A cron job (`JobKind::Cron`) on `expression` in `zone`, prompt = id.
pub fn cron_def(agent: &str, id: &str, expression: &str, zone: &str) -> HeartbeatDef {
    let schedule = Schedule::cron(CronSchedule::parse(expression, zone).expect("valid cron"));
    HeartbeatDef { kind: JobKind::Cron, schedule, ..def(agent, id, 60) }
}

/// What the test LLM does for a prompt.
#[derive(Debug, Clone)]
pub enum Behaviour {
    Reply(String),
    Silent,
    Fail,
    /// Answers after this much virtual time.
    Slow(Duration, String),
    /// Fails with this HTTP status after this much virtual time.
    SlowFail(Duration, u16),
    /// Calls this tool with these arguments once; after the tool's result, stays silent.
    CallOnce(String, String),
    /// Calls this tool on every turn, never answering.
    CallForever(String, String),
}

pub struct ScriptedByPrompt {
    pub clock: Arc<VirtualClock>,
    pub behaviours: Mutex<BTreeMap<String, Behaviour>>,
    pub calls: Mutex<Vec<(Timestamp, String)>>,
    /// Every request, to read the tool results the model was shown.
    pub requests: Mutex<Vec<ChatRequest>>,
}

impl ScriptedByPrompt {
    pub fn new(clock: Arc<VirtualClock>) -> Arc<Self> {
        Arc::new(Self {
            clock,
            behaviours: Mutex::new(BTreeMap::new()),
            calls: Mutex::new(Vec::new()),
            requests: Mutex::new(Vec::new()),
        })
    }

    pub fn set(&self, prompt: &str, behaviour: Behaviour) {
        self.behaviours.lock().expect("lock").insert(prompt.to_owned(), behaviour);
    }

    /// The tool results shown to the model, in order.
    pub fn tool_results(&self) -> Vec<String> {
        let requests = self.requests.lock().expect("lock");
        let mut seen = Vec::new();
        for request in requests.iter() {
            for message in request.messages.iter().filter(|m| m.role == Role::Tool) {
                if !seen.iter().any(|text: &String| **text == *message.content) {
                    seen.push(message.content.to_string());
                }
            }
        }
        seen
    }

    pub fn calls_for(&self, prompt: &str) -> usize {
        self.calls.lock().expect("lock").iter().filter(|(_, p)| p == prompt).count()
    }
}

#[async_trait]
impl Llm for ScriptedByPrompt {
    async fn complete(&self, request: ChatRequest) -> Result<ChatResponse, LlmError> {
        let prompt =
            request.messages.iter().find(|m| m.role == Role::User).map(|m| m.content.to_string()).unwrap_or_default();
        let has_tool_result = request.messages.iter().any(|m| m.role == Role::Tool);
        self.calls.lock().expect("lock").push((self.clock.wall(), prompt.clone()));
        self.requests.lock().expect("lock").push(request.clone());
        let call = |name: String, arguments: String| {
            let tool_calls = vec![ToolCall { id: format!("call-{}", request.messages.len()), name, arguments }];
            Ok(ChatResponse { text: None, tool_calls, usage: None })
        };
        let behaviour = self.behaviours.lock().expect("lock").get(&prompt).cloned().unwrap_or(Behaviour::Silent);
        match behaviour {
            Behaviour::Reply(text) => Ok(ChatResponse { text: Some(text), tool_calls: Vec::new(), usage: None }),
            Behaviour::Silent => Ok(ChatResponse::default()),
            Behaviour::Fail => Err(LlmError::Status { status: 500, body: "boom".to_owned() }),
            Behaviour::Slow(delay, text) => {
                self.clock.sleep(delay).await;
                Ok(ChatResponse { text: Some(text), tool_calls: Vec::new(), usage: None })
            }
            Behaviour::SlowFail(delay, status) => {
                self.clock.sleep(delay).await;
                Err(LlmError::Status { status, body: "refused".to_owned() })
            }
            Behaviour::CallOnce(_, _) if has_tool_result => Ok(ChatResponse::default()),
            Behaviour::CallOnce(name, arguments) | Behaviour::CallForever(name, arguments) => call(name, arguments),
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

/// Engine options for tests: the heartbeat tool may deliver to the test target.
pub fn options() -> EngineOptions {
    let mut options = EngineOptions::default();
    options.agent_default.allowed_targets.insert("test:inbox".to_owned());
    options
}

/// [`options`] without error backoff, for tests that count failures to the breaker.
pub fn options_without_backoff() -> EngineOptions {
    EngineOptions { error_backoff: Vec::new(), ..options() }
}

pub struct Rig {
    pub clock: Arc<VirtualClock>,
    pub llm: Arc<ScriptedByPrompt>,
    pub messenger: Arc<RecordingMessenger>,
    pub store: Arc<MemoryStore>,
    pub events: Arc<RecordingSink>,
    pub workspace: Arc<MemoryWorkspace>,
    /// The servers of tools (none unless a test sets them).
    pub tools: Arc<dyn systole::ports::tools::ToolServers>,
}

impl Rig {
    pub fn new() -> Self {
        let clock = Arc::new(VirtualClock::new(start()));
        Self {
            llm: ScriptedByPrompt::new(Arc::clone(&clock)),
            clock,
            messenger: Arc::new(RecordingMessenger::default()),
            store: Arc::new(MemoryStore::new()),
            events: Arc::new(RecordingSink::default()),
            workspace: Arc::new(MemoryWorkspace::default()),
            tools: Arc::new(systole::ports::tools::NoToolServers),
        }
    }

    pub async fn start(&self, defs: &[HeartbeatDef]) -> EngineHandle {
        self.start_with(defs, options()).await
    }

    pub async fn start_with(&self, defs: &[HeartbeatDef], options: EngineOptions) -> EngineHandle {
        self.start_on(self.store.clone(), defs, options).await
    }

    /// Starts the engine on `store` (a wrapper of the rig's own) instead of the rig's store.
    pub async fn start_on(&self, store: Arc<dyn Store>, defs: &[HeartbeatDef], options: EngineOptions) -> EngineHandle {
        store.seed_config(defs, self.clock.wall()).await.expect("seed");
        let ports = Ports {
            clock: self.clock.clone(),
            llm: self.llm.clone(),
            messenger: self.messenger.clone(),
            store,
            events: self.events.clone(),
            workspace: self.workspace.clone(),
            tools: self.tools.clone(),
            telemetry: Arc::new(systole::ports::telemetry::NoTelemetry),
        };
        driver::start(ports, options).await.expect("start")
    }

    pub async fn advance(&self, secs: u64) {
        self.clock.sleep(Duration::from_secs(secs)).await;
    }

    /// When each run of `agent/heartbeat` started (wall clock) and the slot it stands for.
    pub fn starts(&self, agent: &str, heartbeat: &str) -> Vec<(Timestamp, Timestamp)> {
        let wanted = key(agent, heartbeat);
        self.events
            .matching(|e| matches!(e, EngineEvent::RunStarted { key, .. } if *key == wanted))
            .into_iter()
            .filter_map(|(at, event)| match event {
                EngineEvent::RunStarted { slot, .. } => Some((at, slot)),
                _ => None,
            })
            .collect()
    }

    pub async fn statuses(&self, agent: &str, heartbeat: &str) -> Vec<ExecutionStatus> {
        let mut runs = self.store.executions(&key(agent, heartbeat), 1_000).await.expect("read");
        runs.reverse();
        runs.into_iter().map(|e| e.status).collect()
    }
}

/// The agent heartbeat of `agent` (`kind = agent`, id `main`), prompt "hb", every `every_secs`.
pub fn agent_def(agent: &str, every_secs: u64) -> HeartbeatDef {
    let key = HeartbeatKey::agent_heartbeat(&AgentId::new(agent).expect("valid"));
    HeartbeatDef { key, kind: JobKind::Agent, prompt: "hb".into(), ..def(agent, "unused", every_secs) }
}

/// A main-mode cron job: every `every_secs` it queues `[CRON:id] text` for the agent heartbeat.
pub fn cron_main_def(agent: &str, id: &str, every_secs: u64, text: &str) -> HeartbeatDef {
    HeartbeatDef {
        kind: JobKind::CronMain,
        prompt: text.into(),
        target: DeliveryTarget::silent(),
        ..def(agent, id, every_secs)
    }
}
