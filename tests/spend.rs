//! What runs cost, end to end (issue 27): the real `systole` daemon with the real clock and
//! SQLite, against a local OpenAI-compatible server that reports `usage` (in OpenAI's
//! shape and in the shape LiteLLM's proxy gives, and through the real LiteLLM proxy) and a
//! webhook receiver, all on 127.0.0.1.
#![allow(clippy::disallowed_methods)] // this test waits on a real process in real time

#[path = "common/daemon_process.rs"]
mod daemon_process;

use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

const WAIT_SECS_MAX: u64 = 30;
/// How long LiteLLM's proxy may take to answer its health check (it imports a lot).
const LITELLM_START_SECS_MAX: u64 = 90;
const TOKEN: &str = "spend-test-token";
/// The LLM's API key, given to the daemon through `llm.api_key_env`.
const LLM_KEY: &str = "sk-spend-test-0123456789";

/// Prices of model `m` per million tokens: 2.00 input, 0.50 cached, 8.00 output.
const PRICES: &str = "[llm.prices.m]\ninput = 2.0\ncached_input = 0.5\noutput = 8.0\n\
                      [llm.prices.cheap]\ninput = 0.2\noutput = 0.8\n";

#[derive(Default)]
struct Peers {
    /// The first user message of every completion asked for.
    prompts: Mutex<Vec<String>>,
    /// The model each completion asked for, with its prompt.
    models: Mutex<Vec<(String, String)>>,
    deliveries: Mutex<Vec<String>>,
}

impl Peers {
    fn calls_with(&self, text: &str) -> usize {
        self.prompts.lock().expect("lock").iter().filter(|prompt| prompt.contains(text)).count()
    }

    fn deliveries_with(&self, text: &str) -> Vec<String> {
        self.deliveries.lock().expect("lock").iter().filter(|body| body.contains(text)).cloned().collect()
    }
}

