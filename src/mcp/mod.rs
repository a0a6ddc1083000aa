//! Tools from MCP servers (ADR 0019): the config's servers, the client on the official
//! SDK (`rmcp`, real tokio only) behind the [`ToolServers`](crate::ports::tools::ToolServers)
//! port, and what a result becomes for the model.

pub mod settings;
