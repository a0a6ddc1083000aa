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
# Cheap by design: the mutants are built at the checkout's own path (scripts/in-checkout.sh)
# in the `lean` profile (no debug info, incremental, no ThinLTO), so each build recompiles
# only what the patch touched in the engine and the simulator, and in MUTANT_LANES lanes
# at once (one a core by default), each with its own copy of the clean build's target
# directory: a single build leaves a core idle while rustc checks the engine's types and
# while it links. The clean build itself is never overwritten.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
seeds="${1:-300}"
shift || true
# A catch this rare would come from a side effect (judged in full runs only).
CATCH_PERCENT_MIN=1
# More lanes than this would only copy more target directories: each build is itself
# parallel in code generation.
LANES_MAX=4
lanes="${MUTANT_LANES:-$(nproc 2>/dev/null || echo 1)}"
if ! [[ "$lanes" =~ ^[0-9]+$ ]] || [ "$lanes" -lt 1 ]; then
    echo "MUTANT_LANES must be a whole number of at least 1, not '$lanes'" >&2
    exit 2
fi
[ "$lanes" -gt "$LANES_MAX" ] && lanes=$LANES_MAX
full=0
[ "${MUTANT_RATES:-}" = "full" ] && full=1
stop=(--stop-after-failures 1)
[ "$full" = 1 ] && stop=()
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
if [ "$#" -gt 0 ]; then
    patches=()
    for name in "$@"; do patches+=("$repo/sim/mutants/$name.patch"); done
else
    # Mutants of one file one after the other: a lane's next build then recompiles the code
    # its last one touched anyway, instead of that code and a second part of the engine
    # (a driver mutant's rebuild is the slow kind, a pure function's a fast one). A `+++`
    # line may end in a tab and a date, hence the cut.
    mapfile -t patches < <(for patch in "$repo"/sim/mutants/*.patch; do
        printf '%s\t%s\n' "$(sed -n 's|^+++ b/||p' "$patch" | head -n1 | cut -f1)" "$patch"
    done | sort | cut -f2)
fi

# The clean build every lane starts from: the dependencies CI built for the simulator's
# tests serve every mutant, and only systole and the simulator rebuild.
(cd "$repo/sim" && cargo build --profile lean --locked --quiet)

printf '%s\n' "${patches[@]}" > "$work/queue"
echo 0 > "$work/next"
mkdir -p "$work/results"

# One mutant in one lane; prints its verdict line and records it as results/INDEX.
check_one() {
    local index="$1" patch="$2" lane_dir="$3"
    local name tree built start command output failed ran first rate timing verdict
    name="$(basename "$patch" .patch)"
    tree="$lane_dir/tree"
    rm -rf "$tree"
    mkdir -p "$tree"
    (cd "$repo" && tar --exclude=./target --exclude=./sim/target --exclude=./fuzz --exclude=./.git -cf - .) | tar -xf - -C "$tree"
    if ! (cd "$tree" && patch -p1 --quiet --forward < "$patch"); then
        verdict="STALE     $name: the patch no longer applies; update it to the current engine"
    else
        start=$SECONDS
        if ! CARGO_TARGET_DIR="$repo/sim/target" bash "$repo/scripts/in-checkout.sh" --target "$lane_dir/target" "$tree" sim \
            cargo build --profile lean --locked --quiet; then
            verdict="BROKEN    $name: the mutated engine does not build"
        else
            built=$((SECONDS - start))
            # A patch may name the simulation that must catch it (`# sim-command: cluster`).
            command="$(sed -n 's/^# sim-command: *\([a-z-]*\).*/\1/p' "$patch" | head -n1)"
            case "${command:-run}" in
                run | cluster)
                    output="$("$lane_dir/target/lean/systole-sim" "${command:-run}" --seeds "$seeds" --regressions /dev/null "${stop[@]}" 2>&1 || true)" ;;
                *) output="" ;;
            esac
            if [ -z "$output" ]; then
                verdict="BROKEN    $name: unknown sim-command ${command}"
            else
                failed="$(printf '%s\n' "$output" | sed -n 's/^[0-9]* passed, \([0-9]*\) failed$/\1/p' | tail -n1)"
                failed="${failed:-0}"
                ran="$(printf '%s\n' "$output" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\1 \2/p' | tail -n1 | awk '{ print $1 + $2 }')"
                ran="${ran:-$seeds}"
                # The most common way it was caught, as the run's summary names it.
                first="$(printf '%s\n' "$output" | grep -o 'FAILED: invariant `[^`]*`\|PANICKED' | sort | uniq -c | sort -rn | head -n1 | sed 's/^ *//' || true)"
                rate="$(awk -v f="$failed" -v s="$ran" 'BEGIN { printf "%.1f", 100 * f / (s > 0 ? s : 1) }')"
                timing="build ${built}s, run $((SECONDS - start - built))s"
                if [ "$failed" -eq 0 ]; then
                    verdict="SURVIVED  $name: $seeds seeds passed with this bug in the engine ($timing)"
                elif [ "$full" = 1 ] && [ $((failed * 100)) -lt $((seeds * CATCH_PERCENT_MIN)) ]; then
                    verdict="THIN      $name: caught by $failed of $seeds seeds ($rate%), under ${CATCH_PERCENT_MIN}% ($timing): $first"
                else
                    verdict="caught    $name: $failed of the $ran seeds run ($rate%; $timing): $first"
                fi
            fi
        fi
    fi
    echo "$verdict"
    echo "$verdict" > "$work/results/$index"
}

# A lane takes the next mutant off the queue until none is left (a counter under flock, so
# a slow mutant never holds the others back behind it).
lane() {
    local lane_dir="$work/lane-$1" index patch
    mkdir -p "$lane_dir/target"
    cp -a "$repo/sim/target/lean" "$lane_dir/target/"
    while true; do
        index="$(flock "$work/next" bash -c 'n=$(cat "$1"); echo $((n + 1)) > "$1"; echo "$n"' _ "$work/next")"
        patch="$(sed -n "$((index + 1))p" "$work/queue")"
        [ -n "$patch" ] || break
        check_one "$index" "$patch" "$lane_dir"
    done
}

start_all=$SECONDS
pids=()
for ((i = 0; i < lanes; i++)); do
    lane "$i" &
    pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done

weak=0
broken=0
for ((i = 0; i < ${#patches[@]}; i++)); do
    verdict="$(cat "$work/results/$i" 2>/dev/null || echo "BROKEN    $(basename "${patches[$i]}" .patch): no verdict")"
    case "$verdict" in
        caught*) ;;
        SURVIVED* | THIN*) weak=$((weak + 1)) ;;
        *) broken=$((broken + 1)); echo "$verdict" >&2 ;;
    esac
done
echo "mutant check: ${#patches[@]} mutants in $lanes lanes, $weak survived or caught thinly, $broken stale or broken, $((SECONDS - start_all)) s"
[ "$weak" -eq 0 ] && [ "$broken" -eq 0 ]
