//! The real daemon, end to end: the `systole` binary with the real clock and SQLite,
//! against a local OpenAI-compatible server and a local webhook receiver (127.0.0.1).
#![allow(clippy::disallowed_methods)] // this test waits on a real process in real time

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

const WAIT_SECS_MAX: u64 = 30;

#[derive(Default)]
struct Servers {
    llm_calls: Mutex<BTreeMap<String, usize>>,
    /// The tool results each prompt's conversation showed the model.
    tool_results: Mutex<BTreeMap<String, Vec<String>>>,
    tools_offered: Mutex<std::collections::BTreeSet<String>>,
    deliveries: Mutex<Vec<(Option<String>, Value)>>,
    /// Set once the test has seen the model-made heartbeat listed: only then does its run
    /// delete it, so a slow `list` on a loaded machine cannot miss it.
    created_may_delete: std::sync::atomic::AtomicBool,
}

impl Servers {
    fn calls(&self, prompt: &str) -> usize {
        self.llm_calls.lock().expect("lock").get(prompt).copied().unwrap_or(0)
    }

    fn deliveries_of(&self, heartbeat: &str) -> Vec<(Option<String>, Value)> {
        self.deliveries
            .lock()
            .expect("lock")
            .iter()
            .filter(|(_, body)| body["heartbeat"] == heartbeat)
            .cloned()
            .collect()
    }
}

fn text_reply(content: Value) -> axum::response::Response {
    Json(json!({ "choices": [{ "index": 0, "message": { "role": "assistant", "content": content }, "finish_reason": "stop" }] }))
        .into_response()
}

/// A reply in the OpenAI tool-calling protocol: one call of `name` with `arguments`.
fn tool_reply(name: &str, arguments: Value) -> axum::response::Response {
    let call =
        json!({ "id": "call-1", "type": "function", "function": { "name": name, "arguments": arguments.to_string() } });
    let message = json!({ "role": "assistant", "content": null, "tool_calls": [call] });
    Json(json!({ "choices": [{ "index": 0, "message": message, "finish_reason": "tool_calls" }] })).into_response()
}

