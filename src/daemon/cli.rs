//! The command line.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::adapters::system_clock::SystemClock;
use crate::core::heartbeat::JobKind;
use crate::daemon::config;
use crate::daemon::list;
use crate::daemon::preview::{preview, PreviewSpec};
use crate::daemon::serve::serve;
use crate::daemon::store_file;
use crate::daemon::DaemonError;
use crate::ports::clock::Clock;
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
        command: JobCommand,
    },
    /// Inspect cron jobs (`[[agents.cron]]` and those the `cron` tool made).
    Cron {
        #[command(subcommand)]
        command: JobCommand,
    },
    /// Work with schedules.
    Schedule {
        #[command(subcommand)]
        command: ScheduleCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum ScheduleCommand {
    /// List the next runs of a schedule, like `systemd-analyze calendar`.
    Preview {
        /// A cron expression: 5 fields, or 6 with seconds first.
        #[arg(long, group = "kind", required = true)]
        cron: Option<String>,
        /// An interval of elapsed time, like 30m or 1h30m.
        #[arg(long, group = "kind")]
        every: Option<String>,
        /// One time: RFC 3339, or a local time read in --tz.
        #[arg(long, group = "kind")]
        at: Option<String>,
        /// IANA time zone of the schedule (default UTC).
        #[arg(long)]
        tz: Option<String>,
        /// Start from this RFC 3339 time instead of now.
        #[arg(long)]
        from: Option<String>,
        #[arg(long, default_value_t = 10)]
        count: usize,
    },
}

#[derive(Debug, Subcommand)]
pub enum JobCommand {
    /// List every one in the store with its state.
    List {
        #[arg(long)]
        config: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Show the newest runs of one, each with the slot it stands for.
    Runs {
        #[arg(long)]
        config: PathBuf,
        /// The heartbeat or cron job id.
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
        Command::Heartbeat { command } => job_command(JobKind::Heartbeat, command).await,
        Command::Cron { command } => job_command(JobKind::Cron, command).await,
        Command::Schedule { command: ScheduleCommand::Preview { cron, every, at, tz, from, count } } => {
            let spec = match (cron, every, at) {
                (Some(expression), _, _) => PreviewSpec::Cron { expression },
                (_, Some(duration), _) => PreviewSpec::Every { duration },
                (_, _, Some(time)) => PreviewSpec::At { time },
                _ => return Err(DaemonError::Usage("give one of --cron, --every or --at".to_owned())),
            };
            let from = match from {
                Some(text) => {
                    text.parse().map_err(|_| DaemonError::Usage(format!("--from: {text:?} is not an RFC 3339 time")))?
                }
                None => SystemClock::new().wall(),
            };
            let preview = preview(&spec, tz.as_deref(), from, count).map_err(|e| DaemonError::Usage(e.to_string()))?;
            eprintln!("{}", preview.description);
            for line in preview.lines {
                println!("{line}");
            }
            Ok(())
        }
    }
}

async fn job_command(kind: JobKind, command: JobCommand) -> Result<(), DaemonError> {
    match command {
        JobCommand::List { config, json } => {
            let config = config::load(&config)?;
            store_file::check_path(&config)?;
            let store = SqliteStore::open(&config.store_path).await?;
            print!("{}", list::list(&store, kind, json).await?);
        }
        JobCommand::Runs { config, id, agent, limit, json } => {
            let config = config::load(&config)?;
            store_file::check_path(&config)?;
            let store = SqliteStore::open(&config.store_path).await?;
            let key = list::resolve(&store, kind, agent.as_deref(), &id).await?;
            print!("{}", list::runs(&store, &key, limit, json).await?);
        }
    }
    Ok(())
}
