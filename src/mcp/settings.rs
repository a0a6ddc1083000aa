//! What the config says about MCP servers (`[mcp.servers.NAME]`): how to reach each, how
//! patient to be, and which of its tools the operator trusts to only read. Secrets are
//! named here (environment variables), never held: the values are read at start-up.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::core::tool_policy::ToolPattern;

/// How one server is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// A child process speaking MCP on its stdin and stdout, in a process group of its own.
    Stdio {
        command: String,
        args: Vec<String>,
        cwd: Option<PathBuf>,
        /// Variables passed through from the daemon's environment (names only). The child
        /// gets these and `PATH`, `HOME`, `LANG`, nothing else.
        env: Vec<String>,
    },
    /// Streamable HTTP at `url`; each header's value is read from the named variable.
    Http { url: String, headers: BTreeMap<String, String> },
}

impl Transport {
    pub fn kind(&self) -> &'static str {
        match self {
            Transport::Stdio { .. } => "stdio",
            Transport::Http { .. } => "http",
        }
    }
}

/// `[mcp.servers.NAME]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSettings {
    pub transport: Transport,
    /// The most one call may take (the run's budget may cut it shorter).
    pub call_timeout: Duration,
    /// The most connecting and listing tools may take.
    pub connect_timeout: Duration,
    /// Tools the operator marks read-only (`["search", "get_*"]`, or `["*"]`): only these
    /// are offered to a job that did not opt into tools that may write.
    pub read_only: Vec<ToolPattern>,
    /// Take the server's own `readOnlyHint` as the operator's word (off by default: a
    /// server's annotations are hints, and the MCP spec says not to trust them).
    pub trust_annotations: bool,
}

/// Every configured server, by name.
pub type McpSettings = BTreeMap<String, ServerSettings>;