/// An OpenAI-compatible endpoint whose reply depends on the heartbeat prompt (the first
/// user message) and on whether a tool result came back already.
async fn chat(State(servers): State<Arc<Servers>>, Json(body): Json<Value>) -> axum::response::Response {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let prompt =
        messages.iter().find(|m| m["role"] == "user").and_then(|m| m["content"].as_str()).unwrap_or("").to_owned();
    let results: Vec<String> = messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["content"].as_str().map(str::to_owned))
        .collect();
    let calls = {
        let mut calls = servers.llm_calls.lock().expect("lock");
        let count = calls.entry(prompt.clone()).or_default();
        *count += 1;
        *count
    };
    if !results.is_empty() {
        servers.tool_results.lock().expect("lock").entry(prompt.clone()).or_default().extend(results.iter().cloned());
    }
    let offered: Vec<String> = body["tools"]
        .as_array()
        .map(|t| t.iter().filter_map(|t| t["function"]["name"].as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    servers.tools_offered.lock().expect("lock").extend(offered);
    match (prompt.as_str(), results.is_empty()) {
        ("say-hello", _) => text_reply(json!("hello from the model")),
        ("say-nothing", _) => text_reply(json!("")),
        ("always-fail", _) => (StatusCode::INTERNAL_SERVER_ERROR, "model exploded").into_response(),
        ("please-pause", true) => tool_reply("pause_heartbeats", json!({ "minutes": 1 })),
        ("loop-forever", _) => tool_reply("heartbeat", json!({ "action": "list" })),
        ("make-too-fast", true) => tool_reply(
            "heartbeat",
            json!({ "action": "create", "id": "spam", "prompt": "spam", "interval_secs": 5, "delivery_target": "webhook:ops" }),
        ),
        // Until the test has seen it listed: a first run that failed (a request cut short on
        // a loaded machine) must not leave it never made (CI, 94b4982).
        ("make-valid", true) if !servers.created_may_delete.load(std::sync::atomic::Ordering::SeqCst) => tool_reply(
            "heartbeat",
            json!({ "action": "create", "id": "created", "prompt": "created-run", "every": "5s", "delivery_target": "webhook:ops" }),
        ),
        ("created-run", true) if calls == 1 => text_reply(json!("hello from a heartbeat the model made")),
        ("created-run", true) if servers.created_may_delete.load(std::sync::atomic::Ordering::SeqCst) => {
            tool_reply("heartbeat", json!({ "action": "delete", "id": "created" }))
        }
        ("created-run", true) => text_reply(json!("")),
        (p, _) if p.starts_with("- [CRON:digest] relay-digest\n\n") => text_reply(json!("digest: 3 new items")),
        _ => text_reply(json!(null)),
    }
}

async fn hook(State(servers): State<Arc<Servers>>, headers: HeaderMap, Json(body): Json<Value>) -> StatusCode {
    let key = headers.get("idempotency-key").and_then(|v| v.to_str().ok()).map(str::to_owned);
    servers.deliveries.lock().expect("lock").push((key, body));
    StatusCode::NO_CONTENT
}

async fn start_servers() -> (Arc<Servers>, SocketAddr) {
    let servers = Arc::new(Servers::default());
    let app = Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/hook", post(hook))
        .with_state(Arc::clone(&servers));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
    (servers, address)
}

fn write_config(dir: &Path, address: SocketAddr) -> PathBuf {
    // A window that certainly excludes now: it opens two hours from now (UTC).
    let hour = jiff::Timestamp::now().to_zoned(jiff::tz::TimeZone::UTC).hour();
    let (start, end) = ((hour + 2) % 24, (hour + 3) % 24);
    let config = format!(
        r#"
[store]
path = "state.db"
[api]
listen = "127.0.0.1:0"

[llm]
base_url = "http://{address}/v1"
model = "test-model"
timeout = "5s"
attempts = 1

[adapters.webhook.ops]
url = "http://{address}/hook"

[engine]
shutdown_grace = "5s"
# One-second heartbeats that fail on purpose: no backoff, so the breaker trips in 3 s.
error_backoff = ["0s"]

[[agents]]
id = "main"

[[agents.heartbeats]]
id = "talker"
prompt = "say-hello"
every = "1s"
target = "webhook:ops"
dedup = false                              # says the same every second, and all of it is wanted

# The same reply every second, deduplicated (the default): delivered once a day.
[[agents.heartbeats]]
id = "echo"
prompt = "say-hello"
every = "1s"
target = "webhook:ops"

[[agents.heartbeats]]
id = "quiet"
prompt = "say-nothing"
every = "1s"
target = "webhook:ops"

[[agents.heartbeats]]
id = "broken"
prompt = "always-fail"
every = "1s"
target = "webhook:ops"

[[agents.heartbeats]]
id = "night"
prompt = "night-only"
every = "1s"
target = "webhook:ops"
active_hours = {{ start = "{start:02}:00", end = "{end:02}:00", timezone = "UTC" }}

# A cron job in the spec's shape: every second by calendar time, its replies kept silent.
[[agents.cron]]
id = "ticker"
payload = {{ text = "say-hello" }}
schedule = {{ cron = "* * * * * *", timezone = "Europe/Berlin" }}
delivery = "silent"
"#
    );
    let path = dir.join("systole.toml");
    std::fs::write(&path, config).expect("write config");
    path
}

fn systole(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_systole"));
    command.args(args).env("RUST_LOG", "info");
    command
}

fn spawn_daemon(config: &Path, log: &Path) -> Child {
    let log = std::fs::File::create(log).expect("log file");
    systole(&["serve", "--config", config.to_str().expect("utf-8 path")])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start daemon")
}

fn stop_daemon(mut child: Child) {
    let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().expect("send SIGTERM");
    assert!(status.success());
    let exit = child.wait().expect("daemon exits");
    assert!(exit.success(), "daemon exits cleanly on SIGTERM: {exit}");
}

fn list_json(config: &Path) -> Vec<Value> {
    let output: Output =
        systole(&["heartbeat", "list", "--json", "--config", config.to_str().expect("utf-8")]).output().expect("list");
    assert!(output.status.success(), "list failed: {}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("list --json prints JSON")
}

fn find<'a>(rows: &'a [Value], id: &str) -> &'a Value {
    rows.iter().find(|row| row["id"] == id).expect("heartbeat listed")
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemon_delivers_stays_silent_trips_the_breaker_and_keeps_it_across_restarts() {
    let (servers, address) = start_servers().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let config = write_config(dir.path(), address);
    let daemon = spawn_daemon(&config, &dir.path().join("first.log"));

    wait_until("two deliveries and a tripped breaker", || {
        servers.deliveries_of("talker").len() >= 2 && servers.calls("always-fail") >= 3
    })
    .await;
    // Give the breaker's interval a few more ticks to prove it stays tripped.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!(servers.calls("always-fail"), 3, "disabled after exactly 3 consecutive failures");

    let (key, body) = servers.deliveries_of("talker")[0].clone();
    assert_eq!(body["text"], "hello from the model");
    assert_eq!(body["agent"], "main");
    assert_eq!(body["heartbeat"], "talker");
    let slot: jiff::Timestamp = body["scheduled_for"].as_str().expect("string").parse().expect("RFC 3339");
    assert_eq!(body["idempotency_key"].as_str(), key.as_deref(), "header and body carry the same key");
    assert_eq!(key, Some(format!("main/talker/{}", slot.as_millisecond())));
    let keys: std::collections::BTreeSet<_> = servers.deliveries_of("talker").into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys.len(), servers.deliveries_of("talker").len(), "one key per slot");

    assert!(servers.calls("say-nothing") >= 2, "the quiet heartbeat ran");
    assert_eq!(servers.deliveries_of("echo").len(), 1, "an identical reply is delivered once within 24 h");
    let echo = runs_json(&config, "main", "echo");
    assert!(echo.iter().any(|run| run["reply"] == "duplicate"), "{echo:#?}");
    assert!(servers.deliveries_of("quiet").is_empty(), "an empty reply delivers nothing");
    assert_eq!(servers.calls("night-only"), 0, "outside active hours the LLM is never called");

    let rows = list_json(&config);
    let broken = find(&rows, "broken");
    assert_eq!(broken["enabled"], false);
    assert_eq!(broken["consecutive_failures"], 3);
    assert_eq!(broken["disabled_reason"], "circuit-breaker");
    // The opening is announced once to the heartbeat's own target, marked as an alert.
    let announced = servers.deliveries_of("broken");
    assert_eq!(announced.len(), 1, "{announced:?}");
    assert_eq!(announced[0].1["kind"], "breaker-opened");
    assert!(announced[0].1["text"].as_str().is_some_and(|text| text.contains("try once more at")), "{announced:?}");
    let night = find(&rows, "night");
    assert_eq!(
        (night["last_status"].as_str(), night["last_skip_reason"].as_str()),
        (Some("skipped"), Some("quiet-hours"))
    );
    let talker = find(&rows, "talker");
    assert_eq!(talker["enabled"], true);
    assert!(talker["next_run_at"].as_str().is_some_and(|t| t.parse::<jiff::Timestamp>().is_ok()));

    stop_daemon(daemon);

    // After a restart the breaker's verdict stands.
    let daemon = spawn_daemon(&config, &dir.path().join("second.log"));
    let delivered_before = servers.deliveries_of("talker").len();
    wait_until("the restarted daemon delivers again", || servers.deliveries_of("talker").len() >= delivered_before + 2)
        .await;
    assert_eq!(servers.calls("always-fail"), 3, "still disabled after a restart");
    let rows = list_json(&config);
    assert_eq!(find(&rows, "broken")["enabled"], false);
    assert_eq!(find(&rows, "broken")["consecutive_failures"], 3);
    stop_daemon(daemon);

    // The cron job ran on whole seconds, delivered nothing, and has its own list and log.
    assert!(servers.deliveries_of("ticker").is_empty(), "delivery = silent");
    assert!(list_json(&config).iter().all(|row| row["id"] != "ticker"), "heartbeat list shows heartbeats only");
    let cron_list =
        systole(&["cron", "list", "--json", "--config", config.to_str().expect("utf-8")]).output().expect("list");
    let cron_list: Vec<Value> = serde_json::from_slice(&cron_list.stdout).expect("cron list --json prints JSON");
    assert_eq!(cron_list.len(), 1);
    assert_eq!((cron_list[0]["id"].as_str(), cron_list[0]["kind"].as_str()), (Some("ticker"), Some("cron")));
    let ticks = systole(&["cron", "runs", "ticker", "--json", "--config", config.to_str().expect("utf-8")])
        .output()
        .expect("cron runs");
    assert!(ticks.status.success(), "{}", String::from_utf8_lossy(&ticks.stderr));
    let ticks: Vec<Value> = serde_json::from_slice(&ticks.stdout).expect("cron runs --json prints JSON");
    assert!(ticks.len() >= 2, "{ticks:?}");
    for tick in &ticks {
        let slot: jiff::Timestamp = tick["scheduled_for"].as_str().expect("string").parse().expect("RFC 3339");
        assert_eq!(slot.subsec_nanosecond(), 0, "cron slots fall on whole seconds: {slot}");
        assert_eq!(tick["status"], "succeeded");
        assert_eq!(tick["delivery"], "not-needed");
    }

    let runs = systole(&["heartbeat", "runs", "broken", "--json", "--config", config.to_str().expect("utf-8")])
        .output()
        .expect("runs");
    let runs: Vec<Value> = serde_json::from_slice(&runs.stdout).expect("runs --json prints JSON");
    assert_eq!(runs.len(), 3);
    assert!(runs
        .iter()
        .all(|run| run["status"] == "failed" && run["error"].as_str().is_some_and(|e| e.contains("HTTP 500"))));
}

