//! The operator API of the real daemon, over HTTP: the `systole` binary with the real clock
//! and SQLite, against a local OpenAI-compatible server and webhook receiver (127.0.0.1).
//! Every refusal is checked to have changed nothing.
#![allow(clippy::disallowed_methods)] // this test waits on a real process in real time

#[path = "common/daemon_process.rs"]
mod daemon_process;
#[path = "common/mcp_peers.rs"]
mod mcp_peers;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::post;
use axum::{Json, Router};
use reqwest::Method;
use serde_json::{json, Value};

const WAIT_SECS_MAX: u64 = 30;
const TOKEN: &str = "test-token-5f1c";

#[derive(Default)]
struct Peers {
    /// Every first user message the model was sent, in order.
    prompts: Mutex<Vec<String>>,
    deliveries: Mutex<Vec<Value>>,
}

impl Peers {
    fn prompts_containing(&self, text: &str) -> usize {
        self.prompts.lock().expect("lock").iter().filter(|p| p.contains(text)).count()
    }
}

async fn chat(State(peers): State<Arc<Peers>>, Json(body): Json<Value>) -> axum::response::Response {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let prompt = messages.iter().find(|m| m["role"] == "user").and_then(|m| m["content"].as_str()).unwrap_or("");
    peers.prompts.lock().expect("lock").push(prompt.to_owned());
    if prompt.contains("always-fail") {
        return (StatusCode::INTERNAL_SERVER_ERROR, "model exploded").into_response();
    }
    let message = json!({ "role": "assistant", "content": format!("reply to {}", prompt.len()) });
    Json(json!({ "choices": [{ "index": 0, "message": message, "finish_reason": "stop" }] })).into_response()
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
    async fn start(peer: std::net::SocketAddr, extra: &str) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(dir.path().join("home")).expect("workspace");
        std::fs::write(dir.path().join("home").join("HEARTBEAT.md"), "- look at the inbox\n").expect("file");
        std::fs::create_dir(dir.path().join("builder")).expect("workspace");
        std::fs::write(dir.path().join("builder").join("HEARTBEAT.md"), "- watch the builds\n").expect("file");
        // A window that certainly excludes now: it opens two hours from now (UTC).
        let hour = jiff::Timestamp::now().to_zoned(jiff::tz::TimeZone::UTC).hour();
        let (start, end) = ((hour + 2) % 24, (hour + 3) % 24);
        let config = format!(
            "[api]\nlisten = \"127.0.0.1:0\"\n{extra}\
             [store]\npath = \"state.db\"\n\
             [llm]\nbase_url = \"http://{peer}/v1\"\nmodel = \"m\"\nattempts = 1\n\
             [adapters.webhook.ops]\nurl = \"http://{peer}/hook\"\n\
             [engine]\nshutdown_grace = \"5s\"\nerror_backoff = [\"0s\"]\nbreaker_failures = 2\n\
             [[agents]]\nid = \"ops\"\n\
             [[agents.heartbeats]]\nid = \"quiet\"\nprompt = \"quiet-prompt\"\nevery = \"1h\"\ntarget = \"webhook:ops\"\n\
             active_hours = {{ start = \"{start:02}:00\", end = \"{end:02}:00\", timezone = \"UTC\" }}\n\
             [[agents.heartbeats]]\nid = \"flaky\"\nprompt = \"always-fail\"\nevery = \"1s\"\ntarget = \"webhook:ops\"\n\
             [[agents]]\nid = \"home\"\nworkspace = \"home\"\n[agents.heartbeat]\ntarget = \"webhook:ops\"\n\
             [[agents]]\nid = \"builder\"\nworkspace = \"builder\"\n[agents.heartbeat]\ntarget = \"webhook:ops\"\n"
        );
        let (child, url) = daemon_process::spawn_serve(dir.path(), &config, &[("SYSTOLE_API_TOKEN", TOKEN)]).await;
        Self { child, url, http: reqwest::Client::new(), dir }
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("systole.toml")
    }

    /// A request with the token; the body is sent as given (so malformed JSON can be).
    async fn call(&self, method: Method, path: &str, body: Option<&str>) -> (u16, Value) {
        self.call_with(method, path, body, Some(TOKEN)).await
    }

    async fn call_with(&self, method: Method, path: &str, body: Option<&str>, token: Option<&str>) -> (u16, Value) {
        let mut request = self.http.request(method, format!("{}{path}", self.url));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.header("content-type", "application/json").body(body.to_owned());
        }
        let response = request.send().await.expect("the API answers");
        let status = response.status().as_u16();
        let text = response.text().await.expect("body");
        let value =
            if text.is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap_or(json!({ "text": text })) };
        (status, value)
    }

    async fn get(&self, path: &str) -> Value {
        let (status, body) = self.call(Method::GET, path, None).await;
        assert_eq!(status, 200, "GET {path}: {body}");
        body
    }

    /// Stops the daemon; the returned folder keeps its config and store for what follows.
    fn stop(mut self) -> tempfile::TempDir {
        let status = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().expect("SIGTERM");
        assert!(status.success());
        let exit = self.child.wait().expect("daemon exits");
        assert!(exit.success(), "daemon exits cleanly on SIGTERM: {exit}");
        assert!(!self.dir.path().join("state.db.api").exists(), "the address file goes with the daemon");
        // Its files outlive it; a type with a `Drop` gives a field up only by a swap.
        std::mem::replace(&mut self.dir, tempfile::tempdir().expect("temp dir"))
    }
}

/// A test that fails half-way still stops its daemon.
impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
            let _ = self.child.wait();
        }
    }
}

async fn wait_until(what: &str, mut done: impl AsyncFnMut() -> bool) {
    for _ in 0..WAIT_SECS_MAX * 10 {
        if done().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out after {WAIT_SECS_MAX} s waiting for: {what}");
}

fn job<'a>(status: &'a Value, agent: &str, id: &str) -> &'a Value {
    status["agents"]
        .as_array()
        .and_then(|agents| agents.iter().find(|a| a["id"] == agent))
        .and_then(|a| a["jobs"].as_array())
        .and_then(|jobs| jobs.iter().find(|j| j["id"] == id))
        .unwrap_or_else(|| panic!("{agent}/{id} in the status: {status:#}"))
}

/// What must not change when a request is refused: every job's definition and state.
async fn snapshot(daemon: &Daemon) -> Vec<Value> {
    let mut rows = Vec::new();
    for agent in ["ops", "home"] {
        for collection in ["heartbeats", "cron"] {
            let list = daemon.get(&format!("/v1/agents/{agent}/{collection}")).await;
            for item in list["items"].as_array().cloned().unwrap_or_default() {
                let id = item["id"].as_str().unwrap_or_default().to_owned();
                let mut shown = daemon.get(&format!("/v1/agents/{agent}/{collection}/{id}")).await;
                // What moves by itself while the daemon runs is not what a refusal may change.
                for moving in [
                    "last_status",
                    "last_skip_reason",
                    "last_slot",
                    "next_run_at",
                    "next_slot",
                    "consecutive_failures",
                    "runs_in_flight",
                    "backoff_until",
                    "would_run_now",
                    "reason",
                    "skip_reason_now",
                    "enabled",
                    "disabled_reason",
                ] {
                    shown[moving] = Value::Null;
                }
                rows.push(shown);
            }
        }
    }
    rows
}

