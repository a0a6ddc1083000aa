//! The workspace port: the files an agent keeps for itself. The engine reads one of them,
//! `HEARTBEAT.md`, before each agent heartbeat run.

use async_trait::async_trait;

use crate::core::ids::AgentId;

/// The file the agent heartbeat follows.
pub const HEARTBEAT_FILE_NAME: &str = "HEARTBEAT.md";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot read {file} of agent {agent}: {problem}")]
pub struct WorkspaceError {
    pub agent: String,
    pub file: &'static str,
    pub problem: String,
}

#[async_trait]
pub trait Workspace: Send + Sync + 'static {
    /// The agent's `HEARTBEAT.md`, or `None` when it has none (no workspace, or no file).
    async fn heartbeat_file(&self, agent: &AgentId) -> Result<Option<String>, WorkspaceError>;
}
