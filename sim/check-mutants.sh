#!/usr/bin/env bash
# Applies each deliberate bug in sim/mutants/ to the engine, runs the simulator, and
# requires it to fail: a simulator that passes a broken engine checks nothing.
# Usage: sim/check-mutants.sh [SEEDS]   (the tree must have no uncommitted engine changes)
set -euo pipefail
cd "$(dirname "$0")/.."
seeds="${1:-300}"
if ! git diff --quiet -- src; then
    echo "check-mutants: src/ has uncommitted changes; commit or stash them first" >&2
    exit 2
fi
current=""
restore() { if [ -n "$current" ]; then git apply -R "$current" || true; fi; }
trap restore EXIT
survived=0
for patch in sim/mutants/*.patch; do
    name="$(basename "$patch" .patch)"
    git apply "$patch"
    current="$patch"
    (cd sim && cargo build --release --quiet)
    if output="$(cd sim && ./target/release/systole-sim run --seeds "$seeds" --regressions /dev/null 2>&1)"; then
        echo "SURVIVED  $name: $seeds seeds passed with this bug in the engine"
        survived=$((survived + 1))
    else
        first="$(printf '%s\n' "$output" | grep -m1 'FAILED\|PANICKED' || true)"
        summary="$(printf '%s\n' "$output" | tail -n1)"
        echo "caught    $name: $summary; first: $first"
    fi
    git apply -R "$patch"
    current=""
done
(cd sim && cargo build --release --quiet)
[ "$survived" -eq 0 ]
