//! Tools the model may call during a run. A tool returns text for the model and,
//! optionally, a typed signal the agent loop acts on (never a magic string in the text).
//! Whatever the model sends, a tool answers with a result or an error it can read.

pub mod external;
pub mod native;
pub mod pause;
pub mod scheduled;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use jiff::Timestamp;

use crate::agent::settings::AgentSettings;
use crate::core::heartbeat::{HeartbeatDef, JobKind};
use crate::core::ids::{AgentId, HeartbeatKey};
use crate::core::pause::Pause;
use crate::core::text::truncate_chars;
use crate::limits::TOOL_ARGUMENTS_QUOTE_CHARS_MAX;
use crate::ports::clock::{Clock, Mono};
use crate::ports::fence::Fence;
use crate::ports::llm::ToolSpec;
use crate::ports::store::{Store, ToolCallOutcome, ToolCallRecord};

/// What the scheduling tools change in the running engine: the store first, then the
/// running schedule, acknowledged only once both hold. The driver's `Control` is the one
/// implementation (the agent layer names what it needs; the driver provides it).
#[async_trait]
pub trait JobControl: Send + Sync + 'static {
    fn store(&self) -> &Arc<dyn Store>;
    fn clock(&self) -> &Arc<dyn Clock>;

    /// Creates or replaces a job.
    ///
    /// # Errors
    /// In words, when the store write failed (nothing changed) or the engine stopped.
    async fn upsert(&self, def: HeartbeatDef) -> Result<(), String>;
    /// Deletes a job; whether it existed.
    ///
    /// # Errors
    /// As [`JobControl::upsert`].
    async fn delete(&self, key: &HeartbeatKey) -> Result<bool, String>;
    /// Enables or disables a job; whether it existed.
    ///
    /// # Errors
    /// As [`JobControl::upsert`].
    async fn set_enabled(&self, key: &HeartbeatKey, enabled: bool) -> Result<bool, String>;
    /// Pauses the agent's timed heartbeats for `minutes`.
    ///
    /// # Errors
    /// As [`JobControl::upsert`].
    async fn pause(&self, agent: &AgentId, minutes: u32) -> Result<Pause, String>;
}

/// A control-flow request from a tool to the agent loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolSignal {
    /// Stop the loop now; the agent's timed heartbeats are paused until `until`.
    PauseHeartbeats { minutes: u32, until: Timestamp },
}

/// What a tool call gave back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutcome {
    /// The text the model reads as the tool's result.
    pub content: String,
    pub signal: Option<ToolSignal>,
    /// Whether the call was refused or failed.
    pub is_error: bool,
    /// How it ended, for the run log.
    pub kind: ToolCallOutcome,
}

impl ToolOutcome {
    pub fn ok(content: impl Into<String>) -> Self {
        Self { content: content.into(), signal: None, is_error: false, kind: ToolCallOutcome::Ok }
    }

    /// A refusal before anything was done (bad arguments, no such tool).
    pub fn error(content: impl Into<String>) -> Self {
        Self::failed(ToolCallOutcome::Refused, content)
    }

    /// A failure of kind `kind`, in words the model reads.
    pub fn failed(kind: ToolCallOutcome, content: impl Into<String>) -> Self {
        Self { content: format!("error: {}", content.into()), signal: None, is_error: true, kind }
    }
}

/// The run a tool call belongs to: its slot, its budget's end, its lease's fence, and the
/// record of every call it made (kept here, so a run its budget cuts off keeps them too).
pub struct RunScope {
    pub key: HeartbeatKey,
    pub slot: Timestamp,
    /// The run's budget ends here; a call gets at most what is left.
    pub deadline: Mono,
    pub clock: Arc<dyn Clock>,
    /// Checked before every call of a tool that may write (ADR 0018).
    pub fence: Fence,
    pub records: Mutex<Vec<ToolCallRecord>>,
    /// When each recorded call went out (for the run's trace).
    pub call_starts: Mutex<Vec<Mono>>,
}

