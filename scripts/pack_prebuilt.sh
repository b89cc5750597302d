#!/usr/bin/env bash
# Builds here (no GPU-machine time) and copies what a GPU run needs into carry/ (git-ignored):
# the CLI, libweave and the GPU test binaries. Then, on the GPU machine, with carry/ copied along:
#   WEAVE_PREBUILT=carry bash scripts/gpu_all.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
export PATH=/usr/local/cuda/bin:$PATH
# WEAVE_GEMM_EXTRA_INSTANCES: instance specs built beside the default list (the CMake option).
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEAVE_GEMM_EXTRA_INSTANCES="${WEAVE_GEMM_EXTRA_INSTANCES:-}" >/dev/null
cmake --build build -j "$(nproc)" --target weave_cli weave_tests_gpu weave_tests_multi_gpu
rm -rf carry && mkdir carry
# The binaries load libweave by its soname (libweave.so.<major>.<minor>); carry it under that name.
soname=$(objdump -p build/src/libweave.so | awk '$1 == "SONAME" {print $2}')
cp build/weave "build/src/$soname" build/tests/weave_tests_gpu build/tests/weave_tests_multi_gpu carry/
du -sh carry
