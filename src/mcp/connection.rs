//! One connection to one MCP server on the official SDK (`rmcp`): a stdio child in a
//! process group of its own (so an `npx` launcher's grandchildren go with it), or
//! streamable HTTP with headers read from the environment. The supervisor in
//! `mcp::servers` owns it; this file only opens it, lists tools, calls one, and ends it.

// A real adapter: the SDK runs only on real tokio (never in the simulator, which has its
// own tool servers), so its timeouts, backoff and stderr window are real time.
#![allow(clippy::disallowed_methods)]

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use process_wrap::tokio::{CommandWrap, ProcessGroup};
use rmcp::model::{CallToolRequestParams, RequestMetaObject};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, Peer, RoleClient, ServiceExt};
use tokio::io::AsyncBufReadExt;
use tokio::sync::Notify;

use crate::limits::{MCP_STDERR_LINES_PER_MINUTE_MAX, MCP_STDERR_LINE_CHARS_MAX};
use crate::mcp::settings::Transport;

/// The variables every stdio server gets besides those its config passes through.
const PASSED_VARIABLES: [&str; 4] = ["PATH", "HOME", "LANG", "TMPDIR"];

/// The `_meta` key a call's idempotency key goes in: a tool with an external effect can
/// drop a repeat of one run's call by it.
pub const IDEMPOTENCY_META_KEY: &str = "systole/idempotency-key";

/// What a server needs from the environment, read once at start-up.
#[derive(Clone, Default)]
pub struct Secrets {
    /// Variables passed to a stdio server, by name.
    pub env: Vec<(String, String)>,
    /// Header values of an HTTP server, by header name.
    pub headers: Vec<(String, String)>,
}

impl Secrets {
    /// `text` with every secret value blanked out (for the log).
    pub fn redact(&self, text: &str) -> String {
        let values = self.env.iter().chain(&self.headers).map(|(_, value)| value);
        values
            .filter(|value| value.len() >= 4)
            .fold(text.to_owned(), |text, value| text.replace(value.as_str(), "[redacted]"))
    }
}

/// Hears `notifications/tools/list_changed`.
#[derive(Clone)]
struct Listener {
    tools_changed: Arc<Notify>,
}

impl ClientHandler for Listener {
    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl std::future::Future<Output = ()> + Send + '_ {
        self.tools_changed.notify_one();
        std::future::ready(())
    }
}

/// An open connection.
pub struct Connection {
    service: RunningService<RoleClient, Listener>,
    /// The process group of a stdio server (its leader's pid).
    group: Option<i32>,
    pub tools_changed: Arc<Notify>,
}

impl Connection {
    /// Opens a connection and completes the MCP handshake.
    ///
    /// # Errors
    /// In words: the process could not start, the handshake failed.
    pub async fn open(server: &str, transport: &Transport, secrets: &Secrets) -> Result<Self, String> {
        let tools_changed = Arc::new(Notify::new());
        let listener = Listener { tools_changed: Arc::clone(&tools_changed) };
        match transport {
            Transport::Stdio { command, args, cwd, .. } => {
                let mut child = tokio::process::Command::new(command);
                child.args(args).env_clear().kill_on_drop(true);
                for name in PASSED_VARIABLES {
                    if let Ok(value) = std::env::var(name) {
                        child.env(name, value);
                    }
                }
                child.envs(secrets.env.iter().map(|(name, value)| (name, value)));
                if let Some(cwd) = cwd {
                    child.current_dir(cwd);
                }
                let mut wrapped = CommandWrap::from(child);
                wrapped.wrap(ProcessGroup::leader());
                let (process, stderr) = TokioChildProcess::builder(wrapped)
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(|error| format!("cannot start {command:?}: {error}"))?;
                let group = process.id().and_then(|pid| i32::try_from(pid).ok());
                if let Some(stderr) = stderr {
                    tokio::spawn(log_stderr(server.to_owned(), stderr, secrets.clone()));
                }
                let service = match listener.serve(process).await {
                    Ok(service) => service,
                    Err(error) => {
                        if let Some(group) = group {
                            signal_group(group, libc::SIGKILL);
                        }
                        return Err(format!("the MCP handshake failed: {}", secrets.redact(&error.to_string())));
                    }
                };
                Ok(Self { service, group, tools_changed })
            }
            Transport::Http { url, .. } => {
                let mut headers = HashMap::new();
                for (name, value) in &secrets.headers {
                    let header =
                        http::HeaderName::try_from(name.as_str()).map_err(|e| format!("header {name}: {e}"))?;
                    let value = http::HeaderValue::try_from(value.as_str())
                        .map_err(|_| format!("header {name}: its value is not a valid header value"))?;
                    headers.insert(header, value);
                }
                let config = StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(headers);
                let transport = StreamableHttpClientTransport::from_config(config);
                let service = listener
                    .serve(transport)
                    .await
                    .map_err(|error| format!("the MCP handshake failed: {}", secrets.redact(&error.to_string())))?;
                Ok(Self { service, group: None, tools_changed })
            }
        }
    }

