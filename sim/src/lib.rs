//! The systole simulator: runs the real engine on madsim with simulated ports, one seed
//! at a time, and checks its invariants. See `sim/README.md`.
//!
//! A library with a one-line binary (`main.rs`) so that cargo compiles it while the engine
//! is still generating code (a binary waits for its dependencies' whole build): the mutant
//! check rebuilds both once per deliberate bug.

mod agents;
mod checker;
mod cluster;
mod faults;
mod harness;
mod one_shot_at_trigger;
mod one_shot_triggers;
mod options;
mod ports;
mod report;
mod retired_one_shot_revived;
mod scenarios;
mod trace;
mod trigger_held_enable;
mod workload;
mod world;

use std::collections::{BTreeMap, BTreeSet};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use clap::{Parser, Subcommand};

use crate::faults::FaultKind;
use crate::report::{run_and_check, SeedResult};
use crate::world::RarePath;

#[derive(Parser)]
#[command(name = "systole-sim", about = "Deterministic simulation of the systole engine")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run seeds FROM..FROM+SEEDS, plus the regression list; exit 0 only if all pass.
    Run {
        #[arg(long)]
        seeds: u64,
        #[arg(long, default_value_t = 0)]
        from: u64,
        /// Seeds run at once (each on its own thread and runtime).
        #[arg(long)]
        jobs: Option<usize>,
        /// Print how often each fault fired and each invariant was checked.
        #[arg(long)]
        stats: bool,
        /// Seeds that once failed, one a line ('#' starts a comment).
        #[arg(long, default_value = "regressions.txt")]
        regressions: PathBuf,
        /// Stop at the first failing seed.
        #[arg(long)]
        fail_fast: bool,
        /// Stop once this many seeds failed (the mutant check: enough catches to pass its
        /// rate, without running the rest).
        #[arg(long)]
        stop_after_failures: Option<usize>,
    },
    /// Run N fresh seeds from a start derived from the commit (or --from), on all cores,
    /// with a progress bar and the failures counted by invariant. No regression list.
    Sweep {
        #[arg(long)]
        seeds: u64,
        /// The first seed; by default derived from the current commit, so each change
        /// explores seeds no earlier sweep ran.
        #[arg(long)]
        from: Option<u64>,
        #[arg(long)]
        jobs: Option<usize>,
    },
    /// Print a readable timeline of one seed, one event a line.
    Replay {
        #[arg(long)]
        seed: u64,
    },
    /// Print the hash of one seed's trace (16 hex digits) as the last line.
    Hash {
        #[arg(long)]
        seed: u64,
    },
    /// Run cluster seeds FROM..FROM+SEEDS: three engine nodes on one store with leases,
    /// fencing and node faults (ADR 0017); the first seed runs twice to prove replay.
    Cluster {
        #[arg(long)]
        seeds: u64,
        #[arg(long, default_value_t = 0)]
        from: u64,
        #[arg(long)]
        jobs: Option<usize>,
        #[arg(long)]
        stats: bool,
        /// Print one seed's record, one entry a line, instead.
        #[arg(long)]
        replay: Option<u64>,
        /// Print the hash of one seed's record instead (the replay check runs this in a
        /// fresh process: madsim's task ids are per process, so a replay is too).
        #[arg(long)]
        hash: Option<u64>,
        /// Seeds that once failed, run beside the range.
        #[arg(long, default_value = "cluster-regressions.txt")]
        regressions: PathBuf,
        /// Stop once this many seeds failed (the mutant check, as for `run`).
        #[arg(long)]
        stop_after_failures: Option<usize>,
    },
}

/// The `systole-sim` command line: parses the arguments and runs the command.
pub fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Run { seeds, from, jobs, stats, regressions, fail_fast, stop_after_failures } => {
            let stop_after = if fail_fast { Some(1) } else { stop_after_failures };
            run(seeds, from, jobs, stats, &regressions, stop_after)
        }
        Command::Sweep { seeds, from, jobs } => sweep(seeds, from, jobs),
        Command::Replay { seed } => {
            let (timeline, passed) = report::timeline(seed);
            print!("{timeline}");
            if passed {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Command::Hash { seed } => {
            println!("{}", trace::hash(&report::entries(seed)));
            ExitCode::SUCCESS
        }
        Command::Cluster { seeds, from, jobs, stats, replay, hash, regressions, stop_after_failures } => {
            match (replay, hash) {
                (Some(seed), _) => cluster_replay(seed),
                (None, Some(seed)) => {
                    println!("{:016x}", cluster_hash(&cluster::run_seed(seed).entries));
                    ExitCode::SUCCESS
                }
                (None, None) => cluster_run(seeds, from, jobs, stats, &regressions, stop_after_failures),
            }
        }
    }
}