/// A request that must be refused: method, path, body, status, error code, a word the message has.
type Refusal = (Method, &'static str, Option<&'static str>, u16, &'static str, &'static str);

fn assert_error(status: u16, body: &Value, expected: u16, code: &str, mentions: &str) {
    assert_eq!(status, expected, "{body}");
    assert_eq!(body["error"]["code"], code, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(mentions), "{message:?} should mention {mentions:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_status_and_refusals_that_change_nothing() {
    let (_peers, peer) = start_peers().await;
    let daemon = Daemon::start(peer, "").await;

    // Health needs no token; everything else does, and a wrong one is refused.
    let (status, body) = daemon.call_with(Method::GET, "/healthz", None, None).await;
    assert_eq!((status, body["status"].as_str()), (200, Some("ok")));
    let (status, body) = daemon.call_with(Method::GET, "/v1/status", None, None).await;
    assert_error(status, &body, 401, "unauthorized", "Authorization: Bearer");
    let (status, body) = daemon.call_with(Method::GET, "/v1/status", None, Some("nope")).await;
    assert_error(status, &body, 401, "unauthorized", "wrong");
    let (status, body) = daemon.call_with(Method::POST, "/v1/agents/ops/pause", Some(r#"{"minutes":5}"#), None).await;
    assert_error(status, &body, 401, "unauthorized", "Bearer");
    assert!(
        job(&daemon.get("/v1/status").await, "ops", "quiet")["paused_until"].is_null(),
        "the refused pause did nothing"
    );

    // The status says why a slot due now would not run, from the engine's guard chain.
    let status = daemon.get("/v1/status").await;
    let quiet = job(&status, "ops", "quiet");
    assert_eq!(quiet["would_run_now"], false, "{quiet:#}");
    assert_eq!(quiet["reason"], "quiet-hours");
    // Its next run is the first slot inside the window (opening two hours from now), not
    // its next slot, which quiet hours will skip.
    let next_run: jiff::Timestamp = quiet["next_run_at"].as_str().expect("next run").parse().expect("RFC 3339");
    let next_slot: jiff::Timestamp = quiet["next_slot"].as_str().expect("next slot").parse().expect("RFC 3339");
    let opens = (jiff::Timestamp::now().to_zoned(jiff::tz::TimeZone::UTC).hour() + 2) % 24;
    assert_eq!(next_run.to_zoned(jiff::tz::TimeZone::UTC).hour(), opens, "{quiet:#}");
    assert!(next_run > next_slot, "{quiet:#}");
    assert_eq!(job(&status, "home", "main")["kind"], "agent");

    let before = snapshot(&daemon).await;
    let refusals: [Refusal; 18] = [
        (Method::POST, "/v1/agents/ops/heartbeats", Some("{not json"), 400, "malformed", "not JSON"),
        (Method::POST, "/v1/agents/ops/heartbeats", Some("[1, 2]"), 400, "malformed", "object"),
        (
            Method::POST,
            "/v1/agents/ops/heartbeats",
            Some(r#"{"id":"x","prompt":"p","every":"soon","target":"webhook:ops"}"#),
            422,
            "invalid",
            "`every`",
        ),
        (
            Method::POST,
            "/v1/agents/ops/heartbeats",
            Some(r#"{"id":"x","prompt":"p","every":"1m","target":"webhook:ops","colour":"red"}"#),
            422,
            "invalid",
            "colour",
        ),
        (
            Method::POST,
            "/v1/agents/ops/heartbeats",
            Some(r#"{"id":"x","every":"1m","target":"webhook:ops"}"#),
            422,
            "invalid",
            "`prompt`",
        ),
        (
            Method::POST,
            "/v1/agents/ops/heartbeats",
            Some(r#"{"id":"x","prompt":"p","every":"1m","target":"webhook:elsewhere"}"#),
            422,
            "invalid",
            "not a configured target",
        ),
        (
            Method::POST,
            "/v1/agents/ops/heartbeats",
            Some(r#"{"id":"quiet","prompt":"p","every":"1m","target":"webhook:ops"}"#),
            409,
            "conflict",
            "exists already",
        ),
        (
            Method::POST,
            "/v1/agents/nobody/heartbeats",
            Some(r#"{"id":"x","prompt":"p","every":"1m","target":"webhook:ops"}"#),
            404,
            "not-found",
            "nobody",
        ),
        (
            Method::PATCH,
            "/v1/agents/ops/heartbeats/quiet",
            Some(r#"{"prompt":"changed"}"#),
            409,
            "conflict",
            "config file",
        ),
        (Method::DELETE, "/v1/agents/ops/heartbeats/quiet", None, 409, "conflict", "config file"),
        (Method::DELETE, "/v1/agents/ops/heartbeats/ghost", None, 404, "not-found", "ghost"),
        (Method::POST, "/v1/agents/ops/pause", Some(r#"{"minutes":0}"#), 422, "invalid", "minutes"),
        (Method::POST, "/v1/agents/ops/pause", Some(r#"{"minutes":"five"}"#), 422, "invalid", "minutes"),
        (Method::POST, "/v1/agents/ops/wake", Some(r#"{"reason":"because"}"#), 422, "invalid", "reason"),
        (
            Method::POST,
            "/v1/agents/ops/events",
            Some(r#"{"text":"hello","mode":"now"}"#),
            409,
            "conflict",
            "no agent heartbeat",
        ),
        (Method::GET, "/v1/no-such-route", None, 404, "not-found", "route"),
        // PostgreSQL cannot store a NUL: refused at the edge on every store, naming the field.
        (
            Method::POST,
            "/v1/agents/ops/heartbeats",
            Some(r#"{"id":"nul","prompt":"a\u0000b","every":"1h","target":"webhook:ops"}"#),
            422,
            "invalid",
            "NUL",
        ),
        (Method::POST, "/v1/agents/home/events", Some(r#"{"text":"a\u0000b"}"#), 422, "invalid", "text"),
    ];
    for (method, path, body, expected, code, mentions) in refusals {
        let (status, answer) = daemon.call(method.clone(), path, body).await;
        assert_error(status, &answer, expected, code, mentions);
    }
    let (status, body) = daemon.call(Method::GET, "/v1/agents/ops/heartbeats/quiet/runs?limit=0", None).await;
    assert_error(status, &body, 422, "invalid", "limit");
    let (status, body) = daemon.call(Method::GET, "/v1/agents/ops/heartbeats/quiet/runs?before=yesterday", None).await;
    assert_error(status, &body, 422, "invalid", "before");
    let (status, body) = daemon.call(Method::POST, "/v1/agents/ops/user-turns", Some(r#"{"timeout_secs":0}"#)).await;
    assert_error(status, &body, 422, "invalid", "timeout_secs");
    let (status, body) = daemon.call(Method::GET, "/v1/status?limit=0", None).await;
    assert_error(status, &body, 422, "invalid", "limit");
    let (status, body) = daemon.call(Method::GET, "/v1/status?limit=2001", None).await;
    assert_error(status, &body, 422, "invalid", "limit");
    let (status, body) = daemon.call(Method::GET, "/v1/status?after=ops", None).await;
    assert_error(status, &body, 422, "invalid", "after");
    let (status, body) = daemon.call(Method::GET, "/v1/status?after=ops%2FNot%20Valid", None).await;
    assert_error(status, &body, 422, "invalid", "after");
    assert_eq!(snapshot(&daemon).await, before, "refused requests changed nothing");
    assert!(job(&daemon.get("/v1/status").await, "ops", "quiet")["paused_until"].is_null());

    // The status a page at a time, in key order: an agent shows on each page that holds one
    // of its jobs, and the last page says there is no other.
    let pages = |limit: usize| {
        let daemon = &daemon;
        async move {
            let mut pages = Vec::new();
            let mut after = String::new();
            loop {
                let page = daemon.get(&format!("/v1/status?limit={limit}{after}")).await;
                let shown: Vec<String> = page["agents"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|agent| {
                        let jobs: Vec<&str> =
                            agent["jobs"].as_array().into_iter().flatten().filter_map(|j| j["id"].as_str()).collect();
                        format!("{}: {}", agent["id"].as_str().unwrap_or_default(), jobs.join(" "))
                    })
                    .collect();
                pages.push(shown.join(", "));
                match page["next_cursor"].as_str() {
                    Some(cursor) => after = format!("&after={}", cursor.replace('/', "%2F")),
                    None => return pages,
                }
            }
        }
    };
    // An agent's list a page at a time by id, the same way.
    let (status, body) = daemon.call(Method::GET, "/v1/agents/ops/heartbeats?limit=0", None).await;
    assert_error(status, &body, 422, "invalid", "limit");
    let (status, body) = daemon.call(Method::GET, "/v1/agents/ops/heartbeats?after=Not%20Valid", None).await;
    assert_error(status, &body, 422, "invalid", "after");
    let ids = |page: &Value| -> (Vec<String>, Value) {
        let ids = page["items"].as_array().into_iter().flatten().filter_map(|j| j["id"].as_str().map(str::to_owned));
        (ids.collect(), page["next_cursor"].clone())
    };
    assert_eq!(
        ids(&daemon.get("/v1/agents/ops/heartbeats").await),
        (vec!["flaky".into(), "quiet".into()], Value::Null)
    );
    assert_eq!(ids(&daemon.get("/v1/agents/ops/heartbeats?limit=1").await), (vec!["flaky".into()], json!("flaky")));
    let second = daemon.get("/v1/agents/ops/heartbeats?limit=1&after=flaky").await;
    assert_eq!(ids(&second), (vec!["quiet".into()], json!("quiet")));
    let past = daemon.get("/v1/agents/ops/heartbeats?limit=1&after=quiet").await;
    assert_eq!(ids(&past), (Vec::new(), Value::Null), "the page after the last says there is no other");
    assert_eq!(pages(3).await, ["builder: main, home: main, ops: flaky", "ops: quiet"]);
    assert_eq!(pages(2).await, ["builder: main, home: main", "ops: flaky quiet", ""]);
    assert_eq!(pages(500).await, ["builder: main, home: main, ops: flaky quiet"]);
    let _ = daemon.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_are_created_triggered_paged_paused_and_the_breaker_cleared() {
    let (peers, peer) = start_peers().await;
    let daemon = Daemon::start(peer, "").await;

    // An operator may go below the model's minimum interval (60 s).
    let body = r#"{"id":"fast","prompt":"fast-prompt","every":"1s","target":"webhook:ops"}"#;
    let (status, created) = daemon.call(Method::POST, "/v1/agents/ops/heartbeats", Some(body)).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!((created["origin"].as_str(), created["every"].as_str()), (Some("runtime"), Some("1s")));
    wait_until("the created heartbeat runs", async || peers.prompts_containing("fast-prompt") >= 2).await;

    // Update, then a refused update leaves the first one in place.
    let (status, updated) =
        daemon.call(Method::PATCH, "/v1/agents/ops/heartbeats/fast", Some(r#"{"prompt":"faster-prompt"}"#)).await;
    assert_eq!((status, updated["prompt"].as_str()), (200, Some("faster-prompt")), "{updated}");
    let (status, body) = daemon.call(Method::PATCH, "/v1/agents/ops/heartbeats/fast", Some(r#"{"every":"-1s"}"#)).await;
    assert_error(status, &body, 422, "invalid", "`every`");
    let shown = daemon.get("/v1/agents/ops/heartbeats/fast").await;
    assert_eq!((shown["prompt"].as_str(), shown["every"].as_str()), (Some("faster-prompt"), Some("1s")));

    // Disabled: a trigger is refused; enabled again, a trigger runs once under its own slot.
    let (status, disabled) = daemon.call(Method::POST, "/v1/agents/ops/heartbeats/quiet/disable", None).await;
    assert_eq!((status, disabled["enabled"].as_bool()), (200, Some(false)), "{disabled}");
    let (status, body) = daemon.call(Method::POST, "/v1/agents/ops/heartbeats/quiet/trigger", None).await;
    assert_error(status, &body, 409, "conflict", "disabled");
    let (status, enabled) = daemon.call(Method::POST, "/v1/agents/ops/heartbeats/quiet/enable", None).await;
    assert_eq!((status, enabled["enabled"].as_bool()), (200, Some(true)), "{enabled}");
    // Quiet hours hold timed runs only: the operator's trigger goes through them.
    let (status, triggered) = daemon.call(Method::POST, "/v1/agents/ops/heartbeats/quiet/trigger", None).await;
    assert_eq!(status, 202, "{triggered}");
    let slot = triggered["slot"].as_str().expect("the trigger's slot").to_owned();
    wait_until("the triggered run is logged", async || {
        let runs = daemon.get("/v1/agents/ops/heartbeats/quiet/runs").await;
        runs["items"]
            .as_array()
            .is_some_and(|runs| runs.iter().any(|r| r["scheduled_for"] == slot && r["status"] == "succeeded"))
    })
    .await;
    assert_eq!(peers.prompts_containing("quiet-prompt"), 1, "one trigger, one run");

    // The breaker tripped `flaky` after two failures; enabling clears it.
    wait_until("the breaker trips flaky", async || {
        job(&daemon.get("/v1/status").await, "ops", "flaky")["enabled"] == false
    })
    .await;
    let flaky = job(&daemon.get("/v1/status").await, "ops", "flaky").clone();
    assert_eq!(flaky["would_run_now"], false);
    assert!(flaky["reason"].as_str().is_some_and(|r| r.starts_with("disabled: ")), "{flaky:#}");
    let (status, enabled) = daemon.call(Method::POST, "/v1/agents/ops/heartbeats/flaky/enable", None).await;
    assert_eq!(status, 200, "{enabled}");
    assert_eq!(
        (enabled["enabled"].as_bool(), enabled["consecutive_failures"].as_u64()),
        (Some(true), Some(0)),
        "{enabled}"
    );

    // The run log pages newest first; the cursor leads to older runs only.
    let first = daemon.get("/v1/agents/ops/heartbeats/fast/runs?limit=1").await;
    let cursor = first["next_cursor"].as_str().expect("a full page has a cursor").to_owned();
    let older = daemon.get(&format!("/v1/agents/ops/heartbeats/fast/runs?limit=50&before={cursor}")).await;
    let older = older["items"].as_array().expect("items").clone();
    assert!(!older.is_empty());
    assert!(older.iter().all(|run| run["scheduled_for"].as_str().expect("slot") < cursor.as_str()));

    // Pause holds timed runs and shows in the status; resume ends it.
    let (status, paused) = daemon.call(Method::POST, "/v1/agents/ops/pause", Some(r#"{"minutes":5}"#)).await;
    assert_eq!(status, 200, "{paused}");
    let fast = job(&daemon.get("/v1/status").await, "ops", "fast").clone();
    assert_eq!(fast["skip_reason_now"], "paused", "{fast:#}");
    assert!(fast["reason"].as_str().is_some_and(|r| r.starts_with("paused until ")), "{fast:#}");
    let (status, resumed) = daemon.call(Method::POST, "/v1/agents/ops/resume", None).await;
    assert_eq!((status, resumed["was_paused"].as_bool()), (200, Some(true)), "{resumed}");
    assert_eq!(job(&daemon.get("/v1/status").await, "ops", "fast")["would_run_now"], true);

    // A runtime job is deleted once; then it is gone.
    let (status, _) = daemon.call(Method::DELETE, "/v1/agents/ops/heartbeats/fast", None).await;
    assert_eq!(status, 204);
    let (status, body) = daemon.call(Method::GET, "/v1/agents/ops/heartbeats/fast", None).await;
    assert_error(status, &body, 404, "not-found", "fast");
    let _ = daemon.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_wake_user_turns_metrics_and_the_live_stream() {
    let (peers, peer) = start_peers().await;
    let daemon = Daemon::start(peer, "").await;

    // Follow the stream before anything happens.
    let mut stream = daemon
        .http
        .get(format!("{}/v1/events", daemon.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("the event stream opens");
    assert_eq!(stream.status().as_u16(), 200);

    // A system event with mode `now` wakes the agent heartbeat, whose prompt carries it.
    let body = r#"{"text":"deploy finished: 3 services","mode":"now"}"#;
    let (status, queued) = daemon.call(Method::POST, "/v1/agents/home/events", Some(body)).await;
    assert_eq!((status, queued["woken"].as_bool()), (202, Some(true)), "{queued}");
    wait_until("the agent heartbeat read the event", async || peers.prompts_containing("deploy finished") >= 1).await;

    // The stream showed the run.
    let mut seen = String::new();
    while !seen.contains("event: run") || !seen.contains("\"agent\":\"home\"") {
        let chunk = stream.chunk().await.expect("stream").expect("the stream stays open");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }

    // An exec event wakes the agent heartbeat with the spec's exec-event prompt.
    let body = r#"{"reason":"exec-event","text":"cargo build: 0 errors"}"#;
    let (status, woken) = daemon.call(Method::POST, "/v1/agents/builder/wake", Some(body)).await;
    assert_eq!(status, 202, "{woken}");
    wait_until("the exec event reached the model", async || {
        peers.prompts_containing("- [EXEC] cargo build: 0 errors\n\nAn async command you ran earlier has completed.")
            == 1
    })
    .await;

    // A user turn holds the lane; ending it twice is a 404 the second time.
    let (status, turn) = daemon.call(Method::POST, "/v1/agents/home/user-turns", Some("{}")).await;
    assert_eq!(status, 201, "{turn}");
    let id = turn["id"].as_str().expect("turn id").to_owned();
    let (status, _) = daemon.call(Method::DELETE, &format!("/v1/agents/home/user-turns/{id}"), None).await;
    assert_eq!(status, 204);
    let (status, body) = daemon.call(Method::DELETE, &format!("/v1/agents/home/user-turns/{id}"), None).await;
    assert_error(status, &body, 404, "not-found", "no user turn");

    // The agent view shows the budget spent today and the last run event.
    let home = daemon.get("/v1/agents/home").await;
    assert!(home["budget"]["llm_calls_today"].as_u64().is_some_and(|calls| calls >= 1), "{home:#}");
    assert_eq!(home["has_agent_heartbeat"], true);
    // It ran moments ago: the flood guard keeps the next start 30 s away.
    assert_eq!(home["flood_guard"]["open"], false, "{home:#}");
    assert!(home["flood_guard"]["opens_at"].is_string(), "{home:#}");
    assert_eq!(home["last_event"]["agent"], "home");

    // Metrics: Prometheus text, every sample line well formed, the run counted.
    wait_until("flaky's failures are counted", async || {
        let (_, body) = daemon.call(Method::GET, "/metrics", None).await;
        body["text"].as_str().is_some_and(|text| text.contains("systole_breaker_trips_total 1"))
    })
    .await;
    let (status, body) = daemon.call(Method::GET, "/metrics", None).await;
    assert_eq!(status, 200);
    let text = body["text"].as_str().expect("text exposition").to_owned();
    check_exposition(&text);
    assert!(text.contains("systole_runs_total{agent=\"home\",heartbeat=\"main\",status=\"succeeded\"} 1"), "{text}");
    assert!(text.contains("systole_runs_total{agent=\"ops\",heartbeat=\"flaky\",status=\"failed\"} 2"), "{text}");
    assert!(text.contains("systole_heartbeats{state=\"disabled\"} 1"), "{text}");
    assert!(text.contains("systole_deliveries_total{adapter=\"webhook\",outcome=\"delivered\"}"), "{text}");
    let (status, _) = daemon.call_with(Method::GET, "/metrics", None, None).await;
    assert_eq!(status, 401, "metrics need the token too");
    assert!(daemon.config().exists());
    let _ = daemon.stop();
}

/// Checks the text format's grammar: `# HELP`/`# TYPE` lines, then samples of the
/// declared metric (histograms as `_bucket`, `_sum`, `_count`) with a float value.
fn check_exposition(text: &str) {
    let mut declared: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split(' ');
            let (name, kind) = (parts.next().expect("name"), parts.next().expect("type"));
            assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
            declared.push((name.to_owned(), kind.to_owned()));
            continue;
        }
        if line.starts_with("# HELP ") {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("sample without value: {line}"));
        assert!(value == "+Inf" || value.parse::<f64>().is_ok(), "value of {line}");
        let name = series.split('{').next().expect("name");
        assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'), "{line}");
        if let Some(labels) = series.strip_prefix(name).filter(|l| !l.is_empty()) {
            assert!(labels.starts_with('{') && labels.ends_with('}'), "{line}");
        }
        let (family, kind) = declared.last().unwrap_or_else(|| panic!("sample before its TYPE: {line}"));
        let allowed: Vec<String> = if kind == "histogram" {
            ["_bucket", "_sum", "_count"].iter().map(|suffix| format!("{family}{suffix}")).collect()
        } else {
            vec![family.clone()]
        };
        assert!(allowed.iter().any(|a| a == name), "{name} is not part of {family}: {line}");
    }
    assert!(declared.len() >= 9, "every metric declared: {declared:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_public_address_without_a_token_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("open.toml");
    std::fs::write(&config, "[api]\nlisten = \"0.0.0.0:0\"\n[llm]\nprovider = \"scripted\"\n").expect("write");
    let output = Command::new(env!("CARGO_BIN_EXE_systole"))
        .args(["serve", "--config", config.to_str().expect("utf-8")])
        .env_remove("SYSTOLE_API_TOKEN")
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("api.listen: 0.0.0.0:0 is reachable from other machines"), "{stderr}");
    assert!(!Path::new(&dir.path().join("systole.db.api")).exists());
}

/// The CLI as the API's client: it finds the daemon through its config, prints tables in
/// the agent's zone, and exits 2 for what the user can fix, 1 when no daemon answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_steers_the_daemon_and_says_what_went_wrong() {
    let (peers, peer) = start_peers().await;
    let daemon = Daemon::start(peer, "").await;
    let config = daemon.config();
    let cli = |args: &[&str], token: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_systole"));
        command.args(args).env("SYSTOLE_CONFIG", &config).env_remove("SYSTOLE_URL");
        match token {
            Some(token) => command.env("SYSTOLE_API_TOKEN", token),
            None => command.env_remove("SYSTOLE_API_TOKEN"),
        };
        let output = command.output().expect("run the CLI");
        let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
        (output.status.code(), text(&output.stdout), text(&output.stderr))
    };

    let (code, table, stderr) = cli(&["status"], Some(TOKEN));
    assert_eq!(code, Some(0), "{stderr}");
    let quiet = table.lines().find(|line| line.contains(" quiet ")).unwrap_or_else(|| panic!("{table}"));
    assert!(quiet.contains("held: quiet-hours") && quiet.contains("+00:00 (in "), "{quiet}");

    let (code, out, stderr) = cli(&["heartbeat", "trigger", "quiet"], Some(TOKEN));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(out.starts_with("triggered ops/quiet under slot "), "{out}");
    wait_until("the CLI's trigger ran", async || peers.prompts_containing("quiet-prompt") == 1).await;

    let (code, out, stderr) = cli(&["agent", "pause", "ops", "--minutes", "3"], Some(TOKEN));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(out.starts_with("ops paused until "), "{out}");
    let (_, shown, _) = cli(&["heartbeat", "show", "quiet", "--json"], Some(TOKEN));
    let shown: Value = serde_json::from_str(&shown).expect("show --json prints JSON");
    assert!(shown["reason"].as_str().is_some_and(|r| r.starts_with("paused until ")), "{shown:#}");
    let (_, listed, _) = cli(&["heartbeat", "list", "--agent", "ops", "--json"], None);
    let listed: Vec<Value> = serde_json::from_str(&listed).expect("list --json prints JSON");
    assert!(listed.iter().all(|row| row["paused_until"].is_string()), "the pause shows in `list`: {listed:#?}");
    let (_, table, _) = cli(&["heartbeat", "list", "--agent", "ops"], None);
    assert!(table.lines().any(|line| line.contains(" quiet ") && line.contains("paused")), "{table}");
    let (code, out, _) = cli(&["agent", "resume", "ops"], Some(TOKEN));
    assert_eq!((code, out.as_str()), (Some(0), "ops resumed\n"));

    let body = [
        "heartbeat",
        "create",
        "made",
        "--agent",
        "ops",
        "--prompt",
        "made-prompt",
        "--every",
        "1h",
        "--target",
        "webhook:ops",
    ];
    let (code, out, stderr) = cli(&body, Some(TOKEN));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(out.contains("origin") && out.contains("runtime"), "{out}");
    let (code, out, _) = cli(&["heartbeat", "list", "--agent", "ops", "--json"], Some(TOKEN));
    assert_eq!(code, Some(0));
    assert!(out.ends_with("]\n") && out.contains("\"made\""), "{out}");
    // A job named without --agent is looked up among the agents: once is its agent's,
    // twice needs --agent, and a heartbeat is no cron job.
    let mut home = body;
    home[4] = "home";
    let (code, _, stderr) = cli(&home, Some(TOKEN));
    assert_eq!(code, Some(0), "{stderr}");
    let (code, _, stderr) = cli(&["heartbeat", "show", "made"], Some(TOKEN));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("several agents have a heartbeat \"made\"; pass --agent"), "{stderr}");
    let (code, shown, stderr) = cli(&["heartbeat", "show", "made", "--agent", "home", "--json"], Some(TOKEN));
    assert_eq!(code, Some(0), "{stderr}");
    let shown: Value = serde_json::from_str(&shown).expect("show --json prints JSON");
    assert_eq!(shown["id"], "made", "{shown:#}");
    let (code, _, stderr) = cli(&["cron", "show", "quiet"], Some(TOKEN));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("no cron \"quiet\""), "{stderr}");

    // Mistakes the user can fix exit 2 and say what is wrong.
    let (code, _, stderr) = cli(&["heartbeat", "enable", "ghost"], Some(TOKEN));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("no heartbeat \"ghost\""), "{stderr}");
    let (code, _, stderr) = cli(&["heartbeat", "list", "--agent", "nobody"], Some(TOKEN));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("no agent \"nobody\""), "{stderr}");
    let (code, _, stderr) = cli(&["heartbeat", "runs", "ghost", "--agent", "ops"], Some(TOKEN));
    assert_eq!(code, Some(2), "{stderr}");
    let (code, _, stderr) = cli(&["status"], None);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("SYSTOLE_API_TOKEN"), "{stderr}");
    let (code, _, stderr) = cli(&["agent", "pause", "ops", "--minutes", "0"], Some(TOKEN));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("minutes: 0 is out of range"), "{stderr}");
    let _kept = daemon.stop();

    // With the daemon gone, the API verbs say so; the store-reading ones still work.
    let (code, _, stderr) = cli(&["status", "--url", "http://127.0.0.1:9"], Some(TOKEN));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("no daemon answers at http://127.0.0.1:9") && stderr.contains("refused"), "{stderr}");
    let (code, out, stderr) = cli(&["heartbeat", "list"], None);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(out.contains("quiet"), "{out}");
}

/// A reload applies the file's heartbeats at once (new ones run, changed ones re-armed,
/// removed ones stop), refuses a file that does not validate without changing anything,
/// and SIGHUP does the same as the route.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_follows_the_file_and_refuses_a_broken_one() {
    let (peers, peer) = start_peers().await;
    let daemon = Daemon::start(peer, "").await;
    let config = daemon.config();
    let original = std::fs::read_to_string(&config).expect("config");

    // Broken: refused with start-up's own error, and nothing changes.
    std::fs::write(&config, original.replace("every = \"1h\"", "every = \"often\"")).expect("write");
    let before = snapshot(&daemon).await;
    let (status, body) = daemon.call(Method::POST, "/v1/reload", None).await;
    assert_error(status, &body, 422, "invalid", "agents[0].heartbeats[0]");
    assert_eq!(snapshot(&daemon).await, before);

    // Changed: `quiet` gets a new prompt, `flaky` goes, `fresh` comes.
    let changed = original
        .replace("prompt = \"quiet-prompt\"", "prompt = \"quieter-prompt\"")
        .replace("id = \"flaky\"\nprompt = \"always-fail\"", "id = \"fresh\"\nprompt = \"fresh-prompt\"")
        .replace("[llm]\n", "[llm]\ntimeout = \"30s\"\n");
    std::fs::write(&config, &changed).expect("write");
    let (status, report) = daemon.call(Method::POST, "/v1/reload", None).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["inserted"], json!(["ops/fresh"]), "{report}");
    assert_eq!(report["updated"], json!(["ops/quiet"]), "{report}");
    assert_eq!(report["removed"], json!(["ops/flaky"]), "{report}");
    assert_eq!(report["restart_needed"], json!(["llm"]), "{report}");
    wait_until("the new heartbeat runs without a restart", async || peers.prompts_containing("fresh-prompt") >= 2)
        .await;
    let (status, _) = daemon.call(Method::GET, "/v1/agents/ops/heartbeats/flaky", None).await;
    assert_eq!(status, 404, "the removed heartbeat is gone");
    let quiet = daemon.get("/v1/agents/ops/heartbeats/quiet").await;
    assert_eq!(quiet["prompt"], "quieter-prompt");

    // SIGHUP: the file's `fresh` goes again.
    std::fs::write(&config, &original).expect("write");
    let pid = daemon.child.id().to_string();
    assert!(Command::new("kill").args(["-HUP", &pid]).status().expect("SIGHUP").success());
    wait_until("SIGHUP reloaded the file", async || {
        daemon.call(Method::GET, "/v1/agents/ops/heartbeats/fresh", None).await.0 == 404
    })
    .await;
    let fresh_runs = peers.prompts_containing("fresh-prompt");
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!(peers.prompts_containing("fresh-prompt"), fresh_runs, "a removed heartbeat stops");
    let flaky = daemon.get("/v1/agents/ops/heartbeats/flaky").await;
    assert_eq!(flaky["origin"], "config", "flaky is back: {flaky}");
    let _ = daemon.stop();
}

/// A WebDriver session on Debian's chromium, through chromedriver's HTTP protocol.
struct Browser {
    driver: Child,
    base: String,
    session: String,
    http: reqwest::Client,
    profile: tempfile::TempDir,
}

impl Browser {
    async fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("addr").port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver runs (Debian's chromium and chromium-driver; .ci/run installs them)");
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        wait_until("chromedriver answers", async || http.get(format!("{base}/status")).send().await.is_ok()).await;
        let profile = tempfile::tempdir().expect("profile dir");
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            // Room for the whole page in the kept screenshot.
            "--window-size=1400,1200",
        ];
        let mut args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        args.push(format!("--user-data-dir={}", profile.path().display()));
        let capabilities = json!({ "capabilities": { "alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": { "binary": "/usr/bin/chromium", "args": args }
        } } });
        let answer: Value = http
            .post(format!("{base}/session"))
            .json(&capabilities)
            .send()
            .await
            .expect("new session")
            .json()
            .await
            .expect("JSON");
        let session = answer["value"]["sessionId"].as_str().unwrap_or_else(|| panic!("a session: {answer}")).to_owned();
        Self { driver, base, session, http, profile }
    }

    async fn command(&self, path: &str, body: Value) -> Value {
        let url = format!("{}/session/{}/{path}", self.base, self.session);
        let answer: Value =
            self.http.post(url).json(&body).send().await.expect("webdriver").json().await.expect("JSON");
        answer["value"].clone()
    }

    async fn open(&self, url: &str) {
        self.command("url", json!({ "url": url })).await;
    }

    /// Saves a screenshot of the page under `target/` (kept as the test's artefact) and
    /// returns its path.
    async fn screenshot(&self, name: &str) -> PathBuf {
        use base64::Engine as _;
        let url = format!("{}/session/{}/screenshot", self.base, self.session);
        let answer: Value = self.http.get(url).send().await.expect("webdriver").json().await.expect("JSON");
        let png = base64::engine::general_purpose::STANDARD
            .decode(answer["value"].as_str().unwrap_or_default())
            .expect("a base64 PNG");
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}.png"));
        std::fs::write(&path, png).expect("write the screenshot");
        path
    }

    /// Runs `script` in the page and returns what it returns.
    async fn run(&self, script: &str) -> Value {
        self.command("execute/sync", json!({ "script": script, "args": [] })).await
    }

    /// The page's row of `job` (its text and indicator), once its indicator is `wanted` or
    /// the wait is over (then as it is).
    async fn row_with_indicator(&self, job: &str, wanted: &str) -> Value {
        let script = format!(
            r#"const r = document.querySelector('tr[data-job="{job}"]');
            return r ? {{ text: r.innerText, indicator: r.querySelector('.dot').dataset.indicator }} : null;"#
        );
        let mut seen = Value::Null;
        for _ in 0..WAIT_SECS_MAX * 10 {
            seen = self.run(&script).await;
            if seen["indicator"] == wanted {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        seen
    }

    async fn stop(self) {
        let _ = self.http.delete(format!("{}/session/{}", self.base, self.session)).send().await;
        // The rest as a test that failed before here leaves it (`Drop`).
    }
}

/// A test that panics before `stop` ends its browser too: chromedriver, and the chromium it
/// started, found by the profile directory that is this browser's alone (killing the driver
/// leaves its chromium running).
impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        let profile = format!("--user-data-dir={}", self.profile.path().display());
        let _ = Command::new("pkill").arg("-f").arg("--").arg(profile).status();
    }
}

/// The status page in a real headless Chromium: it lists the jobs and the tool servers, a
/// trigger through the API changes the row live (through the event stream), and its
/// buttons act.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_updates_live_in_a_real_browser() {
    mcp_peers::require_peers();
    let (_peers, peer) = start_peers().await;
    let daemon = Daemon::start(peer, &mcp_peers::stdio_server_toml("inbox", "read_only = [\"search\"]")).await;
    let browser = Browser::start().await;
    browser.open(&format!("{}/#token={TOKEN}", daemon.url)).await;
    // The tools view: the MCP server's state and each tool's access, the server's hint beside it.
    let script = r#"const r = document.querySelector('tr[data-tool="inbox/search"]'); return r ? r.innerText : null;"#;
    let mut tool_row = Value::Null;
    for _ in 0..WAIT_SECS_MAX * 10 {
        tool_row = browser.run(script).await;
        if tool_row.is_string() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let tool_row = tool_row.as_str().unwrap_or_default().to_owned();
    assert!(tool_row.contains("ready") && tool_row.contains("read-only (server: read-only)"), "{tool_row:?}");
    let archive = browser.run(r#"return document.querySelector('tr[data-tool="inbox/archive"]').innerText;"#).await;
    assert!(archive.as_str().is_some_and(|text| text.contains("may write (server: writes)")), "{archive}");
    let seen = browser.row_with_indicator("ops/quiet", "idle").await;
    assert_eq!(seen["indicator"], "idle", "never ran yet: {seen}");
    assert!(seen["text"].as_str().is_some_and(|t| t.contains("quiet-hours")), "{seen}");

    // A trigger through the API: the open page hears of it and the row turns yellow
    // (the model's reply was delivered: an alert).
    let (status, _) = daemon.call(Method::POST, "/v1/agents/ops/heartbeats/quiet/trigger", None).await;
    assert_eq!(status, 202);
    let seen = browser.row_with_indicator("ops/quiet", "alert").await;
    assert_eq!(seen["indicator"], "alert", "{seen}");
    assert!(seen["text"].as_str().is_some_and(|t| t.contains("succeeded")), "{seen}");
    let events = browser.run("return document.getElementById('events').innerText;").await;
    assert!(events.as_str().is_some_and(|e| e.contains("ops/quiet sent")), "{events}");
    // Today's spending: the agent's against its caps, the job's own.
    let agent_row = browser.run(r#"return document.querySelector('tr[data-agent="ops"]').innerText;"#).await;
    let today = agent_row.as_str().unwrap_or_default();
    assert!(
        today.contains(" LLM call") && today.contains("of 2000000 tokens") && today.contains("of 5.000000"),
        "{today:?}"
    );
    let job_row = browser.run(r#"return document.querySelector('tr[data-job="ops/quiet"]').innerText;"#).await;
    assert!(job_row.as_str().is_some_and(|text| text.contains("1 LLM call")), "{job_row}");
    // All agents together, against the global caps (the defaults: 20,000,000 tokens, 50.00).
    let global = browser.run("return document.getElementById('global-spend').innerText;").await;
    let global = global.as_str().unwrap_or_default();
    assert!(
        global.starts_with("All agents today (UTC): ")
            && global.contains("of 20000000 tokens")
            && global.contains("of 50.000000"),
        "{global:?}"
    );
    // The last day as a strip of outcomes (the triggered run an alert, the newest mark),
    // the last reply under the result, and the next run in the job's zone with how soon.
    let strip = browser
        .run(r#"return [...document.querySelectorAll('tr[data-job="ops/quiet"] .run')].map(m => m.dataset.outcome);"#)
        .await;
    let outcomes: Vec<&str> = strip.as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    assert_eq!(outcomes.last(), Some(&"alert"), "{strip}");
    let job_row = job_row.as_str().unwrap_or_default();
    assert!(job_row.contains("reply to"), "the last reply is shown: {job_row:?}");
    assert!(job_row.contains(" UTC (in "), "the next run in the job's zone, and how soon: {job_row:?}");
    // The run's transcript, one click away: the prompt the model got and its reply.
    browser
        .run(r#"[...document.querySelectorAll('tr[data-job="ops/quiet"] button')].find(b => b.textContent === 'Transcript').click(); return true;"#)
        .await;
    let script = r#"const s = document.getElementById('transcript'); return s.hidden ? null : s.innerText;"#;
    let mut shown = Value::Null;
    for _ in 0..WAIT_SECS_MAX * 10 {
        shown = browser.run(script).await;
        if shown.is_string() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let shown = shown.as_str().unwrap_or_default();
    assert!(
        shown.contains("Transcript of ops/quiet") && shown.contains("quiet-prompt") && shown.contains("reply to"),
        "{shown:?}"
    );
    let screenshot = browser.screenshot("status-page").await;
    eprintln!("status page screenshot: {}", screenshot.display());

    // Its Disable button disables it.
    browser
        .run(r#"[...document.querySelectorAll('tr[data-job="ops/quiet"] button')].find(b => b.textContent === 'Disable').click(); return true;"#)
        .await;
    wait_until("the page's button disabled the job", async || {
        daemon.get("/v1/agents/ops/heartbeats/quiet").await["enabled"] == false
    })
    .await;

    // Two jobs a page: the first page, then one more with each "Show more jobs"; an agent
    // whose jobs span pages is listed once, and the button goes once every job shows.
    // (A query, so that the browser loads the page again rather than only moving to the fragment.)
    browser.open(&format!("{}/?paged#token={TOKEN}&page=2", daemon.url)).await;
    let shown = r#"return { jobs: [...document.querySelectorAll('tr[data-job]')].map(r => r.dataset.job),
        agents: [...document.querySelectorAll('tr[data-agent]')].map(r => r.dataset.agent),
        more: !document.getElementById('more').hidden };"#;
    let page_shows = async |jobs: usize, more: bool| {
        let mut seen = Value::Null;
        for _ in 0..WAIT_SECS_MAX * 10 {
            seen = browser.run(shown).await;
            if seen["jobs"].as_array().map(Vec::len) == Some(jobs) && seen["more"] == more {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        seen
    };
    let first = page_shows(2, true).await;
    assert_eq!(first["jobs"], json!(["builder/main", "home/main"]), "{first}");
    let click = "document.getElementById('more-jobs').click(); return true;";
    browser.run(click).await;
    let two = page_shows(4, true).await;
    assert_eq!(two["jobs"], json!(["builder/main", "home/main", "ops/flaky", "ops/quiet"]), "{two}");
    assert_eq!(two["agents"], json!(["builder", "home", "ops"]), "{two}");
    browser.run(click).await;
    let all = page_shows(4, false).await;
    assert_eq!(all["more"], false, "the last page says there is no other: {all}");
    browser.stop().await;
    let _ = daemon.stop();
}

/// The served OpenAPI document passes the reference validator (openapi-spec-validator,
/// installed by .ci/run), and every documented operation answers with something other
/// than "no such route" (a 404 from the fallback) or 405.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_validates_and_every_operation_is_served() {
    let (_peers, peer) = start_peers().await;
    let daemon = Daemon::start(peer, "").await;
    let document = daemon.get("/v1/openapi.json").await;
    let file = daemon.dir.path().join("openapi.json");
    std::fs::write(&file, document.to_string()).expect("write");
    let output = Command::new("python3")
        .args(["-m", "openapi_spec_validator", file.to_str().expect("utf-8")])
        .output()
        .expect("python3 runs (pip install openapi-spec-validator; .ci/run does)");
    let said = String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the document does not validate: {said}");
    assert!(said.contains("OK"), "{said}");
    for (path, item) in document["paths"].as_object().expect("paths") {
        let concrete = path
            .replace("{agent}", "ops")
            .replace("{collection}", "heartbeats")
            .replace("{id}", "quiet")
            .replace("{turn}", "1");
        for method in item.as_object().expect("operations").keys() {
            if path.ends_with("/events") && method == "get" || path == "/v1/reload" {
                continue; // a stream that does not end, and a reload of the file in use
            }
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).expect("method");
            let (status, body) = daemon.call(method.clone(), &concrete, None).await;
            let fallback =
                status == 404 && body["error"]["message"].as_str().is_some_and(|m| m.contains("no such route"));
            assert!(!fallback && status != 405, "{method} {concrete}: {status} {body}");
        }
    }
    let _ = daemon.stop();
}

/// A backfill runs the slots a past window held, each once under its own slot; a second
/// backfill of the same window runs nothing again; windows it cannot serve are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backfill_runs_each_past_slot_once() {
    let (peers, peer) = start_peers().await;
    let daemon = Daemon::start(peer, "").await;
    let body =
        r#"{"id":"yearly","prompt":"yearly-prompt","cron":"0 0 1 1,7 *","timezone":"UTC","target":"webhook:ops"}"#;
    let (status, created) = daemon.call(Method::POST, "/v1/agents/ops/cron", Some(body)).await;
    assert_eq!(status, 201, "{created}");
    let year = jiff::Timestamp::now().to_zoned(jiff::tz::TimeZone::UTC).year() - 1;
    let window = format!(r#"{{"from":"{year}-01-01T00:00:00Z","to":"{year}-12-31T00:00:00Z"}}"#);
    let (status, answer) = daemon.call(Method::POST, "/v1/agents/ops/cron/yearly/backfill", Some(&window)).await;
    assert_eq!(status, 202, "{answer}");
    let january = format!("{year}-01-01T00:00:00Z");
    let july = format!("{year}-07-01T00:00:00Z");
    assert_eq!(answer["slots"], json!([january, july]));
    wait_until("both backfilled slots ran", async || peers.prompts_containing("yearly-prompt") == 2).await;
    let runs = daemon.get("/v1/agents/ops/cron/yearly/runs").await;
    let slots: Vec<&str> =
        runs["items"].as_array().expect("items").iter().filter_map(|r| r["scheduled_for"].as_str()).collect();
    assert_eq!(slots, vec![july.as_str(), january.as_str()], "each under its own slot, newest first");

    // Again: both slots are decided already, so nothing runs twice.
    let (status, _) = daemon.call(Method::POST, "/v1/agents/ops/cron/yearly/backfill", Some(&window)).await;
    assert_eq!(status, 202);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(peers.prompts_containing("yearly-prompt"), 2, "a backfill never runs a slot twice");

    let hourly = r#"{"id":"hourly","prompt":"hourly-prompt","cron":"0 * * * *","target":"webhook:ops"}"#;
    assert_eq!(daemon.call(Method::POST, "/v1/agents/ops/cron", Some(hourly)).await.0, 201);
    let (status, body) = daemon.call(Method::POST, "/v1/agents/ops/cron/hourly/backfill", Some(&window)).await;
    assert_error(status, &body, 422, "invalid", "more than 100 slots");
    let (status, body) = daemon.call(Method::POST, "/v1/agents/ops/heartbeats/quiet/backfill", Some(&window)).await;
    assert_error(status, &body, 422, "invalid", "no fixed slots");
    let future = r#"{"from":"2020-01-01T00:00:00Z","to":"2999-01-01T00:00:00Z"}"#;
    let (status, body) = daemon.call(Method::POST, "/v1/agents/ops/cron/yearly/backfill", Some(future)).await;
    assert_error(status, &body, 422, "invalid", "to: ");
    let (status, body) =
        daemon.call(Method::POST, "/v1/agents/ops/cron/yearly/backfill", Some(r#"{"from":"x","to":"y"}"#)).await;
    assert_error(status, &body, 422, "invalid", "from: \"x\"");
    assert_eq!(peers.prompts_containing("hourly-prompt"), 0, "refused backfills ran nothing");
    let _ = daemon.stop();
}

/// Two configs, two stores, one address (both with the default `listen`, say): the second
/// daemon cannot start, and a CLI run with the second config never steers the first one's
/// agents; it says that no daemon serves its config, naming both stores (issue 24).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_run_with_another_config_never_steers_this_daemon() {
    let (_peers, peer) = start_peers().await;
    let daemon = Daemon::start(peer, "").await;
    let address = daemon.url.trim_start_matches("http://").to_owned();
    let other = tempfile::tempdir().expect("temp dir");
    let other_config = other.path().join("second.toml");
    let text = format!(
        "[api]\nlisten = \"{address}\"\n[store]\npath = \"second.db\"\n[llm]\nprovider = \"scripted\"\n\
         [[agents]]\nid = \"ops\"\n[[agents.heartbeats]]\nid = \"x\"\nprompt = \"p\"\nevery = \"1h\"\ntarget = \"stdout\"\n"
    );
    std::fs::write(&other_config, text).expect("write config");
    let cli = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_systole"))
            .args(args)
            .env("SYSTOLE_API_TOKEN", TOKEN)
            .env_remove("SYSTOLE_CONFIG")
            .env_remove("SYSTOLE_URL")
            .output()
            .expect("run the CLI");
        (output.status.code(), String::from_utf8_lossy(&output.stderr).into_owned())
    };
    let second = other_config.to_str().expect("utf-8");
    let (code, stderr) = cli(&["serve", "--config", second]);
    assert_ne!(code, Some(0), "the address is taken: {stderr}");

    let (code, stderr) = cli(&["status", "--config", second]);
    assert_eq!(code, Some(1), "{stderr}");
    let (first_store, second_store) = (daemon.dir.path().join("state.db"), other.path().join("second.db"));
    let first_store = std::fs::canonicalize(first_store).expect("the daemon's store exists");
    assert!(stderr.contains(&format!("no daemon for {second}")), "{stderr}");
    assert!(stderr.contains(&format!("sqlite:{}", first_store.display())), "names the daemon's store: {stderr}");
    assert!(stderr.contains(second_store.file_name().and_then(|n| n.to_str()).expect("name")), "{stderr}");

    let (code, stderr) = cli(&["agent", "pause", "ops", "--minutes", "30", "--config", second]);
    assert_eq!(code, Some(1), "{stderr}");
    let agent = daemon.get("/v1/agents/ops").await;
    assert!(agent["paused_until"].is_null(), "the first daemon's agent was not paused: {agent:#}");

    // The daemon's own config steers it; --url steers whatever answers, on purpose.
    let first = daemon.config();
    let (code, stderr) = cli(&["status", "--config", first.to_str().expect("utf-8")]);
    assert_eq!(code, Some(0), "{stderr}");
    let (code, stderr) = cli(&["status", "--config", second, "--url", &daemon.url]);
    assert_eq!(code, Some(0), "{stderr}");
    let status = daemon.get("/v1/status").await;
    assert_eq!(status["store"], json!(format!("sqlite:{}", first_store.display())));

    // With no daemon at all for the second config's address, it says so.
    let _kept = daemon.stop();
    let (code, stderr) = cli(&["status", "--config", second]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains(&format!("no daemon serves {second}")), "{stderr}");
}
