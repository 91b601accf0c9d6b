#!/usr/bin/env bash
# Create (or reuse) the peer venv used by peer_zephon.py / peer_grain.py / bench_peers.py and the
# vision-language benchmark (peer_grain_vlm.py / bench_vlm.py, which also need Pillow).
# Idempotent: does nothing when the venv already holds exactly requirements.txt.
#   VENV=/path bash setup_venv.sh [--force]
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
VENV=${VENV:-/root/.cache/zephon-peers/venv}
REQ=$HERE/requirements.txt
STAMP=$VENV/.zephon-peers-requirements.sha256
want=$(cat "$REQ" "$HERE/constraints.txt" | sha256sum | cut -d" " -f1)
check='import zephon, grain, tokenizers, transformers, numpy, psutil, PIL
print("zephon", zephon.__version__, "grain", grain.__version__, "tokenizers", tokenizers.__version__,
      "transformers", transformers.__version__, "numpy", numpy.__version__, "pillow", PIL.__version__)'

if [[ ${1:-} != --force && -x $VENV/bin/python && -f $STAMP && $(cat "$STAMP") == "$want" ]] \
    && "$VENV/bin/python" -c "$check" >/dev/null 2>&1; then
    echo "setup_venv: reusing $VENV" >&2
    exit 0
fi

PYTHON=${PYTHON:-}
if [[ -z $PYTHON ]]; then
    for c in python3.11 python3.12 python3; do
        if command -v "$c" >/dev/null 2>&1; then PYTHON=$c; break; fi
    done
fi
[[ -n $PYTHON ]] || { echo "setup_venv: no python3 found" >&2; exit 1; }

echo "setup_venv: installing $(grep -v '^#' "$REQ" | tr '\n' ' ') into $VENV" >&2
if [[ ! -x $VENV/bin/python ]]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q -r "$REQ" -c "$HERE/constraints.txt"
"$VENV/bin/python" -c "$check" >&2
echo "$want" >"$STAMP"
