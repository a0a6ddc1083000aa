//! Real `systole serve` nodes on one throwaway PostgreSQL, for the cluster tests: a local
//! OpenAI-compatible model that answers after a delay and a webhook receiver that records
//! every delivery, the nodes' configs, and the lease table as the database has it.
#![allow(clippy::disallowed_methods)] // real processes, a real database, real time
#![allow(dead_code)] // each cluster test uses its own subset

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::common::postgres_server::POSTGRES_TEST_PASSWORD;
use systole::core::ids::AgentId;
use systole::core::partition::{partition_of, PARTITIONS_COUNT};

pub const LEASE_SECS: u64 = 3;
/// How long the model takes to answer: long enough that a kill or a stop lands mid-run.
pub const LLM_DELAY_MS: u64 = 400;
pub const WAIT_SECS_MAX: u64 = 60;
const PASSWORD_ENV: &str = "SYSTOLE_CLUSTER_TEST_DB_PASSWORD";

#[derive(Default)]
pub struct Receiver {
    replies: AtomicU64,
    /// Each delivery: its idempotency key, the agent, and when it arrived.
    pub deliveries: Mutex<Vec<(String, String, Instant)>>,
    /// Each model request: the agent its prompt names, and when it arrived.
    pub requests: Mutex<Vec<(String, Instant)>>,
}

impl Receiver {
    pub fn agents_heard_since(&self, since: Instant) -> BTreeSet<String> {
        let deliveries = self.deliveries.lock().expect("lock");
        deliveries.iter().filter(|(_, _, at)| *at >= since).map(|(_, agent, _)| agent.clone()).collect()
    }

    pub fn first_after(&self, agent: &str, since: Instant) -> Option<Instant> {
        let deliveries = self.deliveries.lock().expect("lock");
        deliveries.iter().filter(|(_, who, at)| who == agent && *at >= since).map(|(_, _, at)| *at).min()
    }

    pub fn requested_since(&self, agent: &str, since: Instant) -> bool {
        self.requests.lock().expect("lock").iter().any(|(who, at)| who == agent && *at >= since)
    }
}

async fn chat(State(receiver): State<Arc<Receiver>>, Json(body): Json<Value>) -> Json<Value> {
    // The prompt is "report for agent-N".
    let text = body.to_string();
    let agent = text
        .split("report for ")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')).next())
        .unwrap_or_default()
        .to_owned();
    receiver.requests.lock().expect("lock").push((agent, Instant::now()));
    tokio::time::sleep(Duration::from_millis(LLM_DELAY_MS)).await;
    // A different text every time: duplicate suppression must not hide a delivery.
    let count = receiver.replies.fetch_add(1, Ordering::SeqCst);
    let message = json!({ "role": "assistant", "content": format!("report number {count}") });
    Json(json!({ "choices": [{ "index": 0, "message": message, "finish_reason": "stop" }] }))
}

async fn hook(State(receiver): State<Arc<Receiver>>, headers: HeaderMap, Json(body): Json<Value>) -> StatusCode {
    let key = headers.get("idempotency-key").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let agent = body["agent"].as_str().unwrap_or_default().to_owned();
    receiver.deliveries.lock().expect("lock").push((key, agent, Instant::now()));
    StatusCode::NO_CONTENT
}

pub async fn start_peers() -> (Arc<Receiver>, SocketAddr) {
    let receiver = Arc::new(Receiver::default());
    let app = Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/hook", post(hook))
        .with_state(Arc::clone(&receiver));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
    (receiver, address)
}

/// A node's config: `agents` agents, each with a heartbeat every second to the receiver.
pub fn write_config(dir: &Path, node: &str, url: &str, address: SocketAddr, agents: usize) -> PathBuf {
    let mut config = format!(
        r#"
[store]
url = "{url}"
password_env = "{PASSWORD_ENV}"

[api]
listen = "127.0.0.1:0"

[cluster]
node_id = "{node}"
lease_secs = {LEASE_SECS}

[llm]
base_url = "http://{address}/v1"
model = "test-model"
timeout = "5s"
attempts = 1

[adapters.webhook.ops]
url = "http://{address}/hook"

[engine]
shutdown_grace = "2s"
"#
    );
    for index in 0..agents {
        config.push_str(&format!(
            "\n[[agents]]\nid = \"agent-{index}\"\n[[agents.heartbeats]]\nid = \"pulse\"\n\
             prompt = \"report for agent-{index}\"\nevery = \"1s\"\ntarget = \"webhook:ops\"\n"
        ));
    }
    std::fs::create_dir_all(dir).expect("node dir");
    let path = dir.join("systole.toml");
    std::fs::write(&path, config).expect("write config");
    path
}

