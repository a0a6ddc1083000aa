//! Heartbeats that use tools, end to end: the real `systole` binary with real MCP servers
//! (the Python test peer over stdio and streamable HTTP, server-everything through
//! `npx`), a local OpenAI-compatible model that calls the tools, and a webhook that gets
//! replies built from their results. Also: a tool that may write is never offered
//! without the job's opt-in, a missing required tool fails the run naming it, `kill -9`
//! of a stdio server mid-call answers the model with an error while the daemon goes on
//! and restarts the server, a job's pre-check spares the model a quiet inbox, and no
//! server process outlives the daemon.
#![allow(clippy::disallowed_methods)] // a real daemon and real servers in real time

#[path = "common/daemon_process.rs"]
mod daemon_process;
#[path = "common/mcp_peers.rs"]
mod mcp_peers;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

use mcp_peers::{everything_toml, peer_script, processes_matching, require_peers, stdio_server_toml, HttpPeer};

const TOKEN: &str = "mcp-test-token";
const WAIT_SECS_MAX: u64 = 40;

#[derive(Default)]
struct Peers {
    /// LLM calls per prompt.
    calls: Mutex<BTreeMap<String, usize>>,
    /// The tool names offered per prompt, as the model saw them.
    offered: Mutex<BTreeMap<String, Vec<String>>>,
    deliveries: Mutex<Vec<Value>>,
}

impl Peers {
    fn calls(&self, prompt: &str) -> usize {
        self.calls.lock().expect("lock").get(prompt).copied().unwrap_or(0)
    }

    fn delivered(&self, heartbeat: &str) -> Vec<String> {
        let deliveries = self.deliveries.lock().expect("lock");
        deliveries
            .iter()
            .filter(|d| d["heartbeat"] == heartbeat)
            .filter_map(|d| d["text"].as_str().map(str::to_owned))
            .collect()
    }
}

fn tool_calls(calls: &[(&str, Value)]) -> axum::response::Response {
    let calls: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(index, (name, arguments))| {
            json!({ "id": format!("call-{index}"), "type": "function",
                    "function": { "name": name, "arguments": arguments.to_string() } })
        })
        .collect();
    let message = json!({ "role": "assistant", "content": null, "tool_calls": calls });
    Json(json!({ "choices": [{ "index": 0, "message": message, "finish_reason": "tool_calls" }] })).into_response()
}

fn text(content: &str) -> axum::response::Response {
    let message = json!({ "role": "assistant", "content": content });
    Json(json!({ "choices": [{ "index": 0, "message": message, "finish_reason": "stop" }] })).into_response()
}

/// A model that calls the tools each prompt names, then answers with what they returned.
async fn chat(State(peers): State<Arc<Peers>>, Json(body): Json<Value>) -> axum::response::Response {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let prompt = messages.iter().find(|m| m["role"] == "user").and_then(|m| m["content"].as_str()).unwrap_or("");
    let prompt = prompt.to_owned();
    *peers.calls.lock().expect("lock").entry(prompt.clone()).or_default() += 1;
    let offered: Vec<String> = body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
        .collect();
    peers.offered.lock().expect("lock").insert(prompt.clone(), offered);
    let results: Vec<&str> =
        messages.iter().filter(|m| m["role"] == "tool").filter_map(|m| m["content"].as_str()).collect();
    if !results.is_empty() {
        return text(&format!("{prompt} found: {}", results.join(" | ")));
    }
    match prompt.as_str() {
        "use-tools" => tool_calls(&[
            ("inbox__search", json!({ "query": "urgent" })),
            ("web__search", json!({ "query": "urgent" })),
        ]),
        "try-write" => tool_calls(&[("inbox__archive", json!({ "message": "denied-m1" }))]),
        "opted-write" => tool_calls(&[("inbox__archive", json!({ "message": "opted-m2" }))]),
        "slow-tool" => tool_calls(&[("inbox__slow", json!({ "seconds": 30 }))]),
        "echo-it" => tool_calls(&[("everything__echo", json!({ "message": "hello from everything" }))]),
        _ => text(""),
    }
}

async fn hook(State(peers): State<Arc<Peers>>, Json(body): Json<Value>) -> StatusCode {
    peers.deliveries.lock().expect("lock").push(body);
    StatusCode::NO_CONTENT
}

