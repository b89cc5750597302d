#!/usr/bin/env bash
# Installs what a fresh Debian/Ubuntu machine of this project lacks to build weave: CMake, Ninja,
# GoogleTest, CLI11, nlohmann-json, ccache, Python's venv and headers (the CUDA 13 toolkit with
# cuBLASLt and NCCL 2.28 is expected to be there; CMake says what is missing if not). Idempotent
# and quiet when all is there.
set -euo pipefail
need=()
command -v cmake >/dev/null || need+=(cmake)
command -v ninja >/dev/null || need+=(ninja-build)
command -v ccache >/dev/null || need+=(ccache)
[ -f /usr/include/CLI/CLI.hpp ] || need+=(libcli11-dev)
[ -f /usr/include/nlohmann/json.hpp ] || need+=(nlohmann-json3-dev)
[ -d /usr/src/googletest ] || need+=(googletest)
[ -f /usr/include/gtest/gtest.h ] || need+=(libgtest-dev)
# The Python package (pip install .): venv + pip, and the headers the extension compiles against.
command -v python3 >/dev/null || need+=(python3)
if command -v python3 >/dev/null; then
  python3 -c 'import ensurepip, venv' 2>/dev/null || need+=(python3-venv)
  python3 -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
    || need+=(python3-dev)
fi
if [ ${#need[@]} -gt 0 ]; then
  if ! command -v apt-get >/dev/null; then
    echo "weave: missing ${need[*]} and no apt-get here; install them with your package manager" >&2
    exit 1
  fi
  echo "weave: installing ${need[*]}" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "weave: note: nvcc is at /usr/local/cuda/bin; add it to PATH" >&2
fi
