//! The scale benchmark: `cargo bench --bench scale` prints the table that
//! `docs/performance.md` holds. Each figure is the median of three runs, each run a fresh
//! process (so resident memory is that case's own); where tokio-cron-scheduler runs the
//! same workload, it runs in the same invocation and the table gives the ratio.
//!
//! `-- --quick` runs a tenth of each size; `-- --smoke` runs tiny sizes once (the test
//! command runs it, so the harness itself cannot rot). `-- --case NAME key=value...` runs
//! one case in this process and prints its figures (what the parent spawns).
//! `-- --section NAME` runs one section's rows only (registration, cold-start, dispatch,
//! cluster, lateness, saturation, api, simulator), to measure again what a change touched.
#![allow(clippy::disallowed_methods)] // a benchmark reads the real clock on purpose
#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed benchmark setup should stop loudly

mod api_at_scale;
#[path = "../../tests/common/daemon_process.rs"]
mod daemon_process;
mod measure;
mod peer_cases;
#[path = "../../tests/common/postgres_server.rs"]
#[allow(dead_code)] // the tests' helper; the benchmark uses a part of it
mod postgres_server;
#[path = "../../tests/common/saturated_daemon.rs"]
mod saturated_daemon;
mod saturation;
mod sqlite_floor;
mod systole_cases;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use measure::{median, parse_result, print_result, Figures};
use systole::limits::RUNS_IN_FLIGHT_MAX_DEFAULT;
use systole_cases::StoreKind;

/// The daemon's allocator (ADR 0058), so that every case, tokio-cron-scheduler's too,
/// measures what the daemon would run on.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() {
    let process_start = Instant::now();
    let args: Vec<String> = std::env::args().skip(1).filter(|arg| arg != "--bench").collect();
    if let Some(position) = args.iter().position(|arg| arg == "--case") {
        let name = args.get(position + 1).cloned().unwrap_or_default();
        let params: BTreeMap<String, String> = args[position + 2..]
            .iter()
            .filter_map(|pair| pair.split_once('='))
            .map(|(key, value)| (key.to_owned(), value.to_owned()))
            .collect();
        // `SCALE_LOG=sqlx::query=debug`: every statement a case makes, on stderr (what a
        // profile of the SQLite cases counts).
        if let Ok(filter) = std::env::var("SCALE_LOG") {
            tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                .with_writer(std::io::stderr)
                .init();
        }
        let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a runtime");
        let figures = runtime.block_on(run_case(&name, &params, process_start));
        print_result(&figures);
        // The runtime's blocking threads (SQLite's workers) need not be joined.
        std::process::exit(0);
    }
    let mode = if args.iter().any(|arg| arg == "--smoke") {
        Mode::Smoke
    } else if args.iter().any(|arg| arg == "--quick") {
        Mode::Quick
    } else {
        Mode::Full
    };
    let only = args.iter().position(|arg| arg == "--section").map(|position| args.get(position + 1).cloned());
    let only = match only {
        None => None,
        Some(Some(name)) if SECTIONS.contains(&name.as_str()) => Some(name),
        Some(name) => {
            eprintln!("--section needs one of {}; got {}", SECTIONS.join(", "), name.as_deref().unwrap_or("nothing"));
            std::process::exit(2);
        }
    };
    let bench = Bench::new(mode);
    bench.run_all(only.as_deref());
    let failed = bench.failed.get();
    if failed > 0 {
        eprintln!("{failed} case runs failed; their cells say n/a");
        std::process::exit(1);
    }
}

/// The table's sections, in its order (`--section`).
const SECTIONS: [&str; 8] =
    ["registration", "cold-start", "dispatch", "cluster", "lateness", "saturation", "api", "simulator"];

