//! The MCP client against real servers: the Python test peer on the official SDK over
//! stdio and streamable HTTP, and the reference `server-everything` through `npx`. Each
//! failure a server can show (a hang, a crash mid-call, a flood, a changed list, a noisy
//! stderr, a grandchild process) ends in a clear answer and a client that keeps going.
#![allow(clippy::disallowed_methods)] // real servers in real time

#[path = "common/mcp_peers.rs"]
mod mcp_peers;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use serde_json::json;

use mcp_peers::{
    everything_toml, processes_matching, require_peers, stdio_server_toml, stdio_server_toml_with, HttpPeer,
};
use systole::core::ids::{AgentId, HeartbeatId, HeartbeatKey};
use systole::core::tool_policy::ToolName;
use systole::mcp::servers::{secrets, McpServers};
use systole::ports::tools::{CallContext, ServerState, ToolCallError, ToolServers};

fn context() -> CallContext {
    let key = HeartbeatKey {
        agent: AgentId::new("main").expect("valid"),
        heartbeat: HeartbeatId::new("inbox").expect("valid"),
    };
    CallContext { key, slot: Timestamp::UNIX_EPOCH, idempotency_key: "main/inbox/0/tool-1".to_owned() }
}

async fn servers(toml: &str, env: &[(&str, &str)]) -> Arc<McpServers> {
    let text = format!("[llm]\nprovider = \"scripted\"\n{toml}");
    let config = systole::daemon::config::parse(&text, Path::new("/tmp/mcp-test.toml")).expect("valid config");
    let secrets = secrets(&config.mcp, |name| env.iter().find(|(n, _)| *n == name).map(|(_, v)| (*v).to_owned()))
        .expect("every variable set");
    McpServers::start(&config.mcp, secrets).await
}

