#!/usr/bin/env bash
# Vision-language side-by-side benchmark: our zephon (Rust CLI) vs Grain + Pillow, same captioned
# photos and pipeline, run one after another in alternating rounds. See benches/peers/README.md.
#
#   bash benches/peers/run_vlm.sh [--quick] [--no-build] [bench_vlm.py options]
#
#   --quick      40 steps instead of 172 (smoke test; throughput not meaningful)
#   --no-build   do not run cargo; use target/release/zephon as it is (or $ZEPHON_BIN)
#   other options go to bench_vlm.py (e.g. --rounds 3, --worker-kinds thread, --layout vit,
#   --no-extras, --quiet-wait 0); see: .../venv/bin/python benches/peers/bench_vlm.py --help
#
# Writes benches/peers/results/vlm-latest.{json,md} (raw logs, specs, per-run JSON in results/raw/vlm/).
# Environment: VENV (default ~/.cache/zephon-peers/venv), ZEPHON_TESTDATA, ZEPHON_BIN, CARGO_TARGET_DIR.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
VENV=${VENV:-$HOME/.cache/zephon-peers/venv}
export VENV

BUILD=1
PASS=()
while [[ $# -gt 0 ]]; do
    case $1 in
        --no-build) BUILD=0 ;;
        -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) PASS+=("$1") ;;
    esac
    shift
done

log() { printf 'run_vlm.sh: %s\n' "$*" >&2; }

# 1. Peer venv (pinned, idempotent; Pillow is in requirements.txt).
bash "$HERE/setup_venv.sh"
PY=$VENV/bin/python

# 2. Test data (fast no-op when present and current): images/captioned, tokenizers/gpt2.
(cd "$REPO" && bash scripts/fetch-testdata.sh)

# 3. Our CLI (the vision feature is on by default in zephon-cli).
mkdir -p "$HERE/results/raw/vlm"
ZEPHON_BIN=${ZEPHON_BIN:-${CARGO_TARGET_DIR:-$REPO/target}/release/zephon}
if [[ $BUILD == 1 ]]; then
    log "cargo build --release -p zephon-cli (log: benches/peers/results/raw/vlm/cargo-build.log)"
    if ! (cd "$REPO" && cargo build --release -p zephon-cli) >"$HERE/results/raw/vlm/cargo-build.log" 2>&1; then
        tail -n 20 "$HERE/results/raw/vlm/cargo-build.log" >&2 || true
        log "cargo build failed"
        exit 1
    fi
fi

# 4. Measure, one system after another, and report.
exec "$PY" "$HERE/bench_vlm.py" --python "$PY" --zephon-bin "$ZEPHON_BIN" "${PASS[@]}"
