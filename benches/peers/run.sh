#!/usr/bin/env bash
# Side-by-side benchmark: our zephon (Rust CLI, and the same loader through the Python wheel
# zephon_rs) vs Zephon 0.2.0 (PyPI) vs Google Grain, same corpora, tokenizer and settings, run one
# after another. See benches/peers/README.md.
#
#   bash benches/peers/run.sh [--quick] [--zephon-only | --peers-only | --systems LIST] [--no-build]
#        [--tokenizer FILE] [--corpus-a PATH] [--corpus-b PATH] [--text-field NAME]
#        [--eos TOKEN] [--pad-id N] [--out-dir DIR] [bench_peers.py options]
#
#   --quick        30 steps instead of 200 (checkpoint still at step 20)
#   --zephon-only  only our CLI          --peers-only  only Zephon 0.2.0 and Grain
#   --systems LIST comma list among cli, zephon_rs, zephon-0.2.0, grain (e.g. --systems cli,zephon_rs)
#   --no-build     do not run cargo or maturin; use target/release/zephon as it is (or $ZEPHON_BIN)
#                  and the zephon_rs installed in the peer venv
#   Inputs (default: the test data's corpora A and B and the GPT-2 tokenizer.json):
#   --tokenizer FILE   an HF tokenizer.json
#   --corpus-a PATH    a .jsonl file or a folder of *.jsonl shards (also --corpus-b)
#   --text-field NAME  the JSONL field holding the text (default: text)
#   --eos TOKEN        appended to every document (default: <|endoftext|>, <|end_of_text|>, </s>,
#                      ... whichever the tokenizer has as a special token; refused if none)
#   --pad-id N         padding id (default: the EOS id)
#   --out-dir DIR      where latest.{json,md} and raw/ go (default: benches/peers/results)
#   other options go to bench_peers.py (e.g. --mix docs, --worker-kinds thread, --quiet-wait 0);
#   see: .../venv/bin/python benches/peers/bench_peers.py --help
#
# Token counts and the peers' document weights are computed for the given corpora and tokenizer
# (cached in ~/.cache/zephon-peers/token_stats/ by file paths, sizes, mtimes and tokenizer sha256).
# Writes results/latest.{json,md} (raw logs and per-run JSON in results/raw/) and prints, last,
# the ratios ours / each peer and zephon_rs / each peer and / the CLI. The test data is fetched
# unless all three inputs are given. The zephon_rs wheel is built with maturin (the one in
# ~/.cache/zephon-py/tools if present, else maturin 1.16.0 in the peer venv) and installed into
# the peer venv.
# Environment: VENV (default ~/.cache/zephon-peers/venv), ZEPHON_TESTDATA, ZEPHON_BIN, CARGO_TARGET_DIR.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
VENV=${VENV:-$HOME/.cache/zephon-peers/venv}
export VENV

PEERS_ONLY=0 ZEPHON_ONLY=0 BUILD=1 SYSTEMS=
PASS=()
declare -A INPUTS=()  # which of --tokenizer / --corpus-a / --corpus-b were given
while [[ $# -gt 0 ]]; do
    case $1 in
        --peers-only) PEERS_ONLY=1; PASS+=("$1") ;;
        --zephon-only) ZEPHON_ONLY=1; PASS+=("$1") ;;
        --no-build) BUILD=0 ;;
        --systems) [[ $# -ge 2 ]] || { echo "run.sh: --systems needs a value" >&2; exit 2; }
            SYSTEMS=$2; PASS+=("$1" "$2"); shift ;;
        --systems=*) SYSTEMS=${1#*=}; PASS+=("$1") ;;
        --tokenizer|--tokenizer=*|--corpus-a|--corpus-a=*|--corpus-b|--corpus-b=*) INPUTS[${1%%=*}]=1; PASS+=("$1") ;;
        -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
        *) PASS+=("$1") ;;
    esac
    shift
done
exclusive=$((PEERS_ONLY + ZEPHON_ONLY))
[[ -n $SYSTEMS ]] && exclusive=$((exclusive + 1))
if [[ $exclusive -gt 1 ]]; then
    echo "run.sh: --peers-only, --zephon-only and --systems exclude each other" >&2
    exit 2
fi
# Which of ours run: the CLI (cargo build) and the wheel (maturin build).
if [[ -n $SYSTEMS ]]; then
    NEED_CLI=0 NEED_RS=0
    [[ ,$SYSTEMS, == *,cli,* ]] && NEED_CLI=1
    [[ ,$SYSTEMS, == *,zephon_rs,* ]] && NEED_RS=1