async fn run_case(name: &str, params: &BTreeMap<String, String>, process_start: Instant) -> Figures {
    let number = |key: &str| params.get(key).and_then(|value| value.parse::<usize>().ok()).unwrap_or(0);
    let store = || StoreKind::parse(params.get("store").map_or("memory", String::as_str)).expect("store=memory|sqlite");
    let path = PathBuf::from(params.get("path").cloned().unwrap_or_default());
    let from = || PathBuf::from(params.get("from").cloned().unwrap_or_default());
    let spread = Duration::from_secs(number("spread") as u64);
    let windows = number("windows") as u32;
    match name {
        "register" => systole_cases::register(store(), number("n"), &path, number("distinct_prompts") == 1).await,
        "prepare" => systole_cases::prepare(number("n"), &path, number("prompt_bytes")).await,
        "cold-start" => systole_cases::cold_start(&path, process_start).await,
        "log-runs" => systole_cases::log_runs(&path).await,
        "dispatch" => systole_cases::dispatch(store(), number("n"), &path).await,
        "cluster-dispatch" => {
            let url = params.get("url").cloned().unwrap_or_default();
            let password = postgres_server::POSTGRES_TEST_PASSWORD;
            systole_cases::cluster_dispatch(number("nodes"), number("n"), &url, password).await
        }
        "lateness" => systole_cases::lateness(number("busy"), number("idle"), spread, windows).await,
        "saturation" => {
            let saturated = Duration::from_secs(number("saturated_secs") as u64);
            saturation::saturation(number("agents"), number("per_agent"), saturated).await
        }
        "api-at-scale" => api_at_scale::api_at_scale(number("n")).await,
        "floor-seed" => sqlite_floor::seed(&from(), &path),
        "floor-dispatch" => sqlite_floor::dispatch(&from(), &path, number("batch")),
        "peer-register" => peer_cases::register(number("n")).await,
        "peer-lateness" => peer_cases::lateness(number("n"), spread.as_secs(), windows).await,
        other => panic!("no case named {other}"),
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Full,
    Quick,
    Smoke,
}

struct Bench {
    mode: Mode,
    repeats: usize,
    scratch: tempfile::TempDir,
    /// Case runs that failed: the benchmark then exits with an error (the smoke run is a test).
    failed: std::cell::Cell<usize>,
}

/// One line of the table.
struct Row {
    measure: String,
    systole: String,
    peer: String,
    target: &'static str,
}

impl Bench {
    fn new(mode: Mode) -> Self {
        let repeats = if mode == Mode::Smoke { 1 } else { 3 };
        Self { mode, repeats, scratch: tempfile::tempdir().expect("a scratch directory"), failed: Default::default() }
    }

    /// A size: `full` in a full run, a tenth in a quick one, `smoke` in a smoke run.
    fn size(&self, full: usize, smoke: usize) -> usize {
        match self.mode {
            Mode::Full => full,
            Mode::Quick => full / 10,
            Mode::Smoke => smoke,
        }
    }

    /// Every section's rows, or only the one named.
    fn run_all(&self, only: Option<&str>) {
        print_machine(self.repeats);
        println!("| measure | systole | tokio-cron-scheduler | target |");
        println!("|---|---|---|---|");
        let sections: [fn(&Self) -> Vec<Row>; 8] = [
            Self::registration,
            Self::cold_start,
            Self::dispatch,
            Self::cluster,
            Self::lateness,
            Self::saturation,
            Self::api,
            Self::simulator,
        ];
        for (name, section) in SECTIONS.iter().zip(sections) {
            if only.is_some_and(|only| only != *name) {
                continue;
            }
            for row in section(self) {
                println!("| {} | {} | {} | {} |", row.measure, row.systole, row.peer, row.target);
            }
        }
    }

    /// Runs a case `repeats` times, each in a fresh process; the median of each figure.
    fn case(&self, name: &str, params: &[(&str, String)]) -> Figures {
        let mut runs: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        for repeat in 0..self.repeats {
            let mut params = params.to_vec();
            for (key, value) in &mut params {
                if *key == "path" {
                    // A fresh database per run, unless the case reads a prepared one.
                    *value = value.replace("{run}", &repeat.to_string());
                }
            }
            for (key, value) in self.case_once(name, &params) {
                runs.entry(key).or_default().push(value);
            }
        }
        runs.into_iter().map(|(key, values)| (key, median(&values))).collect()
    }

    fn case_once(&self, name: &str, params: &[(&str, String)]) -> Figures {
        let exe = std::env::current_exe().expect("the benchmark's own path");
        let mut command = Command::new(exe);
        command.arg("--case").arg(name);
        for (key, value) in params {
            command.arg(format!("{key}={value}"));
        }
        match command.output() {
            Ok(output) if output.status.success() => {
                if let Some(figures) = parse_result(&String::from_utf8_lossy(&output.stdout)) {
                    return figures;
                }
                eprintln!("case {name} printed no result");
            }
            Ok(output) => eprintln!("case {name} failed: {}", String::from_utf8_lossy(&output.stderr)),
            Err(error) => eprintln!("case {name} could not start: {error}"),
        }
        self.failed.set(self.failed.get() + 1);
        Figures::new()
    }

    fn db(&self, name: &str) -> String {
        self.scratch.path().join(format!("{name}-{{run}}.db")).display().to_string()
    }

    fn registration(&self) -> Vec<Row> {
        let mut rows = Vec::new();
        let peer_size = self.size(100_000, 1_000);
        for count in [self.size(100_000, 1_000), self.size(1_000_000, 2_000)] {
            for store in ["memory", "sqlite"] {
                let path = self.db(&format!("register-{store}-{count}"));
                let ours = self.case("register", &[("store", store.into()), ("n", count.to_string()), ("path", path)]);
                let peer = (store == "memory" && count == peer_size)
                    .then(|| self.case("peer-register", &[("n", count.to_string())]));
                rows.push(Row {
                    measure: format!("{} heartbeats registered ({store} store): stored + started", thousands(count)),
                    systole: format!("{} + {} s", secs(ours.get("seed_secs")), secs(ours.get("start_secs"))),
                    peer: peer.as_ref().map_or_else(
                        || "—".into(),
                        |peer| {
                            format!(
                                "{} s ({})",
                                secs(peer.get("total_secs")),
                                ratio(ours.get("total_secs"), peer.get("total_secs"))
                            )
                        },
                    ),
                    target: if count >= 1_000_000 { "< 2 s" } else { "" },
                });
                rows.push(Row {
                    measure: format!("  resident memory, {} heartbeats ({store})", thousands(count)),
                    systole: format!(
                        "{} MB, {} B each: the engine's heap {} B, the store's {} B (peak {} MB)",
                        whole(ours.get("resident_mb")),
                        whole(ours.get("bytes_each")),
                        whole(ours.get("engine_heap_bytes_each")),
                        whole(ours.get("store_heap_bytes_each")),
                        whole(ours.get("peak_mb"))
                    ),
                    peer: peer.as_ref().map_or_else(
                        || "—".into(),
                        |peer| {
                            format!(
                                "{} MB, {} B each ({})",
                                whole(peer.get("resident_mb")),
                                whole(peer.get("bytes_each")),
                                ratio(ours.get("bytes_each"), peer.get("bytes_each"))
                            )
                        },
                    ),
                    // Issue 28's target is a heartbeat's share: the process's own pages
                    // before any heartbeat (the runtime, the binary) are not one's.
                    target: if count >= 1_000_000 { "< 200 B each" } else { "" },
                });
            }
        }
        // What a heartbeat costs must not grow with its prompt: the driver keeps none, and a
        // start reads none. A fresh process each, so freed memory does not blur the figure.
        let count = self.size(100_000, 1_000);
        let mut resident = Vec::new();
        for prompt_bytes in [240, 4_096] {
            let path = self.scratch.path().join(format!("prompts-{prompt_bytes}.db")).display().to_string();
            let params = [("n", count.to_string()), ("path", path.clone()), ("prompt_bytes", prompt_bytes.to_string())];
            self.case_once("prepare", &params);
            self.case_once("cold-start", &[("path", path.clone())]);
            let restart = self.case("cold-start", &[("path", path.clone())]);
            resident.push(whole(restart.get("resident_mb")));
            let _ = std::fs::remove_file(Path::new(&path));
        }
        rows.push(Row {
            measure: format!(
                "  resident memory after a restart with {} in SQLite: 240 B / 4 KB prompts",
                thousands(count)
            ),
            systole: format!("{} / {} MB", resident[0], resident[1]),
            peer: "—".into(),
            target: "no growth with the prompt",
        });
        // The memory store holds every definition, one copy of each distinct prompt: with a
        // prompt of its own for every heartbeat, each holds its prompt too.
        let path = self.db("register-distinct");
        let params =
            [("store", "memory".into()), ("n", count.to_string()), ("path", path), ("distinct_prompts", "1".into())];
        let distinct = self.case("register", &params);
        rows.push(Row {
            measure: format!("  resident memory, {} heartbeats (memory), every prompt its own", thousands(count)),
            systole: format!("{} MB, {} B each", whole(distinct.get("resident_mb")), whole(distinct.get("bytes_each"))),
            peer: "—".into(),
            target: "",
        });
        rows
    }

    fn cold_start(&self) -> Vec<Row> {
        let count = self.size(1_000_000, 2_000);
        let (mut seeds, mut firsts, mut restarts, mut logged) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut floors = Vec::new();
        for repeat in 0..self.repeats {
            let path = self.scratch.path().join(format!("cold-{repeat}.db")).display().to_string();
            let prepared = self.case_once("prepare", &[("n", count.to_string()), ("path", path.clone())]);
            seeds.push(prepared.get("seed_secs").copied().unwrap_or(f64::NAN));
            // SQLite alone storing the rows just seeded, into a file of its own.
            let floor_path = self.scratch.path().join(format!("cold-floor-{repeat}.db"));
            let floor =
                self.case_once("floor-seed", &[("from", path.clone()), ("path", floor_path.display().to_string())]);
            floors.push(floor.get("floor_seed_secs").copied().unwrap_or(f64::NAN));
            remove_database(&floor_path);
            let first = self.case_once("cold-start", &[("path", path.clone())]);
            firsts.push(first.get("start_secs").copied().unwrap_or(f64::NAN));
            let again = self.case_once("cold-start", &[("path", path.clone())]);
            restarts.push(again.get("start_secs").copied().unwrap_or(f64::NAN));
            self.case_once("log-runs", &[("path", path.clone())]);
            let with_runs = self.case_once("cold-start", &[("path", path.clone())]);
            logged.push(with_runs.get("start_secs").copied().unwrap_or(f64::NAN));
            let _ = std::fs::remove_file(Path::new(&path));
        }
        vec![
            Row {
                measure: format!("{} heartbeats through config seeding into SQLite", thousands(count)),
                systole: format!("{} s", secs(Some(&median(&seeds)))),
                peer: "—".into(),
                target: "",
            },
            Row {
                measure: "  SQLite alone storing the same rows: one `INSERT` each, one transaction, as a first seed"
                    .into(),
                systole: format!("{} s", secs(Some(&median(&floors)))),
                peer: "—".into(),
                target: "",
            },
            Row {
                measure: format!("cold start, {} heartbeats in SQLite: first start / restart", thousands(count)),
                systole: format!("{} / {} s", secs(Some(&median(&firsts))), secs(Some(&median(&restarts)))),
                peer: "—".into(),
                target: "< 3 s",
            },
            Row {
                measure: format!("  restart of {} in SQLite with a logged slot each", thousands(count)),
                systole: format!("{} s", secs(Some(&median(&logged)))),
                peer: "—".into(),
                target: "< 3 s",
            },
        ]
    }

    fn dispatch(&self) -> Vec<Row> {
        let mut rows = Vec::new();
        let count = self.size(10_000, 200);
        for store in ["memory", "sqlite"] {
            let path = self.db(&format!("dispatch-{store}"));
            let ours =
                self.case("dispatch", &[("store", store.into()), ("n", count.to_string()), ("path", path.clone())]);
            rows.push(Row {
                measure: format!("dispatch, {} due at once ({store}): runs/s end to end", thousands(count)),
                systole: format!(
                    "{} runs/s ({} ms CPU each, {} lost)",
                    whole(ours.get("runs_per_sec")),
                    fixed(ours.get("cpu_ms_per_run"), 3),
                    whole(ours.get("lost"))
                ),
                peer: "—".into(),
                target: if store == "sqlite" { "≥ 50,000" } else { "" },
            });
            if store == "sqlite" {
                rows.push(self.dispatch_floor(&path));
            }
        }
        let burst = self.size(100_000, 500);
        let ours = self.case("dispatch", &[("store", "memory".into()), ("n", burst.to_string())]);
        rows.push(Row {
            measure: format!("burst, {} due in one second (memory): last started after / lost", thousands(burst)),
            systole: format!("{} s / {}", secs(ours.get("last_started_secs")), whole(ours.get("lost"))),
            peer: "—".into(),
            target: "< 1 s / 0",
        });
        rows
    }

    /// SQLite alone writing the runs of the SQLite dispatch just measured (its files,
    /// `dispatch_path` with `{run}`), with the store's statements on one thread: in
    /// transactions of as many runs as a pass of that dispatch claimed on average, of the
    /// most a pass can claim (a run is claimed only when it can start: the default runs in
    /// flight), and of `FLOOR_BATCH_RUNS_LARGE`.
    fn dispatch_floor(&self, dispatch_path: &str) -> Row {
        let mut cells = Vec::new();
        for batch in [FLOOR_BATCH_RUNS_PASS, RUNS_IN_FLIGHT_MAX_DEFAULT, FLOOR_BATCH_RUNS_LARGE] {
            let mut figures: BTreeMap<String, Vec<f64>> = BTreeMap::new();
            for repeat in 0..self.repeats {
                let from = dispatch_path.replace("{run}", &repeat.to_string());
                let floor_path = self.scratch.path().join(format!("dispatch-floor-{repeat}.db"));
                let params = [("from", from), ("path", floor_path.display().to_string()), ("batch", batch.to_string())];
                for (key, value) in self.case_once("floor-dispatch", &params) {
                    figures.entry(key).or_default().push(value);
                }
                remove_database(&floor_path);
            }
            let figures: Figures = figures.into_iter().map(|(key, values)| (key, median(&values))).collect();
            cells.push(format!(
                "{} a transaction: {} runs/s ({} ms CPU each)",
                thousands(batch),
                whole(figures.get("floor_runs_per_sec")),
                fixed(figures.get("floor_cpu_ms_per_run"), 3)
            ));
        }
        Row {
            measure: "  SQLite alone writing the same runs, the store's statements on one thread".into(),
            systole: cells.join("; "),
            peer: "—".into(),
            target: "",
        }
    }

    /// Runs per second with 1, 2 and 3 nodes on one throwaway PostgreSQL, measured in the
    /// same run so the three compare.
    fn cluster(&self) -> Vec<Row> {
        let server = postgres_server::PostgresServer::start();
        let count = self.size(10_000, 200);
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        let mut cells = Vec::new();
        for nodes in 1..=3 {
            let mut params = vec![("nodes", nodes.to_string()), ("n", count.to_string())];
            // A fresh database per repeat, made here so each case process only connects.
            let mut figures: BTreeMap<String, Vec<f64>> = BTreeMap::new();
            for repeat in 0..self.repeats {
                let url = runtime.block_on(server.create_database(&format!("cluster_{nodes}_{repeat}")));
                params.retain(|(key, _)| *key != "url");
                params.push(("url", url));
                for (key, value) in self.case_once("cluster-dispatch", &params) {
                    figures.entry(key).or_default().push(value);
                }
            }
            let figures: Figures = figures.into_iter().map(|(key, values)| (key, median(&values))).collect();
            cells.push(format!(
                "{nodes} node{}: {} runs/s ({} lost)",
                if nodes == 1 { "" } else { "s" },
                whole(figures.get("runs_per_sec")),
                whole(figures.get("lost"))
            ));
        }
        vec![Row {
            measure: format!(
                "cluster dispatch, {} due at once (PostgreSQL, one process per node set): runs/s end to end",
                thousands(count)
            ),
            systole: cells.join("; "),
            peer: "—".into(),
            target: "",
        }]
    }

    fn lateness(&self) -> Vec<Row> {
        let mut rows = Vec::new();
        let spread = if self.mode == Mode::Smoke { 1 } else { 10 };
        for count in [self.size(10_000, 200), self.size(100_000, 400)] {
            let params = [
                ("busy", count.to_string()),
                ("idle", "0".into()),
                ("spread", spread.to_string()),
                ("windows", "1".into()),
            ];
            let ours = self.case("lateness", &params);
            let peer = self.case(
                "peer-lateness",
                &[("n", count.to_string()), ("spread", spread.to_string()), ("windows", "1".into())],
            );
            rows.push(Row {
                measure: format!("lateness, {} spread over {spread} s: p50 / p99 / max, lost", thousands(count)),
                systole: lateness_cell(&ours),
                peer: format!("{} (p99 {})", lateness_cell(&peer), ratio(ours.get("p99_ms"), peer.get("p99_ms"))),
                target: if count >= 100_000 { "p99 < 3 ms, 0 lost" } else { "" },
            });
        }
        let busy = self.size(1_000, 100).max(100);
        let spread = if self.mode == Mode::Smoke { 1 } else { 5 };
        for idle in [self.size(10_000, 200), self.size(1_000_000, 2_000)] {
            let params = [
                ("busy", busy.to_string()),
                ("idle", idle.to_string()),
                ("spread", spread.to_string()),
                ("windows", "2".into()),
            ];
            let ours = self.case("lateness", &params);
            rows.push(Row {
                measure: format!(
                    "{} busy (every {spread} s) beside {} idle: p50 / p99 / max, lost; CPU per run",
                    thousands(busy),
                    thousands(idle)
                ),
                systole: format!("{}; {} ms", lateness_cell(&ours), fixed(ours.get("cpu_ms_per_run"), 3)),
                peer: "—".into(),
                target: "no growth with idle count",
            });
        }
        rows
    }

    /// The daemon saturated: heartbeats due every second, each run holding its place for the
    /// model's 2 s, so twenty times more is due than the default places can start.
    fn saturation(&self) -> Vec<Row> {
        let count = self.size(3_000, 120);
        let per_agent = 30;
        let saturated_secs = if self.mode == Mode::Smoke { 3 } else { 6 };
        let params = [
            ("agents", (count / per_agent).to_string()),
            ("per_agent", per_agent.to_string()),
            ("saturated_secs", saturated_secs.to_string()),
        ];
        let ours = self.case("saturation", &params);
        vec![Row {
            measure: format!(
                "saturation, the daemon on SQLite: {} heartbeats every second, a {} s model, {} places: \
                 `GET /v1/status` / `GET /v1/agents` (slowest of 5 each) / a pause answered / SIGTERM to exit; \
                 requests at once; runs of the paused agent after its answer; slots abandoned / left running",
                thousands(count),
                saturated_daemon::MODEL_SECS,
                RUNS_IN_FLIGHT_MAX_DEFAULT
            ),
            systole: format!(
                "{} / {} / {} / {} s; at most {} ({} requests); {}; {} / {}",
                fixed(ours.get("status_secs_max"), 3),
                fixed(ours.get("agents_secs_max"), 3),
                fixed(ours.get("pause_secs"), 3),
                secs(ours.get("stop_secs")),
                whole(ours.get("in_flight_max")),
                whole(ours.get("model_requests")),
                whole(ours.get("paused_runs_after")),
                whole(ours.get("abandoned")),
                whole(ours.get("left_running"))
            ),
            peer: "—".into(),
            target: SATURATION_TARGET,
        }]
    }

    /// The operator's API over a million jobs in the daemon's SQLite store.
    fn api(&self) -> Vec<Row> {
        let count = self.size(1_000_000, 2_000);
        let ours = self.case("api-at-scale", &[("n", count.to_string())]);
        let kib =
            |name: &str| ours.get(name).map_or_else(|| "n/a".to_owned(), |bytes| format!("{:.0} KB", bytes / 1_000.0));
        vec![Row {
            measure: format!(
                "the API over {} jobs in SQLite (a daemon, slowest of {} reads each): the status's first / a middle \
                 page (its size) / the agents' list / an agent / a page of its jobs / a job / `/metrics` / `/v1/mcp`; the CLI's \
                 `heartbeat show` of a job without `--agent` (once); the daemon's resident \
                 memory before / after the reads, and its peak before / after them; SIGTERM to its exit",
                thousands(count),
                api_at_scale::READS_EACH
            ),
            systole: format!(
                "{} / {} s ({}) / {} / {} / {} / {} / {} / {} s; {} s; {} / {} MiB, peak {} / {} MiB; {} s",
                fixed(ours.get("status_first_secs_max"), 3),
                fixed(ours.get("status_middle_secs_max"), 3),
                kib("status_first_bytes"),
                fixed(ours.get("agents_secs_max"), 3),
                fixed(ours.get("agent_secs_max"), 3),
                fixed(ours.get("agent_jobs_secs_max"), 3),
                fixed(ours.get("job_secs_max"), 3),
                fixed(ours.get("metrics_secs_max"), 3),
                fixed(ours.get("mcp_secs_max"), 3),
                fixed(ours.get("cli_show_secs"), 2),
                whole(ours.get("rss_before_mib")),
                whole(ours.get("rss_after_mib")),
                whole(ours.get("peak_before_mib")),
                whole(ours.get("peak_after_mib")),
                fixed(ours.get("stop_secs"), 2)
            ),
            peer: "—".into(),
            target: "each < 1 s; the peak not raised by the reads",
        }]
    }

    /// Seeds a minute and simulated seconds per wall second, from the simulator's own
    /// `--stats` line (it is built first; a smoke run skips it).
    fn simulator(&self) -> Vec<Row> {
        if self.mode == Mode::Smoke {
            return Vec::new();
        }
        let sim = Path::new(env!("CARGO_MANIFEST_DIR")).join("sim");
        let built = Command::new("cargo").args(["build", "--release", "--quiet"]).current_dir(&sim).status();
        if !built.is_ok_and(|status| status.success()) {
            eprintln!("the simulator did not build; its row is left out");
            return Vec::new();
        }
        let seeds = self.size(1_000, 100).to_string();
        let mut per_minute = Vec::new();
        let mut speedup = Vec::new();
        for repeat in 0..self.repeats {
            let from = (5_000_000 + repeat * 10_000).to_string();
            let output = Command::new(sim.join("target/release/systole-sim"))
                .args(["run", "--seeds", &seeds, "--from", &from, "--stats", "--regressions", "/dev/null"])
                .output();
            let text = output.map(|output| String::from_utf8_lossy(&output.stdout).into_owned()).unwrap_or_default();
            if let Some(line) = text.lines().find(|line| line.starts_with("speed:")) {
                let number_before = |unit: &str| {
                    line.split(unit)
                        .next()
                        .and_then(|head| head.split_whitespace().last())
                        .and_then(|n| n.parse::<f64>().ok())
                };
                per_minute.extend(number_before(" seeds/min"));
                speedup.extend(number_before(" simulated s per wall s"));
            }
        }
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        vec![Row {
            measure: format!("simulator, default scenario on {cores} threads: seeds a minute; simulated s per wall s"),
            systole: format!("{}; {}", whole(Some(&median(&per_minute))), whole(Some(&median(&speedup)))),
            peer: "—".into(),
            target: "≥ 2,000 seeds/min",
        }]
    }
}

/// Issue 28's bounds for a saturated daemon: the API well under a second, a pause at once,
/// SIGTERM within `shutdown_grace` and a second, no more requests at once than places, and
/// no run of a paused agent, no abandoned run and no claimed slot left that never ran.
const SATURATION_TARGET: &str = "< 1 s / < 1 s / at once / grace + 1 s; ≤ places; 0; 0 / 0";

/// Runs a transaction of the SQLite floor's dispatch: about what one pass of the engine
/// claimed in a dispatch of 10,000 (341 passes, "Definitions handed out shared" in
/// `docs/performance.md`).
const FLOOR_BATCH_RUNS_PASS: usize = 32;

/// Runs a transaction of the floor's generous case: more than a pass can claim with the
/// default runs in flight.
const FLOOR_BATCH_RUNS_LARGE: usize = 1_024;

/// Removes a SQLite file and its WAL and shared-memory files.
fn remove_database(path: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        let _ = std::fs::remove_file(name);
    }
}

