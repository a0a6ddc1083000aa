//! The `systole` binary.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

use systole::daemon::cli::{run, Cli};

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    // RUST_LOG wins, then --log-level; sqlx's statements stay out unless a filter asks.
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        let level = cli.log_level.as_deref().unwrap_or("info");
        EnvFilter::try_new(format!("{level},sqlx=warn")).unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn"))
    });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("systole: {error}");
            ExitCode::from(error.exit_code())
        }
    }
}
