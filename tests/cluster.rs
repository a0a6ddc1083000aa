//! Three real `systole serve` nodes on one real PostgreSQL, one killed with `kill -9` in
//! the middle of runs: every slot runs at most once across the cluster (the receiver sees
//! each idempotency key once), and the survivors take the dead node's heartbeats over
//! within its lease.
#![allow(clippy::disallowed_methods)] // real processes, a real database, real time

#[path = "common/cluster_nodes.rs"]
mod cluster_nodes;
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::{Duration, Instant};

use cluster_nodes::{
    partition, run_to_end, spawn_node, start_peers, wait_for_sharing, wait_until, write_config, Nodes,
    ShowLogsOnFailure, LEASE_SECS, LLM_DELAY_MS,
};
use common::postgres_server;

const AGENTS_COUNT: usize = 8;
const NODES: [&str; 3] = ["node-a", "node-b", "node-c"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_run_every_slot_once_and_take_over_a_killed_node_within_its_lease() {
    let (receiver, address) = start_peers().await;
    let url = postgres_server::fresh_database().await;
    let pool = cluster_nodes::connect(&url).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let _logs = ShowLogsOnFailure(dir.path().to_owned(), &NODES);
    let nodes = NODES;
    let mut children = Nodes(BTreeMap::new());
    for node in nodes {
        let config = write_config(&dir.path().join(node), node, &url, address, AGENTS_COUNT);
        children.0.insert(node, spawn_node(&config, &dir.path().join(format!("{node}.log"))));
    }
    let agents: Vec<String> = (0..AGENTS_COUNT).map(|index| format!("agent-{index}")).collect();
    let started = Instant::now();
    wait_until("every agent delivered from a node of the cluster", || {
        receiver.agents_heard_since(started).len() == AGENTS_COUNT
    })
    .await;
    // The nodes share the partitions: wait until all three hold some.
    let table = wait_for_sharing(&pool, nodes.len()).await;
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
    let after = cluster_nodes::owners(&pool).await;
    assert!(after.values().all(|owner| owner != victim), "nothing is still held by the dead node: {after:?}");
    // A single-node daemon (no [cluster]) on the cluster's database is refused at start-up.
    let single = write_config(&dir.path().join("single"), "single", &url, address, AGENTS_COUNT);
    let text = std::fs::read_to_string(&single).expect("config");
    let start = text.find("[cluster]").expect("a cluster section");
    let end = text[start..].find("[llm]").map_or(text.len(), |offset| start + offset);
    std::fs::write(&single, format!("{}{}", &text[..start], &text[end..])).expect("write config");
    let output = run_to_end(&single);
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
