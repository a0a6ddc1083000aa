//! A rolling restart loses nothing, with three real `systole serve` nodes on one real
//! PostgreSQL under load: each node in turn is stopped with SIGTERM and started again.
//! Every partition stays owned but for its handover, every agent keeps delivering, no
//! slot is delivered twice, no run is cut short (`interrupted`) and none is left `running`.
#![allow(clippy::disallowed_methods)] // real processes, a real database, real time

#[path = "common/cluster_nodes.rs"]
mod cluster_nodes;
mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cluster_nodes::{
    partition, signal, spawn_node, start_peers, wait_for_sharing, write_config, Nodes, ShowLogsOnFailure, LEASE_SECS,
};
use common::postgres_server;
use systole::core::partition::PARTITIONS_COUNT;

/// `agent-0` to `agent-28` reach all 16 partitions (checked below), so every node owns
/// agents whatever partitions it holds and each has a run in flight to be stopped during.
const AGENTS_COUNT: usize = 29;
const NODES: [&str; 3] = ["node-a", "node-b", "node-c"];
/// The configs' `shutdown_grace` (cluster_nodes::write_config).
const SHUTDOWN_GRACE_SECS: u64 = 2;
/// How often the test reads the lease table while the nodes restart.
const WATCH_EVERY_MS: u64 = 50;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_keeps_every_partition_owned_and_runs_every_slot_once() {
    let reached: std::collections::BTreeSet<u32> =
        (0..AGENTS_COUNT).map(|index| partition(&format!("agent-{index}"))).collect();
    assert_eq!(reached.len(), PARTITIONS_COUNT as usize, "the agents reach every partition");
    let (receiver, address) = start_peers().await;
    let url = postgres_server::fresh_database().await;
    let pool = cluster_nodes::connect(&url).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let _logs = ShowLogsOnFailure(dir.path().to_owned(), &NODES);
    let mut children = Nodes(BTreeMap::new());
    let mut configs = BTreeMap::new();
    for node in NODES {
        let config = write_config(&dir.path().join(node), node, &url, address, AGENTS_COUNT);
        children.0.insert(node, spawn_node(&config, &dir.path().join(format!("{node}.log"))));
        configs.insert(node, config);
    }
    wait_for_sharing(&pool, NODES.len()).await;

    // Watch the lease table: for each partition, the longest stretch with no live owner.
    let unowned_longest: Arc<Mutex<BTreeMap<u32, Duration>>> = Arc::default();
    let watching = Arc::new(AtomicBool::new(true));
    let watcher = {
        let (pool, longest, watching) = (pool.clone(), Arc::clone(&unowned_longest), Arc::clone(&watching));
        tokio::spawn(async move {
            let mut unowned_since: BTreeMap<u32, Instant> = BTreeMap::new();
            while watching.load(Ordering::SeqCst) {
                let owners = cluster_nodes::owners(&pool).await;
                let now = Instant::now();
                for partition in 0..PARTITIONS_COUNT {
                    if owners.contains_key(&partition) {
                        if let Some(since) = unowned_since.remove(&partition) {
                            let mut longest = longest.lock().expect("lock");
                            let entry = longest.entry(partition).or_default();
                            *entry = (*entry).max(now - since);
                        }
                    } else {
                        unowned_since.entry(partition).or_insert(now);
                    }
                }
                tokio::time::sleep(Duration::from_millis(WATCH_EVERY_MS)).await;
            }
            assert!(unowned_since.is_empty(), "partitions left without an owner at the end: {unowned_since:?}");
        })
    };

    let started = Instant::now();
    let mut stop_times = Vec::new();
    for node in NODES {
        let child = children.0.remove(node).expect("running");
        // Stopped while a run of it waits for the model: that run must finish, not be cut short.
        let owners = cluster_nodes::owners(&pool).await;
        let mine: Vec<String> = (0..AGENTS_COUNT)
            .map(|index| format!("agent-{index}"))
            .filter(|agent| owners.get(&partition(agent)).map(String::as_str) == Some(node))
            .collect();
        let since = Instant::now();
        cluster_nodes::wait_until(&format!("a run of {node} in flight"), || {
            mine.iter().any(|agent| receiver.requested_since(agent, since))
        })
        .await;
        let in_flight = mine.iter().find(|agent| receiver.requested_since(agent, since)).cloned().expect("one");
        let stop = Instant::now();
        signal(&child, "TERM");
        let mut child = child;
        let exit = child.wait().expect("node exits");
        let took = stop.elapsed();
        assert!(exit.success(), "{node} stops cleanly on SIGTERM: {exit}");
        assert!(took <= Duration::from_secs(SHUTDOWN_GRACE_SECS + 1), "{node} took {took:?} to stop");
        let finished = receiver.first_after(&in_flight, stop);
        assert!(
            finished.is_some_and(|at| at <= stop + took),
            "{node} delivered {in_flight}'s run in flight before it exited"
        );
        stop_times.push((node, took));
        // The other two run everything while it is away.
        let table = wait_for_sharing(&pool, NODES.len() - 1).await;
        assert!(table.values().all(|owner| owner != node), "{node} holds nothing once stopped: {table:?}");
        let log = dir.path().join(format!("{node}.log"));
        children.0.insert(node, spawn_node(&configs[node], &log));
        wait_for_sharing(&pool, NODES.len()).await;
    }
    let rolled = started.elapsed();
    // Every agent still delivers after the last restart.
    let after = Instant::now();
    cluster_nodes::wait_until("every agent delivers after the rolling restart", || {
        receiver.agents_heard_since(after).len() == AGENTS_COUNT
    })
    .await;
    watching.store(false, Ordering::SeqCst);
    watcher.await.expect("the watcher saw every partition owned at the end");
    for (_, child) in std::mem::take(&mut children.0) {
        signal(&child, "TERM");
        let mut child = child;
        assert!(child.wait().expect("node exits").success());
    }

    // A handover is one node's release and another's next turn (a third of the lease), not
    // a lease expiry: a bound of the lease itself catches a node that left without releasing.
    let longest = unowned_longest.lock().expect("lock").clone();
    let worst = longest.values().max().copied().unwrap_or_default();
    assert!(worst < Duration::from_secs(LEASE_SECS), "a partition went unowned for {worst:?}: {longest:?}");
    // Each agent's longest silence while the nodes rolled.
    let deliveries = receiver.deliveries.lock().expect("lock").clone();
    let mut by_agent: BTreeMap<String, Vec<Instant>> = BTreeMap::new();
    for (_, agent, at) in &deliveries {
        by_agent.entry(agent.clone()).or_default().push(*at);
    }
    let silence =
        by_agent.values().flat_map(|times| times.windows(2).map(|pair| pair[1] - pair[0])).max().unwrap_or_default();
    assert!(silence < Duration::from_secs(LEASE_SECS + 2), "an agent was silent for {silence:?}");
    let mut keys = BTreeMap::new();
    for (key, _, _) in &deliveries {
        *keys.entry(key.clone()).or_insert(0) += 1;
    }
    let repeated: Vec<_> = keys.iter().filter(|(_, count)| **count > 1).collect();
    assert!(repeated.is_empty(), "slots delivered twice: {repeated:?}");
    let (running, interrupted, delivered): (i64, i64, i64) = sqlx::query_as(
        "SELECT COUNT(*) FILTER (WHERE status = 'running'), COUNT(*) FILTER (WHERE status = 'interrupted'), \
         COUNT(*) FILTER (WHERE delivery = 'delivered') FROM executions",
    )
    .fetch_one(&pool)
    .await
    .expect("log");
    assert_eq!(running, 0, "no run left running");
    assert_eq!(interrupted, 0, "no run cut short by a clean stop or a rebalance");
    assert_eq!(delivered, i64::try_from(deliveries.len()).expect("small"), "every delivery recorded, once");
    eprintln!(
        "rolling restart of {} nodes in {rolled:?}: stops took {stop_times:?}; longest unowned partition {worst:?}; \
         longest silence of an agent {silence:?}; {delivered} deliveries, no key twice, none interrupted",
        NODES.len()
    );
}
