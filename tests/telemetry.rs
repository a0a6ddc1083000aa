//! Traces over OTLP, end to end (issue 27, ADR 0022): the real daemon with `[telemetry]`,
//! a local OpenAI-compatible model that calls a tool of a real MCP server and reports
//! usage, and a real OTLP/HTTP receiver on 127.0.0.1 that parses every request with the
//! OpenTelemetry project's protobuf definitions (tests/peers/otlp_receiver.py). Checked:
//! span names, parent-child links, the GenAI attributes, and the trace id the run log names.
#![allow(clippy::disallowed_methods)] // a real daemon and real peers in real time

#[path = "common/daemon_process.rs"]
mod daemon_process;
#[path = "common/mcp_peers.rs"]
mod mcp_peers;

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use axum::response::IntoResponse;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

const TOKEN: &str = "telemetry-test-token";
/// A hosted receiver's key: given to the daemon only through the environment.
const OTLP_KEY: &str = "otlp-key-from-the-environment";
const WAIT_SECS_MAX: u64 = 40;

/// Calls `inbox__search` first, then answers from its result; usage on every completion.
async fn chat(Json(body): Json<Value>) -> axum::response::Response {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let usage = json!({ "prompt_tokens": 321, "completion_tokens": 12, "total_tokens": 333 });
    let message = if messages.iter().any(|m| m["role"] == "tool") {
        json!({ "role": "assistant", "content": "HEARTBEAT_OK" })
    } else {
        let call = json!({ "id": "call-1", "type": "function",
                           "function": { "name": "inbox__search", "arguments": "{\"query\":\"urgent\"}" } });
        json!({ "role": "assistant", "content": null, "tool_calls": [call] })
    };
    Json(json!({ "choices": [{ "index": 0, "message": message, "finish_reason": "stop" }], "usage": usage }))
        .into_response()
}

struct Receiver {
    child: Child,
    url: String,
    spans: std::path::PathBuf,
}

impl Receiver {
    fn start(dir: &Path) -> Self {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/otlp_receiver.py");
        let port_file = dir.join("otlp.port");
        let spans = dir.join("spans.jsonl");
        let child =
            Command::new("python3").arg(&script).arg(&port_file).arg(&spans).spawn().expect(
                "python3 runs the OTLP receiver (bash scripts/install-test-deps.sh installs opentelemetry-proto)",
            );
        let started = Instant::now();
        let port = loop {
            if let Ok(port) = std::fs::read_to_string(&port_file) {
                break port;
            }
            assert!(started.elapsed() < Duration::from_secs(WAIT_SECS_MAX), "the OTLP receiver never started");
            std::thread::sleep(Duration::from_millis(50));
        };
        Self { child, url: format!("http://127.0.0.1:{}", port.trim()), spans }
    }

    fn spans(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.spans).unwrap_or_default();
        text.lines().filter_map(|line| serde_json::from_str(line).ok()).collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The daemon, ended however the test ends (a panic must not leave it and its MCP server
/// running beside other tests).
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.0.id().to_string()]).status();
        let _ = self.0.wait();
    }
}

