#!/usr/bin/env bash
# Runs a command on a mutated copy of the tree as if the copy were the checkout: the
# copy's src/ is mounted over the checkout's in a private mount namespace, which nothing
# outside it sees and which ends with the command, so the checkout itself is never touched.
# rustc takes a crate at another path for another crate: built in the copy, the engine
# recompiled from scratch (the simulator's first mutant 115 s in a CI run, the store's
# 63 s); at the checkout's path a build recompiles only what the patch changed. Where mount
# namespaces are refused, the command runs in the copy, as before (ADR 0030).
#
# With --target T, T is mounted over DIR's target/ as well, so that builds running at once
# each write their own copy of it: rustc keeps a crate's incremental state only for the
# paths it was built with, and a copy built at its own path recompiled the whole engine
# (41 s) where at the original's path it recompiles what the patch changed.
# Usage: scripts/in-checkout.sh [--target T] COPY DIR COMMAND... (DIR: where to run, in tree
# terms: ".", "sim")
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
target=""
if [ "${1:-}" = "--target" ]; then
    target="$2"
    shift 2
fi
copy="$1"
dir="$2"
shift 2
# --map-root-user lets a user who is not root have a mount namespace of their own.
if unshare --map-root-user --mount true 2>/dev/null; then
    exec unshare --map-root-user --mount --propagation private -- bash -c \
        'mount --bind "$1/src" "$2/src" && if [ -n "$4" ]; then mkdir -p "$2/$3/target" && mount --bind "$4" "$2/$3/target"; fi && cd "$2/$3" && shift 4 && exec "$@"' \
        _ "$copy" "$repo" "$dir" "$target" "$@"
fi
cd "$copy/$dir"
if [ -n "$target" ]; then
    export CARGO_TARGET_DIR="$target"
fi
exec "$@"
