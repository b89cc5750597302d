#!/usr/bin/env bash
# The test command (README; .ci/run calls exactly this). Installs what is missing, builds
# everything (all CUDA code compiles without a GPU), runs every test through CTest: CPU tests run,
# GPU and multi-GPU tests run where Hopper GPUs are visible and are reported as Skipped, with the
# reason, where not. Then builds once more with every transport compiled out and runs the CPU tests
# that cover those diagnostics, so the compiled-out paths cannot rot.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
export PATH=/usr/local/cuda/bin:$PATH
jobs=$(nproc)
start=$(date +%s)

echo "== build (Release, all kernels) =="
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$jobs"

echo "== GPUs =="
./build/weave info | sed -n '3,4p'

echo "== tests (labels cpu, gpu, multi_gpu) =="
ctest --test-dir build --output-on-failure -j "$jobs" --timeout 1200

echo "== consumer project against the installed package (install, find_package, add_subdirectory, examples) =="
bash scripts/check_consumer.sh build

echo "== build with every transport compiled out (-DWEAVE_ENABLE_{CE,LSA,NCCL_TRANSPORT}=OFF) =="
cmake -S . -B build-notransport -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEAVE_ENABLE_CE=OFF \
  -DWEAVE_ENABLE_LSA=OFF -DWEAVE_ENABLE_NCCL_TRANSPORT=OFF >/dev/null
cmake --build build-notransport -j "$jobs" --target weave_tests_cpu weave_cli
./build-notransport/weave info | sed -n '/^Transports/,$p'
ctest --test-dir build-notransport --output-on-failure -j "$jobs" -L cpu

echo "== done in $(( $(date +%s) - start )) s =="
