//! Three real `systole serve` nodes on one real PostgreSQL, one killed with `kill -9` in
//! the middle of runs: every slot runs at most once across the cluster (the receiver sees
//! each idempotency key once), and the survivors take the dead node's heartbeats over
//! within its lease.
#![allow(clippy::disallowed_methods)] // real processes, a real database, real time

mod common;

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

use common::postgres_server::{self, POSTGRES_TEST_PASSWORD};
use systole::core::ids::AgentId;
use systole::core::partition::{partition_of, PARTITIONS_COUNT};

const AGENTS_COUNT: usize = 8;
const LEASE_SECS: u64 = 3;
/// How long the model takes to answer: long enough that a kill lands mid-run.
const LLM_DELAY_MS: u64 = 400;
const WAIT_SECS_MAX: u64 = 60;
const PASSWORD_ENV: &str = "SYSTOLE_CLUSTER_TEST_DB_PASSWORD";

#[derive(Default)]
struct Receiver {
    replies: AtomicU64,
    /// Each delivery: its idempotency key, the agent, and when it arrived.
    deliveries: Mutex<Vec<(String, String, Instant)>>,
}

impl Receiver {
    fn agents_heard_since(&self, since: Instant) -> BTreeSet<String> {
        let deliveries = self.deliveries.lock().expect("lock");
        deliveries.iter().filter(|(_, _, at)| *at >= since).map(|(_, agent, _)| agent.clone()).collect()
    }

    fn first_after(&self, agent: &str, since: Instant) -> Option<Instant> {
        let deliveries = self.deliveries.lock().expect("lock");
        deliveries.iter().filter(|(_, who, at)| who == agent && *at >= since).map(|(_, _, at)| *at).min()
    }
}