pub fn spawn_node(config: &Path, log: &Path) -> Child {
    spawn_node_env(config, log, &[])
}

/// A node with more environment (a token): its log is appended to, so a restarted node's
/// earlier lines stay.
pub fn spawn_node_env(config: &Path, log: &Path, envs: &[(&str, &str)]) -> Child {
    let log = std::fs::OpenOptions::new().create(true).append(true).open(log).expect("log file");
    let mut command = Command::new(env!("CARGO_BIN_EXE_systole"));
    command
        .args(["serve", "--config", config.to_str().expect("utf-8 path")])
        .env("RUST_LOG", "info")
        .env(PASSWORD_ENV, POSTGRES_TEST_PASSWORD);
    for (name, value) in envs {
        command.env(name, value);
    }
    command.stdout(Stdio::null()).stderr(log).spawn().expect("start node")
}

/// Runs a single node's `systole serve` to its end (for a start-up that must be refused).
pub fn run_to_end(config: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_systole"))
        .args(["serve", "--config", config.to_str().expect("utf-8 path")])
        .env(PASSWORD_ENV, POSTGRES_TEST_PASSWORD)
        .output()
        .expect("run a node")
}

pub async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..WAIT_SECS_MAX * 10 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out after {WAIT_SECS_MAX} s waiting for: {what}");
}

/// A test's own connection to the nodes' database.
pub async fn connect(url: &str) -> sqlx::PgPool {
    sqlx::PgPool::connect_with(
        url.parse::<sqlx::postgres::PgConnectOptions>().expect("url").password(POSTGRES_TEST_PASSWORD),
    )
    .await
    .expect("connect")
}

/// Owner and term of each partition whose lease has not expired, as the database says now
/// (none before the first node has created the table).
pub async fn leases(pool: &sqlx::PgPool) -> BTreeMap<u32, (String, i64)> {
    let rows: Vec<(i32, Option<String>, i64)> = sqlx::query_as(
        "SELECT partition, owner, term FROM partition_leases WHERE expires_at > now() ORDER BY partition",
    )
    .fetch_all(pool)
    .await
    .unwrap_or_default();
    rows.into_iter()
        .filter_map(|(partition, owner, term)| Some((u32::try_from(partition).ok()?, (owner?, term))))
        .collect()
}

/// Owner of each partition, as the lease table says now.
pub async fn owners(pool: &sqlx::PgPool) -> BTreeMap<u32, String> {
    leases(pool).await.into_iter().map(|(partition, (owner, _))| (partition, owner)).collect()
}

/// Waits until `count` nodes share all the partitions, none holding more than its fair
/// share (the rebalance is over: the table stays as it is); returns the owners.
pub async fn wait_for_sharing(pool: &sqlx::PgPool, count: usize) -> BTreeMap<u32, String> {
    let mut table = BTreeMap::new();
    let fair_share = (PARTITIONS_COUNT as usize).div_ceil(count.max(1));
    for _ in 0..WAIT_SECS_MAX * 10 {
        table = owners(pool).await;
        let mut held: BTreeMap<&String, usize> = BTreeMap::new();
        for owner in table.values() {
            *held.entry(owner).or_default() += 1;
        }
        let settled = held.values().all(|partitions| *partitions <= fair_share);
        if held.len() == count && table.len() == PARTITIONS_COUNT as usize && settled {
            return table;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{count} nodes never shared the partitions: {table:?}");
}

/// Sends `signal` (`KILL`, `STOP`, `CONT`, `TERM`) to a node.
pub fn signal(child: &Child, signal: &str) {
    let status = Command::new("kill").args([&format!("-{signal}"), &child.id().to_string()]).status().expect("kill");
    assert!(status.success(), "kill -{signal} {}", child.id());
}

/// The running nodes; killed (and continued first, if stopped) if the test fails, so none
/// outlives it.
pub struct Nodes(pub BTreeMap<&'static str, Child>);

impl Drop for Nodes {
    fn drop(&mut self) {
        for child in self.0.values_mut() {
            let _ = Command::new("kill").args(["-CONT", &child.id().to_string()]).status();
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Prints the nodes' logs when the test fails, before their folder goes.
pub struct ShowLogsOnFailure(pub PathBuf, pub &'static [&'static str]);

impl Drop for ShowLogsOnFailure {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        for node in self.1 {
            let log = std::fs::read_to_string(self.0.join(format!("{node}.log"))).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            eprintln!("--- {node}.log (last lines, newest first)\n{}", tail.join("\n"));
        }
    }
}

pub fn partition(agent: &str) -> u32 {
    partition_of(&AgentId::new(agent).expect("valid"), PARTITIONS_COUNT)
}
