#!/usr/bin/env bash
# Applies each deliberate bug in sim/mutants/ to a copy of the engine, runs the simulator
# on it, and requires it to fail: a simulator that passes a broken engine checks nothing.
# The working tree is never touched. Usage: sim/check-mutants.sh [SEEDS]
#
# Cheap by design: one copy of the tree, restored from the clean one before each patch;
# the `mutant` profile (no debug info, incremental) so each build recompiles only the
# engine and the simulator; and `--fail-fast`, since one failing seed is a catch. Each
# line says how many seeds it took.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
seeds="${1:-600}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# Builds share one target directory beside the simulator's, so only systole rebuilds.
export CARGO_TARGET_DIR="$repo/sim/target/mutants"
survived=0
start_all=$SECONDS
for patch in "$repo"/sim/mutants/*.patch; do
    name="$(basename "$patch" .patch)"
    rm -rf "$work/tree"
    mkdir -p "$work/tree"
    (cd "$repo" && tar --exclude=./target --exclude=./sim/target --exclude=./fuzz --exclude=./.git -cf - .) | tar -xf - -C "$work/tree"
    if ! (cd "$work/tree" && patch -p1 --quiet --forward < "$patch"); then
        echo "STALE     $name: the patch no longer applies; update it to the current engine" >&2
        exit 2
    fi
    start=$SECONDS
    (cd "$work/tree/sim" && cargo build --profile mutant --locked --quiet)
    built=$((SECONDS - start))
    if output="$("$CARGO_TARGET_DIR/mutant/systole-sim" run --seeds "$seeds" --regressions /dev/null --fail-fast 2>&1)"; then
        echo "SURVIVED  $name: $seeds seeds passed with this bug in the engine"
        survived=$((survived + 1))
    else
        first="$(printf '%s\n' "$output" | grep -m1 'FAILED\|PANICKED' || true)"
        echo "caught    $name ($(printf '%s\n' "$output" | tail -n1); build ${built}s, run $((SECONDS - start - built))s): $first"
    fi
done
echo "mutant check: $(ls "$repo"/sim/mutants/*.patch | wc -l) mutants, $survived survived, $((SECONDS - start_all)) s"
[ "$survived" -eq 0 ]
