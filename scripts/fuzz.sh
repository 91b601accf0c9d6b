#!/usr/bin/env bash
# Runs every fuzz target for a fixed time, starting from the committed seed corpora in
# fuzz/corpus/ (written by `cd fuzz && cargo run --release --bin make-seeds`). New interesting
# inputs go to a scratch folder (FUZZ_WORK, default ~/.cache/zephon-fuzz-corpus), so a run never
# dirties the checkout; copy inputs worth keeping into fuzz/corpus/ by hand. cargo-fuzz needs
# nightly flags; on stable, RUSTC_BOOTSTRAP=1 lets it pass them.
#
#   bash scripts/fuzz.sh [SECONDS_PER_TARGET]     (default 20)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
SECONDS_PER_TARGET=${1:-20}
export RUSTC_BOOTSTRAP=1
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked --quiet
fi
WORK=${FUZZ_WORK:-${XDG_CACHE_HOME:-$HOME/.cache}/zephon-fuzz-corpus}
cd fuzz
# Its own target folder: sanitizer builds must not touch the main build's artifacts.
export CARGO_TARGET_DIR=${FUZZ_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/zephon-fuzz-target}
for target in checkpoint restore jsonl spec image; do
    echo "== fuzz $target (${SECONDS_PER_TARGET} s)"
    work="$WORK/$target"
    mkdir -p "$work"
    log=$(mktemp)
    # -rss_limit_mb: a target that allocates what an input claims would show here.
    if ! cargo fuzz run "$target" "$work" "corpus/$target" -- \
        -max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 >"$log" 2>&1; then
        tail -n 60 "$log"
        echo "fuzz.sh: target $target failed (crash inputs are under fuzz/artifacts/$target)" >&2
        exit 1
    fi
    grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$log" || tail -n 3 "$log"
    rm -f "$log"
done
