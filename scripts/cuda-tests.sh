#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: zephon-candle's tests with `--features cuda` (the CPU tests
# plus tests/it/cuda.rs: every conversion path and the prefetcher on the device) and the
# candle_lm example trained on the GPU (the W=1 vs W=4->2 curves, plotted to
# target/candle_lm_cuda.png so the committed CPU plot stays as it is).
#
# Uses the system's CUDA toolkit when `nvcc` is on PATH; otherwise a CUDA 13.4 toolchain and
# cuBLAS/cuRAND/NVRTC from PyPI wheels (scripts/cuda-env.sh), linked against the driver's
# libcuda. Needs the test data (bash scripts/fetch-testdata.sh) for the example.
#
# Usage: bash scripts/cuda-tests.sh [--steps N]   (extra arguments go to the example)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader
if ! command -v nvcc >/dev/null; then
    # shellcheck source=cuda-env.sh
    source scripts/cuda-env.sh
    zephon_cuda_env libs
fi
export CUDA_COMPUTE_CAP=${CUDA_COMPUTE_CAP:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)}
nvcc --version | tail -1
cargo test -p zephon-candle --features cuda
cargo run --release -p zephon-candle --features cuda --example candle_lm -- \
    --device cuda --out target/candle_lm_cuda.png "$@"
echo "cuda-tests: passed"
