//! Reloading the config file in a running daemon (`POST /v1/reload`, SIGHUP). Heartbeats
//! and cron jobs follow the file at once: unchanged ones keep their timers and slots,
//! changed ones are re-armed, removed ones stop. Everything else (the LLM, adapters,
//! agents' settings, the store, the API) is read at start-up; a reload that changes it
//! says so in `restart_needed` and leaves it as it runs. A file that does not validate
//! changes nothing.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::{json, Value};

use crate::api::reload::{ReloadError, Reloader};
use crate::daemon::config::{self, Config};
use crate::driver::EngineClient;
use crate::mcp::servers::McpServers;

pub struct ConfigReloader {
    /// The config as this process runs it (its heartbeats as last reloaded).
    running: Mutex<Config>,
    engine: EngineClient,
    /// Listed again at every reload: a server's tools may have changed without a word.
    mcp: Arc<McpServers>,
    /// One reload at a time: two would seed over each other.
    busy: tokio::sync::Mutex<()>,
}

impl ConfigReloader {
    pub fn new(running: Config, engine: EngineClient, mcp: Arc<McpServers>) -> Self {
        Self { running: Mutex::new(running), engine, mcp, busy: tokio::sync::Mutex::new(()) }
    }

    fn running(&self) -> std::sync::MutexGuard<'_, Config> {
        self.running.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The sections that differ and only take effect at a restart.
fn restart_needed(running: &Config, new: &Config) -> Vec<&'static str> {
    let mut sections = Vec::new();
    if running.store_path != new.store_path || running.postgres != new.postgres {
        sections.push("store");
    }
    if running.llm != new.llm || running.system_prompt != new.system_prompt {
        sections.push("llm");
    }
    if running.adapters != new.adapters {
        sections.push("adapters");
    }
    if running.engine != new.engine {
        sections.push("engine");
    }
    if running.agents != new.agents
        || running.agent_default != new.agent_default
        || running.workspaces != new.workspaces
    {
        sections.push("agents (settings)");
    }
    if running.visibility != new.visibility {
        sections.push("visibility");
    }
    if running.api != new.api {
        sections.push("api");
    }
    if running.mcp != new.mcp {
        sections.push("mcp");
    }
    sections
}

#[async_trait]
impl Reloader for ConfigReloader {
    async fn reload(&self) -> Result<Value, ReloadError> {
        let _one_at_a_time = self.busy.lock().await;
        let file = self.running().file.clone();
        let new = config::load(&file).map_err(|error| ReloadError::Invalid(error.to_string()))?;
        let report = self
            .engine
            .reload_heartbeats(&new.heartbeats)
            .await
            .map_err(|error| ReloadError::Unavailable(error.to_string()))?;
        self.mcp.refresh();
        let mut running = self.running();
        let restart = restart_needed(&running, &new);
        running.heartbeats = new.heartbeats;
        let keys = |keys: &[crate::core::ids::HeartbeatKey]| keys.iter().map(ToString::to_string).collect::<Vec<_>>();
        Ok(json!({
            "file": file.display().to_string(),
            "inserted": keys(&report.inserted),
            "updated": keys(&report.updated),
            "unchanged": keys(&report.unchanged),
            "removed": keys(&report.removed),
            "restart_needed": restart,
        }))
    }
}