impl RunScope {
    pub fn records(&self) -> Vec<ToolCallRecord> {
        self.records.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Records a call before it goes out (as cut off by the run's budget), returning its
    /// index for [`RunScope::finish`]: a call the budget drops stays recorded as such.
    pub fn start(&self, tool: String, arguments: String) -> usize {
        let mut records = self.records.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        self.call_starts.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(self.clock.monotonic());
        records.push(ToolCallRecord {
            tool,
            arguments,
            duration_ms: 0,
            outcome: ToolCallOutcome::Timeout,
            error: Some("the run's budget ended during the call".to_owned()),
        });
        records.len() - 1
    }

    pub fn finish(&self, index: usize, duration: Duration, outcome: &ToolOutcome) {
        let mut records = self.records.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(record) = records.get_mut(index) {
            record.duration_ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
            record.outcome = outcome.kind;
            record.error = outcome.is_error.then(|| truncate_chars(&outcome.content, TOOL_ERROR_LOGGED_CHARS_MAX));
        }
    }

    /// When each recorded call went out, in the order of [`RunScope::records`].
    pub fn call_starts(&self) -> Vec<Mono> {
        self.call_starts.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Calls recorded so far.
    pub fn calls(&self) -> usize {
        self.records.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len()
    }
}

/// Characters of a failed call's error the run log keeps.
const TOOL_ERROR_LOGGED_CHARS_MAX: usize = 300;

/// What a tool may touch: its agent, that agent's settings, and the engine's control.
#[derive(Clone)]
pub struct ToolContext {
    pub agent: AgentId,
    pub settings: Arc<AgentSettings>,
    pub control: Arc<dyn JobControl>,
    /// An operator's call through the API (true), or the model's in a run (false): only
    /// an operator may opt a job into tools that may write.
    pub operator: bool,
    /// The run the call belongs to; `None` for an operator's call through the API.
    pub run: Option<Arc<RunScope>>,
}

#[async_trait]
pub trait Tool: Send + Sync + 'static {
    fn spec(&self) -> ToolSpec;

    /// Runs the tool with the model's raw JSON argument text.
    async fn call(&self, context: &ToolContext, arguments: &serde_json::Value) -> ToolOutcome;

    /// Its name in the run log (the model's name for it, unless it says otherwise).
    fn logged_name(&self) -> String {
        self.spec().name
    }
}

/// The tools offered in a run, by name.
#[derive(Clone, Default)]
pub struct ToolBox {
    tools: BTreeMap<String, Listed>,
    /// The specs offered to the model, gathered once: the engine's toolbox serves every
    /// run, and building the schemas again for each was 5 % of a busy engine's CPU.
    specs: OnceLock<Arc<[ToolSpec]>>,
}

/// A tool with what the toolbox read of it when it was added: a run's toolbox is the
/// engine's with the run's server tools beside it, so its built-in tools' schemas are
/// built once per engine, not once per run (7 % of the simulator's CPU when they were).
#[derive(Clone)]
struct Listed {
    tool: Arc<dyn Tool>,
    spec: ToolSpec,
    logged_name: String,
}

impl ToolBox {
    /// The tools every heartbeat run gets: `pause_heartbeats`, `heartbeat` and `cron`.
    pub fn standard() -> Self {
        let mut toolbox = Self::default();
        toolbox.add(Arc::new(pause::PauseHeartbeats));
        toolbox.add(Arc::new(scheduled::ScheduledTool { kind: JobKind::Heartbeat }));
        toolbox.add(Arc::new(scheduled::ScheduledTool { kind: JobKind::Cron }));
        toolbox
    }

    pub fn add(&mut self, tool: Arc<dyn Tool>) {
        let spec = tool.spec();
        let logged_name = tool.logged_name();
        self.tools.insert(spec.name.clone(), Listed { tool, spec, logged_name });
        self.specs = OnceLock::new();
    }

    /// This toolbox with `more` beside its own tools (a run's tools of servers).
    pub fn with(&self, more: impl IntoIterator<Item = Arc<dyn Tool>>) -> Self {
        let mut toolbox = self.clone();
        for tool in more {
            toolbox.add(tool);
        }
        toolbox
    }

    /// The name the run log keeps for a call of `name`: `server/tool` for a tool of a
    /// server, the name itself for a built-in one or one the run does not have.
    pub fn logged_name(&self, name: &str) -> String {
        match self.tools.get(name) {
            Some(listed) => listed.logged_name.clone(),
            None => truncate_chars(name, TOOL_ARGUMENTS_QUOTE_CHARS_MAX),
        }
    }

    /// The specs of its tools, in name order.
    pub fn specs(&self) -> Arc<[ToolSpec]> {
        Arc::clone(self.specs.get_or_init(|| self.tools.values().map(|listed| listed.spec.clone()).collect()))
    }

    /// Calls `name` with `arguments` as the model wrote them. Unknown tools and arguments
    /// that are not a JSON object come back as errors the model can read.
    pub async fn call(&self, context: &ToolContext, name: &str, arguments: &str) -> ToolOutcome {
        let Some(Listed { tool, .. }) = self.tools.get(name) else {
            let names: Vec<&str> = self.tools.keys().map(String::as_str).collect();
            let name = truncate_chars(name, TOOL_ARGUMENTS_QUOTE_CHARS_MAX);
            return ToolOutcome::error(format!("there is no tool named {name:?}; the tools are {}", names.join(", ")));
        };
        let trimmed = arguments.trim();
        let parsed = if trimmed.is_empty() { Ok(serde_json::json!({})) } else { serde_json::from_str(trimmed) };
        match parsed {
            Ok(value @ serde_json::Value::Object(_)) => tool.call(context, &value).await,
            Ok(_) | Err(_) => {
                let quoted = truncate_chars(arguments, TOOL_ARGUMENTS_QUOTE_CHARS_MAX);
                ToolOutcome::error(format!("the arguments of {name} must be a JSON object; got {quoted:?}"))
            }
        }
    }
}
