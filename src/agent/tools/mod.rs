//! Tools the model may call during a run. A tool returns text for the model and,
//! optionally, a typed signal the agent loop acts on (never a magic string in the text).
//! Whatever the model sends, a tool answers with a result or an error it can read.

pub mod pause;
pub mod scheduled;

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use jiff::Timestamp;

use crate::agent::settings::AgentSettings;
use crate::core::heartbeat::JobKind;
use crate::core::ids::AgentId;
use crate::driver::control::Control;
use crate::driver::run::truncate_chars;
use crate::limits::TOOL_ARGUMENTS_QUOTE_CHARS_MAX;
use crate::ports::llm::ToolSpec;

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
}

impl ToolOutcome {
    pub fn ok(content: impl Into<String>) -> Self {
        Self { content: content.into(), signal: None, is_error: false }
    }

    pub fn error(content: impl Into<String>) -> Self {
        Self { content: format!("error: {}", content.into()), signal: None, is_error: true }
    }
}

/// What a tool may touch: its agent, that agent's settings, and the engine's control.
#[derive(Clone)]
pub struct ToolContext {
    pub agent: AgentId,
    pub settings: Arc<AgentSettings>,
    pub control: Control,
}

#[async_trait]
pub trait Tool: Send + Sync + 'static {
    fn spec(&self) -> ToolSpec;

    /// Runs the tool with the model's raw JSON argument text.
    async fn call(&self, context: &ToolContext, arguments: &serde_json::Value) -> ToolOutcome;
}

/// The tools offered in a run, by name.
#[derive(Clone, Default)]
pub struct ToolBox {
    tools: BTreeMap<String, Arc<dyn Tool>>,
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
        self.tools.insert(tool.spec().name, tool);
    }

    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools.values().map(|tool| tool.spec()).collect()
    }

    /// Calls `name` with `arguments` as the model wrote them. Unknown tools and arguments
    /// that are not a JSON object come back as errors the model can read.
    pub async fn call(&self, context: &ToolContext, name: &str, arguments: &str) -> ToolOutcome {
        let Some(tool) = self.tools.get(name) else {
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