async fn chat(State(receiver): State<Arc<Receiver>>) -> Json<Value> {
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

async fn start_peers() -> (Arc<Receiver>, SocketAddr) {
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

fn write_config(dir: &Path, node: &str, url: &str, address: SocketAddr) -> PathBuf {
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
    for index in 0..AGENTS_COUNT {
        config.push_str(&format!(
            "\n[[agents]]\nid = \"agent-{index}\"\n[[agents.heartbeats]]\nid = \"pulse\"\nprompt = \"report\"\n\
             every = \"1s\"\ntarget = \"webhook:ops\"\n"
        ));
    }
    std::fs::create_dir_all(dir).expect("node dir");
    let path = dir.join("systole.toml");
    std::fs::write(&path, config).expect("write config");
    path
}

fn spawn_node(config: &Path, log: &Path) -> Child {
    let log = std::fs::File::create(log).expect("log file");
    Command::new(env!("CARGO_BIN_EXE_systole"))
        .args(["serve", "--config", config.to_str().expect("utf-8 path")])
        .env("RUST_LOG", "info")
        .env(PASSWORD_ENV, POSTGRES_TEST_PASSWORD)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start node")
}

async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..WAIT_SECS_MAX * 10 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out after {WAIT_SECS_MAX} s waiting for: {what}");
}

/// Owner of each partition, as the lease table says now.
async fn owners(pool: &sqlx::PgPool) -> BTreeMap<u32, String> {
    let rows: Vec<(i32, Option<String>)> =
        sqlx::query_as("SELECT partition, owner FROM partition_leases WHERE expires_at > now() ORDER BY partition")
            .fetch_all(pool)
            .await
            .expect("lease table");
    rows.into_iter().filter_map(|(partition, owner)| Some((u32::try_from(partition).ok()?, owner?))).collect()
}

/// The running nodes; killed if the test fails, so none outlives it.
struct Nodes(BTreeMap<&'static str, Child>);

impl Drop for Nodes {
    fn drop(&mut self) {
        for child in self.0.values_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Prints the nodes' logs when the test fails, before their folder goes.
struct ShowLogsOnFailure(PathBuf);

impl Drop for ShowLogsOnFailure {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        for node in ["node-a", "node-b", "node-c"] {
            let log = std::fs::read_to_string(self.0.join(format!("{node}.log"))).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            eprintln!("--- {node}.log (last lines, newest first)\n{}", tail.join("\n"));
        }
    }
}

fn partition(agent: &str) -> u32 {
    partition_of(&AgentId::new(agent).expect("valid"), PARTITIONS_COUNT)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_run_every_slot_once_and_take_over_a_killed_node_within_its_lease() {
    let (receiver, address) = start_peers().await;
    let url = postgres_server::fresh_database().await;
    let pool = sqlx::PgPool::connect_with(
        url.parse::<sqlx::postgres::PgConnectOptions>().expect("url").password(POSTGRES_TEST_PASSWORD),
    )
    .await
    .expect("connect");
    let dir = tempfile::tempdir().expect("temp dir");
    let _logs = ShowLogsOnFailure(dir.path().to_owned());
    let nodes = ["node-a", "node-b", "node-c"];
    let mut children = Nodes(BTreeMap::new());
    for node in nodes {
        let config = write_config(&dir.path().join(node), node, &url, address);
        children.0.insert(node, spawn_node(&config, &dir.path().join(format!("{node}.log"))));
    }
    let agents: Vec<String> = (0..AGENTS_COUNT).map(|index| format!("agent-{index}")).collect();
    let started = Instant::now();
    wait_until("every agent delivered from a node of the cluster", || {
        receiver.agents_heard_since(started).len() == AGENTS_COUNT
    })
    .await;
    // The nodes share the partitions: wait until all three hold some.
    let mut table = BTreeMap::new();
    for _ in 0..WAIT_SECS_MAX * 10 {
        table = owners(&pool).await;
        if table.values().collect::<BTreeSet<_>>().len() == nodes.len() && table.len() == PARTITIONS_COUNT as usize {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let holders: BTreeSet<&String> = table.values().collect();
    assert_eq!(holders.len(), 3, "three nodes share the partitions: {table:?}");

    // Kill the node that runs the most agents, while its runs are in flight.
    let victim = *nodes
        .iter()
        .max_by_key(|node| {
            agents.iter().filter(|agent| table.get(&partition(agent)) == Some(&node.to_string())).count()
        })
        .expect("three nodes");
    let victims_agents: Vec<String> = agents
        .iter()
        .filter(|agent| table.get(&partition(agent)).map(String::as_str) == Some(victim))
        .cloned()
        .collect();
    assert!(!victims_agents.is_empty(), "the victim runs some agents: {table:?}");
    tokio::time::sleep(Duration::from_millis(LLM_DELAY_MS / 2)).await;
    let mut child = children.0.remove(victim).expect("victim");
    let status = Command::new("kill").args(["-KILL", &child.id().to_string()]).status().expect("kill -9");
    assert!(status.success());
    child.wait().expect("reaped");
    let killed_at = Instant::now();

    // Within the lease (plus a renewal turn, one interval and the model's delay, with
    // room for a loaded machine) every agent of the dead node delivers again.
    for agent in &victims_agents {
        let agent_name = agent.clone();
        wait_until(&format!("{agent_name} delivered by a survivor"), || {
            receiver.first_after(&agent_name, killed_at + Duration::from_millis(LLM_DELAY_MS)).is_some()
        })
        .await;
    }
    let takeover = victims_agents
        .iter()
        .filter_map(|agent| receiver.first_after(agent, killed_at + Duration::from_millis(LLM_DELAY_MS)))
        .max()
        .expect("delivered")
        .duration_since(killed_at);
    let bound = Duration::from_secs(LEASE_SECS)
        + Duration::from_secs(LEASE_SECS) / 3
        + Duration::from_secs(1)
        + Duration::from_millis(LLM_DELAY_MS)
        + Duration::from_secs(3);
    assert!(takeover <= bound, "took {takeover:?} to take over; the bound is {bound:?}");
    let after = owners(&pool).await;
    assert!(after.values().all(|owner| owner != victim), "nothing is still held by the dead node: {after:?}");
    // A single-node daemon (no [cluster]) on the cluster's database is refused at start-up.
    let single = write_config(&dir.path().join("single"), "single", &url, address);
    let text = std::fs::read_to_string(&single).expect("config");
    let start = text.find("[cluster]").expect("a cluster section");
    let end = text[start..].find("[llm]").map_or(text.len(), |offset| start + offset);
    std::fs::write(&single, format!("{}{}", &text[..start], &text[end..])).expect("write config");
    let output = Command::new(env!("CARGO_BIN_EXE_systole"))
        .args(["serve", "--config", single.to_str().expect("utf-8 path")])
        .env(PASSWORD_ENV, POSTGRES_TEST_PASSWORD)
        .output()
        .expect("run a single node");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "a single node beside a cluster must not start: {stderr}");
    assert!(stderr.contains("[cluster]"), "the refusal says what to do: {stderr}");
    tokio::time::sleep(Duration::from_secs(2)).await;

    for (_, child) in std::mem::take(&mut children.0) {
        let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().expect("SIGTERM");
        assert!(status.success());
        let mut child = child;
        let exit = child.wait().expect("node exits");
        assert!(exit.success(), "a survivor stops cleanly on SIGTERM: {exit}");
    }

    // Every slot at most once: no idempotency key twice, and every delivered run's row.
    let deliveries = receiver.deliveries.lock().expect("lock").clone();
    let mut keys = BTreeMap::new();
    for (key, _, _) in &deliveries {
        assert!(!key.is_empty(), "every delivery carries an idempotency key");
        *keys.entry(key.clone()).or_insert(0) += 1;
    }
    let repeated: Vec<_> = keys.iter().filter(|(_, count)| **count > 1).collect();
    assert!(repeated.is_empty(), "slots delivered twice: {repeated:?}");
    let (delivered, interrupted): (i64, i64) = sqlx::query_as(
        "SELECT COUNT(*) FILTER (WHERE delivery = 'delivered'), COUNT(*) FILTER (WHERE status = 'interrupted') \
         FROM executions",
    )
    .fetch_one(&pool)
    .await
    .expect("log");
    let sent = i64::try_from(deliveries.len()).expect("small");
    assert!(delivered >= AGENTS_COUNT as i64 * 2, "the cluster ran: {delivered} delivered");
    // A run of the killed node may have delivered and died before recording it: such a
    // run is `interrupted`, so the receiver may hold at most that many extra.
    assert!(
        sent >= delivered && sent - delivered <= interrupted,
        "{sent} sent, {delivered} delivered, {interrupted} interrupted"
    );
    eprintln!(
        "cluster: {victim} killed; its {} agents delivered again after {takeover:?} (bound {bound:?}); {sent} \
         deliveries, {delivered} runs recorded delivered, {interrupted} interrupted, no key twice",
        victims_agents.len()
    );
    let still_running: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM executions WHERE status = 'running'")
        .fetch_one(&pool)
        .await
        .expect("log");
    assert_eq!(still_running, 0, "the dead node's runs were recovered as interrupted by their new owners");
}
