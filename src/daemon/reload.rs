//! Reloading the config file in a running daemon (`POST /v1/reload`, SIGHUP). Heartbeats
//! and cron jobs follow the file at once: unchanged ones keep their timers and slots,
//! changed ones are re-armed, removed ones stop. Everything else (the LLM, adapters,
//! agents' settings, the store, the API) is read at start-up; a reload that changes it
//! says so in `restart_needed` and leaves it as it runs. A file that does not validate
//! changes nothing.
//!
//! On a node of a cluster (ADR 0024) a reload asked of one node reaches all: it first
//! asks every other node whether its own file holds the same heartbeats (a digest of
//! them), and goes on only if all say yes; then it seeds the store and re-arms its own
//! partitions, and has every other node re-arm theirs. Each node re-arms what changed
//! between the heartbeats it runs and its file's.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::{json, Value};

use crate::api::forward;
use crate::api::reload::{ReloadCall, ReloadError, Reloader};
use crate::cluster::engines::ClusterRoute;
use crate::core::ids::HeartbeatKey;
use crate::core::reload_plan::{changes, heartbeats_digest, in_partition};
use crate::daemon::config::{self, Config};
use crate::driver::EngineClient;
use crate::mcp::servers::McpServers;
use crate::ports::clock::Clock;
use crate::ports::store::{SeedReport, Store};

/// What a reload re-arms: the engine of a single node, or a node's part of a cluster.
pub enum ReloadTarget {
    One(EngineClient),
    Cluster {
        route: ClusterRoute,
        /// The store without a fence: the seed writes every partition's definitions.
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        /// This node's API token, sent with the calls to the other nodes (a SIGHUP has no
        /// caller whose token could be passed on).
        token: Option<Arc<str>>,
    },
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
    /// Seeds the store and re-arms this node's partitions; the report of what changed.
    async fn apply_here(&self, new: &Config) -> Result<SeedReport, ReloadError> {
        let unavailable = |error: &dyn std::fmt::Display| ReloadError::Unavailable(error.to_string());
        match &self.target {
            ReloadTarget::One(engine) => engine.reload_heartbeats(&new.heartbeats).await.map_err(|e| unavailable(&e)),
            ReloadTarget::Cluster { route, store, clock, .. } => {
                let report = changes(&self.running().heartbeats, &new.heartbeats);
                // Every node seeds the same file: the first changes the store, the rest find
                // it unchanged.
                store.seed_config(&new.heartbeats, clock.wall()).await.map_err(|e| unavailable(&e))?;
                for (partition, engine) in route.engines() {
                    // A partition lost meanwhile answers `Stopped`; its next owner loads the store.
                    let _ = engine.apply_seeded(&new.heartbeats, &in_partition(&report, partition)).await;
                }
                Ok(report)
            }
        }
    }

    /// Asks every other node of the cluster to check (`check_only`) or apply a reload of
    /// heartbeats with `digest`; each node's answer, or why there is none.
    async fn ask_nodes(&self, digest: &str, check_only: bool) -> BTreeMap<String, Result<Value, String>> {
        let ReloadTarget::Cluster { route, token, .. } = &self.target else { return BTreeMap::new() };
        let authorization =
            token.as_deref().and_then(|token| axum::http::HeaderValue::from_str(&format!("Bearer {token}")).ok());
        let path = format!("/v1/reload?digest={digest}{}", if check_only { "&check=true" } else { "" });
        forward::call_owners(route, reqwest::Method::POST, &path, authorization.as_ref()).await
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
        match call {
            ReloadCall::Node { digest: theirs, .. } if clustered && theirs != digest => {
                return Err(ReloadError::Disagrees(format!(
                    "the heartbeats in {} differ from those of the node that asked; give every node the same \
                     file first",
                    file.display()
                )));
            }
            ReloadCall::Node { check_only: true, .. } if clustered => {
                return Ok(json!({ "file": file.display().to_string(), "digest": digest }));
            }
            ReloadCall::Operator if clustered => {
                let refusals: Vec<String> = self
                    .ask_nodes(&digest, true)
                    .await
                    .into_iter()
                    .filter_map(|(node, answer)| answer.err().map(|problem| format!("node {node}: {problem}")))
                    .collect();
                if !refusals.is_empty() {
                    return Err(ReloadError::Disagrees(refusals.join("; ")));
                }
            }
            _ => {}
        }
        let report = self.apply_here(&new).await?;
        if call == ReloadCall::Operator && clustered {
            for (node, answer) in self.ask_nodes(&digest, false).await {
                nodes.insert(node, answer.unwrap_or_else(|problem| json!({ "error": problem })));
            }
        }
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