    /// A handle to call through while the connection lives.
    pub fn peer(&self) -> Peer<RoleClient> {
        self.service.peer().clone()
    }

    /// Every tool the server lists, in the wire form.
    ///
    /// # Errors
    /// In words, when the server does not answer the listing.
    pub async fn list_tools(&self) -> Result<Vec<serde_json::Value>, String> {
        let tools = self.service.peer().list_all_tools().await.map_err(|error| error.to_string())?;
        Ok(tools.iter().filter_map(|tool| serde_json::to_value(tool).ok()).collect())
    }

    /// Waits until the connection ends by itself (the server exited or hung up).
    pub async fn closed(&self) {
        while !(self.service.is_closed() || self.service.peer().is_transport_closed()) {
            tokio::time::sleep(CLOSED_POLL).await;
        }
    }

    /// Ends the connection: a stdio server's whole group gets SIGTERM, then SIGKILL
    /// after `grace` if it is still there.
    pub async fn end(mut self, grace: Duration) {
        if let Some(group) = self.group {
            signal_group(group, libc::SIGTERM);
        }
        let _ = tokio::time::timeout(grace, self.service.close()).await;
        if let Some(group) = self.group {
            signal_group(group, libc::SIGKILL);
        }
    }
}

/// How often a supervisor looks whether its connection ended.
const CLOSED_POLL: Duration = Duration::from_millis(200);

/// One `tools/call`, answered as the wire's JSON result. Dropping the future (a timeout,
/// the run's budget) sends `notifications/cancelled` (the SDK's call cancels on drop).
///
/// # Errors
/// `Err(true)` with words when the connection is gone, `Err(false)` for a protocol error.
pub async fn call(
    peer: &Peer<RoleClient>,
    tool: &str,
    arguments: serde_json::Map<String, serde_json::Value>,
    idempotency_key: &str,
) -> Result<serde_json::Value, (bool, String)> {
    let mut meta = RequestMetaObject::new();
    meta.insert(IDEMPOTENCY_META_KEY.to_owned(), serde_json::Value::String(idempotency_key.to_owned()));
    let mut params = CallToolRequestParams::new(tool.to_owned());
    params.arguments = Some(arguments);
    params.meta = Some(meta);
    match peer.call_tool(params).await {
        Ok(result) => serde_json::to_value(&result).map_err(|error| (false, error.to_string())),
        Err(rmcp::ServiceError::McpError(error)) => Err((false, error.message.to_string())),
        Err(error) => Err((true, error.to_string())),
    }
}

/// Signals a whole process group (a stdio server and whatever it started).
fn signal_group(group: i32, signal: i32) {
    // SAFETY: `kill` with a negative pid signals the group; no memory is touched.
    unsafe {
        libc::kill(-group, signal);
    }
}

/// Logs a stdio server's stderr, line by line, with secrets blanked out and at most
/// `MCP_STDERR_LINES_PER_MINUTE_MAX` lines a minute (a server that floods it is counted).
async fn log_stderr(server: String, stderr: tokio::process::ChildStderr, secrets: Secrets) {
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    let mut window = tokio::time::Instant::now();
    let (mut logged, mut dropped) = (0u32, 0u64);
    while let Ok(Some(line)) = lines.next_line().await {
        if window.elapsed() >= Duration::from_secs(60) {
            if dropped > 0 {
                tracing::warn!(server, dropped, "MCP server wrote more to stderr than is logged");
            }
            window = tokio::time::Instant::now();
            (logged, dropped) = (0, 0);
        }
        if logged >= MCP_STDERR_LINES_PER_MINUTE_MAX {
            dropped += 1;
            continue;
        }
        logged += 1;
        let line = crate::core::text::truncate_chars(&secrets.redact(&line), MCP_STDERR_LINE_CHARS_MAX);
        tracing::info!(server, "stderr: {line}");
    }
    if dropped > 0 {
        tracing::warn!(server, dropped, "MCP server wrote more to stderr than is logged");
    }
}
