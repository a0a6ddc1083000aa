//! A tool of a server outside the engine (an MCP server, or native tools a library
//! registered), as one run offers it to the model (ADR 0019). The policy decided that the
//! run may have it; here each call is bounded by what is left of the run's budget, a tool
//! that may write checks the lease's fence first (ADR 0018), and every failure becomes a
//! result the model reads.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::agent::tools::{Tool, ToolContext, ToolOutcome};
use crate::core::tool_policy::ToolName;
use crate::ports::llm::ToolSpec;
use crate::ports::store::ToolCallOutcome;
use crate::ports::tools::{CallContext, ServerTool, ToolCallError, ToolServers};

/// Left of a run's budget when a call must give up, so its own timeout (and the
/// cancellation it sends) comes before the run is cut off.
const CALL_BUDGET_MARGIN_MILLIS: u64 = 250;

pub struct ExternalTool {
    tool: ServerTool,
    model_name: String,
    servers: Arc<dyn ToolServers>,
}

impl ExternalTool {
    pub fn new(tool: ServerTool, servers: Arc<dyn ToolServers>) -> Self {
        Self { model_name: tool.name.model_name(), tool, servers }
    }

    pub fn name(&self) -> &ToolName {
        &self.tool.name
    }
}

#[async_trait]
impl Tool for ExternalTool {
    fn spec(&self) -> ToolSpec {
        let access = if self.tool.read_only { "reads only" } else { "may change things" };
        ToolSpec {
            name: self.model_name.clone(),
            description: format!("[{} ({access})] {}", self.tool.name, self.tool.description),
            parameters: Arc::new(self.tool.input_schema.clone()),
        }
    }

    fn logged_name(&self) -> String {
        self.tool.name.to_string()
    }

    async fn call(&self, context: &ToolContext, arguments: &serde_json::Value) -> ToolOutcome {
        let name = &self.tool.name;
        let Some(run) = &context.run else {
            return ToolOutcome::error(format!("{name} can only be called inside a run"));
        };
        if !self.tool.read_only {
            if let Err(fenced) = run.fence.check() {
                return ToolOutcome::failed(ToolCallOutcome::Fenced, fenced.to_string());
            }
        }
        let left = run.deadline.saturating_since(run.clock.monotonic());
        let timeout = left.saturating_sub(Duration::from_millis(CALL_BUDGET_MARGIN_MILLIS));
        if timeout.is_zero() {
            return ToolOutcome::failed(ToolCallOutcome::Timeout, "the run's budget has no time left for a call");
        }
        let call = CallContext {
            key: run.key.clone(),
            slot: run.slot,
            idempotency_key: format!(
                "{}/{}/{}/tool-{}",
                run.key.agent,
                run.key.heartbeat,
                run.slot.as_millisecond(),
                run.calls()
            ),
        };
        match self.servers.call(name, arguments.clone(), timeout, &call).await {
            Ok(answer) if answer.is_error => ToolOutcome::failed(ToolCallOutcome::ToolError, answer.text),
            Ok(answer) => ToolOutcome::ok(answer.text),
            Err(error) => {
                let kind = match error {
                    ToolCallError::Timeout { .. } => ToolCallOutcome::Timeout,
                    ToolCallError::Unavailable { .. } | ToolCallError::Failed { .. } => ToolCallOutcome::Unavailable,
                };
                ToolOutcome::failed(kind, error.to_string())
            }
        }
    }
}
