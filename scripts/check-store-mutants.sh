#!/usr/bin/env bash
# Applies each deliberate bug in tests/store_mutants/ to a copy of the SQL statements SQLite
# runs (src/store/sql_store.rs, shared with PostgreSQL; src/store/sqlite_writes.rs and
# src/store/sqlite_dispatch_writer.rs, its direct writer's: ADR 0033, 0037; its index of
# recent deliveries in src/store/sqlite.rs and src/store/delivered_index.rs: ADR 0066), runs the
# store differential test (memory and SQLite on seeded write sequences) on it, and
# prints the share of sequences that caught it. The simulator runs on the memory store, so
# this is what stands between a wrong SQL statement and production (ADR 0016). A mutant
# caught by fewer than CATCH_PERCENT_MIN percent of the sequences, or by none, fails.
# The working tree is never touched. Usage: scripts/check-store-mutants.sh [MUTANT...];
# MUTANT_RATES=full compares all sequences and prints each mutant's true catch rate.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
CATCH_PERCENT_MIN=1
# The test stops at the divergences that pass the rate (1 % of its 48 sequences: 1); its
# true rate over all of them is MUTANT_RATES=full's.
stop_after=(env STORE_DIFF_STOP_AFTER=1)
[ "${MUTANT_RATES:-}" = "full" ] && stop_after=()
work="$(mktemp -d)"
# The mutants' builds share the clean tree's artifact names, and cargo judges freshness by
# time: without the touch, the clean tree's next test run would take the last mutant's
# build for fresh.
trap 'rm -rf "$work"; touch "$repo/src/lib.rs"' EXIT
# The main target directory: its dependencies are built already, so only systole rebuilds.
export CARGO_TARGET_DIR="$repo/target"
if [ "$#" -gt 0 ]; then
    patches=()
    for name in "$@"; do patches+=("$repo/tests/store_mutants/$name.patch"); done
else
    patches=("$repo"/tests/store_mutants/*.patch)
fi
weak=0
start_all=$SECONDS
for patch in "${patches[@]}"; do
    name="$(basename "$patch" .patch)"
    rm -rf "$work/tree"
    mkdir -p "$work/tree"
    (cd "$repo" && tar --exclude=./target --exclude=./sim --exclude=./fuzz --exclude=./.git -cf - .) | tar -xf - -C "$work/tree"
    if ! (cd "$work/tree" && patch -p1 --quiet --forward < "$patch"); then
        echo "STALE     $name: the patch no longer applies; update it to the current store" >&2
        exit 2
    fi
    start=$SECONDS
    # At the checkout's path (scripts/in-checkout.sh): only what the patch changed rebuilds.
    output="$("${stop_after[@]}" bash "$repo/scripts/in-checkout.sh" "$work/tree" . cargo test --locked --quiet \
        --test store_differential memory_and_sqlite_agree_on_random_write_sequences -- --nocapture 2>&1 || true)"
    line="$(printf '%s\n' "$output" | grep -o 'diverged in [0-9]* of [0-9]* sequences' | head -n1 || true)"
    if [ -z "$line" ]; then
        printf '%s\n' "$output" | tail -n 20 >&2
        echo "BROKEN    $name: the differential test did not report (see above)" >&2
        exit 2
    fi
    failed="$(printf '%s\n' "$line" | awk '{ print $3 }')"
    total="$(printf '%s\n' "$line" | awk '{ print $5 }')"
    rate="$(awk -v f="$failed" -v s="$total" 'BEGIN { printf "%.1f", 100 * f / s }')"
    # The first divergence, as the test names it.
    first="$(printf '%s\n' "$output" | grep -m1 -E '^  (memory|sqlite)' | sed 's/^ *//' | cut -c1-100 || true)"
    timing="$((SECONDS - start))s"
    if [ "$failed" -eq 0 ]; then
        echo "SURVIVED  $name: $total sequences agreed with this bug in the SQL ($timing)"
        weak=$((weak + 1))
    elif [ $((failed * 100)) -lt $((total * CATCH_PERCENT_MIN)) ]; then
        echo "THIN      $name: caught by $failed of $total sequences ($rate%), under ${CATCH_PERCENT_MIN}% ($timing)"
        weak=$((weak + 1))
    else
        echo "caught    $name: $failed of the $total sequences run ($rate%; $timing): $first"
    fi
done
echo "store mutant check: ${#patches[@]} mutants, $weak survived or caught thinly, $((SECONDS - start_all)) s"
[ "$weak" -eq 0 ]
