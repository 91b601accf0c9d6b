#!/usr/bin/env bash
# The Python wheel's tests (called by scripts/test.sh): builds the `zephon-rs` wheel with maturin,
# installs it into a fresh venv that has only numpy and pytest, and runs the pytest suite there
# from outside the source tree, so that the installed wheel is what is tested; then installs the
# same wheel into a venv with torch, torchdata and TorchTitan (cached, about 6 GB: PyPI's only
# Linux torch wheel pulls the CUDA libraries, though the tests run on the CPU) and runs the
# PyTorch tests. ZEPHON_TORCH_TESTS=0 skips those.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"

export ZEPHON_TESTDATA=${ZEPHON_TESTDATA:-${XDG_CACHE_HOME:-$HOME/.cache}/zephon-testdata}
export ZEPHON_REQUIRE_TESTDATA=1
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/zephon-py
PIP_QUIET=(--quiet --disable-pip-version-check)

# Tools: maturin, pinned.
if [[ ! -x $CACHE/tools/bin/maturin ]]; then
    python3 -m venv "$CACHE/tools"
    "$CACHE/tools/bin/pip" install "${PIP_QUIET[@]}" maturin==1.16.0
fi

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

echo "== the wheel (maturin)"
"$CACHE/tools/bin/maturin" build --release -m crates/zephon-py/Cargo.toml -o "$WORK/wheels"
WHEEL=$(ls "$WORK"/wheels/zephon_rs-*.whl)
echo "built $(basename "$WHEEL") ($(du -h "$WHEEL" | cut -f1))"

echo "== the zephon command (the tests compare the wheel's steps with it)"
cargo build --release -q -p zephon-cli
export ZEPHON_BIN=${CARGO_TARGET_DIR:-$REPO/target}/release/zephon

echo "== pytest against the installed wheel, in a fresh venv (numpy only)"
python3 -m venv "$WORK/venv"
"$WORK/venv/bin/pip" install "${PIP_QUIET[@]}" "$WHEEL" pytest==9.2.0 pytest-timeout==2.4.0
(cd "$WORK" && "$WORK/venv/bin/python" -m pytest -q -p no:cacheprovider --timeout=900 "$REPO/crates/zephon-py/tests" \
    --ignore="$REPO/crates/zephon-py/tests/test_torch.py" --ignore="$REPO/crates/zephon-py/tests/test_trainers.py")
"$WORK/venv/bin/python" -c 'import sys, zephon_rs; assert "torch" not in sys.modules; print("zephon_rs imports without torch")'

if [[ ${ZEPHON_TORCH_TESTS:-1} == 0 ]]; then
    echo "== PyTorch tests skipped (ZEPHON_TORCH_TESTS=0)"
    exit 0
fi
echo "== PyTorch tests (torch, torchdata, TorchTitan 0.3, transformers), against the same wheel"
TORCH=$CACHE/torch-2.15
if [[ ! -f $TORCH/.ready ]]; then
    rm -rf "$TORCH"
    python3 -m venv "$TORCH"
    start=$(date +%s)
    "$TORCH/bin/pip" install "${PIP_QUIET[@]}" torch==2.15.0 torchdata==0.11.0 torchtitan==0.3.0 pytest==9.2.0 \
        matplotlib==3.11.2
    echo "installed torch, torchdata and TorchTitan in $(( $(date +%s) - start )) s"
    touch "$TORCH/.ready"
fi
"$TORCH/bin/python" -c 'import transformers, pytest_timeout' 2>/dev/null ||
    "$TORCH/bin/pip" install "${PIP_QUIET[@]}" transformers==5.25.0 pytest-timeout==2.4.0
"$TORCH/bin/pip" install "${PIP_QUIET[@]}" --force-reinstall --no-deps "$WHEEL"
(cd "$WORK" && ZEPHON_REQUIRE_TORCH=1 "$TORCH/bin/python" -m pytest -q -p no:cacheprovider --timeout=900 \
    "$REPO/crates/zephon-py/tests/test_torch.py" "$REPO/crates/zephon-py/tests/test_trainers.py")
