//! Fencing against a frozen node (ADR 0018), with two real `systole serve` nodes on one
//! real PostgreSQL and `SIGSTOP`:
//! - a node stopped inside a write transaction (its claim's `INSERT` made slow by a
//!   trigger) holds its locks only until the database ends its idle session, so the other
//!   node takes its partition over while it is still stopped, and keeps its own leases;
//! - a node stopped while the model answers, woken after its lease ran out, drops the
//!   reply it holds instead of delivering it for a partition the other node runs.
#![allow(clippy::disallowed_methods)] // real processes, a real database, real time

#[path = "common/cluster_nodes.rs"]
mod cluster_nodes;
mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use cluster_nodes::{
    leases, partition, signal, spawn_node, start_peers, wait_for_sharing, wait_until, write_config, Nodes,
    ShowLogsOnFailure, LEASE_SECS,
};
use common::postgres_server;

const AGENTS_COUNT: usize = 6;
const NODES: [&str; 2] = ["node-a", "node-b"];

/// Starts both nodes on a fresh database and waits until they share the partitions.
async fn two_nodes(
    dir: &std::path::Path,
    address: std::net::SocketAddr,
) -> (sqlx::PgPool, Nodes, BTreeMap<u32, String>) {
    let url = postgres_server::fresh_database().await;
    let pool = cluster_nodes::connect(&url).await;
    let mut children = Nodes(BTreeMap::new());
    for node in NODES {
        let config = write_config(&dir.join(node), node, &url, address, AGENTS_COUNT);
        children.0.insert(node, spawn_node(&config, &dir.join(format!("{node}.log"))));
    }
    let table = wait_for_sharing(&pool, NODES.len()).await;
    (pool, children, table)
}

