#!/usr/bin/env bash
# Every test systole has: formatting, lints (with the clock/sleep/rng bans), unit,
# property, store-conformance and store-differential, engine and end-to-end daemon tests;
# the SQL mutant check, the benchmark's smoke run; and beside them the simulator's half
# (scripts/test-sim.sh): its own tests, 500 seeds plus the regression list, 500 seeds of
# the cluster simulation (ADR 0017), and its mutant check.
set -euo pipefail
cd "$(dirname "$0")/.."

# The simulator's half (scripts/test-sim.sh) needs nothing installed and has its own
# target directory, so it starts first and runs beside the rest at the lowest CPU
# priority: it takes the cores the engine's tests leave idle while they wait on sockets,
# processes and real time, and yields them to the builds. Its output follows at the end.
# setsid makes it a process group, so a failure here stops the whole of it. A new session
# is also a new scheduler autogroup where the kernel has them (`sched_autogroup_enabled`),
# and autogroups share the CPU equally whatever their processes' nice values: the group's
# own nice is what lowers it (measured: at the group's nice 0, clippy took 331 s instead of 189).
sim_log="$(mktemp)"
setsid bash -c 'echo 19 > /proc/self/autogroup 2>/dev/null || true; exec nice -n 19 bash scripts/test-sim.sh' \
    > "$sim_log" 2>&1 &
sim_pid=$!
trap 'kill -- -"$sim_pid" 2>/dev/null || true; rm -f "$sim_log"' EXIT

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

# Before the store mutant check: it leaves the library to be rebuilt (a touch of
# src/lib.rs), and the benchmark builds on the one the tests just built (a minute saved).
echo "== the scale benchmark's harness runs (tiny sizes, once; the figures come from cargo bench --bench scale)"
cargo bench --locked --bench scale --profile dev -- --smoke

echo "== the store differential test catches every deliberate SQL bug in tests/store_mutants/"
bash scripts/check-store-mutants.sh

echo "== the simulator's half, which ran beside the above (scripts/test-sim.sh)"
sim_status=0
wait "$sim_pid" || sim_status=$?
cat "$sim_log"
exit "$sim_status"
