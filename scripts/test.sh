#!/usr/bin/env bash
# The test command (README; .ci/run calls exactly this). Installs what is missing, builds
# everything (all CUDA code compiles without a GPU), runs every test through CTest: CPU tests run,
# GPU and multi-GPU tests run where Hopper GPUs are visible and are reported as Skipped, with the
# reason, where not. Checks libweave.so exports only weave's API, installs the Python package
# (pip install .) into a venv and runs its pytest suite (CPU part here). Then builds once more with every transport compiled out and runs the CPU tests
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

echo "== libweave.so exports only weave's API =="
bash scripts/check_exports.sh build/src/libweave.so

echo "== GPUs =="
./build/weave info | sed -n '3,4p'

echo "== tests (labels cpu, gpu, multi_gpu) =="
ctest --test-dir build --output-on-failure -j "$jobs" --timeout 1200

echo "== consumer project against the installed package (install, find_package, add_subdirectory, examples) =="
bash scripts/check_consumer.sh build

echo "== Python package: pip install . into a venv, then pytest (GPU tests skip, with the reason, without a GPU) =="
# The same command a user runs; the build (library + extension only) reuses ccache, so it costs
# little after the build above. pytest runs from the repository root, where no weave/ folder
# shadows the installed package.
[ -x build/pyvenv/bin/python ] || python3 -m venv build/pyvenv
build/pyvenv/bin/python -m pip install -q pytest numpy
# The same C++ compiler as the build above (Python's own configuration may name another, e.g. g++
# where CMake took c++, and ccache keys on the compiler's name), unless CXX is set.
cxx=${CXX:-$(sed -n 's/^CMAKE_CXX_COMPILER:FILEPATH=//p' build/CMakeCache.txt)}
pip_env=()
[ -n "$cxx" ] && pip_env=(CXX="$cxx")
env "${pip_env[@]}" build/pyvenv/bin/python -m pip install -q .
build/pyvenv/bin/python -m pytest -q -rs tests/python

echo "== build with every transport compiled out (-DWEAVE_ENABLE_{CE,LSA,NCCL_TRANSPORT}=OFF) =="
cmake -S . -B build-notransport -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEAVE_ENABLE_CE=OFF \
  -DWEAVE_ENABLE_LSA=OFF -DWEAVE_ENABLE_NCCL_TRANSPORT=OFF >/dev/null
cmake --build build-notransport -j "$jobs" --target weave_tests_cpu weave_cli
./build-notransport/weave info | sed -n '/^Transports/,$p'
ctest --test-dir build-notransport --output-on-failure -j "$jobs" -L cpu

echo "== done in $(( $(date +%s) - start )) s =="
