//! The daemon's MCP servers behind the [`ToolServers`] port: one supervisor task per
//! server connects it (bounded by its connect timeout), lists its tools at connect, on
//! `tools/list_changed` and on a refresh (a config reload), restarts it with a bounded
//! backoff when it dies, and ends its whole process group at shutdown. Calls go through
//! the live connection, bounded by the lesser of the server's call timeout and what the
//! run has left; a call in flight when the server dies answers with an error.

// A real adapter: the SDK runs only on real tokio (never in the simulator, which has its
// own tool servers), so its timeouts, backoff and stderr window are real time.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rmcp::{Peer, RoleClient};
use tokio::sync::{watch, Notify};

use crate::core::tool_policy::ToolName;
use crate::limits::{
    MCP_RESTART_BACKOFF_SECS_MAX, MCP_RESTART_BACKOFF_SECS_MIN, MCP_STOP_GRACE_MILLIS, MCP_TOOLS_PER_SERVER_MAX,
    TOOL_RESULT_CHARS_MAX,
};
use crate::mcp::connection::{self, Connection, Secrets};
use crate::mcp::result::{answer, listed_tool};
use crate::mcp::settings::{McpSettings, ServerSettings, Transport};
use crate::ports::tools::{
    CallContext, Catalog, ServerState, ServerTool, ServerView, ToolAnswer, ToolCallError, ToolServers,
};

/// A variable a server's config names, missing from the environment.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: the environment variable {variable} is not set (the config names it; it holds the value)")]
pub struct MissingVariable {
    pub field: String,
    pub variable: String,
}

/// Reads every variable the servers name, so a missing one stops start-up naming it.
///
/// # Errors
/// The first variable that is not set.
pub fn secrets(
    settings: &McpSettings,
    env: impl Fn(&str) -> Option<String>,
) -> Result<BTreeMap<String, Secrets>, MissingVariable> {
    let mut all = BTreeMap::new();
    for (name, server) in settings {
        let mut secrets = Secrets::default();
        let missing = |field: String, variable: &str| MissingVariable { field, variable: variable.to_owned() };
        match &server.transport {
            Transport::Stdio { env: names, .. } => {
                for variable in names {
                    let value = env(variable).ok_or_else(|| missing(format!("mcp.servers.{name}.env"), variable))?;
                    secrets.env.push((variable.clone(), value));
                }
            }
            Transport::Http { headers, .. } => {
                for (header, variable) in headers {
                    let field = format!("mcp.servers.{name}.headers.{header}");
                    let value = env(variable).ok_or_else(|| missing(field, variable))?;
                    secrets.headers.push((header.clone(), value));
                }
            }
        }
        all.insert(name.clone(), secrets);
    }
    Ok(all)
}

/// What the supervisor publishes about its server.
struct Live {
    state: ServerState,
    tools: Vec<ServerTool>,
    peer: Option<Peer<RoleClient>>,
    restarts: u64,
}

struct Server {
    name: String,
    settings: ServerSettings,
    live: Mutex<Live>,
    /// Asks the supervisor to list the tools again (a reload).
    refresh: Notify,
    /// Wakes whoever waits for the first attempt to end.
    attempted: watch::Sender<bool>,
}

