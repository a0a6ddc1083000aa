#!/usr/bin/env bash
# The simulator's half of the test command (scripts/test.sh runs it beside the engine's
# half): its format, clippy and tests, 500 seeds plus the regression list, 500 seeds of
# the cluster simulation (ADR 0017), and its mutant check.
set -euo pipefail
cd "$(dirname "$0")/.."

# The simulator builds once, in its `lean` profile (sim/Cargo.toml): its clippy, its tests,
# the seed runs and every mutant's rebuild share those dependencies.
echo "== simulator: format, clippy, tests"
(cd sim && cargo fmt --check && cargo clippy --locked --profile lean --all-targets -- -D warnings \
    && cargo test --locked --profile lean && cargo build --locked --profile lean)

echo "== simulator: 500 seeds plus the regression list"
(cd sim && ./target/lean/systole-sim run --seeds 500 --stats)

echo "== cluster simulation: 500 seeds of three nodes with leases, fencing and node faults"
(cd sim && ./target/lean/systole-sim cluster --seeds 500 --stats)

echo "== simulator catches every deliberate engine bug in sim/mutants/"
# Up to 300 seeds each, stopping at the first that catches it; the catch rates (and the
# check that none is thin) come from `MUTANT_RATES=full` runs, kept in docs/simulation.md.
bash sim/check-mutants.sh 300
