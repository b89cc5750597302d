#!/usr/bin/env bash
# The main job (README): installs what is missing, builds, and runs `weave bench` with its
# defaults on all visible GPUs. Arguments are passed to `weave bench` (e.g. `gemm -m 4096`).
# Without a Hopper GPU, weave says so and exits with status 2.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
export PATH=/usr/local/cuda/bin:$PATH
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target weave_cli
exec ./build/weave bench "$@"