impl Server {
    fn live(&self) -> std::sync::MutexGuard<'_, Live> {
        self.live.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The daemon's MCP servers.
pub struct McpServers {
    servers: BTreeMap<String, Arc<Server>>,
    stop: watch::Sender<bool>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl McpServers {
    /// Starts a supervisor per server and waits until each has made its first attempt
    /// (bounded by its connect timeout), so runs due at start-up find their tools.
    pub async fn start(settings: &McpSettings, secrets: BTreeMap<String, Secrets>) -> Arc<Self> {
        let (stop, _) = watch::channel(false);
        let mut servers = BTreeMap::new();
        let mut tasks = Vec::new();
        for (name, server_settings) in settings {
            let (attempted, _) = watch::channel(false);
            let server = Arc::new(Server {
                name: name.clone(),
                settings: server_settings.clone(),
                live: Mutex::new(Live { state: ServerState::Starting, tools: Vec::new(), peer: None, restarts: 0 }),
                refresh: Notify::new(),
                attempted,
            });
            let secrets = secrets.get(name).cloned().unwrap_or_default();
            tasks.push(tokio::spawn(supervise(Arc::clone(&server), secrets, stop.subscribe())));
            servers.insert(name.clone(), server);
        }
        for server in servers.values() {
            let mut attempted = server.attempted.subscribe();
            let bound = server.settings.connect_timeout + Duration::from_secs(1);
            let _ = tokio::time::timeout(bound, async { attempted.wait_for(|done| *done).await.map(|_| ()) }).await;
        }
        Arc::new(Self { servers, stop, tasks: Mutex::new(tasks) })
    }

    /// Lists every server's tools again (a config reload).
    pub fn refresh(&self) {
        for server in self.servers.values() {
            server.refresh.notify_one();
        }
    }

    /// Ends every server: each stdio server's process group is signalled and waited for.
    pub async fn shutdown(&self) {
        let _ = self.stop.send(true);
        let tasks: Vec<_> = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        for task in tasks {
            let _ = task.await;
        }
    }
}

async fn supervise(server: Arc<Server>, secrets: Secrets, mut stop: watch::Receiver<bool>) {
    let mut backoff = Duration::from_secs(MCP_RESTART_BACKOFF_SECS_MIN);
    loop {
        server.live().state = ServerState::Starting;
        let opened = tokio::select! {
            opened = tokio::time::timeout(server.settings.connect_timeout, connect(&server, &secrets)) => opened,
            () = stopped(&mut stop) => return,
        };
        let why = match opened {
            Ok(Ok(connection)) => {
                server.attempted.send_replace(true);
                backoff = Duration::from_secs(MCP_RESTART_BACKOFF_SECS_MIN);
                match serve(&server, connection, &mut stop).await {
                    Ended::Stopped => return,
                    Ended::Died(why) => why,
                }
            }
            Ok(Err(why)) => why,
            Err(_) => format!("did not connect within {} s", server.settings.connect_timeout.as_secs()),
        };
        server.attempted.send_replace(true);
        let retry_at =
            jiff::Timestamp::now().checked_add(jiff::SignedDuration::try_from(backoff).unwrap_or_default()).ok();
        tracing::warn!(server = server.name, why, retry_in_secs = backoff.as_secs(), "MCP server is down");
        {
            let mut live = server.live();
            live.state = ServerState::Down { why, retry_at };
            live.peer = None;
            live.tools.clear();
            live.restarts += 1;
        }
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            () = stopped(&mut stop) => return,
        }
        backoff = (backoff * 2).min(Duration::from_secs(MCP_RESTART_BACKOFF_SECS_MAX));
    }
}

async fn connect(server: &Server, secrets: &Secrets) -> Result<Connection, String> {
    let connection = Connection::open(&server.name, &server.settings.transport, secrets).await?;
    let tools = list(server, &connection).await?;
    let count = tools.len();
    let mut live = server.live();
    live.tools = tools;
    live.peer = Some(connection.peer());
    live.state = ServerState::Ready;
    drop(live);
    tracing::info!(
        server = server.name,
        tools = count,
        transport = server.settings.transport.kind(),
        "MCP server ready"
    );
    Ok(connection)
}

/// The server's tools as the engine offers them; unusable ones are logged and left out.
async fn list(server: &Server, connection: &Connection) -> Result<Vec<ServerTool>, String> {
    let listed = connection.list_tools().await.map_err(|why| format!("listing its tools failed: {why}"))?;
    let mut tools = Vec::new();
    for tool in listed.iter().take(MCP_TOOLS_PER_SERVER_MAX) {
        match listed_tool(&server.name, &server.settings, tool) {
            Ok(tool) => tools.push(tool),
            Err(why) => tracing::warn!(server = server.name, why, "a listed tool is left out"),
        }
    }
    if listed.len() > MCP_TOOLS_PER_SERVER_MAX {
        tracing::warn!(
            server = server.name,
            listed = listed.len(),
            "only the first {MCP_TOOLS_PER_SERVER_MAX} tools are used"
        );
    }
    Ok(tools)
}

/// Resolves once the daemon stops (never, if the sender is gone without stopping).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    loop {
        if *stop.borrow_and_update() {
            return;
        }
        if stop.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

enum Ended {
    Stopped,
    Died(String),
}

/// Holds the connection until it dies or the daemon stops; lists the tools again when the
/// server says they changed or a reload asks.
async fn serve(server: &Server, connection: Connection, stop: &mut watch::Receiver<bool>) -> Ended {
    let changed = Arc::clone(&connection.tools_changed);
    loop {
        tokio::select! {
            () = connection.closed() => return Ended::Died("the server exited or hung up".to_owned()),
            () = changed.notified() => relist(server, &connection).await,
            () = server.refresh.notified() => relist(server, &connection).await,
            () = stopped(stop) => {
                server.live().peer = None;
                connection.end(Duration::from_millis(MCP_STOP_GRACE_MILLIS)).await;
                return Ended::Stopped;
            }
        }
    }
}

async fn relist(server: &Server, connection: &Connection) {
    match tokio::time::timeout(server.settings.connect_timeout, list(server, connection)).await {
        Ok(Ok(tools)) => {
            tracing::info!(server = server.name, tools = tools.len(), "MCP server's tools listed again");
            server.live().tools = tools;
        }
        Ok(Err(why)) => tracing::warn!(server = server.name, why, "listing tools again failed; the old list stays"),
        Err(_) => tracing::warn!(server = server.name, "listing tools again timed out; the old list stays"),
    }
}

#[async_trait]
impl ToolServers for McpServers {
    fn catalog(&self) -> Catalog {
        self.servers
            .values()
            .map(|server| {
                let live = server.live();
                let view = ServerView {
                    name: server.name.clone(),
                    transport: server.settings.transport.kind(),
                    state: live.state.clone(),
                    tools: live.tools.clone(),
                    restarts: live.restarts,
                };
                (server.name.clone(), view)
            })
            .collect()
    }