fn cluster_replay(seed: u64) -> ExitCode {
    let outcome = cluster::run_seed(seed);
    println!("{:?}", outcome.options);
    for (sequence, at, record) in &outcome.entries {
        println!("#{sequence:<6} {:>8.3}s {record:?}", at.as_secs_f64());
    }
    let verdict = cluster::checker::check(&outcome.options, &outcome.entries);
    match verdict.failure {
        Some(failure) => {
            println!("FAILED: {failure}");
            ExitCode::FAILURE
        }
        None => ExitCode::SUCCESS,
    }
}

/// A seed's record as one number: two runs of a seed must agree on it.
fn cluster_hash(entries: &[cluster::Entry]) -> u64 {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    for entry in entries {
        hasher.update(format!("{entry:?}\n").as_bytes());
    }
    let digest = hasher.finalize();
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(bytes)
}

/// One cluster seed: its number, verdict, faults fired and record hash.
type ClusterResult = (u64, cluster::checker::Verdict, BTreeMap<cluster::FaultKind, u64>, u64);

fn cluster_run(
    count: u64,
    from: u64,
    jobs: Option<usize>,
    stats: bool,
    regressions: &PathBuf,
    stop_after: Option<usize>,
) -> ExitCode {
    let mut seeds: BTreeSet<u64> = (from..from.saturating_add(count)).collect();
    seeds.extend(regression_seeds(regressions));
    let seeds: Vec<u64> = seeds.into_iter().collect();
    let jobs = jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())).max(1);
    let next = AtomicUsize::new(0);
    let failures = AtomicUsize::new(0);
    let results: Mutex<Vec<ClusterResult>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| loop {
                if stop_after.is_some_and(|limit| failures.load(Ordering::SeqCst) >= limit) {
                    break;
                }
                let index = next.fetch_add(1, Ordering::SeqCst);
                let Some(&seed) = seeds.get(index) else { break };
                let outcome = cluster::run_seed(seed);
                let verdict = cluster::checker::check(&outcome.options, &outcome.entries);
                if let Some(failure) = &verdict.failure {
                    failures.fetch_add(1, Ordering::SeqCst);
                    eprintln!("seed {seed} FAILED: {failure}\n  replay: systole-sim cluster --seeds 0 --replay {seed}");
                }
                let hash = cluster_hash(&outcome.entries);
                results.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((
                    seed,
                    verdict,
                    outcome.fired,
                    hash,
                ));
            });
        }
    });
    let mut results = results.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
    results.sort_by_key(|(seed, ..)| *seed);
    let mut replay_failed = false;
    if let Some((seed, _, _, hash)) = results.first() {
        let again = std::env::current_exe()
            .and_then(|exe| {
                std::process::Command::new(exe).args(["cluster", "--seeds", "0", "--hash", &seed.to_string()]).output()
            })
            .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_owned())
            .unwrap_or_default();
        if again == format!("{hash:016x}") {
            println!("replay: seed {seed} ran twice to the same record ({hash:016x})");
        } else {
            println!("replay FAILED: seed {seed} gave {hash:016x}, then {again:?} in a fresh process");
            replay_failed = true;
        }
    }
    if stats {
        let mut fired: BTreeMap<cluster::FaultKind, (u64, u64)> =
            cluster::FaultKind::ALL.into_iter().map(|kind| (kind, (0, 0))).collect();
        let mut checks: BTreeMap<&str, u64> = cluster::checker::INVARIANTS.iter().map(|name| (*name, 0)).collect();
        for (_, verdict, faults, _) in &results {
            for (kind, count) in faults {
                let entry = fired.entry(*kind).or_default();
                entry.0 += count;
                entry.1 += u64::from(*count > 0);
            }
            for (name, count) in &verdict.checks {
                *checks.entry(name).or_default() += count;
            }
        }
        println!("cluster faults fired (total, in how many seeds):");
        for (kind, (count, seeds)) in &fired {
            println!("  {:<22} {count:>9} {seeds:>6}", kind.name());
        }
        let refused: u64 = results.iter().map(|(_, verdict, ..)| verdict.refused_writes).sum();
        let seeds_refused = results.iter().filter(|(_, verdict, ..)| verdict.refused_writes > 0).count();
        println!("  {:<22} {refused:>9} {seeds_refused:>6}", "fenced-write-refused");
        let dropped: u64 = results.iter().map(|(_, verdict, ..)| verdict.fenced_effects).sum();
        let seeds_dropped = results.iter().filter(|(_, verdict, ..)| verdict.fenced_effects > 0).count();
        println!("  {:<22} {dropped:>9} {seeds_dropped:>6}", "fenced-effect-dropped");
        for (index, name) in ["reload-everywhere", "reload-partly", "reload-refused"].into_iter().enumerate() {
            let total: u64 = results.iter().map(|(_, verdict, ..)| verdict.reloads[index]).sum();
            let seeds = results.iter().filter(|(_, verdict, ..)| verdict.reloads[index] > 0).count();
            println!("  {name:<22} {total:>9} {seeds:>6}");
        }
        println!("cluster invariants checked:");
        for (name, count) in &checks {
            println!("  {name:<30} {count:>9}");
        }
    }
    let failed = results.iter().filter(|(_, verdict, ..)| verdict.failure.is_some()).count();
    println!("{} passed, {failed} failed", results.len() - failed);
    if failed == 0 && !replay_failed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn regression_seeds(path: &PathBuf) -> Vec<u64> {
    let Ok(text) = std::fs::read_to_string(path) else { return Vec::new() };
    text.lines()
        .map(|line| line.split('#').next().unwrap_or("").trim())
        .filter(|line| !line.is_empty())
        .filter_map(|line| line.parse().ok())
        .collect()
}

