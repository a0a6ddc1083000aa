//! Reloading the config file in a running daemon (`POST /v1/reload`, SIGHUP). Heartbeats
//! and cron jobs follow the file at once: unchanged ones keep their timers and slots,
//! changed ones are re-armed, removed ones stop. Everything else (the LLM, adapters,
//! agents' settings, the store, the API) is read at start-up; a reload that changes it
//! says so in `restart_needed` and leaves it as it runs. A file that does not validate
//! changes nothing.
//!
//! On a node of a cluster (ADR 0024) a reload asked of one node reaches all
//! (`cluster::reload`, whose exchange the simulator runs too); here the other nodes are
//! reached over HTTP at the addresses the lease table gives.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::{json, Value};

use crate::api::forward;
use crate::api::reload::{ReloadCall, ReloadError, Reloader};
use crate::cluster::reload::{ClusterReloadError, NodeReload, ReloadPeers};
use crate::core::ids::HeartbeatKey;
use crate::core::reload_plan::heartbeats_digest;
use crate::daemon::config::{self, Config};
use crate::driver::EngineClient;
use crate::mcp::servers::McpServers;
use crate::ports::store::SeedReport;

/// What a reload re-arms: the engine of a single node, or a node's part of a cluster.
pub enum ReloadTarget {
    One(EngineClient),
    Cluster {
        node: NodeReload,
        /// This node's API token, sent with the calls to the other nodes (a SIGHUP has no
        /// caller whose token could be passed on).
        token: Option<Arc<str>>,
    },
}

/// The other nodes, reached at their APIs with this node's token.
struct HttpPeers {
    from: String,
    token: Option<Arc<str>>,
}

#[async_trait]
impl ReloadPeers for HttpPeers {
    async fn ask(&self, _node: &str, url: &str, digest: &str, check_only: bool) -> Result<Value, String> {
        let authorization =
            self.token.as_deref().and_then(|token| axum::http::HeaderValue::from_str(&format!("Bearer {token}")).ok());
        let path = format!("/v1/reload?digest={digest}{}", if check_only { "&check=true" } else { "" });
        forward::call_node(&self.from, url, reqwest::Method::POST, &path, authorization.as_ref()).await
    }
}

pub struct ConfigReloader {
    /// The config as this process runs it (its heartbeats as last reloaded).
    running: Mutex<Config>,
    target: ReloadTarget,
    /// Listed again at every reload: a server's tools may have changed without a word.
    mcp: Arc<McpServers>,
    /// One reload at a time: two would seed over each other.
    busy: tokio::sync::Mutex<()>,
}

impl ConfigReloader {
    pub fn new(running: Config, target: ReloadTarget, mcp: Arc<McpServers>) -> Self {
        Self { running: Mutex::new(running), target, mcp, busy: tokio::sync::Mutex::new(()) }
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

impl ConfigReloader {
    /// Applies `new` on this node alone: a single daemon's engine, or this node's part of
    /// a cluster (asked by another node).
    async fn apply_here(&self, new: &Config) -> Result<SeedReport, ReloadError> {
        let unavailable = |error: &dyn std::fmt::Display| ReloadError::Unavailable(error.to_string());
        match &self.target {
            ReloadTarget::One(engine) => engine.reload_heartbeats(&new.heartbeats).await.map_err(|e| unavailable(&e)),
            ReloadTarget::Cluster { node, .. } => {
                let running = self.running().heartbeats.clone();
                node.apply_here(&running, &new.heartbeats).await.map_err(|e| unavailable(&e))
            }
        }
    }

    /// The operator's reload of the whole cluster, asked of this node: the report of what
    /// changed here, and each other node's answer.
    async fn apply_everywhere(
        &self,
        node: &NodeReload,
        token: Option<&Arc<str>>,
        digest: &str,
        new: &Config,
    ) -> Result<(SeedReport, BTreeMap<String, Value>), ReloadError> {
        let peers = HttpPeers { from: node.route.node.clone(), token: token.cloned() };
        let running = self.running().heartbeats.clone();
        let reloaded =
            node.reload_all(&peers, digest, &running, &new.heartbeats).await.map_err(|error| match error {
                ClusterReloadError::Disagrees(why) => ReloadError::Disagrees(why),
                ClusterReloadError::Unavailable(why) => ReloadError::Unavailable(why),
            })?;
        let nodes = reloaded
            .nodes
            .into_iter()
            .map(|(node, answer)| (node, answer.unwrap_or_else(|problem| json!({ "error": problem }))))
            .collect();
        Ok((reloaded.report, nodes))
    }
}

#[async_trait]
impl Reloader for ConfigReloader {
    async fn reload(&self, call: ReloadCall) -> Result<Value, ReloadError> {
        // One reload at a time; a check changes nothing and never waits, or two nodes
        // reloaded at once would each wait for the other's check.
        let check_only = matches!(call, ReloadCall::Node { check_only: true, .. });
        let _one_at_a_time = if check_only { None } else { Some(self.busy.lock().await) };
        let file = self.running().file.clone();
        let new = config::load(&file).map_err(|error| ReloadError::Invalid(error.to_string()))?;
        let digest = heartbeats_digest(&new.heartbeats);
        let clustered = matches!(self.target, ReloadTarget::Cluster { .. });
        let mut nodes = BTreeMap::new();
        let report = match (&call, &self.target) {
            (ReloadCall::Node { digest: theirs, .. }, ReloadTarget::Cluster { .. }) if *theirs != digest => {
                return Err(ReloadError::Disagrees(format!(
                    "the heartbeats in {} differ from those of the node that asked; give every node the same \
                     file first",
                    file.display()
                )));
            }
            (ReloadCall::Node { check_only: true, .. }, ReloadTarget::Cluster { .. }) => {
                return Ok(json!({ "file": file.display().to_string(), "digest": digest }));
            }
            (ReloadCall::Operator, ReloadTarget::Cluster { node, token }) => {
                let (report, answers) = self.apply_everywhere(node, token.as_ref(), &digest, &new).await?;
                nodes = answers;
                report
            }
            _ => self.apply_here(&new).await?,
        };
        self.mcp.refresh();
        let mut running = self.running();
        let restart = restart_needed(&running, &new);
        running.heartbeats = new.heartbeats;
        let keys = |keys: &[HeartbeatKey]| keys.iter().map(ToString::to_string).collect::<Vec<_>>();
        let mut answer = json!({
            "file": file.display().to_string(),
            "inserted": keys(&report.inserted),
            "updated": keys(&report.updated),
            "unchanged": keys(&report.unchanged),
            "removed": keys(&report.removed),
            "restart_needed": restart,
        });
        if clustered {
            answer["digest"] = json!(digest);
            answer["nodes"] = json!(nodes);
        }
        Ok(answer)
    }
}
