//! What a seed's run says: its verdict, and on failure everything needed to reproduce it.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::checker::{self, Verdict};
use crate::faults::FaultKind;
use crate::harness::{run_seed, Outcome};
use crate::trace::{self, Entry};
use crate::world::RarePath;

/// Events shown before a violation in a failure report.
const FAILURE_CONTEXT_EVENTS: usize = 50;

pub struct SeedResult {
    pub seed: u64,
    pub verdict: Verdict,
    pub faults_fired: BTreeMap<FaultKind, u64>,
    /// How often each rare path was taken.
    pub paths: BTreeMap<RarePath, u64>,
    /// Filled only for failures: the report to print.
    pub failure: Option<String>,
    /// How much simulated time the seed covered (its safety and liveness phases).
    pub simulated: std::time::Duration,
}

/// Runs and checks one seed, turning a panic into a failure with its message.
pub fn run_and_check(seed: u64) -> SeedResult {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_seed(seed)));
    match outcome {
        Ok(outcome) => judge(seed, &outcome),
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "a panic without a message".to_owned());
            let report = format!("seed {seed} PANICKED: {message}\n{}", reproduce(seed));
            SeedResult {
                seed,
                verdict: Verdict::default(),
                faults_fired: BTreeMap::new(),
                paths: BTreeMap::new(),
                failure: Some(report),
                simulated: std::time::Duration::ZERO,
            }
        }
    }
}

fn judge(seed: u64, outcome: &Outcome) -> SeedResult {
    let verdict = checker::check(&outcome.options, &outcome.entries);
    let failure = verdict.violation.as_ref().map(|violation| {
        let mut out = String::new();
        let _ = writeln!(out, "seed {seed} FAILED: invariant `{}` violated", violation.invariant);
        let _ = writeln!(out, "  {}", violation.message);
        let _ = writeln!(out, "  at simulated +{:.3}s (wall {})", violation.elapsed.as_secs_f64(), violation.wall);
        let _ = writeln!(out, "commit: {}", commit());
        // Hashed only for a failure: a passing seed's hash is asked for by `hash` (5 % of a
        // sweep's time when every seed was hashed).
        let _ = writeln!(out, "trace hash: {}", trace::hash(&outcome.entries));
        let _ = writeln!(out, "options:");
        for line in outcome.options.describe().lines() {
            let _ = writeln!(out, "  {line}");
        }
        let first = violation.index.saturating_sub(FAILURE_CONTEXT_EVENTS - 1);
        let _ = writeln!(out, "last {} events:", violation.index + 1 - first);
        for entry in &outcome.entries[first..=violation.index] {
            let _ = writeln!(out, "  {}", trace::describe(entry));
        }
        out.push_str(&reproduce(seed));
        out
    });
    let simulated = outcome.options.safety + outcome.options.liveness;
    let (faults_fired, paths) = (outcome.faults_fired.clone(), outcome.paths.clone());
    SeedResult { seed, verdict, faults_fired, paths, failure, simulated }
}

impl SeedResult {
    /// The invariant this seed broke, `panicked` for a panic, `None` when it passed.
    pub fn failed_invariant(&self) -> Option<&'static str> {
        self.failure.as_ref()?;
        Some(self.verdict.violation.as_ref().map_or("panicked", |violation| violation.invariant))
    }
}

fn reproduce(seed: u64) -> String {
    format!("reproduce with: (cd sim && cargo run --release -- replay --seed {seed})\n")
}

/// The commit the simulator was built from, as git reports it now.
pub fn commit() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|output| output.status.success())
        .and_then(|output| String::from_utf8(output.stdout).ok())
        .map(|text| text.trim().to_owned())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// A readable timeline of a whole run.
pub fn timeline(seed: u64) -> (String, bool) {
    let outcome = run_seed(seed);
    let result = judge(seed, &outcome);
    let mut out = String::new();
    let _ = writeln!(out, "{}", outcome.options.describe());
    for entry in &outcome.entries {
        let _ = writeln!(out, "{}", trace::describe(entry));
    }
    let passed = result.failure.is_none();
    match &result.failure {
        Some(report) => out.push_str(report),
        None => {
            let _ = writeln!(out, "seed {seed} passed; trace hash {}", trace::hash(&outcome.entries));
        }
    }
    (out, passed)
}

/// Entries alone, for tests of determinism.
pub fn entries(seed: u64) -> Vec<Entry> {
    run_seed(seed).entries
}