// `Instant::now` times the harness itself (seeds a minute), outside any simulation.
#[allow(clippy::disallowed_methods)]
fn run(
    count: u64,
    from: u64,
    jobs: Option<usize>,
    stats: bool,
    regressions: &PathBuf,
    stop_after: Option<usize>,
) -> ExitCode {
    let mut seeds: BTreeSet<u64> = (from..from.saturating_add(count)).collect();
    let regression = regression_seeds(regressions);
    seeds.extend(regression.iter().copied());
    let seeds: Vec<u64> = seeds.into_iter().collect();
    let started = std::time::Instant::now();
    let results = run_all(&seeds, jobs, false, stop_after);
    let wall = started.elapsed();
    if stats {
        print_stats(&results);
        print_speed(&results, wall, jobs);
    }
    let failed = results.iter().filter(|r| r.failure.is_some()).count();
    if !regression.is_empty() {
        println!("(including {} regression seeds)", regression.len());
    }
    println!("{} passed, {failed} failed", results.len() - failed);
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Where a sweep starts when not told: a number derived from the commit, far from the
/// seeds CI runs (0..500) and from the regression list.
fn sweep_start_from_commit(commit: &str) -> u64 {
    use sha2::{Digest, Sha256};
    let hash = Sha256::digest(commit.as_bytes());
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&hash[..8]);
    SWEEP_START_MIN + u64::from_le_bytes(bytes) % SWEEP_START_SPAN
}

/// Sweep starts fall in `SWEEP_START_MIN..SWEEP_START_MIN + SWEEP_START_SPAN`.
const SWEEP_START_MIN: u64 = 10_000_000;
const SWEEP_START_SPAN: u64 = 1_000_000_000_000;

