//! Workspaces held in memory: for tests, embedding applications and the simulator.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;

use crate::core::ids::AgentId;
use crate::ports::workspace::{Workspace, WorkspaceError};

#[derive(Debug, Default)]
pub struct MemoryWorkspace {
    files: Mutex<BTreeMap<AgentId, String>>,
}

impl MemoryWorkspace {
    /// Writes (`Some`) or removes (`None`) the agent's `HEARTBEAT.md`.
    pub fn set_heartbeat_file(&self, agent: &AgentId, content: Option<&str>) {
        let mut files = self.files.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match content {
            Some(content) => files.insert(agent.clone(), content.to_owned()),
            None => files.remove(agent),
        };
    }
}

#[async_trait]
impl Workspace for MemoryWorkspace {
    async fn heartbeat_file(&self, agent: &AgentId) -> Result<Option<String>, WorkspaceError> {
        Ok(self.files.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(agent).cloned())
    }
}
