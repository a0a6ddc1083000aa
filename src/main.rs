//! The `systole` binary.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

use systole::daemon::cli::{run, Cli};

/// jemalloc, not glibc's allocator: a run's memory is often freed on another worker than
/// the one that made it, and glibc's arena lock then put both workers to sleep a quarter of
/// a burst (ADR 0058).
#[cfg(all(feature = "jemalloc", not(madsim)))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

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