async fn start_peers() -> (Arc<Peers>, std::net::SocketAddr) {
    let peers = Arc::new(Peers::default());
    let app = Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/hook", post(hook))
        .with_state(Arc::clone(&peers));
    (peers, daemon_process::serve_loopback(app).await)
}

struct Daemon {
    child: Child,
    url: String,
    http: reqwest::Client,
    dir: tempfile::TempDir,
}

impl Daemon {
    async fn start(peer: std::net::SocketAddr, http_peer: &HttpPeer) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let effects = dir.path().join("effects.txt");
        let heartbeat = |id: &str, prompt: &str, extra: &str| {
            format!("[[agents.heartbeats]]\nid = \"{id}\"\nprompt = \"{prompt}\"\nevery = \"1h\"\ntarget = \"webhook:ops\"\n{extra}\n")
        };
        let config = format!(
            "[api]\nlisten = \"127.0.0.1:0\"\n[store]\npath = \"state.db\"\n\
             [llm]\nbase_url = \"http://{peer}/v1\"\nmodel = \"m\"\nattempts = 1\n\
             [adapters.webhook.ops]\nurl = \"http://{peer}/hook\"\n\
             [engine]\nshutdown_grace = \"5s\"\n\
             {}{}[mcp.servers.web]\nurl = {:?}\nread_only = [\"search\"]\n\
             [[agents]]\nid = \"ops\"\ntools = [\"inbox/*\", \"web/search\", \"everything/echo\"]\n{}{}{}{}{}{}{}{}",
            stdio_server_toml("inbox", "env = [\"EFFECTS_FILE\"]\nread_only = [\"search\", \"slow\", \"unread\"]"),
            everything_toml("everything", "read_only = [\"echo\"]"),
            http_peer.url,
            heartbeat("reader", "use-tools", ""),
            heartbeat("writer-denied", "try-write", ""),
            heartbeat("writer", "opted-write", "write_tools = [\"inbox/archive\"]"),
            heartbeat("needy", "needs-missing", "required_tools = [\"inbox/missing\"]"),
            heartbeat("slowpoke", "slow-tool", "tools = [\"inbox/slow\"]"),
            heartbeat("echoer", "echo-it", "tools = [\"everything/echo\"]"),
            heartbeat(
                "quiet-inbox",
                "quiet-check",
                "check_tool = \"inbox/unread\"\ncheck_arguments = { folder = \"quiet\" }"
            ),
            heartbeat(
                "busy-inbox",
                "busy-check",
                "check_tool = \"inbox/unread\"\ncheck_arguments = { folder = \"INBOX\" }"
            ),
        );
        let effects = effects.to_str().expect("utf-8");
        let envs = [("SYSTOLE_API_TOKEN", TOKEN), ("EFFECTS_FILE", effects)];
        let (child, url) = daemon_process::spawn_serve(dir.path(), &config, &envs).await;
        Self { child, url, http: reqwest::Client::new(), dir }
    }

    async fn call(&self, method: reqwest::Method, path: &str) -> (u16, Value) {
        let response = self
            .http
            .request(method, format!("{}{path}", self.url))
            .bearer_auth(TOKEN)
            .send()
            .await
            .expect("the API answers");
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn trigger(&self, id: &str) {
        let (status, body) = self.call(reqwest::Method::POST, &format!("/v1/agents/ops/heartbeats/{id}/trigger")).await;
        assert_eq!(status, 202, "trigger {id}: {body}");
    }

    /// The newest finished run of `id`.
    async fn finished_run(&self, id: &str) -> Value {
        let started = Instant::now();
        loop {
            let (_, runs) =
                self.call(reqwest::Method::GET, &format!("/v1/agents/ops/heartbeats/{id}/runs?limit=1")).await;
            let run = runs["items"][0].clone();
            if run["status"].as_str().is_some_and(|status| status != "running") {
                return run;
            }
            assert!(
                started.elapsed() < Duration::from_secs(WAIT_SECS_MAX),
                "{id} never finished: {runs}\n{}",
                log_of(self.dir.path())
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn effects(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("effects.txt")).unwrap_or_default()
    }

    fn stop(mut self) {
        let status = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().expect("SIGTERM");
        assert!(status.success());
        let exit = self.child.wait().expect("daemon exits");
        assert!(exit.success(), "the daemon exits cleanly: {exit}\n{}", log_of(self.dir.path()));
    }
}

impl Drop for Daemon {
    /// A test that fails half-way still stops its daemon (and so its servers).
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
            let _ = self.child.wait();
        }
    }
}

