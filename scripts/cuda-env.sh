# Sourced by check-cuda.sh and cuda-tests.sh (not run on its own): `zephon_cuda_env [libs]`
# puts a CUDA 13.4 toolchain from PyPI wheels into a venv outside the repo, idempotently, and
# exports CUDA_ROOT, PATH, LD_LIBRARY_PATH and CUDA_COMPUTE_CAP for candle's build scripts.
#
# - Always: nvcc (`nvidia-cuda-nvcc`), cicc (`nvidia-nvvm`), the crt and runtime headers
#   (`nvidia-cuda-crt`, `nvidia-cuda-runtime`) and CCCL: enough to compile candle's kernels to
#   PTX, i.e. for `cargo check`.
# - With `libs`: cuBLAS, cuRAND and NVRTC too, which a build that links needs (tests, examples),
#   and a `libcuda.so` link to the driver's `libcuda.so.1` (the driver itself is never a wheel).
#
# Why CUDA 13 wheels: the `nvidia-cuda-nvcc-cu12` wheels (12.4 to 12.9) ship only ptxas and
# libnvvm (for JAX and Triton): no `nvcc` driver, `cicc` or `cudafe++`. The unified 13.x wheels
# ship the whole compiler. 13.4 is the newest CUDA that cudarc 0.19 (candle 0.11) knows.
#
# Env: ZEPHON_CUDA_VENV (default ~/.cache/zephon-cuda-venv), CUDA_COMPUTE_CAP (default: the
# GPU's, from nvidia-smi, else 80).

ZEPHON_CUDA_VERSION=13.4

zephon_cuda_env() {
    local want_libs=${1:-}
    local venv=${ZEPHON_CUDA_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/zephon-cuda-venv}
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    local site
    site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    local root=$site/nvidia/cu13
    local v=$ZEPHON_CUDA_VERSION
    if [ ! -x "$root/bin/nvcc" ] || [ ! -x "$root/nvvm/bin/cicc" ]; then
        "$venv/bin/pip" install -q "nvidia-cuda-nvcc==$v.*" "nvidia-nvvm==$v.*" "nvidia-cuda-crt==$v.*" \
            "nvidia-cuda-runtime==$v.*" "nvidia-cuda-cccl<13.5"
    fi
    if [ "$want_libs" = libs ] && ! ls "$root"/lib/libcublas.so* >/dev/null 2>&1; then
        "$venv/bin/pip" install -q "nvidia-cuda-nvrtc==$v.*" "nvidia-cublas>=13,<14" "nvidia-curand>=10.4,<11"
    fi
    # Some wheels lose the executable bit on their tools.
    chmod +x "$root"/bin/* "$root"/nvvm/bin/* 2>/dev/null || true
    mkdir -p "$root/lib"
    # Linkers want unversioned names; the wheels ship libX.so.N only, some under their own
    # nvidia/<name>/lib folder.
    local f base
    for f in "$site"/nvidia/*/lib/lib*.so.*; do
        [ -e "$f" ] || continue
        base=$(basename "$f")
        [ -e "$root/lib/$base" ] || ln -s "$f" "$root/lib/$base"
        [ -e "$root/lib/${base%%.so.*}.so" ] || ln -s "$f" "$root/lib/${base%%.so.*}.so"
    done
    if [ "$want_libs" = libs ] && [ ! -e "$root/lib/libcuda.so" ]; then
        local driver
        driver=$(ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 /{print $NF; exit}')
        [ -n "$driver" ] && ln -s "$driver" "$root/lib/libcuda.so"
    fi
    export CUDA_ROOT=$root CUDA_HOME=$root CUDA_PATH=$root
    export PATH=$root/bin:$PATH
    export LD_LIBRARY_PATH=$root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    if [ -z "${CUDA_COMPUTE_CAP:-}" ] && command -v nvidia-smi >/dev/null; then
        CUDA_COMPUTE_CAP=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .) || true
    fi
    export CUDA_COMPUTE_CAP=${CUDA_COMPUTE_CAP:-80}
}
