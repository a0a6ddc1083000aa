//! The replay key works: the same seed gives the same trace hash in separate processes,
//! and different seeds give different traces.

use std::process::Command;

fn hash(seed: u64) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_systole-sim"))
        .args(["hash", "--seed", &seed.to_string()])
        .output()
        .expect("run systole-sim");
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).expect("utf-8");
    let last = text.lines().last().expect("a line").to_owned();
    assert_eq!(last.len(), 16, "16 hex digits: {last:?}");
    assert!(last.chars().all(|c| c.is_ascii_hexdigit()));
    last
}

#[test]
fn same_seed_same_hash_across_processes() {
    for seed in [0, 17, 4_242] {
        assert_eq!(hash(seed), hash(seed), "seed {seed} must replay bit for bit");
    }
}

#[test]
fn different_seeds_differ() {
    let hashes: std::collections::BTreeSet<String> = (100..110).map(hash).collect();
    assert_eq!(hashes.len(), 10);
}

#[test]
fn replay_prints_a_timeline_and_the_verdict() {
    let output = Command::new(env!("CARGO_BIN_EXE_systole-sim"))
        .args(["replay", "--seed", "5"])
        .output()
        .expect("run systole-sim");
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).expect("utf-8");
    assert!(text.starts_with("seed: 5\n"), "options first");
    assert!(text.contains("run started"), "engine events are in the timeline");
    assert!(text.lines().last().is_some_and(|line| line.starts_with("seed 5 passed; trace hash ")));
}

#[test]
fn run_ends_with_the_count_line() {
    let output = Command::new(env!("CARGO_BIN_EXE_systole-sim"))
        .args(["run", "--seeds", "6", "--from", "40", "--jobs", "2", "--regressions", "/dev/null"])
        .output()
        .expect("run systole-sim");
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).expect("utf-8");
    assert_eq!(text.lines().last(), Some("6 passed, 0 failed"));
}
