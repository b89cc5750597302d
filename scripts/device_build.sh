#!/usr/bin/env bash
# Builds weave on a GPU machine without access to package registries: header-only
# deps, GoogleTest and the NCCL headers come from .deps/ (scripts/make_device_deps.sh, carried),
# the NCCL library from the PyTorch venv (2.28.9, matching the headers).
#   bash scripts/device_build.sh [ninja targets...]      (default: everything)
# WEAVE_GEMM_EXTRA_INSTANCES (the CMake option's value, e.g. "bf16 bf16 128x160 allreduce bandround;...")
# builds instances beside the default list; WEAVE_CMAKE_ARGS adds other (space-free) options.
# Prints the environment to put in front of every binary: source build-gpu/env.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
nccl_lib=$(ls -d /opt/torch/.venv/lib/python3.*/site-packages/nvidia/nccl/lib 2>/dev/null | head -1)
[ -n "$nccl_lib" ] || { echo "device_build: no PyTorch NCCL lib found" >&2; exit 1; }
[ -e "$nccl_lib/libnccl.so" ] || ln -sf "$nccl_lib/libnccl.so.2" "$nccl_lib/libnccl.so"
[ -d .deps ] || { echo "device_build: .deps missing: run scripts/make_device_deps.sh here and carry .deps" >&2; exit 1; }
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEAVE_DEPS_DIR="$PWD/.deps" \
  -DNCCL_INCLUDE_DIR="$PWD/.deps/nccl/include" -DNCCL_LIBRARY="$nccl_lib/libnccl.so.2" \
  -DWEAVE_GEMM_EXTRA_INSTANCES="${WEAVE_GEMM_EXTRA_INSTANCES:-}" ${WEAVE_CMAKE_ARGS:-} >build-gpu.configure.log 2>&1 || { tail -30 build-gpu.configure.log; exit 1; }
if ! ninja -C build-gpu "$@" >build-gpu.build.log 2>&1; then
  grep -E 'error|FAILED' -A3 build-gpu.build.log | head -80; echo "device_build: build FAILED" >&2; exit 1
fi
grep -iE 'warning' build-gpu.build.log | head -20 || true
cat > build-gpu/env.sh <<ENV
export LD_LIBRARY_PATH=$nccl_lib:\${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CUDA_MODULE_LOADING=EAGER
ENV
echo "device_build: ok"
