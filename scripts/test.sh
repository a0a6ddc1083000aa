#!/usr/bin/env bash
# Every test systole has: formatting, lints (with the clock/sleep/rng bans), unit,
# property, store-conformance and store-differential, engine and end-to-end daemon tests;
# the SQL mutant check; then the simulator's own tests, 500 seeds plus the regression
# list, 500 seeds of the cluster simulation (ADR 0017), and its mutant check.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== test dependencies (installed only when missing)"
bash scripts/install-test-deps.sh

echo "== every deliberate bug (sim/mutants/, tests/store_mutants/) still applies to the code"
# In seconds, before the builds: a stale patch would otherwise fail the run at its end.
stale=0
for patch in sim/mutants/*.patch tests/store_mutants/*.patch; do
    if ! patch -p1 --dry-run --quiet --forward < "$patch" > /dev/null; then
        echo "STALE $patch: the patch no longer applies; update it to the current code" >&2
        stale=1
    fi
done
[ "$stale" = 0 ]

echo "== format"
cargo fmt --all --check

echo "== clippy (disallowed clock, sleep and RNG calls outside the real adapters)"
cargo clippy --locked --all-targets -- -D warnings

echo "== tests"
cargo test --locked

echo "== the store differential test catches every deliberate SQL bug in tests/store_mutants/"
bash scripts/check-store-mutants.sh

echo "== the scale benchmark's harness runs (tiny sizes, once; the figures come from cargo bench --bench scale)"
cargo bench --locked --bench scale --profile dev -- --smoke

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
