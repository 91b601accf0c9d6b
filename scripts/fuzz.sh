#!/usr/bin/env bash
# Runs every fuzz target, starting from the committed seed corpora in fuzz/corpus/ (written by
# `cd fuzz && cargo run --release --bin make-seeds`). cargo-fuzz needs nightly flags; on
# stable, RUSTC_BOOTSTRAP=1 lets it pass them.
#
#   bash scripts/fuzz.sh [SECONDS_PER_TARGET]   explore: random seeds, a fixed time per target
#                                              (default 20); new inputs go to a scratch folder
#                                              (FUZZ_WORK, default ~/.cache/zephon-fuzz-corpus)
#                                              that grows across runs; copy inputs worth keeping
#                                              into fuzz/corpus/ by hand
#   bash scripts/fuzz.sh --fixed                 CI: seed 1, a fixed number of inputs per target,
#                                              from the committed corpora only, so that a run
#                                              here and in CI try the same inputs and a result
#                                              does not depend on luck or machine speed
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
FIXED=false
if [ "${1:-}" = "--fixed" ]; then
    FIXED=true
    shift
fi
SECONDS_PER_TARGET=${1:-20}
export RUSTC_BOOTSTRAP=1
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked --quiet
fi
WORK=${FUZZ_WORK:-${XDG_CACHE_HOME:-$HOME/.cache}/zephon-fuzz-corpus}
if $FIXED; then
    WORK=$(mktemp -d)
    trap 'rm -rf "$WORK"' EXIT
fi
cd fuzz
# Its own target folder: sanitizer builds must not touch the main build's artifacts.
export CARGO_TARGET_DIR=${FUZZ_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/zephon-fuzz-target}
# Inputs per target in --fixed mode: about 20 s each on two cores.
declare -A RUNS=([checkpoint]=1000000 [restore]=30000 [jsonl]=6000 [spec]=100000 [image]=12000)
for target in checkpoint restore jsonl spec image; do
    if $FIXED; then
        budget=(-seed=1 -runs="${RUNS[$target]}")
        echo "== fuzz $target (seed 1, ${RUNS[$target]} inputs)"
    else
        budget=(-max_total_time="$SECONDS_PER_TARGET")
        echo "== fuzz $target (${SECONDS_PER_TARGET} s)"
    fi
    work="$WORK/$target"
    mkdir -p "$work"
    log=$(mktemp)
    # -rss_limit_mb: a target that allocates what an input claims would show here.
    if ! cargo fuzz run "$target" "$work" "corpus/$target" -- \
        "${budget[@]}" -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 >"$log" 2>&1; then
        tail -n 60 "$log"
        echo "fuzz.sh: target $target failed (crash inputs are under fuzz/artifacts/$target)" >&2
        exit 1
    fi
    grep -E "stat::number_of_executed_units|stat::average_exec_per_sec|stat::peak_rss_mb" "$log" || tail -n 3 "$log"
    rm -f "$log"
done
