//! Workspaces on disk: each agent's `workspace` directory from the config.

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::path::PathBuf;

use async_trait::async_trait;

use crate::core::ids::AgentId;
use crate::ports::workspace::{Workspace, WorkspaceError, HEARTBEAT_FILE_NAME};

#[derive(Debug, Default, Clone)]
pub struct DirWorkspace {
    dirs: BTreeMap<AgentId, PathBuf>,
}

impl DirWorkspace {
    pub fn new(dirs: BTreeMap<AgentId, PathBuf>) -> Self {
        Self { dirs }
    }
}

#[async_trait]
impl Workspace for DirWorkspace {
    async fn heartbeat_file(&self, agent: &AgentId) -> Result<Option<String>, WorkspaceError> {
        let Some(dir) = self.dirs.get(agent) else { return Ok(None) };
        let path = dir.join(HEARTBEAT_FILE_NAME);
        let failed = |problem: String| WorkspaceError { agent: agent.to_string(), file: HEARTBEAT_FILE_NAME, problem };
        // A blocking read on the blocking pool: the driver must not stall on a slow disk.
        let read = tokio::task::spawn_blocking(move || std::fs::read_to_string(path))
            .await
            .map_err(|error| failed(error.to_string()))?;
        match read {
            Ok(content) => Ok(Some(content)),
            Err(error) if error.kind() == ErrorKind::NotFound => Ok(None),
            Err(error) => Err(failed(error.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reads_the_file_and_tells_missing_from_present() {
        let dir = std::env::temp_dir().join(format!("systole-workspace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let agent = AgentId::new("ops").expect("valid id");
        let workspace = DirWorkspace::new(BTreeMap::from([(agent.clone(), dir.clone())]));
        let _ = std::fs::remove_file(dir.join(HEARTBEAT_FILE_NAME));
        assert_eq!(workspace.heartbeat_file(&agent).await, Ok(None));
        std::fs::write(dir.join(HEARTBEAT_FILE_NAME), "- check mail\n").expect("write");
        assert_eq!(workspace.heartbeat_file(&agent).await, Ok(Some("- check mail\n".to_owned())));
        let other = AgentId::new("other").expect("valid id");
        assert_eq!(workspace.heartbeat_file(&other).await, Ok(None));
        // A directory where the file should be is an error, not "missing".
        std::fs::remove_file(dir.join(HEARTBEAT_FILE_NAME)).expect("remove");
        std::fs::create_dir_all(dir.join(HEARTBEAT_FILE_NAME)).expect("dir");
        assert!(workspace.heartbeat_file(&agent).await.is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
