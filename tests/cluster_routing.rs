//! Any node answers any call (ADR 0024), with three real `systole serve` nodes on one real
//! PostgreSQL: every route about an agent, asked on a node that does not run it, is
//! answered by the node that does (`Systole-Node` says which) and takes effect there; the
//! status and the agent list on any node show every agent with its owner and the owner's
//! own view; the token is checked on the way; a call is never forwarded twice; and when
//! the owner dies, its agents answer `owner-unreachable` until another node takes them over.
#![allow(clippy::disallowed_methods)] // real processes, a real database, real time

#[path = "common/cluster_nodes.rs"]
mod cluster_nodes;
mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{json, Value};

use cluster_nodes::{
    partition, signal, spawn_node_env, start_peers, wait_for_sharing, write_config, Nodes, ShowLogsOnFailure,
    WAIT_SECS_MAX,
};
use common::postgres_server;

const AGENTS_COUNT: usize = 8;
const NODES: [&str; 3] = ["node-a", "node-b", "node-c"];
const TOKEN: &str = "routing-test-token";

/// A node's API as a test calls it.
struct Api {
    url: String,
    http: reqwest::Client,
}

impl Api {
    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> (u16, Option<String>, Value) {
        self.call_with(method, path, body, Some(TOKEN), &[]).await
    }

    async fn call_with(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        token: Option<&str>,
        headers: &[(&str, &str)],
    ) -> (u16, Option<String>, Value) {
        let mut request = self.http.request(method, format!("{}{path}", self.url));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("the node answers");
        let status = response.status().as_u16();
        let node = response.headers().get("systole-node").and_then(|v| v.to_str().ok()).map(str::to_owned);
        let text = response.text().await.expect("body");
        let value = if text.is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap_or(json!(text)) };
        (status, node, value)
    }
}