fn attribute<'a>(span: &'a Value, key: &str) -> &'a Value {
    &span["attributes"][key]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_trace_reaches_a_real_otlp_receiver_with_genai_spans() {
    mcp_peers::require_peers();
    let dir = tempfile::tempdir().expect("temp dir");
    let receiver = Receiver::start(dir.path());
    let peer = daemon_process::serve_loopback(Router::new().route("/v1/chat/completions", post(chat))).await;
    let config = format!(
        "[api]\nlisten = \"127.0.0.1:0\"\n[store]\npath = \"state.db\"\n\
         [llm]\nbase_url = \"http://{peer}/v1\"\nmodel = \"m\"\nattempts = 1\n\
         [telemetry]\notlp_endpoint = \"{}\"\nservice_name = \"systole-test\"\n\
         headers = {{ \"x-otlp-api-key\" = \"SYSTOLE_TEST_OTLP_KEY\" }}\n\
         {}[[agents]]\nid = \"ops\"\ntools = [\"inbox/search\"]\n\
         [[agents.heartbeats]]\nid = \"traced\"\nprompt = \"look\"\nevery = \"1h\"\ntarget = \"stdout\"\n",
        receiver.url,
        mcp_peers::stdio_server_toml("inbox", "read_only = [\"search\"]"),
    );
    let env = [("SYSTOLE_API_TOKEN", TOKEN), ("SYSTOLE_TEST_OTLP_KEY", OTLP_KEY)];
    let (child, url) = daemon_process::spawn_serve(dir.path(), &config, &env).await;
    let _daemon = Daemon(child);
    let http = reqwest::Client::new();
    let call = |method: reqwest::Method, path: &str| http.request(method, format!("{url}{path}")).bearer_auth(TOKEN);
    let started = Instant::now();
    // The MCP server is ready when the agent's tool is listed.
    loop {
        let catalog: Value =
            call(reqwest::Method::GET, "/v1/mcp").send().await.expect("mcp").json().await.expect("json");
        let ready = catalog["servers"].as_array().into_iter().flatten().any(|s| s["state"] == "ready");
        if ready {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(WAIT_SECS_MAX), "the MCP server never got ready: {catalog}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let response =
        call(reqwest::Method::POST, "/v1/agents/ops/heartbeats/traced/trigger").send().await.expect("trigger");
    assert_eq!(response.status(), 202);

    let spans = loop {
        let spans = receiver.spans();
        if spans.len() >= 4 {
            break spans;
        }
        assert!(started.elapsed() < Duration::from_secs(WAIT_SECS_MAX), "spans received: {spans:#?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let names: Vec<&str> = spans.iter().filter_map(|s| s["name"].as_str()).collect();
    assert_eq!(names, ["invoke_agent ops", "chat m", "chat m", "execute_tool inbox/search"], "{spans:#?}");
    let root = &spans[0];
    assert_eq!(root["parent_span_id"], "", "the run's span is the root");
    for child in &spans[1..] {
        assert_eq!((&child["trace_id"], &child["parent_span_id"]), (&root["trace_id"], &root["span_id"]), "{child}");
        let (start, end) = (child["start"].as_u64().unwrap_or(0), child["end"].as_u64().unwrap_or(0));
        assert!(root["start"].as_u64() <= Some(start) && start <= end, "a child within its run: {child}");
    }
    assert_eq!(attribute(root, "gen_ai.operation.name"), "invoke_agent");
    assert_eq!(attribute(root, "gen_ai.agent.name"), "ops");
    assert_eq!(root["service"], "systole-test");
    assert!(spans.iter().all(|span| span["api_key"] == OTLP_KEY), "the header from its variable: {spans:#?}");
    assert!(root["schema_url"].as_str().is_some_and(|url| url.ends_with("/1.41.0")), "{root}");
    let chat = &spans[1];
    assert_eq!(attribute(chat, "gen_ai.operation.name"), "chat");
    assert_eq!(attribute(chat, "gen_ai.request.model"), "m");
    assert_eq!(attribute(chat, "gen_ai.usage.input_tokens"), 321);
    assert_eq!(attribute(chat, "gen_ai.usage.output_tokens"), 12);
    assert_eq!(chat["kind"], 3, "a completion is a client span");
    let tool = &spans[3];
    assert_eq!(attribute(tool, "gen_ai.operation.name"), "execute_tool");
    assert_eq!(attribute(tool, "gen_ai.tool.name"), "inbox/search");

    // The run log names the same trace.
    let runs: Value = call(reqwest::Method::GET, "/v1/agents/ops/heartbeats/traced/runs?limit=1")
        .send()
        .await
        .expect("runs")
        .json()
        .await
        .expect("json");
    assert_eq!(runs["items"][0]["trace_id"], root["trace_id"], "{runs}");
}

/// A header whose variable the environment lacks stops start-up naming the field; a bad
/// header name is refused by `config check`.
#[test]
fn a_missing_header_variable_stops_start_up_naming_the_field() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("systole.toml");
    let config = "[api]\nlisten = \"\"\n[llm]\nprovider = \"scripted\"\n\
                  [telemetry]\notlp_endpoint = \"http://127.0.0.1:1\"\n\
                  headers = { \"x-otlp-api-key\" = \"SYSTOLE_TEST_UNSET_OTLP_KEY\" }\n";
    std::fs::write(&path, config).expect("write");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_systole"))
        .args(["serve", "--config", path.to_str().expect("utf-8")])
        .env_remove("SYSTOLE_TEST_UNSET_OTLP_KEY")
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("telemetry.headers.x-otlp-api-key") && stderr.contains("SYSTOLE_TEST_UNSET_OTLP_KEY"),
        "{stderr}"
    );

    let bad = "[llm]\nprovider = \"scripted\"\n[telemetry]\notlp_endpoint = \"http://127.0.0.1:1\"\n\
               headers = { \"x key\" = \"KEY\" }\n";
    std::fs::write(&path, bad).expect("write");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_systole"))
        .args(["config", "check"])
        .arg(&path)
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("telemetry.headers") && stderr.contains("is not a header name"), "{stderr}");
}