fn tool(name: &str) -> ToolName {
    ToolName::parse(name).expect("valid")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_of_a_stdio_and_an_http_server_are_listed_and_called() {
    require_peers();
    let http = HttpPeer::start(None);
    let toml = format!(
        "{}[mcp.servers.web]\nurl = {:?}\n",
        stdio_server_toml("inbox", "env = [\"PASSED_TOKEN\"]\nread_only = [\"search\"]"),
        http.url
    );
    let servers = servers(&toml, &[("PASSED_TOKEN", "passed-value")]).await;
    let catalog = servers.catalog();
    for name in ["inbox", "web"] {
        assert_eq!(catalog[name].state, ServerState::Ready, "{name}: {:?}", catalog[name].state);
        let search = catalog[name].tools.iter().find(|t| t.name.tool == "search").expect("search listed");
        assert_eq!(search.hints.read_only, Some(true), "the server's hint is read");
        assert_eq!(search.read_only, name == "inbox", "only the operator's mark makes it read-only");
    }
    for name in ["inbox/search", "web/search"] {
        let answer = servers.call(&tool(name), json!({ "query": "urgent" }), Duration::from_secs(10), &context()).await;
        let answer = answer.expect("answered");
        assert!(!answer.is_error && answer.text.contains("3 messages match 'urgent'"), "{}", answer.text);
    }
    // Only the named variables reach a stdio server (and PATH, HOME, LANG, TMPDIR).
    let echo_env = tool("inbox/echo_env");
    let call = context();
    let echo = |variable: &str| servers.call(&echo_env, json!({ "name": variable }), Duration::from_secs(10), &call);
    assert_eq!(echo("PASSED_TOKEN").await.expect("answered").text, "passed-value");
    std::env::set_var("NOT_PASSED_SECRET", "leak");
    assert_eq!(echo("NOT_PASSED_SECRET").await.expect("answered").text, "<unset>");
    // A call with arguments the tool refuses comes back as the tool's error, not a hang.
    let refused = servers.call(&tool("inbox/search"), json!({}), Duration::from_secs(10), &context()).await;
    match refused {
        Ok(answer) => assert!(answer.is_error, "a missing argument is an error the model reads: {}", answer.text),
        Err(error) => assert!(matches!(error, ToolCallError::Failed { .. }), "{error}"),
    }
    servers.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_call_times_out_and_a_crash_mid_call_answers_an_error_then_the_server_restarts() {
    require_peers();
    let dir = tempfile::tempdir().expect("temp dir");
    let effects = dir.path().join("effects.txt");
    let effects_text = effects.to_str().expect("utf-8");
    // It floods its stderr before it serves: drained and rate-capped, it never blocks it.
    let toml = stdio_server_toml_with("inbox", &["--stderr-flood"], "env = [\"EFFECTS_FILE\"]");
    let servers = servers(&toml, &[("EFFECTS_FILE", effects_text)]).await;
    assert_eq!(servers.catalog()["inbox"].state, ServerState::Ready);
    let started = Instant::now();
    let hung = servers.call(&tool("inbox/hang"), json!({}), Duration::from_secs(1), &context()).await;
    assert!(matches!(hung, Err(ToolCallError::Timeout { .. })), "{hung:?}");
    assert!(started.elapsed() < Duration::from_secs(3), "bounded by its timeout: {:?}", started.elapsed());
    // The server heard the cancellation (`notifications/cancelled`) and stopped the call.
    let cancelled = Instant::now();
    while !std::fs::read_to_string(&effects).unwrap_or_default().contains("hang cancelled") {
        assert!(cancelled.elapsed() < Duration::from_secs(10), "the server never heard of the cancellation");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let crashed = servers.call(&tool("inbox/crash"), json!({}), Duration::from_secs(20), &context()).await;
    assert!(matches!(crashed, Err(ToolCallError::Unavailable { .. })), "{crashed:?}");
    let started = Instant::now();
    loop {
        let catalog = servers.catalog();
        if catalog["inbox"].state == ServerState::Ready && catalog["inbox"].restarts >= 1 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "restarted with backoff: {:?}", catalog["inbox"]);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let again = servers.call(&tool("inbox/search"), json!({ "query": "x" }), Duration::from_secs(10), &context()).await;
    assert!(again.expect("answers after its restart").text.contains("match"));
    servers.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_is_cut_with_a_note_and_a_changed_list_is_read_again() {
    require_peers();
    let http = HttpPeer::start(None);
    let servers = servers(&format!("[mcp.servers.web]\nurl = {:?}\n", http.url), &[]).await;
    let flood = servers.call(&tool("web/flood"), json!({ "megabytes": 3 }), Duration::from_secs(30), &context()).await;
    let flood = flood.expect("answered");
    assert!(flood.text.len() < 20_000, "cut: {} bytes", flood.text.len());
    assert!(
        flood.text.contains("[cut: the result had 3145728 characters"),
        "{}",
        &flood.text[flood.text.len() - 120..]
    );

    assert!(!servers.catalog()["web"].tools.iter().any(|t| t.name.tool == "fresh"));
    let added = servers.call(&tool("web/add_tool"), json!({}), Duration::from_secs(10), &context()).await;
    assert_eq!(added.expect("answered").text, "added fresh");
    let started = Instant::now();
    while !servers.catalog()["web"].tools.iter().any(|t| t.name.tool == "fresh") {
        assert!(started.elapsed() < Duration::from_secs(10), "tools/list_changed makes it list them again");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    servers.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_through_npx_answers_and_its_whole_group_ends_with_it() {
    require_peers();
    let servers = servers(&everything_toml("everything", "read_only = [\"echo\"]"), &[]).await;
    let catalog = servers.catalog();
    assert_eq!(catalog["everything"].state, ServerState::Ready, "{:?}", catalog["everything"].state);
    let echo = servers
        .call(&tool("everything/echo"), json!({ "message": "hello systole" }), Duration::from_secs(10), &context())
        .await
        .expect("answered");
    assert!(echo.text.contains("hello systole"), "{}", echo.text);
    let sum =
        servers.call(&tool("everything/get-sum"), json!({ "a": 2, "b": 3 }), Duration::from_secs(10), &context()).await;
    assert!(sum.expect("answered").text.contains('5'));
    // npx is a launcher: the server is its node grandchild, in the same process group.
    let running = processes_matching("mcp-server-everything");
    assert!(running.len() >= 2, "the launcher and the server: {running:?}");
    servers.shutdown().await;
    let started = Instant::now();
    while !processes_matching("mcp-server-everything").is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "left behind: {:?}",
            processes_matching("mcp-server-everything")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