/// Answers `HEARTBEAT_OK` (a silent run) with usage in OpenAI's shape, or in LiteLLM's
/// (`cache_read_input_tokens`, no details) for a prompt asking for it; `refuse-me` gets
/// the 401 of a revoked key.
async fn chat(
    State(peers): State<Arc<Peers>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> axum::response::Response {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let prompt = messages.iter().find(|m| m["role"] == "user").and_then(|m| m["content"].as_str()).unwrap_or("");
    peers.prompts.lock().expect("lock").push(prompt.to_owned());
    let model = body["model"].as_str().unwrap_or("").to_owned();
    peers.models.lock().expect("lock").push((prompt.to_owned(), model));
    if prompt.contains("echo-key") {
        // A careless model (or a tool) repeating the API key it was called with.
        let key = headers.get("authorization").and_then(|value| value.to_str().ok()).unwrap_or("");
        let message = json!({ "role": "assistant", "content": format!("Found it: {key}") });
        return Json(json!({ "choices": [{ "index": 0, "message": message, "finish_reason": "stop" }] }))
            .into_response();
    }
    if prompt.contains("refuse-me") {
        let error = json!({ "error": { "message": "Incorrect API key provided", "type": "invalid_request_error" } });
        return (StatusCode::UNAUTHORIZED, Json(error)).into_response();
    }
    let usage = if prompt.contains("litellm-shape") {
        json!({ "prompt_tokens": 900, "completion_tokens": 20, "total_tokens": 920,
                "cache_read_input_tokens": 300, "prompt_tokens_details": null })
    } else {
        json!({ "prompt_tokens": 1200, "completion_tokens": 30, "total_tokens": 1230,
                "prompt_tokens_details": { "cached_tokens": 1000 },
                "completion_tokens_details": { "reasoning_tokens": 10 } })
    };
    let message = json!({ "role": "assistant", "content": "HEARTBEAT_OK" });
    Json(json!({ "choices": [{ "index": 0, "message": message, "finish_reason": "stop" }], "usage": usage }))
        .into_response()
}

async fn hook(State(peers): State<Arc<Peers>>, body: String) -> StatusCode {
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
    /// A daemon on `peer` with the price table and `agents` (TOML of `[[agents]]` tables).
    async fn start(peer: std::net::SocketAddr, agents: &str) -> Self {
        Self::start_via(peer, peer, agents).await
    }

    /// The same, asking the model at `llm` (a proxy in front of `peer`, say).
    async fn start_via(llm: std::net::SocketAddr, peer: std::net::SocketAddr, agents: &str) -> Self {
        Self::start_with(llm, peer, "", agents).await
    }

    /// The same, with more lines for the `[engine]` table.
    async fn start_with(llm: std::net::SocketAddr, peer: std::net::SocketAddr, engine: &str, agents: &str) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = format!(
            "[api]\nlisten = \"127.0.0.1:0\"\n[store]\npath = \"state.db\"\n\
             [llm]\nbase_url = \"http://{llm}/v1\"\nmodel = \"m\"\nattempts = 1\napi_key_env = \"SPEND_TEST_LLM_KEY\"\n{PRICES}\
             [adapters.webhook.ops]\nurl = \"http://{peer}/hook\"\n\
             [engine]\nshutdown_grace = \"5s\"\nbreaker_failures = 3\n{engine}{agents}"
        );
        let envs = [("SYSTOLE_API_TOKEN", TOKEN), ("SPEND_TEST_LLM_KEY", LLM_KEY)];
        let (child, url) = daemon_process::spawn_serve(dir.path(), &config, &envs).await;
        Self { child, url, http: reqwest::Client::new(), dir }
    }

    async fn get_text(&self, path: &str) -> String {
        let response =
            self.http.get(format!("{}{path}", self.url)).bearer_auth(TOKEN).send().await.expect("the API answers");
        assert_eq!(response.status().as_u16(), 200, "GET {path}");
        response.text().await.expect("body")
    }

    async fn get(&self, path: &str) -> Value {
        serde_json::from_str(&self.get_text(path).await).expect("JSON")
    }

    async fn post(&self, path: &str, body: Value) {
        self.send(reqwest::Method::POST, path, body).await;
    }

    async fn send(&self, method: reqwest::Method, path: &str, body: Value) {
        let response = self
            .http
            .request(method.clone(), format!("{}{path}", self.url))
            .bearer_auth(TOKEN)
            .json(&body)
            .send()
            .await
            .expect("the API answers");
        assert!(response.status().is_success(), "{method} {path}: {}", response.status());
    }

    /// The run log of one heartbeat, newest first.
    async fn runs(&self, agent: &str, id: &str) -> Vec<Value> {
        let page = self.get(&format!("/v1/agents/{agent}/heartbeats/{id}/runs?limit=200")).await;
        page["items"].as_array().cloned().unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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

fn agent<'a>(status: &'a Value, id: &str) -> &'a Value {
    status["agents"]
        .as_array()
        .and_then(|agents| agents.iter().find(|agent| agent["id"] == id))
        .unwrap_or_else(|| panic!("agent {id} in the status: {status:#}"))
}