elif [[ $PEERS_ONLY == 1 ]]; then
    NEED_CLI=0 NEED_RS=0
elif [[ $ZEPHON_ONLY == 1 ]]; then
    NEED_CLI=1 NEED_RS=0
else
    NEED_CLI=1 NEED_RS=1
fi

log() { printf 'run.sh: %s\n' "$*" >&2; }

# 1. Peer venv (pinned, idempotent). bench_peers.py itself needs it too (psutil, tokenizers).
bash "$HERE/setup_venv.sh"
PY=$VENV/bin/python

# 2. Test data (fast no-op when present and current), unless every input is given.
if [[ ${#INPUTS[@]} -lt 3 ]]; then
    (cd "$REPO" && bash scripts/fetch-testdata.sh)
fi

# 3. Our CLI.
mkdir -p "$HERE/results/raw"
ZEPHON_BIN=${ZEPHON_BIN:-${CARGO_TARGET_DIR:-$REPO/target}/release/zephon}
STATUS=()
if [[ $NEED_CLI == 1 && $BUILD == 1 ]]; then
    if command -v cargo >/dev/null 2>&1; then
        log "cargo build --release -p zephon-cli (log: benches/peers/results/raw/cargo-build.log)"
        if ! (cd "$REPO" && cargo build --release -p zephon-cli) >"$HERE/results/raw/cargo-build.log" 2>&1; then
            tail -n 20 "$HERE/results/raw/cargo-build.log" >&2 || true
            log "cargo build failed; zephon is reported as not built"
            STATUS=(--zephon-status "not built (cargo build failed, see benches/peers/results/raw/cargo-build.log)")
        fi
    else
        STATUS=(--zephon-status "not built (cargo not found)")
    fi
fi

# 4. Our loader through the Python wheel: build it with maturin, install it into the peer venv.
if [[ $NEED_RS == 1 && $BUILD == 1 ]]; then
    RSLOG=$HERE/results/raw/maturin-build.log
    WHEELS=$HERE/results/raw/wheels
    MATURIN=
    for m in "${XDG_CACHE_HOME:-$HOME/.cache}/zephon-py/tools/bin/maturin" "$VENV/bin/maturin"; do
        if [[ -x $m ]]; then MATURIN=$m; break; fi
    done
    : >"$RSLOG"
    if [[ -z $MATURIN ]]; then
        log "installing maturin==1.16.0 into $VENV"
        if "$VENV/bin/pip" install -q --disable-pip-version-check maturin==1.16.0 >>"$RSLOG" 2>&1; then
            MATURIN=$VENV/bin/maturin
        fi
    fi
    if [[ -z $MATURIN ]]; then
        log "could not install maturin; zephon_rs is reported as not built"
        STATUS+=(--zephon-rs-status "not built (maturin missing, see benches/peers/results/raw/maturin-build.log)")
    elif ! command -v cargo >/dev/null 2>&1; then
        STATUS+=(--zephon-rs-status "not built (cargo not found)")
    else
        log "$MATURIN build --release -m crates/zephon-py/Cargo.toml, installed into $VENV (log: benches/peers/results/raw/maturin-build.log)"
        rm -rf "$WHEELS"
        if (cd "$REPO" && "$MATURIN" build --release -m crates/zephon-py/Cargo.toml -o "$WHEELS") >>"$RSLOG" 2>&1 \
            && "$VENV/bin/pip" install -q --disable-pip-version-check --force-reinstall --no-deps \
                "$WHEELS"/zephon_rs-*.whl >>"$RSLOG" 2>&1; then
            log "installed $(basename "$WHEELS"/zephon_rs-*.whl)"
        else
            tail -n 20 "$RSLOG" >&2 || true
            log "building or installing the zephon_rs wheel failed; zephon_rs is reported as not built"
            STATUS+=(--zephon-rs-status "not built (maturin build or pip install failed, see benches/peers/results/raw/maturin-build.log)")
        fi
    fi
elif [[ $NEED_RS == 1 ]]; then
    if ! "$PY" -c 'import zephon_rs' >/dev/null 2>&1; then
        log "--no-build: the peer venv $VENV has no zephon_rs (run without --no-build to build and install the wheel)"
        STATUS+=(--zephon-rs-status "not installed (--no-build, and the peer venv has no zephon_rs; run without --no-build)")
    fi
fi

# 5. Measure, one system after another, and report.
exec "$PY" "$HERE/bench_peers.py" --python "$PY" --zephon-bin "$ZEPHON_BIN" "${STATUS[@]}" "${PASS[@]}"
