#!/usr/bin/env bash
# Compile-checks zephon-candle's `cuda` feature (library, tests, example, benches) on a machine
# without a GPU or a CUDA install: a CUDA 13.4 compiler from PyPI wheels (scripts/cuda-env.sh,
# kept in a venv outside the repo and reused), then `cargo check --features cuda`, whose build
# scripts compile candle's kernels to PTX with that nvcc. Nothing is linked or run.
#
# Usage: bash scripts/check-cuda.sh [extra cargo args]. The first run downloads ~200 MB of
# wheels and compiles the kernels (tens of minutes on 2 busy cores); later runs are quick.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=cuda-env.sh
source scripts/cuda-env.sh
zephon_cuda_env
nvcc --version | tail -2
time cargo check -p zephon-candle --features cuda --all-targets "$@"
echo "check-cuda: zephon-candle --features cuda compiles (CUDA $ZEPHON_CUDA_VERSION, compute capability $CUDA_COMPUTE_CAP)"
