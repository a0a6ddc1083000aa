//! Tools written in Rust by a program that embeds the engine, offered to runs through the
//! same policy as MCP servers' (ADR 0019): they belong to a namespace (their "server" in
//! `server/tool`), declare whether they only read (the code is trusted, unlike a server's
//! hints), and are bounded by the same timeout. [`ToolServerSet`] puts them beside other
//! servers behind one port.
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use systole::agent::tools::native::{NativeTool, NativeTools, ToolServerSet};
//! # use systole::ports::tools::{CallContext, ToolAnswer};
//! struct Weather;
//!
//! #[async_trait::async_trait]
//! impl NativeTool for Weather {
//!     fn name(&self) -> &str { "forecast" }
//!     fn description(&self) -> &str { "Tomorrow's forecast for a city." }
//!     fn input_schema(&self) -> serde_json::Value {
//!         serde_json::json!({ "type": "object", "properties": { "city": { "type": "string" } } })
//!     }
//!     fn read_only(&self) -> bool { true }
//!     async fn call(&self, arguments: serde_json::Value, _: &CallContext) -> Result<ToolAnswer, String> {
//!         Ok(ToolAnswer { text: format!("sunny in {}", arguments["city"]), is_error: false })
//!     }
//! }
//! # fn wire(clock: Arc<dyn systole::ports::clock::Clock>) -> Result<(), String> {
//! let weather = NativeTools::new("weather", clock)?.with(Arc::new(Weather))?;
//! // Agents list `weather/*` (or `weather/forecast`) in their `tools`, like any server's.
//! let tools = ToolServerSet::new(vec![Arc::new(weather)]);
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::core::tool_policy::{check_server_name, check_tool_name, ToolName};
use crate::ports::clock::Clock;
use crate::ports::tools::{
    CallContext, Catalog, ServerState, ServerTool, ServerView, ToolAnswer, ToolCallError, ToolHints, ToolServers,
};

/// One tool in Rust.
#[async_trait]
pub trait NativeTool: Send + Sync + 'static {
    /// Its name within its namespace (`A-Za-z0-9_-.`, up to 64).
    fn name(&self) -> &str;
    fn description(&self) -> &str;
    /// The JSON schema of its arguments (an object schema).
    fn input_schema(&self) -> serde_json::Value;
    /// Whether it only reads. A tool that may write is offered only to jobs that opt in.
    fn read_only(&self) -> bool;
    /// Runs it with the model's arguments (a JSON object).
    ///
    /// # Errors
    /// A failure in words; the model reads it as the tool's error.
    async fn call(&self, arguments: serde_json::Value, context: &CallContext) -> Result<ToolAnswer, String>;
}

/// The native tools of one namespace.
pub struct NativeTools {
    server: String,
    clock: Arc<dyn Clock>,
    tools: BTreeMap<String, Arc<dyn NativeTool>>,
}

impl NativeTools {
    /// An empty namespace `server` (`[a-z0-9-]`, up to 32), timed by `clock`.
    ///
    /// # Errors
    /// When the name is not one a policy can name.
    pub fn new(server: &str, clock: Arc<dyn Clock>) -> Result<Self, String> {
        check_server_name(server)?;
        Ok(Self { server: server.to_owned(), clock, tools: BTreeMap::new() })
    }

    /// The namespace with `tool` added.
    ///
    /// # Errors
    /// When its name is not valid or already taken.
    pub fn with(mut self, tool: Arc<dyn NativeTool>) -> Result<Self, String> {
        let name = tool.name().to_owned();
        check_tool_name(&name)?;
        if self.tools.insert(name.clone(), tool).is_some() {
            return Err(format!("{}/{name} is registered twice", self.server));
        }
        Ok(self)
    }
}

#[async_trait]
impl ToolServers for NativeTools {
    fn catalog(&self) -> Catalog {
        let tools = self
            .tools
            .values()
            .map(|tool| ServerTool {
                name: ToolName::new(&self.server, tool.name()),
                description: tool.description().to_owned(),
                input_schema: tool.input_schema(),
                hints: ToolHints { read_only: Some(tool.read_only()), ..ToolHints::default() },
                read_only: tool.read_only(),
            })
            .collect();
        let view = ServerView {
            name: self.server.clone(),
            transport: "native",
            state: ServerState::Ready,
            tools,
            restarts: 0,
        };
        Catalog::from([(self.server.clone(), view)])
    }

    async fn call(
        &self,
        tool: &ToolName,
        arguments: serde_json::Value,
        timeout: Duration,
        context: &CallContext,
    ) -> Result<ToolAnswer, ToolCallError> {
        let native = self.tools.get(&tool.tool).ok_or_else(|| ToolCallError::Failed {
            tool: tool.clone(),
            why: format!("{} has no tool {:?}", self.server, tool.tool),
        })?;
        let deadline = self.clock.monotonic() + timeout;
        tokio::select! {
            biased;
            answer = native.call(arguments, context) => {
                answer.map_err(|why| ToolCallError::Failed { tool: tool.clone(), why })
            }
            () = self.clock.sleep_until(deadline) => Err(ToolCallError::Timeout { tool: tool.clone(), timeout }),
        }
    }
}

/// Several servers of tools behind one port (MCP servers and native namespaces): the
/// catalogs side by side, each call routed to the server that owns its name. The first
/// server with a name wins a clash.
pub struct ToolServerSet {
    servers: Vec<Arc<dyn ToolServers>>,
}

impl ToolServerSet {
    pub fn new(servers: Vec<Arc<dyn ToolServers>>) -> Self {
        Self { servers }
    }
}

#[async_trait]
impl ToolServers for ToolServerSet {
    fn catalog(&self) -> Catalog {
        let mut all = Catalog::new();
        for server in &self.servers {
            for (name, view) in server.catalog() {
                all.entry(name).or_insert(view);
            }
        }
        all
    }

    async fn call(
        &self,
        tool: &ToolName,
        arguments: serde_json::Value,
        timeout: Duration,
        context: &CallContext,
    ) -> Result<ToolAnswer, ToolCallError> {
        for server in &self.servers {
            if server.catalog().contains_key(&tool.server) {
                return server.call(tool, arguments, timeout, context).await;
            }
        }
        Err(ToolCallError::Unavailable { server: tool.server.clone(), why: "no such server".to_owned() })
    }
}