fn lateness_cell(figures: &Figures) -> String {
    format!(
        "{} / {} / {} ms, {} lost{}",
        fixed(figures.get("p50_ms"), 1),
        fixed(figures.get("p99_ms"), 1),
        fixed(figures.get("max_ms"), 1),
        whole(figures.get("lost")),
        match figures.get("early") {
            Some(early) if *early > 0.0 => {
                let earliest_us = figures.get("earliest_ms").map(|ms| ms * 1000.0);
                format!(", {} early (by up to {} µs)", whole(Some(early)), fixed(earliest_us.as_ref(), 1))
            }
            _ => String::new(),
        }
    )
}

fn print_machine(repeats: usize) {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|line| line.strip_prefix("model name"))
        .map_or("unknown CPU", |rest| rest.trim_start_matches([' ', '\t', ':']));
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let commit = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_owned())
        .unwrap_or_default();
    println!("machine: {model}, {cores} cores; commit {commit}; medians of {repeats} runs, each a fresh process\n");
}

fn thousands(count: usize) -> String {
    let digits = count.to_string();
    let mut out = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

fn secs(value: Option<&f64>) -> String {
    fixed(value, 2)
}

fn fixed(value: Option<&f64>, places: usize) -> String {
    value.filter(|value| value.is_finite()).map_or_else(|| "n/a".into(), |value| format!("{value:.places$}"))
}

fn whole(value: Option<&f64>) -> String {
    value.filter(|value| value.is_finite()).map_or_else(|| "n/a".into(), |value| thousands(value.round() as usize))
}

/// systole's figure against the peer's: `systole: 1/10 of it` or `systole: 3.7× it`.
fn ratio(ours: Option<&f64>, peer: Option<&f64>) -> String {
    match (ours, peer) {
        (Some(ours), Some(peer)) if *peer > 0.0 && *ours > 0.0 && ours.is_finite() => {
            let ratio = ours / peer;
            // A fraction of a half or more reads as one: 0.79 would round to "1/1".
            if ratio < 0.5 {
                format!("systole: 1/{:.0} of it", 1.0 / ratio)
            } else if ratio < 1.0 {
                format!("systole: {ratio:.2}× it")
            } else {
                format!("systole: {ratio:.1}× it")
            }
        }
        _ => "n/a".into(),
    }
}
