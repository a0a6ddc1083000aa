//! Reloads in the cluster simulation: each node serves `POST /v1/reload` as a task of its
//! own (so a node stopped past its lease answers when it wakes, and a killed one not at
//! all), and the exchange between the nodes is the engine's own
//! (`systole::cluster::reload`), its peers reached through these servers with the API's
//! forward timeout.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

use systole::cluster::reload::{NodeReload, ReloadPeers};
use systole::core::heartbeat::HeartbeatDef;
use systole::core::reload_plan::heartbeats_digest;
use systole::ports::clock::Clock;

use super::{ClusterWorld, FORWARD_TIMEOUT_SECS};

/// What a node's reload endpoint is asked.
pub enum ReloadCall {
    /// An operator's reload of the cluster.
    Operator,
    /// Another node's check or apply of the heartbeats with `digest`.
    Node { digest: String, check_only: bool },
    /// The simulation's question (no endpoint of the API): the heartbeats this node's
    /// partition engines hold now.
    Inspect,
}

pub struct ReloadRequest {
    call: ReloadCall,
    answer: oneshot::Sender<Result<Value, String>>,
}

/// A node's reload endpoint for one life: the heartbeats it runs, one reload at a time.
pub struct ReloadServer {
    world: Arc<ClusterWorld>,
    node: NodeReload,
    running: Mutex<Vec<HeartbeatDef>>,
    busy: tokio::sync::Mutex<()>,
}

impl ReloadServer {
    /// Serves calls until the node dies; each call is a task of the node's own.
    pub fn serve(
        world: Arc<ClusterWorld>,
        node: NodeReload,
        running: Vec<HeartbeatDef>,
    ) -> mpsc::Sender<ReloadRequest> {
        let (sender, mut calls) = mpsc::channel::<ReloadRequest>(16);
        let server = Arc::new(Self { world, node, running: Mutex::new(running), busy: tokio::sync::Mutex::new(()) });
        tokio::spawn(async move {
            while let Some(request) = calls.recv().await {
                let server = Arc::clone(&server);
                tokio::spawn(async move {
                    let answer = server.handle(request.call).await;
                    let _ = request.answer.send(answer);
                });
            }
        });
        sender
    }

    fn running(&self) -> Vec<HeartbeatDef> {
        self.running.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    async fn engines_hold(&self) -> Value {
        let mut keys = Vec::new();
        for (_, engine) in self.node.route.engines() {
            let Ok(views) = engine.inspect().await else { continue };
            keys.extend(views.into_iter().map(|view| view.key));
        }
        json!(keys)
    }

    async fn handle(&self, call: ReloadCall) -> Result<Value, String> {
        // A check or an inspection changes nothing and never waits for a reload in progress.
        let _one_at_a_time = match call {
            ReloadCall::Node { check_only: true, .. } | ReloadCall::Inspect => None,
            _ => Some(self.busy.lock().await),
        };
        let file = self.world.config();
        let digest = heartbeats_digest(&file);
        match call {
            ReloadCall::Node { digest: theirs, .. } if theirs != digest => {
                Err("the heartbeats in this node's file differ from those of the node that asked".to_owned())
            }
            ReloadCall::Node { check_only: true, .. } => Ok(json!({ "digest": digest })),
            ReloadCall::Node { .. } => {
                let report = self.node.apply_here(&self.running(), &file).await.map_err(|e| e.to_string())?;
                *self.running.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = file;
                Ok(json!({ "updated": report.updated.len() }))
            }
            ReloadCall::Inspect => Ok(self.engines_hold().await),
            ReloadCall::Operator => {
                let peers = SimPeers { world: Arc::clone(&self.world) };
                let reloaded = self
                    .node
                    .reload_all(&peers, &digest, &self.running(), &file)
                    .await
                    .map_err(|error| format!("{error:?}"))?;
                *self.running.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = file;
                let everywhere = reloaded.nodes.values().all(Result::is_ok);
                let nodes: BTreeMap<String, String> = reloaded
                    .nodes
                    .into_iter()
                    .map(|(node, answer)| (node, answer.map_or_else(|problem| problem, |_| "applied".to_owned())))
                    .collect();
                Ok(json!({ "everywhere": everywhere, "nodes": nodes }))
            }
        }
    }
}

/// The other nodes, reached at their reload endpoints.
struct SimPeers {
    world: Arc<ClusterWorld>,
}

#[async_trait]
impl ReloadPeers for SimPeers {
    async fn ask(&self, node: &str, _url: &str, digest: &str, check_only: bool) -> Result<Value, String> {
        let call = ReloadCall::Node { digest: digest.to_owned(), check_only };
        call_node(&self.world, node, call, Duration::from_secs(FORWARD_TIMEOUT_SECS)).await
    }
}

/// Asks `node`'s reload endpoint, waiting at most `patience` for its answer.
pub async fn call_node(
    world: &ClusterWorld,
    node: &str,
    call: ReloadCall,
    patience: Duration,
) -> Result<Value, String> {
    let Some(server) = world.reload_server(node) else { return Err(format!("{node} has not started")) };
    let (answer, answered) = oneshot::channel();
    server.send(ReloadRequest { call, answer }).await.map_err(|_| format!("{node} refused the connection"))?;
    tokio::select! {
        biased; // an unbiased select draws from an RNG outside the seed
        answer = answered => answer.map_err(|_| format!("{node} closed the connection"))?,
        () = world.clock.sleep(patience) => Err(format!("{node} did not answer within {}s", patience.as_secs())),
    }
}
