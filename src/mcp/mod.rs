//! Tools from MCP servers (ADR 0019): the config's servers, the client on the official
//! SDK (`rmcp`, real tokio only) behind the [`ToolServers`](crate::ports::tools::ToolServers)
//! port, and what a result becomes for the model.

#[cfg(not(madsim))]
pub mod connection;
pub mod report;
pub mod result;
#[cfg(not(madsim))]
pub mod servers;
pub mod settings;