fn heartbeat(agent: &str, id: &str, prompt: &str, every: &str) -> String {
    format!(
        "[[agents]]\nid = \"{agent}\"\n\
         [[agents.heartbeats]]\nid = \"{id}\"\nprompt = \"{prompt}\"\nevery = \"{every}\"\ntarget = \"webhook:ops\"\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_heartbeat_s_tokens_and_cost_show_in_the_run_log_the_status_and_the_metrics() {
    let (peers, peer) = start_peers().await;
    let agents = format!(
        "{}{}",
        heartbeat("plain", "check", "openai-shape", "1s"),
        // Its day starts 14 hours before UTC's: status reads each day start's spending once.
        heartbeat("proxied", "check", "litellm-shape", "1s")
            .replace("id = \"proxied\"\n", "id = \"proxied\"\ntimezone = \"Pacific/Kiritimati\"\n")
    );
    let daemon = Daemon::start(peer, &agents).await;
    wait_until("two runs of each agent", async || {
        daemon.runs("plain", "check").await.iter().filter(|run| run["llm_calls"] == 1).count() >= 2
            && daemon.runs("proxied", "check").await.iter().filter(|run| run["llm_calls"] == 1).count() >= 2
    })
    .await;
    // Stop the timed runs, and let one in flight finish, so the sums below hold still.
    for id in ["plain", "proxied"] {
        daemon.post(&format!("/v1/agents/{id}/pause"), json!({ "minutes": 30 })).await;
    }
    tokio::time::sleep(Duration::from_millis(1_500)).await;

    // (agent, tokens of each run, cost of each run in micros):
    // 200 uncached x 2.00 + 1,000 cached x 0.50 + 30 output x 8.00 = 1,140 micros, and
    // 600 x 2.00 + 300 x 0.50 + 20 x 8.00 = 1,510 micros.
    let expected = [
        ("plain", json!({ "input": 1200, "cached": 1000, "output": 30, "reasoning": 10 }), 1_140_u64, 1_230_u64),
        ("proxied", json!({ "input": 900, "cached": 300, "output": 20, "reasoning": 0 }), 1_510, 920),
    ];
    let status = daemon.get("/v1/status").await;
    let metrics = daemon.get_text("/metrics").await;
    let day_of = |id: &str| agent(&status, id)["today"]["day_started_at"].clone();
    assert_ne!(day_of("plain"), day_of("proxied"), "the two agents' days start apart: {status:#}");
    for (id, tokens, cost, total) in expected {
        let runs: Vec<Value> =
            daemon.runs(id, "check").await.into_iter().filter(|run| run["status"] == "succeeded").collect();
        assert!(runs.len() >= 2, "{id}: {runs:#?}");
        for run in &runs {
            assert_eq!(run["delivery"], "not-needed", "a silent run delivers nothing: {run:#}");
            assert_eq!(run["tokens"], tokens, "{id}: {run:#}");
            assert_eq!(run["cost_micros"], cost, "{id}: {run:#}");
            assert_eq!(run["unpriced_calls"], 0);
        }
        let count = runs.len() as u64;
        let today = &agent(&status, id)["today"];
        assert_eq!(today["llm_calls"], count, "{id}: {today:#}");
        assert_eq!(today["tokens"], count * total, "{id}: {today:#}");
        assert_eq!(today["cost_micros"], count * cost, "{id}: {today:#}");
        assert_eq!(today["cap_reached"], Value::Null);
        let job = &agent(&status, id)["jobs"][0];
        assert_eq!(job["today"]["tokens"], count * total, "the job's share is all of it: {job:#}");
        // The agent's own page reads its day alone: the status, which reads each day start
        // once for all its agents, says the same.
        let own = daemon.get(&format!("/v1/agents/{id}")).await;
        assert_eq!(own["budget"], *today, "{id}: status and the agent's own page agree");
        let input = tokens["input"].as_u64().expect("input");
        let line = format!("systole_llm_tokens_total{{agent=\"{id}\",kind=\"input\"}} {}", count * input);
        assert!(metrics.contains(&line), "{line} in\n{metrics}");
        let cost_line = format!("systole_llm_cost_total{{agent=\"{id}\"}} 0.{:06}", count * cost);
        assert!(metrics.contains(&cost_line), "{cost_line} in\n{metrics}");
    }
    assert!(peers.deliveries_with("HEARTBEAT_OK").is_empty(), "silent runs reach nobody");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_cap_stops_the_runs_and_is_announced_once() {
    let (peers, peer) = start_peers().await;
    // Each run reports 1,230 tokens: two stay under 2,500, the third reaches it.
    let agents = heartbeat("capped", "check", "openai-shape", "1s").replacen(
        "id = \"capped\"\n",
        "id = \"capped\"\ndaily_tokens_max = 2500\n",
        1,
    );
    let daemon = Daemon::start(peer, &agents).await;
    wait_until("three skips for the token cap", async || {
        daemon.runs("capped", "check").await.iter().filter(|run| run["skip_reason"] == "token-cap").count() >= 3
    })
    .await;
    let runs = daemon.runs("capped", "check").await;
    let ran = runs.iter().filter(|run| run["llm_calls"] == 1).count();
    assert_eq!(ran, 3, "runs go on until the cap is reached, then none starts: {runs:#?}");
    assert_eq!(peers.calls_with("openai-shape"), 3);
    let status = daemon.get("/v1/status").await;
    let today = &agent(&status, "capped")["today"];
    assert_eq!(today["cap_reached"], "token-cap", "{today:#}");
    assert_eq!(today["tokens"], 3 * 1_230);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let announced = peers.deliveries_with("daily_tokens_max");
    assert_eq!(announced.len(), 1, "announced once: {announced:#?}");
    assert!(announced[0].contains("token-cap"), "{}", announced[0]);
    let metrics = daemon.get_text("/metrics").await;
    assert!(metrics.contains("systole_skips_total{reason=\"token-cap\"}"), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_global_token_cap_stops_every_agent_s_runs_and_is_announced_once() {
    let (peers, peer) = start_peers().await;
    // Each run reports 1,230 tokens; each agent's own cap is the default (2,000,000), the
    // cap of all agents together 3,000: the third run reaches it.
    let agents = format!(
        "{}{}",
        heartbeat("one", "check", "openai-shape", "1s"),
        heartbeat("two", "check", "openai-shape", "1s")
    );
    let daemon = Daemon::start_with(peer, peer, "daily_tokens_max = 3000\n", &agents).await;
    let skips = async |agent: &str| {
        daemon.runs(agent, "check").await.iter().filter(|run| run["skip_reason"] == "global-token-cap").count()
    };
    wait_until("both agents skip for the global cap", async || skips("one").await >= 2 && skips("two").await >= 2)
        .await;
    let mut ran = 0;
    for agent in ["one", "two"] {
        ran += daemon.runs(agent, "check").await.iter().filter(|run| run["llm_calls"] == 1).count();
    }
    // The third run reaches it; a run of the other agent already going when it did may
    // finish (one per agent in flight at most), and nothing starts after.
    assert!((3..=4).contains(&ran), "runs go on until the global cap is reached, then none starts: {ran}");
    assert_eq!(peers.calls_with("openai-shape"), ran);
    let status = daemon.get("/v1/status").await;
    let today = &status["today"];
    assert_eq!(today["cap_reached"], "global-token-cap", "{today:#}");
    assert_eq!(today["tokens"], 1_230 * ran, "{today:#}");
    assert_eq!((today["daily_tokens_max"].as_u64(), today["timezone"].as_str()), (Some(3_000), Some("UTC")));
    assert_eq!(agent(&status, "one")["today"]["cap_reached"], Value::Null, "no agent reached its own cap");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let announced = peers.deliveries_with("engine.daily_tokens_max");
    assert_eq!(announced.len(), 1, "announced once: {announced:#?}");
    assert!(
        announced[0].contains("all agents together") && announced[0].contains("global-token-cap"),
        "{}",
        announced[0]
    );
    let metrics = daemon.get_text("/metrics").await;
    assert!(metrics.contains("systole_skips_total{reason=\"global-token-cap\"}"), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_401_from_the_model_opens_the_breaker_on_the_first_failure() {
    let (peers, peer) = start_peers().await;
    let daemon = Daemon::start(peer, &heartbeat("keyless", "check", "refuse-me", "1s")).await;
    wait_until("the breaker's announcement", async || !peers.deliveries_with("circuit breaker").is_empty()).await;
    // Several intervals later: still one call, one failure, one announcement.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(peers.calls_with("refuse-me"), 1, "no more calls while the breaker is open");
    let shown = daemon.get("/v1/agents/keyless/heartbeats/check").await;
    assert_eq!(shown["enabled"], false, "{shown:#}");
    assert_eq!(shown["disabled_reason"], "circuit-breaker", "{shown:#}");
    let failed = daemon.runs("keyless", "check").await;
    let failed: Vec<&Value> = failed.iter().filter(|run| run["status"] == "failed").collect();
    assert_eq!(failed.len(), 1, "{failed:#?}");
    assert!(failed[0]["error"].as_str().is_some_and(|error| error.contains("HTTP 401")), "{:#}", failed[0]);
    let announced = peers.deliveries_with("circuit breaker");
    assert_eq!(announced.len(), 1, "{announced:#?}");
    assert!(announced[0].contains("refused the request") && announced[0].contains("HTTP 401"), "{}", announced[0]);
    assert!(!announced[0].contains("times in a row"), "{}", announced[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_s_transcript_reads_back_through_the_api_and_the_cli_with_no_secret_in_it() {
    let (_peers, peer) = start_peers().await;
    let daemon = Daemon::start(peer, &heartbeat("echo", "check", "echo-key", "1h")).await;
    daemon.post("/v1/agents/echo/heartbeats/check/trigger", json!({})).await;
    wait_until("the triggered run", async || {
        daemon.runs("echo", "check").await.iter().any(|run| run["llm_calls"] == 1)
    })
    .await;
    let transcript = daemon.get("/v1/agents/echo/heartbeats/check/runs/latest/transcript").await;
    let messages = transcript["messages"].as_array().cloned().unwrap_or_default();
    let roles: Vec<&str> = messages.iter().filter_map(|message| message["role"].as_str()).collect();
    assert_eq!(roles, ["system", "user", "assistant"], "{transcript:#}");
    assert!(messages[1]["content"].as_str().is_some_and(|text| text.contains("echo-key")), "{transcript:#}");
    assert_eq!(messages[2]["content"], "Found it: Bearer [redacted]", "the key the model repeated is blanked");
    assert!(!transcript.to_string().contains(LLM_KEY));
    // The same transcript under its slot, and through the CLI (read from the store).
    let slot = transcript["slot"].as_str().expect("slot").to_owned();
    let by_slot = daemon.get(&format!("/v1/agents/echo/heartbeats/check/runs/{slot}/transcript")).await;
    assert_eq!(by_slot["messages"], transcript["messages"]);
    let config = daemon.dir.path().join("systole.toml");
    let output = Command::new(env!("CARGO_BIN_EXE_systole"))
        .args(["heartbeat", "runs", "check", "--agent", "echo", "--transcript", "latest", "--config"])
        .arg(&config)
        .output()
        .expect("the CLI runs");
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{printed} {}", String::from_utf8_lossy(&output.stderr));
    assert!(
        printed.contains("--- user") && printed.contains("--- assistant") && printed.contains("Bearer [redacted]"),
        "{printed}"
    );
    assert!(!printed.contains(LLM_KEY));
    // Bad input is named, not a 500.
    let response = daemon
        .http
        .get(format!("{}/v1/agents/echo/heartbeats/check/runs/yesterday/transcript", daemon.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("answer");
    assert_eq!(response.status().as_u16(), 422);
    let response = daemon
        .http
        .get(format!("{}/v1/agents/echo/heartbeats/check/runs/2020-01-01T00:00:00Z/transcript", daemon.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("answer");
    assert_eq!(response.status().as_u16(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_s_own_model_is_asked_for_and_priced_as_itself() {
    let (peers, peer) = start_peers().await;
    let agents = heartbeat("thrifty", "routine", "routine-check", "1h")
        .replace("every = \"1h\"", "every = \"1h\"\nmodel = \"cheap\"")
        + "[[agents.heartbeats]]\nid = \"careful\"\nprompt = \"careful-check\"\nevery = \"1h\"\ntarget = \"webhook:ops\"\n";
    let daemon = Daemon::start(peer, &agents).await;
    for id in ["routine", "careful"] {
        daemon.post(&format!("/v1/agents/thrifty/heartbeats/{id}/trigger"), json!({})).await;
    }
    wait_until("both runs", async || {
        let ran = async |id| daemon.runs("thrifty", id).await.iter().any(|run| run["llm_calls"] == 1);
        ran("routine").await && ran("careful").await
    })
    .await;
    let asked = |prompt: &str| {
        let models = peers.models.lock().expect("lock");
        models.iter().filter(|(sent, _)| sent.contains(prompt)).map(|(_, model)| model.clone()).collect::<Vec<_>>()
    };
    assert_eq!(asked("routine-check"), ["cheap"], "the job's own model");
    assert_eq!(asked("careful-check"), ["m"], "the engine's model");
    // 200 uncached x 0.20 + 1,000 cached x 0.20 (no cached price) + 30 x 0.80 = 264 micros.
    let routine = daemon.runs("thrifty", "routine").await;
    assert_eq!(routine[0]["cost_micros"], 264, "{routine:#?}");
    assert_eq!(daemon.runs("thrifty", "careful").await[0]["cost_micros"], 1_140);
    assert_eq!(daemon.get("/v1/agents/thrifty/heartbeats/routine").await["model"], "cheap");
    // An operator creates a job on the cheap model through the API (config jobs change in
    // the file), then moves it back to the engine's model.
    let job =
        json!({ "id": "adhoc", "prompt": "adhoc-check", "every": "1h", "target": "webhook:ops", "model": "cheap" });
    daemon.post("/v1/agents/thrifty/heartbeats", job).await;
    assert_eq!(daemon.get("/v1/agents/thrifty/heartbeats/adhoc").await["model"], "cheap");
    daemon.post("/v1/agents/thrifty/heartbeats/adhoc/trigger", json!({})).await;
    wait_until("the adhoc job's run", async || asked("adhoc-check").len() == 1).await;
    daemon.send(reqwest::Method::PATCH, "/v1/agents/thrifty/heartbeats/adhoc", json!({ "model": "" })).await;
    assert_eq!(daemon.get("/v1/agents/thrifty/heartbeats/adhoc").await["model"], Value::Null);
    daemon.post("/v1/agents/thrifty/heartbeats/adhoc/trigger", json!({})).await;
    wait_until("its second run", async || asked("adhoc-check").len() == 2).await;
    assert_eq!(asked("adhoc-check"), ["cheap", "m"]);
}

/// LiteLLM's proxy, from the virtualenv `scripts/install-test-deps.sh` makes, in front of
/// `upstream`; the daemon's API key is its master key. Ended when dropped.
struct LiteLlm {
    child: Child,
    address: std::net::SocketAddr,
    _dir: tempfile::TempDir,
}

impl LiteLlm {
    async fn start(upstream: std::net::SocketAddr) -> Self {
        let venv = std::env::var("SYSTOLE_TEST_LITELLM_VENV").map_or_else(
            |_| std::path::PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/systole-test-litellm"),
            std::path::PathBuf::from,
        );
        let litellm = venv.join("bin/litellm");
        assert!(litellm.exists(), "{} is missing: run `bash scripts/install-test-deps.sh`", litellm.display());
        let dir = tempfile::tempdir().expect("temp dir");
        let config = dir.path().join("litellm.yaml");
        let models = format!(
            "model_list:\n  - model_name: m\n    litellm_params:\n      model: openai/m\n      \
             api_base: http://{upstream}/v1\n      api_key: sk-upstream\n"
        );
        std::fs::write(&config, models).expect("write");
        // A free port, taken back just before the proxy binds it.
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a port").port();
        let log = std::fs::File::create(dir.path().join("litellm.log")).expect("log");
        let child = Command::new(&litellm)
            .arg("--config")
            .arg(&config)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .env("LITELLM_MASTER_KEY", LLM_KEY)
            // Its price map from the package, not from the network.
            .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("litellm starts");
        let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let proxy = Self { child, address, _dir: dir };
        let client = reqwest::Client::new();
        for _ in 0..LITELLM_START_SECS_MAX * 10 {
            let health = client.get(format!("http://{address}/health/liveliness")).send().await;
            if health.is_ok_and(|response| response.status().is_success()) {
                return proxy;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("LiteLLM did not answer within {LITELLM_START_SECS_MAX} s");
    }
}

impl Drop for LiteLlm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Usage through the real LiteLLM proxy: what it passes on is what the run log, the
/// status and the metrics count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_through_the_real_litellm_proxy_is_counted_as_the_provider_reported_it() {
    let (peers, upstream) = start_peers().await;
    let proxy = LiteLlm::start(upstream).await;
    let daemon = Daemon::start_via(proxy.address, upstream, &heartbeat("proxied", "check", "openai-shape", "1s")).await;
    wait_until("two runs through the proxy", async || {
        daemon.runs("proxied", "check").await.iter().filter(|run| run["llm_calls"] == 1).count() >= 2
    })
    .await;
    daemon.post("/v1/agents/proxied/pause", json!({ "minutes": 30 })).await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(peers.calls_with("openai-shape") >= 2, "the proxy asked the upstream");
    let runs: Vec<Value> =
        daemon.runs("proxied", "check").await.into_iter().filter(|run| run["status"] == "succeeded").collect();
    assert!(runs.len() >= 2, "{runs:#?}");
    for run in &runs {
        // 200 uncached x 2.00 + 1,000 cached x 0.50 + 30 output x 8.00 = 1,140 micros.
        assert_eq!(run["tokens"], json!({ "input": 1200, "cached": 1000, "output": 30, "reasoning": 10 }), "{run:#}");
        assert_eq!(run["cost_micros"], 1_140, "{run:#}");
    }
    let status = daemon.get("/v1/status").await;
    let today = &agent(&status, "proxied")["today"];
    assert_eq!(today["tokens"], runs.len() as u64 * 1_230, "{today:#}");
    assert_eq!(today["cost_micros"], runs.len() as u64 * 1_140, "{today:#}");
}
