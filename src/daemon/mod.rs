//! The `systole` binary's side: config, CLI, and the daemon wiring of the real ports.

pub mod cli;
pub mod client;
pub mod config;
pub mod deliver_test;
pub mod identity;
pub mod list;
pub mod preview;
pub mod redaction;
pub mod reload;
pub mod remote;
pub mod serve;
pub mod serve_api;
pub mod store_file;
pub mod store_open;

use crate::daemon::config::ConfigError;
use crate::driver::EngineError;
use crate::ports::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error("cannot start: {0}")]
    Startup(String),
    #[error("{0}")]
    Usage(String),
    /// The daemon's API could not be reached.
    #[error("{0}")]
    Remote(String),
}

impl DaemonError {
    /// 2 for what the user can fix in the config or the command line, 1 for the rest.
    pub fn exit_code(&self) -> u8 {
        match self {
            DaemonError::Config(_) | DaemonError::Usage(_) => 2,
            DaemonError::Store(_) | DaemonError::Engine(_) | DaemonError::Startup(_) | DaemonError::Remote(_) => 1,
        }
    }
}