fn log_of(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("daemon.log")).unwrap_or_default()
}

async fn wait_until(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let started = Instant::now();
    while !done().await {
        assert!(started.elapsed() < Duration::from_secs(WAIT_SECS_MAX), "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn calls_of(run: &Value) -> Vec<(String, String)> {
    run["tools"]["calls"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|call| (call["tool"].as_str().unwrap_or("").to_owned(), call["outcome"].as_str().unwrap_or("").to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_use_tools_of_real_servers_within_their_policy() {
    require_peers();
    let (peers, address) = start_peers().await;
    let http_peer = HttpPeer::start(None);
    let daemon = Daemon::start(address, &http_peer).await;

    // Tools of a stdio and a streamable-HTTP server, results in the delivered reply.
    daemon.trigger("reader").await;
    let run = daemon.finished_run("reader").await;
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(
        calls_of(&run),
        [("inbox/search".to_owned(), "ok".to_owned()), ("web/search".to_owned(), "ok".to_owned())]
    );
    let offered: Vec<String> = run["tools"]["offered"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t.as_str().map(str::to_owned))
        .collect();
    assert!(
        offered.contains(&"inbox/search".to_owned()) && !offered.contains(&"inbox/archive".to_owned()),
        "{offered:?}"
    );
    wait_until("the reader's reply", async || !peers.delivered("reader").is_empty()).await;
    let reply = &peers.delivered("reader")[0];
    assert_eq!(reply.matches("invoice overdue").count(), 2, "both servers' results: {reply}");
    // The model never saw a tool that may write without the job's opt-in.
    let seen = peers.offered.lock().expect("lock").get("use-tools").cloned().unwrap_or_default();
    assert!(seen.contains(&"inbox__search".to_owned()) && !seen.contains(&"inbox__archive".to_owned()), "{seen:?}");

    // A write tool the job did not opt into is refused; the opted-in job's write happens.
    daemon.trigger("writer-denied").await;
    let run = daemon.finished_run("writer-denied").await;
    assert_eq!(calls_of(&run), [("inbox__archive".to_owned(), "refused".to_owned())], "{run}");
    daemon.trigger("writer").await;
    let run = daemon.finished_run("writer").await;
    assert_eq!(calls_of(&run), [("inbox/archive".to_owned(), "ok".to_owned())], "{run}");
    assert_eq!(daemon.effects(), "opted-m2\n", "only the opted-in write had an effect");

    // A run never starts without a tool it requires: it fails naming it, no LLM call.
    daemon.trigger("needy").await;
    let run = daemon.finished_run("needy").await;
    assert_eq!(run["status"], "failed");
    assert!(run["error"].as_str().is_some_and(|e| e.contains("inbox/missing")), "{run}");
    assert_eq!(peers.calls("needs-missing"), 0);

    // A job's pre-check: a quiet answer ends the run with no LLM call; another reaches the
    // model with the prompt, and the model answers from it.
    daemon.trigger("quiet-inbox").await;
    let run = daemon.finished_run("quiet-inbox").await;
    assert_eq!(
        (run["status"].as_str(), run["stop_reason"].as_str()),
        (Some("succeeded"), Some("quiet-check")),
        "{run}"
    );
    assert_eq!(calls_of(&run), [("inbox/unread".to_owned(), "ok".to_owned())], "{run}");
    assert_eq!((run["llm_calls"].as_u64(), peers.calls("quiet-check")), (Some(0), 0), "{run}");
    daemon.trigger("busy-inbox").await;
    let run = daemon.finished_run("busy-inbox").await;
    assert_eq!((run["status"].as_str(), run["llm_calls"].as_u64()), (Some("succeeded"), Some(1)), "{run}");
    let prompts: Vec<String> = peers.calls.lock().expect("lock").keys().cloned().collect();
    let sent = prompts.iter().find(|p| p.ends_with("\n\nbusy-check")).expect("the model was asked");
    assert!(sent.contains("inbox/unread") && sent.contains("2 unread in INBOX: invoice overdue"), "{sent}");

    // server-everything through npx answers like the others.
    daemon.trigger("echoer").await;
    let run = daemon.finished_run("echoer").await;
    assert_eq!(calls_of(&run), [("everything/echo".to_owned(), "ok".to_owned())], "{run}");
    wait_until("the echo reply", async || !peers.delivered("echoer").is_empty()).await;
    assert!(peers.delivered("echoer")[0].contains("hello from everything"));

    // kill -9 of the stdio server mid-call: the model hears an error, the run ends, the
    // daemon goes on, and the server is back after its backoff.
    daemon.trigger("slowpoke").await;
    wait_until("the slow call", async || peers.calls("slow-tool") >= 1).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stdio_peer = format!("{} stdio", peer_script().display());
    let killed = processes_matching(&stdio_peer);
    assert_eq!(killed.len(), 1, "one stdio peer: {killed:?}");
    let status = Command::new("kill").args(["-KILL", &killed[0].to_string()]).status().expect("kill -9");
    assert!(status.success());
    let run = daemon.finished_run("slowpoke").await;
    assert_eq!(calls_of(&run), [("inbox/slow".to_owned(), "unavailable".to_owned())], "{run}");
    wait_until("the stdio server restarted", async || {
        let (_, catalog) = daemon.call(reqwest::Method::GET, "/v1/mcp").await;
        let inbox = catalog["servers"].as_array().into_iter().flatten().find(|s| s["name"] == "inbox").cloned();
        inbox.is_some_and(|inbox| inbox["state"] == "ready" && inbox["restarts"].as_u64() >= Some(1))
    })
    .await;
    let metrics = daemon.http.get(format!("{}/metrics", daemon.url)).bearer_auth(TOKEN).send().await.expect("metrics");
    let metrics = metrics.text().await.expect("text");
    for line in [
        "systole_tool_calls_total{server=\"inbox\",tool=\"search\",outcome=\"ok\"} 1",
        "systole_tool_calls_total{server=\"inbox\",tool=\"slow\",outcome=\"unavailable\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} in:\n{metrics}");
    }
    assert!(metrics.contains("systole_mcp_restarts_total{server=\"inbox\"} 1"), "{metrics}");

    // Nothing the daemon started outlives it: stdio servers and npx's grandchild alike.
    daemon.stop();
    let started = Instant::now();
    while !(processes_matching(&stdio_peer).is_empty() && processes_matching("mcp-server-everything").is_empty()) {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "left behind: {:?} {:?}",
            processes_matching(&stdio_peer),
            processes_matching("mcp-server-everything")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A variable a server needs and the environment lacks stops start-up naming the field;
/// a server with both `command` and `url` is refused by `config check`.
#[test]
fn a_missing_variable_or_a_bad_server_stops_start_up_naming_the_field() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("systole.toml");
    let config = format!(
        "[api]\nlisten = \"\"\n[llm]\nprovider = \"scripted\"\n{}",
        stdio_server_toml("inbox", "env = [\"SYSTOLE_TEST_UNSET_VARIABLE\"]")
    );
    std::fs::write(&path, config).expect("write");
    let output = Command::new(env!("CARGO_BIN_EXE_systole"))
        .args(["serve", "--config", path.to_str().expect("utf-8")])
        .env_remove("SYSTOLE_TEST_UNSET_VARIABLE")
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("mcp.servers.inbox.env") && stderr.contains("SYSTOLE_TEST_UNSET_VARIABLE"), "{stderr}");

    let both =
        "[llm]\nprovider = \"scripted\"\n[mcp.servers.inbox]\ncommand = \"x\"\nurl = \"http://127.0.0.1:1/mcp\"\n";
    std::fs::write(&path, both).expect("write");
    let output =
        Command::new(env!("CARGO_BIN_EXE_systole")).args(["config", "check"]).arg(&path).output().expect("run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("mcp.servers.inbox.url") && stderr.contains("not both"), "{stderr}");

    let unknown = "[llm]\nprovider = \"scripted\"\n[[agents]]\nid = \"a\"\ntools = [\"nowhere/*\"]\n";
    std::fs::write(&path, unknown).expect("write");
    let output =
        Command::new(env!("CARGO_BIN_EXE_systole")).args(["config", "check"]).arg(&path).output().expect("run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("agents[0].tools") && stderr.contains("nowhere"), "{stderr}");
}
