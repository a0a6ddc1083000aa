//! The daemon under saturation (issue 28, ADR 0023): 3,000 heartbeats due every second, a
//! model that takes 2 s and the default 64 runs at once. A slot is claimed only when its
//! run can start, so the model never sees more than 64 requests at once, a pause holds at
//! once, and SIGTERM waits only for the runs that began: none is abandoned, and no slot
//! that never ran is left `running` (a restart would mark it `interrupted`).
//!
//! Timings are printed, not asserted tightly (a shared CI machine is slow at times); the
//! bounds asserted are the ones a hung or claim-everything engine breaks by far.
#![allow(clippy::disallowed_methods)] // this test waits on a real process in real time

#[path = "common/daemon_process.rs"]
mod daemon_process;
#[path = "common/saturated_daemon.rs"]
mod saturated_daemon;

use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::Value;
use systole::limits::RUNS_IN_FLIGHT_MAX_DEFAULT as RUNS_IN_FLIGHT_MAX;

use saturated_daemon::{config, count_rows, pause, SlowModel, MODEL_SECS, SHUTDOWN_GRACE_SECS};

const AGENTS_COUNT: usize = 100;
const HEARTBEATS_PER_AGENT: usize = 30;
/// How long the engine runs saturated before it is looked at.
const SATURATED_SECS: u64 = 6;
const TOKEN: &str = "saturation-test-token";

async fn timed_get(http: &reqwest::Client, url: &str) -> (Duration, Value) {
    let started = Instant::now();
    let response = http.get(url).bearer_auth(TOKEN).send().await.expect("the API answers");
    assert_eq!(response.status().as_u16(), 200, "GET {url}");
    let body: Value = response.json().await.expect("JSON");
    (started.elapsed(), body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saturated_engine_starts_no_more_than_it_may_pauses_at_once_and_stops_within_its_grace() {
    let (model, address) = SlowModel::serve().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let config = config(address, AGENTS_COUNT, HEARTBEATS_PER_AGENT);
    let (mut child, url) = daemon_process::spawn_serve(dir.path(), &config, &[("SYSTOLE_API_TOKEN", TOKEN)]).await;
    let http = reqwest::Client::new();
    tokio::time::sleep(Duration::from_secs(SATURATED_SECS)).await;

    let in_flight_now = model.in_flight.load(Ordering::SeqCst);
    // The status a page at a time: every job once, in key order, every agent listed.
    let (mut status_took, mut cursor) = (Duration::ZERO, None::<String>);
    let (mut shown_jobs, mut shown_agents) = (Vec::new(), std::collections::BTreeSet::new());
    loop {
        let after = cursor.as_ref().map(|key| format!("?after={}", key.replace('/', "%2F"))).unwrap_or_default();
        let (took, page) = timed_get(&http, &format!("{url}/v1/status{after}")).await;
        status_took = status_took.max(took);
        for agent in page["agents"].as_array().into_iter().flatten() {
            let id = agent["id"].as_str().unwrap_or_default().to_owned();
            for job in agent["jobs"].as_array().into_iter().flatten() {
                shown_jobs.push((id.clone(), job["id"].as_str().unwrap_or_default().to_owned()));
            }
            shown_agents.insert(id);
        }
        cursor = page["next_cursor"].as_str().map(str::to_owned);
        if cursor.is_none() {
            break;
        }
    }
    assert_eq!(shown_agents.len(), AGENTS_COUNT, "the status's pages show every agent");
    assert_eq!(shown_jobs.len(), AGENTS_COUNT * HEARTBEATS_PER_AGENT, "the status's pages show every job once");
    assert!(shown_jobs.windows(2).all(|pair| pair[0] < pair[1]), "in key order, none twice");
    let (agents_took, list) = timed_get(&http, &format!("{url}/v1/agents")).await;
    let listed = list["items"].as_array().map_or(0, Vec::len);
    assert_eq!(listed, AGENTS_COUNT, "the agents' list shows every agent");
    let jobs: u64 = list["items"].as_array().into_iter().flatten().filter_map(|agent| agent["jobs"].as_u64()).sum();
    assert_eq!(jobs, (AGENTS_COUNT * HEARTBEATS_PER_AGENT) as u64, "each agent counts its own jobs");

    // A pause holds at once: no run of the paused agent starts after it is answered.
    let (pause_took, paused_at_ms) = pause(&http, &url, TOKEN, "a7").await;
    tokio::time::sleep(Duration::from_secs(MODEL_SECS + 1)).await;

    let requests = model.requests.load(Ordering::SeqCst);
    let in_flight_max = model.in_flight_max.load(Ordering::SeqCst);
    assert!(requests > RUNS_IN_FLIGHT_MAX, "the model was kept busy: {requests} requests");
    assert!(
        in_flight_max <= RUNS_IN_FLIGHT_MAX,
        "{in_flight_max} requests at once; the engine may run {RUNS_IN_FLIGHT_MAX}"
    );

    // SIGTERM waits for the runs that began (each ends within the model's 2 s), no more.
    let stop = Instant::now();
    let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().expect("send SIGTERM");
    assert!(status.success());
    let exit = child.wait().expect("the daemon exits");
    let stop_took = stop.elapsed();
    assert!(exit.success(), "the daemon exits cleanly on SIGTERM: {exit}");
    let log = std::fs::read_to_string(dir.path().join("daemon.log")).unwrap_or_default();
    assert!(!log.contains("abandoned"), "no run was abandoned at the stop:\n{}", tail(&log));
    assert!(
        stop_took < Duration::from_secs(SHUTDOWN_GRACE_SECS),
        "the stop took {stop_took:?}, the whole grace or more, though every run takes {MODEL_SECS} s"
    );
    let store = dir.path().join("state.db");
    let running = count_rows(&store, "status = 'running'").await;
    assert_eq!(running, 0, "slots left `running` after a clean stop (claimed but never run?)");
    let after_pause =
        count_rows(&store, &format!("agent_id = 'a7' AND status <> 'skipped' AND started_at_ms > {paused_at_ms}"))
            .await;
    assert_eq!(after_pause, 0, "a run of the paused agent started after its pause was answered");

    println!(
        "saturation: {} heartbeats every second, a {MODEL_SECS} s model, {RUNS_IN_FLIGHT_MAX} places: \
         {requests} requests, at most {in_flight_max} at once ({in_flight_now} when looked at); \
         the slowest page of GET /v1/status in {status_took:?}, GET /v1/agents in {agents_took:?}, a pause in {pause_took:?}, \
         SIGTERM to exit in {stop_took:?}",
        AGENTS_COUNT * HEARTBEATS_PER_AGENT
    );
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}
