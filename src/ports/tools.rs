//! The tool-server port (ADR 0019): the tools that servers outside the engine offer (MCP
//! servers over stdio or streamable HTTP), what they offer now, and one call. The real
//! side (`adapters/mcp/`) runs the official MCP SDK on real tokio; the simulator's twin
//! offers seeded tools that are slow, hang, die mid-call and change their lists.
//!
//! A call never hangs and never panics: it is bounded by `timeout` (the caller passes the
//! lesser of the server's call timeout and what is left of the run's budget), and a
//! server that dies while a call is in flight answers it with an error.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use jiff::Timestamp;

use crate::core::ids::HeartbeatKey;
use crate::core::tool_policy::ToolName;

/// What a server says about a tool. Hints from the server, never trusted as such.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolHints {
    pub read_only: Option<bool>,
    pub destructive: Option<bool>,
    pub idempotent: Option<bool>,
    pub open_world: Option<bool>,
}

/// One tool a server lists.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerTool {
    pub name: ToolName,
    pub description: String,
    /// The JSON schema of its arguments (an object schema).
    pub input_schema: serde_json::Value,
    pub hints: ToolHints,
    /// Whether the operator marked it read-only (or the code that registered a native
    /// tool declared it so): the policy's input, unlike `hints`.
    pub read_only: bool,
}

/// How a server is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerState {
    /// Connecting (at start-up, or again after a failure).
    Starting,
    Ready,
    /// Down, with why and when it is tried again.
    Down {
        why: String,
        retry_at: Option<Timestamp>,
    },
}

impl ServerState {
    pub fn as_str(&self) -> &'static str {
        match self {
            ServerState::Starting => "starting",
            ServerState::Ready => "ready",
            ServerState::Down { .. } => "down",
        }
    }
}

/// One server as the engine sees it now.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerView {
    pub name: String,
    /// `stdio`, `http` or `native`.
    pub transport: &'static str,
    pub state: ServerState,
    pub tools: Vec<ServerTool>,
    /// Restarts since the daemon started.
    pub restarts: u64,
}

/// Every server, by name.
pub type Catalog = BTreeMap<String, ServerView>;

/// Which run a call belongs to: servers with an external effect can drop a repeat by
/// `idempotency_key` (sent in the request's `_meta`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallContext {
    pub key: HeartbeatKey,
    pub slot: Timestamp,
    /// `<agent>/<heartbeat>/<slot ms>/tool-<n>`: the same for a call a retry repeats.
    pub idempotency_key: String,
}

/// What a tool answered, flattened for the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolAnswer {
    /// Text content joined; other content described, never dropped silently.
    pub text: String,
    /// The server reported a failure of the tool (`isError`): the model reads it as one.
    pub is_error: bool,
}

/// Why a call did not get an answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolCallError {
    #[error("server {server} is not available: {why}")]
    Unavailable { server: String, why: String },
    #[error("{tool} did not answer within {} s (the call was cancelled)", timeout.as_secs_f64())]
    Timeout { tool: ToolName, timeout: Duration },
    #[error("{tool} failed: {why}")]
    Failed { tool: ToolName, why: String },
}

/// The servers of tools.
#[async_trait]
pub trait ToolServers: Send + Sync + 'static {
    /// Every server and the tools it lists now.
    fn catalog(&self) -> Catalog;

    /// Calls `tool` with `arguments` (a JSON object), within `timeout`.
    ///
    /// # Errors
    /// When the server is down, the call times out (a cancellation is sent), or the
    /// server dies or answers something that is not a result.
    async fn call(
        &self,
        tool: &ToolName,
        arguments: serde_json::Value,
        timeout: Duration,
        context: &CallContext,
    ) -> Result<ToolAnswer, ToolCallError>;
}

/// No tool servers: the default of an engine without any.
pub struct NoToolServers;

#[async_trait]
impl ToolServers for NoToolServers {
    fn catalog(&self) -> Catalog {
        Catalog::new()
    }

    async fn call(
        &self,
        tool: &ToolName,
        _arguments: serde_json::Value,
        _timeout: Duration,
        _context: &CallContext,
    ) -> Result<ToolAnswer, ToolCallError> {
        Err(ToolCallError::Unavailable {
            server: tool.server.clone(),
            why: "no tool servers are configured".to_owned(),
        })
    }
}