/// A user who stops the daemon and copies its database file has every run in the copy:
/// the stop copies SQLite's WAL into the file and removes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_daemon_leaves_every_run_in_its_database_file_alone() {
    let (servers, address) = start_servers().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let config = write_config(dir.path(), address);
    let daemon = spawn_daemon(&config, &dir.path().join("daemon.log"));
    wait_until("two deliveries", || servers.deliveries_of("talker").len() >= 2).await;
    stop_daemon(daemon);

    let wal = dir.path().join("state.db-wal");
    let wal_bytes = std::fs::metadata(&wal).map_or(0, |meta| meta.len());
    assert_eq!(wal_bytes, 0, "the WAL beside the stopped daemon's database is gone or empty");
    // The file alone, as a backup would take it, beside the same config.
    let copy = tempfile::tempdir().expect("temp dir");
    std::fs::copy(dir.path().join("state.db"), copy.path().join("state.db")).expect("copy the database file");
    let copied_config = copy.path().join("systole.toml");
    std::fs::copy(&config, &copied_config).expect("copy the config");
    let delivered: std::collections::BTreeSet<String> = servers
        .deliveries_of("talker")
        .iter()
        .map(|(_, body)| body["scheduled_for"].as_str().expect("a slot").to_owned())
        .collect();
    let logged: std::collections::BTreeSet<String> = runs_json(&copied_config, "main", "talker")
        .iter()
        .filter(|run| run["status"] == "succeeded")
        .map(|run| run["scheduled_for"].as_str().expect("a slot").to_owned())
        .collect();
    assert!(
        delivered.is_subset(&logged),
        "every delivered run is in the copied file: delivered {delivered:?}, logged {logged:?}"
    );
}