/// The API address a node wrote beside its store, once it serves.
async fn api_of(dir: &Path) -> Api {
    let file = dir.join("systole.db.api");
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(WAIT_SECS_MAX) {
        if let Ok(text) = std::fs::read_to_string(&file) {
            if !text.trim().is_empty() {
                return Api { url: text.trim().to_owned(), http: reqwest::Client::new() };
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no API address in {}", file.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_about_an_agent_is_answered_by_its_owner_from_any_node() {
    let (_receiver, address) = start_peers().await;
    let url = postgres_server::fresh_database().await;
    let pool = cluster_nodes::connect(&url).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let _logs = ShowLogsOnFailure(dir.path().to_owned(), &NODES);
    let mut children = Nodes(BTreeMap::new());
    let mut apis = BTreeMap::new();
    let mut configs = BTreeMap::new();
    for node in NODES {
        let config = write_config(&dir.path().join(node), node, &url, address, AGENTS_COUNT);
        configs.insert(node, config.clone());
        let log = dir.path().join(format!("{node}.log"));
        children.0.insert(node, spawn_node_env(&config, &log, &[("SYSTOLE_API_TOKEN", TOKEN)]));
        apis.insert(node, api_of(&dir.path().join(node)).await);
    }
    let table = wait_for_sharing(&pool, NODES.len()).await;
    // Each node reads the lease table once a renewal turn: wait until all have read this one.
    for node in NODES {
        let started = Instant::now();
        loop {
            let (_, _, body) = apis[node].call(Method::GET, "/v1/status", None).await;
            let seen: BTreeMap<u32, String> = body["cluster"]["partitions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| Some((u32::try_from(p["partition"].as_u64()?).ok()?, p["owner"].as_str()?.to_owned())))
                .collect();
            if seen == table {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(WAIT_SECS_MAX), "{node} never saw {table:?}: {seen:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let owner_of = |agent: &str| table.get(&partition(agent)).cloned().expect("owned");
    // An agent and a node that does not run it.
    let (agent, owner, asked) = (0..AGENTS_COUNT)
        .map(|index| format!("agent-{index}"))
        .find_map(|agent| {
            let owner = owner_of(&agent);
            let asked = NODES.iter().find(|node| **node != owner).map(|node| (*node).to_owned())?;
            Some((agent, owner, asked))
        })
        .expect("an agent");
    let api = &apis[asked.as_str()];
    let base = format!("/v1/agents/{agent}");
    let job = format!("{base}/heartbeats/routed");

    // Every route about the agent, asked on `asked`, is answered by `owner`.
    let created = json!({ "id": "routed", "prompt": "report for routed", "every": "1h", "target": "webhook:ops" });
    let calls: Vec<(Method, String, Option<Value>, u16)> = vec![
        (Method::GET, base.clone(), None, 200),
        (Method::POST, format!("{base}/pause"), Some(json!({ "minutes": 5 })), 200),
        (Method::POST, format!("{base}/resume"), None, 200),
        // These agents have no agent heartbeat: the owner's own refusal comes back.
        (Method::POST, format!("{base}/events"), Some(json!({ "text": "routed event" })), 409),
        (Method::POST, format!("{base}/wake"), Some(json!({})), 409),
        (Method::POST, format!("{base}/heartbeats"), Some(created), 201),
        (Method::GET, format!("{base}/heartbeats"), None, 200),
        (Method::GET, job.clone(), None, 200),
        (Method::PATCH, job.clone(), Some(json!({ "every": "30m" })), 200),
        (Method::POST, format!("{job}/disable"), None, 200),
        (Method::POST, format!("{job}/enable"), None, 200),
        (Method::POST, format!("{job}/trigger"), None, 202),
        (Method::GET, format!("{job}/runs?limit=5"), None, 200),
    ];
    for (method, path, body, expected) in calls {
        let (status, node, answer) = api.call(method.clone(), &path, body).await;
        assert_eq!(status, expected, "{method} {path} on {asked}: {answer}");
        assert_eq!(node.as_deref(), Some(owner.as_str()), "{method} {path} asked on {asked} is answered by {owner}");
    }
    // The event feed of a node is the cluster's: a run on the owner, triggered through
    // another node, shows on the feed of a third, naming the node it ran on.
    let third = NODES.iter().find(|node| **node != owner && **node != asked).expect("a third node");
    let feed = apis[third]
        .http
        .get(format!("{}/v1/events", apis[third].url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("the feed answers");
    assert_eq!(feed.status().as_u16(), 200);
    // The third node follows the others' feeds from the moment it is asked: trigger until a
    // run shows (a trigger before its follower connected is not on the feed).
    let mut feed = feed.bytes_stream();
    let mut seen = String::new();
    let started = Instant::now();
    let wanted = "\"id\":\"routed\"";
    'triggers: loop {
        assert!(started.elapsed() < Duration::from_secs(WAIT_SECS_MAX), "no run of routed on {third}'s feed: {seen}");
        let (status, _, body) = api.call(Method::POST, &format!("{job}/trigger"), None).await;
        assert_eq!(status, 202, "{body}");
        let asked_at = Instant::now();
        while asked_at.elapsed() < Duration::from_secs(3) {
            let next = tokio::time::timeout(Duration::from_secs(3), futures_util::StreamExt::next(&mut feed)).await;
            let Ok(chunk) = next else { continue 'triggers };
            let chunk = chunk.expect("the feed is open").expect("a chunk");
            seen.push_str(&String::from_utf8_lossy(&chunk));
            let run = seen.split("\n\n").find(|event| event.starts_with("event: run") && event.contains(wanted));
            if let Some(run) = run {
                assert!(run.contains(&format!("\"node\":\"{owner}\"")), "the run names its node, {owner}: {run}");
                break 'triggers;
            }
        }
    }

    // The change took effect on the owner: its engine armed the new job at once.
    let (_, _, shown) = apis[owner.as_str()].call(Method::GET, &job, None).await;
    assert_eq!(shown["every"], "30m", "{shown}");
    assert!(shown["next_slot"].is_string(), "the owner's engine armed it: {shown}");
    // A user turn begun through one node is ended through another: both reach the owner.
    let (status, node, turn) = api.call(Method::POST, &format!("{base}/user-turns"), Some(json!({}))).await;
    assert_eq!((status, node.as_deref()), (201, Some(owner.as_str())), "{turn}");
    let turn_path = format!("{base}/user-turns/{}", turn["id"].as_str().expect("a turn id"));
    let (status, _, body) = apis[third].call(Method::DELETE, &turn_path, None).await;
    assert_eq!(status, 204, "{body}");
    let (status, _, _) = api.call(Method::DELETE, &job, None).await;
    assert_eq!(status, 204);

    // The token is checked before anything is forwarded, and again by the owner.
    let (status, node, _) = api.call_with(Method::GET, &base, None, None, &[]).await;
    assert_eq!((status, node.as_deref()), (401, Some(asked.as_str())), "refused where it was asked");
    let (status, _, _) = api.call_with(Method::GET, &base, None, Some("wrong"), &[]).await;
    assert_eq!(status, 401);
    // A call that says it was forwarded already is answered where it lands, never sent on.
    let forwarded = [("systole-forwarded-by", "node-z")];
    let (status, node, body) =
        api.call_with(Method::POST, &format!("{base}/resume"), None, Some(TOKEN), &forwarded).await;
    assert_eq!((status, node.as_deref()), (409, Some(asked.as_str())), "{body}");
    assert_eq!(body["error"]["code"], "not-owner", "{body}");

    // The status and the agent list on any node: every agent, its owner, the owner's view.
    for node in NODES {
        let (status, _, body) = apis[node].call(Method::GET, "/v1/status", None).await;
        assert_eq!(status, 200, "{body}");
        let agents = body["agents"].as_array().expect("agents");
        assert_eq!(agents.len(), AGENTS_COUNT, "{body}");
        for row in agents {
            let id = row["id"].as_str().expect("id");
            assert_eq!(row["owner"].as_str(), Some(owner_of(id).as_str()), "status on {node}: {row}");
            let pulse = &row["jobs"][0];
            assert!(pulse["next_slot"].is_string(), "status on {node} shows {id}'s armed slot from its owner: {row}");
        }
        assert_eq!(body["cluster"]["unreachable"], json!({}), "{body}");
        let (status, _, list) = apis[node].call(Method::GET, "/v1/agents", None).await;
        assert_eq!(status, 200, "{list}");
        for item in list["items"].as_array().expect("items") {
            let id = item["id"].as_str().expect("id");
            assert_eq!(item["owner"].as_str(), Some(owner_of(id).as_str()), "agents on {node}: {item}");
        }
    }

    // A reload reaches every node, or none: with one node's file ahead of the others',
    // nothing changes; with all three the same, a reload asked of one applies on all.
    let late = "\n[[agents]]\nid = \"late\"\n[[agents.heartbeats]]\nid = \"added\"\nprompt = \"report for late\"\n\
                every = \"1h\"\ntarget = \"webhook:ops\"\n";
    let append = |node: &str| {
        let path = &configs[node];
        let text = std::fs::read_to_string(path).expect("config");
        std::fs::write(path, format!("{text}{late}")).expect("write config");
    };
    let added = "/v1/agents/late/heartbeats/added";
    append(&asked);
    let (status, _, body) = api.call(Method::POST, "/v1/reload", None).await;
    assert_eq!((status, body["error"]["code"].as_str()), (409, Some("nodes-disagree")), "{body}");
    for node in NODES {
        let (status, _, body) = apis[node].call(Method::GET, added, None).await;
        assert_eq!(status, 404, "nothing changed on {node}: {body}");
    }
    for node in NODES.iter().filter(|node| **node != asked) {
        append(node);
    }
    let (status, _, body) = api.call(Method::POST, "/v1/reload", None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["inserted"], json!(["late/added"]), "{body}");
    for node in NODES.iter().filter(|node| **node != asked) {
        assert_eq!(body["nodes"][node]["inserted"], json!(["late/added"]), "{node} reloaded too: {body}");
    }
    let late_owner = owner_of("late");
    let (status, node, shown) = apis[third].call(Method::GET, added, None).await;
    assert_eq!((status, node.as_deref()), (200, Some(late_owner.as_str())), "{shown}");
    assert!(shown["next_slot"].is_string(), "armed by its owner's engine: {shown}");
    // SIGHUP on a node that does not run it reloads every node too.
    for node in NODES {
        let path = &configs[node];
        let text = std::fs::read_to_string(path).expect("config");
        std::fs::write(path, text.replace("every = \"1h\"", "every = \"2h\"")).expect("write config");
    }
    let hup = NODES.iter().find(|node| **node != late_owner).expect("a node");
    signal(&children.0[hup], "HUP");
    let sighup = jiff::Timestamp::now();
    let started = Instant::now();
    loop {
        let (_, _, shown) = api.call(Method::GET, added, None).await;
        let next: Option<jiff::Timestamp> = shown["next_slot"].as_str().and_then(|at| at.parse().ok());
        // Re-armed by the new interval: its next slot is more than an hour away.
        if shown["every"] == "2h" && next.is_some_and(|next| next > sighup + jiff::SignedDuration::from_mins(90)) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(WAIT_SECS_MAX), "never re-armed after SIGHUP: {shown}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("routing: a reload on {asked} and a SIGHUP on {hup} re-armed late/added on {late_owner}");

    // The owner dies: its agents answer `owner-unreachable` (nothing done) until another
    // node takes the partition over, and then that node answers.
    let child = children.0.remove(owner.as_str()).expect("owner");
    signal(&child, "KILL");
    let mut child = child;
    child.wait().expect("reaped");
    let killed = Instant::now();
    let (status, node, body) = api.call(Method::POST, &format!("{base}/pause"), Some(json!({ "minutes": 1 }))).await;
    assert_eq!((status, node.as_deref()), (502, Some(asked.as_str())), "{body}");
    assert_eq!(body["error"]["code"], "owner-unreachable", "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(&owner) && message.contains("nothing was done"), "{message}");
    let taken_by = loop {
        let (status, node, body) = api.call(Method::GET, &base, None).await;
        match status {
            200 => break node.expect("a node answered"),
            // Unreachable while the lease runs, `not-owner` between owners.
            502 | 409 => assert!(killed.elapsed() < Duration::from_secs(WAIT_SECS_MAX), "{body}"),
            other => panic!("unexpected {other}: {body}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_ne!(taken_by, owner, "a survivor answers for the dead node's agent");
    eprintln!(
        "routing: {agent} of {owner} answered through {asked}; after kill -9, answered by {taken_by} after {:?}",
        killed.elapsed()
    );
}
