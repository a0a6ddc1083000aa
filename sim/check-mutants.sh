#!/usr/bin/env bash
# Applies each deliberate bug in sim/mutants/ to a copy of the engine and runs the simulator
# on it over up to SEEDS seeds: a mutant that every seed passes survived and fails the
# check, because a simulator that passes a broken engine checks nothing.
# The working tree is never touched. Usage: sim/check-mutants.sh [SEEDS] [MUTANT...]
#
# CI's run stops each mutant at its first catching seed (the decision, caught or not, in a
# fraction of the time). MUTANT_RATES=full runs every seed, prints each mutant's true catch
# rate (for docs/simulation.md) and also fails a thin catch: one caught by fewer than
# CATCH_PERCENT_MIN percent of the seeds would come from a side effect, not from an
# invariant aimed at the bug.
#
# Cheap by design: one copy of the tree, restored from the clean one before each patch,
# built at the checkout's own path (scripts/in-checkout.sh), and the `lean` profile (no
# debug info, incremental, no ThinLTO) so each build recompiles only what the patch
# touched in the engine and the simulator.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
seeds="${1:-300}"
shift || true
# A catch this rare would come from a side effect (judged in full runs only).
CATCH_PERCENT_MIN=1
full=0
[ "${MUTANT_RATES:-}" = "full" ] && full=1
stop=(--stop-after-failures 1)
[ "$full" = 1 ] && stop=()
work="$(mktemp -d)"
# The mutants' builds share the clean tree's artifact names, and cargo judges freshness by
# time: without the touch, the next build of the clean tree would call the last mutant's
# binary fresh and keep it.
trap 'rm -rf "$work"; touch "$repo/src/lib.rs" "$repo/sim/src/lib.rs" "$repo/sim/src/main.rs"' EXIT
# Builds share the simulator's own target directory and profile, so the dependencies CI
# built for its tests serve every mutant and only systole and the simulator rebuild. The
# last mutant's binary is left in sim/target/lean until the next build of the clean tree.
export CARGO_TARGET_DIR="$repo/sim/target"
if [ "$#" -gt 0 ]; then
    patches=()
    for name in "$@"; do patches+=("$repo/sim/mutants/$name.patch"); done
else
    patches=("$repo"/sim/mutants/*.patch)
fi
weak=0
start_all=$SECONDS
for patch in "${patches[@]}"; do
    name="$(basename "$patch" .patch)"
    rm -rf "$work/tree"
    mkdir -p "$work/tree"
    (cd "$repo" && tar --exclude=./target --exclude=./sim/target --exclude=./fuzz --exclude=./.git -cf - .) | tar -xf - -C "$work/tree"
    if ! (cd "$work/tree" && patch -p1 --quiet --forward < "$patch"); then
        echo "STALE     $name: the patch no longer applies; update it to the current engine" >&2
        exit 2
    fi
    start=$SECONDS
    bash "$repo/scripts/in-checkout.sh" "$work/tree" sim cargo build --profile lean --locked --quiet
    built=$((SECONDS - start))
    # A patch may name the simulation that must catch it (`# sim-command: cluster`).
    command="$(sed -n 's/^# sim-command: *\([a-z-]*\).*/\1/p' "$patch" | head -n1)"
    case "${command:-run}" in
        run) output="$("$CARGO_TARGET_DIR/lean/systole-sim" run --seeds "$seeds" --regressions /dev/null "${stop[@]}" 2>&1 || true)" ;;
        cluster) output="$("$CARGO_TARGET_DIR/lean/systole-sim" cluster --seeds "$seeds" --regressions /dev/null "${stop[@]}" 2>&1 || true)" ;;
        *) echo "BROKEN    $name: unknown sim-command ${command}" >&2; exit 2 ;;
    esac
    failed="$(printf '%s\n' "$output" | sed -n 's/^[0-9]* passed, \([0-9]*\) failed$/\1/p' | tail -n1)"
    failed="${failed:-0}"
    ran="$(printf '%s\n' "$output" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\1 \2/p' | tail -n1 | awk '{ print $1 + $2 }')"
    ran="${ran:-$seeds}"
    # The most common way it was caught, as the run's summary names it.
    first="$(printf '%s\n' "$output" | grep -o 'FAILED: invariant `[^`]*`\|PANICKED' | sort | uniq -c | sort -rn | head -n1 | sed 's/^ *//' || true)"
    rate="$(awk -v f="$failed" -v s="$ran" 'BEGIN { printf "%.1f", 100 * f / (s > 0 ? s : 1) }')"
    timing="build ${built}s, run $((SECONDS - start - built))s"
    if [ "$failed" -eq 0 ]; then
        echo "SURVIVED  $name: $seeds seeds passed with this bug in the engine ($timing)"
        weak=$((weak + 1))
    elif [ "$full" = 1 ] && [ $((failed * 100)) -lt $((seeds * CATCH_PERCENT_MIN)) ]; then
        echo "THIN      $name: caught by $failed of $seeds seeds ($rate%), under ${CATCH_PERCENT_MIN}% ($timing): $first"
        weak=$((weak + 1))
    else
        echo "caught    $name: $failed of the $ran seeds run ($rate%; $timing): $first"
    fi
done
echo "mutant check: ${#patches[@]} mutants, $weak survived or caught thinly, $((SECONDS - start_all)) s"
[ "$weak" -eq 0 ]
