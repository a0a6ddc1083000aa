//! The daemon saturated (issue 28, ADR 0023): a real `systole serve` process on SQLite, its
//! heartbeats due every second, a local model that takes `MODEL_SECS` to answer, the
//! default runs in flight (`tests/common/saturated_daemon.rs`). What an operator meets
//! then: how long the status, the agents' list and a pause take to answer, whether a run
//! of the paused agent starts after its answer, how long SIGTERM takes to exit, and how
//! many claimed slots a stop leaves without having run.
//! `tests/saturation.rs` holds the same daemon to these bounds; this case prints figures.

use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::Value;
use systole::limits::RUNS_IN_FLIGHT_MAX_DEFAULT;

use crate::daemon_process;
use crate::measure::{median, Figures};
use crate::saturated_daemon::{config, count_rows, pause, SlowModel, MODEL_SECS};

/// The agent the case pauses (every case has at least two).
const PAUSED_AGENT: &str = "a1";
/// How many times each view (the status, the agents' list) is read; the figure is the
/// slowest.
const VIEW_READS: usize = 5;
const TOKEN: &str = "saturation-bench-token";

/// `agents` agents of `per_agent` heartbeats each, every second, left saturated for
/// `saturated` before the views are read, an agent paused and the daemon stopped.
pub async fn saturation(agents: usize, per_agent: usize, saturated: Duration) -> Figures {
    let (model, address) = SlowModel::serve().await;
    let dir = tempfile::tempdir().expect("a scratch directory");
    let envs = [("SYSTOLE_API_TOKEN", TOKEN)];
    let (mut child, url) =
        daemon_process::spawn_serve(dir.path(), &config(address, agents.max(2), per_agent), &envs).await;
    let http = reqwest::Client::new();
    tokio::time::sleep(saturated).await;
    let in_flight_then = model.in_flight.load(Ordering::SeqCst);

    let status_secs = read_times(&http, &format!("{url}/v1/status")).await;
    let agents_secs = read_times(&http, &format!("{url}/v1/agents")).await;

    let (pause_took, paused_at_ms) = pause(&http, &url, TOKEN, PAUSED_AGENT).await;
    // Every run that began before the pause ends within the model's time.
    tokio::time::sleep(Duration::from_secs(MODEL_SECS + 1)).await;

    let stop = Instant::now();
    let signal = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().expect("send SIGTERM");
    assert!(signal.success(), "SIGTERM was not sent");
    // The model keeps answering on this runtime while the daemon winds down.
    let exit = tokio::task::spawn_blocking(move || child.wait()).await.expect("join").expect("the daemon exits");
    let stop_secs = stop.elapsed().as_secs_f64();
    let log = std::fs::read_to_string(dir.path().join("daemon.log")).unwrap_or_default();

    let store = dir.path().join("state.db");
    let left_running = count_rows(&store, "status = 'running'").await;
    let interrupted = count_rows(&store, "status = 'interrupted'").await;
    let started_runs = count_rows(&store, "status <> 'skipped'").await;
    let paused = format!("agent_id = '{PAUSED_AGENT}' AND status <> 'skipped' AND started_at_ms > {paused_at_ms}");
    let paused_after = count_rows(&store, &paused).await;
    Figures::from([
        ("status_secs_max".to_owned(), status_secs.iter().copied().fold(0.0, f64::max)),
        ("status_secs_median".to_owned(), median(&status_secs)),
        ("agents_secs_max".to_owned(), agents_secs.iter().copied().fold(0.0, f64::max)),
        ("pause_secs".to_owned(), pause_took.as_secs_f64()),
        ("paused_runs_after".to_owned(), paused_after as f64),
        ("stop_secs".to_owned(), stop_secs),
        ("exit_clean".to_owned(), if exit.success() { 1.0 } else { 0.0 }),
        ("abandoned".to_owned(), abandoned(&log) as f64),
        ("left_running".to_owned(), left_running as f64),
        ("interrupted".to_owned(), interrupted as f64),
        ("model_requests".to_owned(), model.requests.load(Ordering::SeqCst) as f64),
        ("started_runs".to_owned(), started_runs as f64),
        ("in_flight_max".to_owned(), model.in_flight_max.load(Ordering::SeqCst) as f64),
        ("in_flight_then".to_owned(), in_flight_then as f64),
        ("places".to_owned(), RUNS_IN_FLIGHT_MAX_DEFAULT as f64),
    ])
}

/// How long each of [`VIEW_READS`] reads of `url` took, its whole JSON body received.
async fn read_times(http: &reqwest::Client, url: &str) -> Vec<f64> {
    let mut secs = Vec::new();
    for _ in 0..VIEW_READS {
        let started = Instant::now();
        let response = http.get(url).bearer_auth(TOKEN).send().await.expect("the API answers");
        assert_eq!(response.status().as_u16(), 200, "GET {url}");
        let _: Value = response.json().await.expect("the view is JSON");
        secs.push(started.elapsed().as_secs_f64());
    }
    secs
}

/// The runs a stop abandoned, as its log line counts them (`abandoned=N`), 0 without one.
fn abandoned(log: &str) -> u64 {
    log.lines()
        .filter_map(|line| line.split_once("abandoned=").map(|(_, rest)| rest))
        .filter_map(|rest| rest.split(|c: char| !c.is_ascii_digit()).next()?.parse::<u64>().ok())
        .sum()
}