fn other(node: &str) -> &'static str {
    if node == NODES[0] {
        NODES[1]
    } else {
        NODES[0]
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_stopped_inside_a_write_transaction_does_not_hold_up_the_takeover() {
    let (receiver, address) = start_peers().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let _logs = ShowLogsOnFailure(dir.path().to_owned(), &NODES);
    let (pool, mut children, _) = two_nodes(dir.path(), address).await;
    let started = Instant::now();
    wait_until("every agent delivered", || receiver.agents_heard_since(started).len() == AGENTS_COUNT).await;

    // From now on a claim of agent-0 sleeps inside its transaction, after the fence has
    // read the lease row FOR SHARE: the node is stopped right there (an insert running for
    // a while is that one, not another agent's quick claim).
    sqlx::query(
        "CREATE FUNCTION slow_claim() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
         IF NEW.agent_id = 'agent-0' THEN PERFORM pg_sleep(1.5); END IF; RETURN NEW; END $$",
    )
    .execute(&pool)
    .await
    .expect("trigger function");
    sqlx::query("CREATE TRIGGER slow_claim BEFORE INSERT ON executions FOR EACH ROW EXECUTE FUNCTION slow_claim()")
        .execute(&pool)
        .await
        .expect("trigger");
    let mut frozen = None;
    for _ in 0..200 {
        let row: Option<String> = sqlx::query_scalar(
            "SELECT application_name FROM pg_stat_activity WHERE state = 'active' \
             AND query LIKE 'INSERT INTO executions%' AND application_name LIKE 'systole %' \
             AND now() - query_start > interval '300 milliseconds'",
        )
        .fetch_optional(&pool)
        .await
        .expect("activity");
        if let Some(name) = row {
            frozen = name.strip_prefix("systole ").and_then(|node| NODES.iter().find(|n| **n == node)).copied();
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let frozen = frozen.expect("a node's claim of agent-0 is in its slow INSERT");
    signal(&children.0[frozen], "STOP");
    let stopped_at = Instant::now();
    let survivor = other(frozen);
    let before = leases(&pool).await;
    let survivors_own: BTreeMap<u32, i64> = before
        .iter()
        .filter(|(_, (owner, _))| owner == survivor)
        .map(|(partition, (_, term))| (*partition, *term))
        .collect();
    let held = partition("agent-0");
    // The session sits idle inside its transaction, holding the lease row FOR SHARE.
    let mut idle = false;
    for _ in 0..100 {
        let count: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction' AND application_name = $1",
        )
        .bind(format!("systole {frozen}"))
        .fetch_one(&pool)
        .await
        .expect("activity");
        if count > 0 {
            idle = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(idle, "the stopped node's session sits idle inside its transaction");

    // The survivor takes agent-0's partition over while the other node is still stopped:
    // within the lease, the database's idle bound (one lease) and a renewal turn.
    let bound = Duration::from_secs(LEASE_SECS * 2) + Duration::from_secs(LEASE_SECS) / 3 + Duration::from_secs(3);
    let mut taken_after = None;
    while stopped_at.elapsed() <= bound + Duration::from_secs(5) {
        if leases(&pool).await.get(&held).is_some_and(|(owner, _)| owner == survivor) {
            taken_after = Some(stopped_at.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let taken_after = taken_after.expect("the survivor took the stopped node's partition while it was stopped");
    assert!(taken_after <= bound, "took {taken_after:?}; the bound is {bound:?}");
    // Its own leases never lapsed while it waited: same terms, still its own.
    let after = leases(&pool).await;
    for (partition, term) in &survivors_own {
        assert_eq!(
            after.get(partition),
            Some(&(survivor.to_owned(), *term)),
            "partition {partition} stayed the survivor's"
        );
    }
    sqlx::query("DROP TRIGGER slow_claim ON executions").execute(&pool).await.expect("drop trigger");
    let taken_at = Instant::now();
    wait_until("agent-0 delivers from the survivor", || receiver.first_after("agent-0", taken_at).is_some()).await;

    // Woken, the stopped node finds its session ended and its partitions gone, and stops
    // cleanly; the survivor too.
    signal(&children.0[frozen], "CONT");
    tokio::time::sleep(Duration::from_secs(LEASE_SECS)).await;
    for (node, child) in std::mem::take(&mut children.0) {
        signal(&child, "TERM");
        let mut child = child;
        let exit = child.wait().expect("node exits");
        assert!(exit.success(), "{node} stops cleanly on SIGTERM: {exit}");
    }
    eprintln!("cluster fencing: {frozen} stopped inside a transaction; {survivor} took partition {held} after {taken_after:?} (bound {bound:?})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_woken_past_its_lease_with_a_reply_in_hand_does_not_deliver_it() {
    let (receiver, address) = start_peers().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let _logs = ShowLogsOnFailure(dir.path().to_owned(), &NODES);
    let (_pool, mut children, table) = two_nodes(dir.path(), address).await;
    let started = Instant::now();
    wait_until("every agent delivered", || receiver.agents_heard_since(started).len() == AGENTS_COUNT).await;

    // Stop agent-0's node the moment its model request arrives: the reply (400 ms later)
    // waits in the stopped node's socket until it wakes, past its lease.
    let owner: &'static str = NODES
        .iter()
        .find(|node| table.get(&partition("agent-0")) == Some(&node.to_string()))
        .copied()
        .expect("an owner");
    let armed = Instant::now();
    wait_until("a model request for agent-0", || receiver.requested_since("agent-0", armed)).await;
    signal(&children.0[owner], "STOP");
    let stopped_at = Instant::now();
    let stopped_wall = jiff::Timestamp::now();
    wait_until("the other node delivers for agent-0", || receiver.first_after("agent-0", stopped_at).is_some()).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    signal(&children.0[owner], "CONT");
    let woken_at = Instant::now();
    tokio::time::sleep(Duration::from_secs(LEASE_SECS)).await;

    // Nothing of a slot from before the stop reached the receiver after the wake: the
    // reply the stopped node held was dropped by its fence, not delivered.
    let stale: Vec<(String, String)> = receiver
        .deliveries
        .lock()
        .expect("lock")
        .iter()
        .filter(|(key, agent, at)| {
            let slot_ms: i64 = key.rsplit('/').next().and_then(|ms| ms.parse().ok()).unwrap_or(i64::MAX);
            agent == "agent-0" && *at >= woken_at && slot_ms < stopped_wall.as_millisecond()
        })
        .map(|(key, agent, _)| (key.clone(), agent.clone()))
        .collect();
    assert!(stale.is_empty(), "the woken node delivered what it held for a partition it had lost: {stale:?}");
    // Woken, the node either reaches the delivery first and its fence drops it (the run
    // says why), or its lease loop first stops the engine, which abandons the run.
    let log = std::fs::read_to_string(dir.path().join(format!("{owner}.log"))).expect("log");
    let fenced = log.contains("fenced: this node no longer surely holds partition");
    assert!(fenced || log.contains("partition lost; its engine stops now"), "the woken node says why it stopped");
    for (node, child) in std::mem::take(&mut children.0) {
        signal(&child, "TERM");
        let mut child = child;
        let exit = child.wait().expect("node exits");
        assert!(exit.success(), "{node} stops cleanly on SIGTERM: {exit}");
    }
    eprintln!("cluster fencing: {owner} woken past its lease; no stale delivery; dropped by the fence: {fenced}");
}
