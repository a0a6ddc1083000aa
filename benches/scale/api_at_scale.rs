//! The operator's API over a million heartbeats: a real `systole serve` process on a
//! SQLite file that holds `count` jobs (the registration's definitions, made run-time jobs
//! and disabled, so that none runs and the model is never asked). What an operator, a
//! Prometheus scrape and an agent's page meet then: how long each read takes, how large
//! the status's page is, how long the CLI takes to show a job named without its agent,
//! and how much the daemon's memory grew while they were answered.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use crate::daemon_process;
use crate::measure::Figures;
use crate::systole_cases;

/// How many times each read is made; the figure is the slowest.
pub const READS_EACH: usize = 5;
const TOKEN: &str = "api-bench-token";

/// The reads, by the figure's name: the status's first page and one from the middle,
/// the agents' list, one agent, a page of its jobs, one job, the metrics and the tools' catalog
/// (the status page reads it every 15 s).
fn reads(count: usize) -> Vec<(&'static str, String)> {
    // The benchmark's keys: job `check-N` of agent `agent-(N mod 1,000)`.
    let middle = count / 2;
    let agent = systole_cases::key(middle).agent;
    vec![
        ("status_first", "/v1/status".to_owned()),
        ("status_middle", format!("/v1/status?after={agent}%2Fcheck-{middle}")),
        ("agents", "/v1/agents".to_owned()),
        ("agent", format!("/v1/agents/{agent}")),
        ("agent_jobs", format!("/v1/agents/{agent}/heartbeats")),
        ("job", format!("/v1/agents/{agent}/heartbeats/check-{middle}")),
        ("metrics", "/metrics".to_owned()),
        ("mcp", "/v1/mcp".to_owned()),
    ]
}

pub async fn api_at_scale(count: usize) -> Figures {
    let dir = tempfile::tempdir().expect("a scratch directory");
    let store = dir.path().join("state.db");
    systole_cases::prepare(count, &store, 0).await;
    make_run_time_and_disabled(&store).await;
    let config = "[api]\nlisten = \"127.0.0.1:0\"\n[store]\npath = \"state.db\"\n\
                  [llm]\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n";
    let starting = Instant::now();
    let (mut child, url) = daemon_process::spawn_serve(dir.path(), config, &[("SYSTOLE_API_TOKEN", TOKEN)]).await;
    let http = reqwest::Client::new();
    // Armed: the API answers once the engine has loaded every job.
    let first = get(&http, &format!("{url}/metrics")).await;
    let start_secs = starting.elapsed().as_secs_f64();
    let jobs = metric(&first, "systole_heartbeats{state=\"disabled\"}");
    assert_eq!(jobs, count as f64, "the engine holds every job, disabled");
    let (rss_before, peak_before) = (memory_kib(child.id(), "VmRSS:"), memory_kib(child.id(), "VmHWM:"));
    let mut figures = Figures::from([("start_secs".to_owned(), start_secs)]);
    for (name, path) in reads(count) {
        let mut slowest: f64 = 0.0;
        let mut bytes = 0;
        for _ in 0..READS_EACH {
            let started = Instant::now();
            bytes = get(&http, &format!("{url}{path}")).await.len();
            slowest = slowest.max(started.elapsed().as_secs_f64());
        }
        figures.insert(format!("{name}_secs_max"), slowest);
        figures.insert(format!("{name}_bytes"), bytes as f64);
    }
    // The CLI's `show` of a job named without `--agent`, which must find the job's agent
    // first: once, as an operator would type it.
    let showing = Instant::now();
    let shown = Command::new(env!("CARGO_BIN_EXE_systole"))
        .args(["heartbeat", "show", &format!("check-{}", count / 2), "--json", "--url", &url])
        .env("SYSTOLE_API_TOKEN", TOKEN)
        .env_remove("SYSTOLE_CONFIG")
        .output()
        .expect("run the CLI");
    figures.insert("cli_show_secs".to_owned(), showing.elapsed().as_secs_f64());
    assert!(shown.status.success(), "the CLI shows the job: {}", String::from_utf8_lossy(&shown.stderr));
    // The peak so far is the start-up's load; one above it was set by the reads.
    let (rss_after, peak_after) = (memory_kib(child.id(), "VmRSS:"), memory_kib(child.id(), "VmHWM:"));
    figures.insert("rss_before_mib".to_owned(), rss_before / 1024.0);
    figures.insert("peak_before_mib".to_owned(), peak_before / 1024.0);
    figures.insert("rss_after_mib".to_owned(), rss_after / 1024.0);
    figures.insert("peak_after_mib".to_owned(), peak_after / 1024.0);
    // A stop with a million jobs and no run going: what it does beside the runs' grace.
    let stopping = Instant::now();
    let signal = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().expect("send SIGTERM");
    assert!(signal.success(), "SIGTERM was not sent");
    let exit = tokio::task::spawn_blocking(move || child.wait()).await.expect("join").expect("the daemon exits");
    assert!(exit.success(), "the daemon exits cleanly: {exit}");
    figures.insert("stop_secs".to_owned(), stopping.elapsed().as_secs_f64());
    figures
}

/// Every job of the file a run-time job (the daemon's config, which names none, leaves it
/// alone) and disabled by its operator (it is listed, armed for nothing, and never runs).
async fn make_run_time_and_disabled(path: &Path) {
    use sqlx::Connection;
    let url = format!("sqlite://{}", path.display());
    let mut connection = sqlx::SqliteConnection::connect(&url).await.expect("open the store");
    sqlx::query(
        "UPDATE heartbeats SET origin = 'runtime', config_fingerprint = NULL, enabled = 0, disabled_reason = 'user'",
    )
    .execute(&mut connection)
    .await
    .expect("the jobs become run-time jobs, disabled");
    connection.close().await.expect("close the store");
}

/// The body of `GET url` with the token; the API must answer 200.
async fn get(http: &reqwest::Client, url: &str) -> String {
    let response = http.get(url).bearer_auth(TOKEN).send().await.expect("the API answers");
    assert_eq!(response.status().as_u16(), 200, "GET {url}");
    response.text().await.expect("a body")
}

/// A gauge's value in a Prometheus exposition, 0 when absent.
fn metric(text: &str, name: &str) -> f64 {
    text.lines().find_map(|line| line.strip_prefix(name)?.trim().parse().ok()).unwrap_or(0.0)
}

/// A field of `/proc/<pid>/status` in KiB (`VmRSS:`, `VmHWM:`), 0 when unreadable.
fn memory_kib(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let line = status.lines().find(|line| line.starts_with(field)).unwrap_or_default();
    line.split_whitespace().nth(1).and_then(|kib| kib.parse().ok()).unwrap_or(0.0)
}