    async fn call(
        &self,
        tool: &ToolName,
        arguments: serde_json::Value,
        timeout: Duration,
        context: &CallContext,
    ) -> Result<ToolAnswer, ToolCallError> {
        let unavailable = |why: String| ToolCallError::Unavailable { server: tool.server.clone(), why };
        let server = self.servers.get(&tool.server).ok_or_else(|| unavailable("no such server".to_owned()))?;
        let peer = {
            let live = server.live();
            match (&live.peer, &live.state) {
                (Some(peer), _) => peer.clone(),
                (None, ServerState::Down { why, .. }) => return Err(unavailable(why.clone())),
                (None, _) => return Err(unavailable("it is starting".to_owned())),
            }
        };
        let serde_json::Value::Object(arguments) = arguments else {
            return Err(ToolCallError::Failed {
                tool: tool.clone(),
                why: "the arguments are not a JSON object".to_owned(),
            });
        };
        let timeout = timeout.min(server.settings.call_timeout);
        let call = connection::call(&peer, &tool.tool, arguments, &context.idempotency_key);
        match tokio::time::timeout(timeout, call).await {
            Err(_) => Err(ToolCallError::Timeout { tool: tool.clone(), timeout }),
            Ok(Err((true, why))) => Err(unavailable(format!("the connection ended during the call ({why})"))),
            Ok(Err((false, why))) => Err(ToolCallError::Failed { tool: tool.clone(), why }),
            Ok(Ok(result)) => Ok(answer(&result, TOOL_RESULT_CHARS_MAX)),
        }
    }
}