#[test]
fn a_bad_config_is_refused_with_the_file_field_and_problem() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        "[llm]\nprovider = \"scripted\"\n[[agents]]\nid = \"main\"\n[[agents.heartbeats]]\nid = \"x\"\nprompt = \"p\"\nevery = \"5 minutes\"\ntarget = \"stdout\"\n",
    )
    .expect("write");
    let output = systole(&["serve", "--config", path.to_str().expect("utf-8")]).output().expect("run");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(path.to_str().expect("utf-8")), "names the file: {stderr}");
    assert!(stderr.contains("agents[0].heartbeats[0].every"), "names the field: {stderr}");
    assert!(stderr.contains("\"5 minutes\""), "names the value: {stderr}");
    assert!(!dir.path().join("systole.db").exists(), "a refused config touches no store");
}

fn refused_with(config_text: &str, dir: &Path) -> String {
    let path = dir.join("start.toml");
    std::fs::write(&path, config_text).expect("write");
    let output = systole(&["serve", "--config", path.to_str().expect("utf-8")]).output().expect("run");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(2), "exit status 2: {stderr}");
    assert!(!stderr.contains("Some(") && !stderr.contains("AgentId("), "no debug formatting: {stderr}");
    stderr
}

#[test]
fn start_up_errors_name_the_field_the_path_and_the_key() {
    let dir = tempfile::tempdir().expect("temp dir");
    let llm = "[llm]\nprovider = \"scripted\"\n";
    let missing = refused_with(&format!("[store]\npath = \"/nonexistent/state.db\"\n{llm}"), dir.path());
    assert!(missing.contains("store.path: cannot create /nonexistent/state.db: no such directory"), "{missing}");
    let folder = dir.path().to_str().expect("utf-8").to_owned();
    let directory = refused_with(&format!("[store]\npath = {folder:?}\n{llm}"), dir.path());
    assert!(directory.contains(&format!("store.path: {folder} is a directory")), "{directory}");
    let typed = refused_with(
        &format!(
            "{llm}[[agents]]\nid = \"main\"\n[[agents.heartbeats]]\nid = \"x\"\nprompt = \"p\"\ninterval_secs = -1\n"
        ),
        dir.path(),
    );
    assert!(typed.contains("agents[0].heartbeats[0].interval_secs"), "names the key: {typed}");
    let twice = refused_with(&format!("{llm}[[agents]]\nid = \"main\"\n[[agents]]\nid = \"main\"\n"), dir.path());
    assert!(twice.contains("agents[1].id: \"main\" is used by an earlier agent"), "{twice}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_daemon_on_the_same_store_is_refused_naming_the_file_and_the_process() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("one.toml");
    std::fs::write(
        &config,
        "[api]\nlisten = \"127.0.0.1:0\"\n[store]\npath = \"shared.db\"\n[llm]\nprovider = \"scripted\"\n",
    )
    .expect("write");
    let first = spawn_daemon(&config, &dir.path().join("first.log"));
    let lock = dir.path().join("shared.db.daemon-lock");
    let first_pid = first.id().to_string();
    wait_until("the first daemon holds the store", || {
        std::fs::read_to_string(&lock).is_ok_and(|text| text.trim() == first_pid)
    })
    .await;
    let output = systole(&["serve", "--config", config.to_str().expect("utf-8")]).output().expect("run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("shared.db is in use by another `systole serve`"), "{stderr}");
    assert!(stderr.contains(&format!("process {first_pid}")), "names the running process: {stderr}");
    stop_daemon(first);
    // The lock goes with the process: a new daemon starts on the same file.
    let second = spawn_daemon(&config, &dir.path().join("second.log"));
    let second_pid = second.id().to_string();
    wait_until("the second daemon holds the store", || {
        std::fs::read_to_string(&lock).is_ok_and(|text| text.trim() == second_pid)
    })
    .await;
    stop_daemon(second);
}

fn write_agent_config(dir: &Path, address: SocketAddr) -> PathBuf {
    let heartbeat = |agent_block: &str, id: &str, prompt: &str| {
        format!("{agent_block}\n[[agents.heartbeats]]\nid = \"{id}\"\nprompt = \"{prompt}\"\nevery = \"1s\"\ntarget = \"webhook:ops\"\n")
    };
    let mut config = format!(
        "[api]\nlisten = \"127.0.0.1:0\"\n[store]\npath = \"state.db\"\n[llm]\nbase_url = \"http://{address}/v1\"\nmodel = \"m\"\nattempts = 1\n\
         [adapters.webhook.ops]\nurl = \"http://{address}/hook\"\n[engine]\nshutdown_grace = \"5s\"\nerror_backoff = [\"0s\"]\n"
    );
    config += &heartbeat("[[agents]]\nid = \"sleepy\"", "nap", "please-pause");
    config +=
        "[[agents.heartbeats]]\nid = \"nap-2\"\nprompt = \"say-nothing\"\nevery = \"1s\"\ntarget = \"webhook:ops\"\n";
    config += &heartbeat("[[agents]]\nid = \"busy\"", "talker", "say-hello");
    config += "dedup = false\n";
    config += &heartbeat("[[agents]]\nid = \"loopy\"", "loop", "loop-forever");
    config += &heartbeat("[[agents]]\nid = \"maker\"", "maker", "make-too-fast");
    config += &heartbeat("[[agents]]\nid = \"maker2\"\nmodel_interval_min = \"1s\"", "maker2", "make-valid");
    let path = dir.join("agents.toml");
    std::fs::write(&path, config).expect("write config");
    path
}

fn runs_json(config: &Path, agent: &str, id: &str) -> Vec<Value> {
    let config = config.to_str().expect("utf-8");
    let output =
        systole(&["heartbeat", "runs", id, "--agent", agent, "--json", "--config", config]).output().expect("runs");
    assert!(output.status.success(), "runs failed: {}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("runs --json prints JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemon_agent_loop_pauses_caps_refuses_creates_and_deletes() {
    let (servers, address) = start_servers().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let config = write_agent_config(dir.path(), address);
    let daemon = spawn_daemon(&config, &dir.path().join("agents.log"));

    // The heartbeat the model creates shows in `heartbeat list`; it deletes itself only after
    // the test has seen it there.
    wait_until("the model's heartbeat is listed", || {
        list_json(&config)
            .iter()
            .any(|row| row["id"] == "created" && row["agent"] == "maker2" && row["origin"] == "runtime")
    })
    .await;
    servers.created_may_delete.store(true, std::sync::atomic::Ordering::SeqCst);
    wait_until("the created heartbeat deleted itself and the loop was disabled", || {
        servers.tool_results.lock().expect("lock").get("created-run").is_some_and(|r| !r.is_empty())
            && servers.calls("loop-forever") >= 15
    })
    .await;
    let talker_before = servers.deliveries_of("talker").len();
    tokio::time::sleep(Duration::from_millis(3_000)).await;

    // pause_heartbeats: one LLM call, then agent sleepy's heartbeats skip as paused, while
    // agent busy keeps delivering.
    assert_eq!(servers.calls("please-pause"), 1, "the run ends after the pause call");
    let nap = runs_json(&config, "sleepy", "nap");
    assert_eq!(nap.last().map(|r| r["stop_reason"].clone()), Some(json!("pause_heartbeats")));
    assert!(nap.iter().filter(|r| r["skip_reason"] == "paused").count() >= 2, "{nap:#?}");
    let nap2 = runs_json(&config, "sleepy", "nap-2");
    assert!(nap2.first().is_some_and(|r| r["skip_reason"] == "paused"), "the agent's other heartbeat is paused too");
    assert!(servers.deliveries_of("talker").len() >= talker_before + 2, "another agent's heartbeats go on");

    // A model that calls tools forever: five calls a run, and three such runs trip the breaker.
    assert_eq!(servers.calls("loop-forever"), 15);
    let loops = runs_json(&config, "loopy", "loop");
    let capped = loops.iter().filter(|r| r["stop_reason"] == "iteration-cap" && r["status"] == "failed").count();
    assert_eq!(capped, 3, "{loops:#?}");

    // A 5-second interval is refused with a clear tool error; nothing is created.
    let refused = servers.tool_results.lock().expect("lock").get("make-too-fast").cloned().unwrap_or_default();
    assert!(refused.iter().any(|r| r.starts_with("error:") && r.contains("too short")), "{refused:?}");

    // A valid create appears in `heartbeat list` and fires without a restart; its own
    // second run deletes it, and it never fires again.
    let created = servers.deliveries_of("created");
    assert_eq!(created.len(), 1, "it fired once and delivered");
    assert_eq!(created[0].1["text"], "hello from a heartbeat the model made");
    let created_calls = servers.calls("created-run");
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    assert_eq!(servers.calls("created-run"), created_calls, "a delete stops it");
    let rows = list_json(&config);
    assert!(!rows.iter().any(|row| row["id"] == "created"), "deleted from the store too");
    assert!(!rows.iter().any(|row| row["id"] == "spam"));
    assert!(servers.tools_offered.lock().expect("lock").contains("pause_heartbeats"));
    stop_daemon(daemon);
}

/// The agent heartbeat through the real binary: a main-mode cron job queues its event in
/// SQLite and wakes the heartbeat, whose relay reaches the webhook; 30 s later its own slot
/// reads the workspace's HEARTBEAT.md, finds it effectively empty and skips without a call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemon_agent_heartbeat_relays_main_mode_jobs_and_skips_an_empty_file() {
    let (servers, address) = start_servers().await;
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir(dir.path().join("home")).expect("workspace");
    std::fs::write(dir.path().join("home").join("HEARTBEAT.md"), "# Heartbeat\n- [ ]\n").expect("file");
    let at = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(3);
    let config = format!(
        "[api]\nlisten = \"127.0.0.1:0\"\n[store]\npath = \"state.db\"\n[llm]\nbase_url = \"http://{address}/v1\"\nmodel = \"m\"\nattempts = 1\n\
         [adapters.webhook.ops]\nurl = \"http://{address}/hook\"\n[engine]\nshutdown_grace = \"5s\"\n\
         [defaults.heartbeat]\nevery = \"30s\"\ntarget = \"webhook:ops\"\n\
         [[agents]]\nid = \"home\"\nworkspace = \"home\"\n\
         [[agents.cron]]\nid = \"digest\"\nmode = \"main\"\npayload = {{ text = \"relay-digest\" }}\n\
         schedule = {{ at = \"{at}\" }}\n"
    );
    let config_path = dir.path().join("home.toml");
    std::fs::write(&config_path, config).expect("write config");
    let daemon = spawn_daemon(&config_path, &dir.path().join("home.log"));
    wait_until("the relay of the main-mode job reaches the webhook", || !servers.deliveries_of("main").is_empty())
        .await;
    let relay = servers.deliveries_of("main");
    assert_eq!(relay[0].1["text"], "digest: 3 new items");
    let runs = runs_json(&config_path, "home", "main");
    assert_eq!(runs[0]["status"], "succeeded", "{runs:?}");
    // The agent heartbeat's own slot comes 30 s after start-up.
    let mut skipped = false;
    for _ in 0..450 {
        let runs = runs_json(&config_path, "home", "main");
        if runs.iter().any(|run| run["skip_reason"] == "empty-heartbeat-file") {
            skipped = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(skipped, "the empty HEARTBEAT.md is skipped within 45 s");
    let calls: usize = servers.llm_calls.lock().expect("lock").values().sum();
    assert_eq!(calls, 1, "one LLM call: the relay; the empty file cost none");
    stop_daemon(daemon);
}
