//! The command line.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::daemon::config;
use crate::daemon::list;
use crate::daemon::serve::serve;
use crate::daemon::DaemonError;
use crate::store::sqlite::SqliteStore;

const RUNS_LIMIT_DEFAULT: usize = 20;

#[derive(Debug, Parser)]
#[command(name = "systole", version, about = "A heartbeat and cron engine for AI agents")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the engine with the real clock until SIGINT/SIGTERM.
    Serve {
        #[arg(long)]
        config: PathBuf,
    },
    /// Inspect heartbeats.
    Heartbeat {
        #[command(subcommand)]
        command: HeartbeatCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum HeartbeatCommand {
    /// List every heartbeat in the store with its state.
    List {
        #[arg(long)]
        config: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Show the newest runs of one heartbeat.
    Runs {
        #[arg(long)]
        config: PathBuf,
        /// The heartbeat id.
        id: String,
        /// The agent, when several agents have a heartbeat with this id.
        #[arg(long)]
        agent: Option<String>,
        #[arg(long, default_value_t = RUNS_LIMIT_DEFAULT)]
        limit: usize,
        #[arg(long)]
        json: bool,
    },
}

/// Runs a parsed command line.
///
/// # Errors
/// Whatever the command could not do, with the exit code in [`DaemonError::exit_code`].
pub async fn run(cli: Cli) -> Result<(), DaemonError> {
    match cli.command {
        Command::Serve { config } => serve(config::load(&config)?).await,
        Command::Heartbeat { command: HeartbeatCommand::List { config, json } } => {
            let config = config::load(&config)?;
            let store = SqliteStore::open(&config.store_path).await?;
            print!("{}", list::list(&store, json).await?);
            Ok(())
        }
        Command::Heartbeat { command: HeartbeatCommand::Runs { config, id, agent, limit, json } } => {
            let config = config::load(&config)?;
            let store = SqliteStore::open(&config.store_path).await?;
            let key = list::resolve(&store, agent.as_deref(), &id).await?;
            print!("{}", list::runs(&store, &key, limit, json).await?);
            Ok(())
        }
    }
}