fn sweep(count: u64, from: Option<u64>, jobs: Option<usize>) -> ExitCode {
    let commit = report::commit();
    let from = from.unwrap_or_else(|| sweep_start_from_commit(&commit));
    println!("sweep of {count} seeds from {from} (commit {commit})");
    let seeds: Vec<u64> = (from..from.saturating_add(count)).collect();
    let results = run_all(&seeds, jobs, true, None);
    let mut by_invariant: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for result in &results {
        if let Some(name) = result.failed_invariant() {
            by_invariant.entry(name).or_default().push(result.seed);
        }
    }
    let failed: usize = by_invariant.values().map(Vec::len).sum();
    if failed > 0 {
        println!("failures by invariant:");
        for (name, mut seeds) in by_invariant {
            seeds.sort_unstable();
            let shown: Vec<String> = seeds.iter().take(SWEEP_SEEDS_SHOWN_MAX).map(u64::to_string).collect();
            let more = seeds.len().saturating_sub(SWEEP_SEEDS_SHOWN_MAX);
            let tail = if more > 0 { format!(" (+{more} more)") } else { String::new() };
            println!("  {name:<26} {:>6}  {}{tail}", seeds.len(), shown.join(" "));
        }
    }
    println!("{} passed, {failed} failed", results.len() - failed);
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// How many failing seeds a sweep names per invariant.
const SWEEP_SEEDS_SHOWN_MAX: usize = 10;

/// Runs `seeds` on `jobs` threads (default: every core). A progress bar shows on a
/// terminal, or always when `always_show_progress` (a sweep is long). With `stop_after`,
/// no new seed starts once that many failed (seeds already running finish).
fn run_all(
    seeds: &[u64],
    jobs: Option<usize>,
    always_show_progress: bool,
    stop_after: Option<usize>,
) -> Vec<SeedResult> {
    let jobs = jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())).max(1);
    let progress = if always_show_progress || std::io::stderr().is_terminal() {
        let bar = indicatif::ProgressBar::new(seeds.len() as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} seeds, {per_sec}, eta {eta} {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };
    let failures = AtomicUsize::new(0);
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<SeedResult>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| loop {
                if stop_after.is_some_and(|limit| failures.load(Ordering::SeqCst) >= limit) {
                    break;
                }
                let index = next.fetch_add(1, Ordering::SeqCst);
                let Some(&seed) = seeds.get(index) else { break };
                let result = run_and_check(seed);
                if let Some(report) = &result.failure {
                    // A sweep names each failure in two lines; `replay` tells the rest.
                    let shown = if always_show_progress {
                        let head: Vec<&str> = report.lines().take(2).collect();
                        format!("{}\n  {}\n", head.join("\n"), report.lines().last().unwrap_or(""))
                    } else {
                        report.clone()
                    };
                    progress.suspend(|| eprint!("{shown}"));
                    let failed = failures.fetch_add(1, Ordering::SeqCst) + 1;
                    progress.set_message(format!("{failed} failed"));
                }
                progress.inc(1);
                results.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(result);
            });
        }
    });
    progress.finish_and_clear();
    results.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Seeds a minute and simulated seconds a wall second: the figures `docs/performance.md`
/// quotes (the scale benchmark reads this line).
fn print_speed(results: &[SeedResult], wall: std::time::Duration, jobs: Option<usize>) {
    let threads = jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())).max(1);
    let wall_secs = wall.as_secs_f64().max(f64::EPSILON);
    let simulated_secs: f64 = results.iter().map(|result| result.simulated.as_secs_f64()).sum();
    println!(
        "speed: {} seeds in {wall_secs:.1} s on {threads} threads: {:.0} seeds/min, {:.0} simulated s per wall s",
        results.len(),
        results.len() as f64 * 60.0 / wall_secs,
        simulated_secs / wall_secs,
    );
}

fn print_stats(results: &[SeedResult]) {
    let mut fired: BTreeMap<FaultKind, u64> = FaultKind::ALL.into_iter().map(|kind| (kind, 0)).collect();
    let mut seeds_with: BTreeMap<FaultKind, u64> = BTreeMap::new();
    let mut checks: BTreeMap<&str, u64> = checker::INVARIANTS.iter().map(|name| (*name, 0)).collect();
    let (mut full, mut seeds_full, mut freed, mut seeds_freed) = (0, 0, 0, 0);
    for result in results {
        full += result.verdict.engine_full;
        seeds_full += u64::from(result.verdict.engine_full > 0);
        freed += result.verdict.freed_place_starts;
        seeds_freed += u64::from(result.verdict.freed_place_starts > 0);
        for (kind, count) in &result.faults_fired {
            *fired.entry(*kind).or_default() += count;
            *seeds_with.entry(*kind).or_default() += u64::from(*count > 0);
        }
        for (name, count) in &result.verdict.checks {
            *checks.entry(name).or_default() += count;
        }
    }
    println!("faults fired (total, in how many seeds):");
    for (kind, count) in &fired {
        println!("  {:<22} {:>9} {:>6}", kind.name(), count, seeds_with.get(kind).copied().unwrap_or(0));
    }
    println!("engine full (every run place taken, due slots waiting): {full} times in {seeds_full} seeds");
    println!("starts in a place freed by a result waiting for its write: {freed} times in {seeds_freed} seeds");
    println!("rare paths taken (total, in how many seeds):");
    for path in RarePath::ALL {
        let total: u64 = results.iter().map(|result| result.paths.get(&path).copied().unwrap_or(0)).sum();
        let seeds = results.iter().filter(|result| result.paths.get(&path).is_some_and(|count| *count > 0)).count();
        println!("  {:<34} {total:>9} {seeds:>6}", path.name());
    }
    println!("invariants checked:");
    for (name, count) in &checks {
        println!("  {name:<26} {count:>9}");
    }
}
