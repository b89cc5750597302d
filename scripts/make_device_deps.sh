#!/usr/bin/env bash
# Fills .deps/ (git-ignored) with what the GPU machines lack and cannot download: GoogleTest
# sources, the header-only CLI libraries, and the NCCL 2.28.9 headers this project builds against
# (the device API is header-inline, so headers and library must match: the GPU machines' PyTorch
# venv ships libnccl 2.28.9). Run here, then copy .deps/ to the GPU machine with the tree.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh >/dev/null
rm -rf .deps && mkdir -p .deps/include .deps/nccl/include
cp -r /usr/src/googletest .deps/googletest
cp -r /usr/include/CLI /usr/include/nlohmann .deps/include/
nccl_inc=$(dirname "$(find /usr/local/cuda/ /usr/include -name nccl.h 2>/dev/null | head -1)")
cp -r "$nccl_inc"/nccl.h "$nccl_inc"/nccl_device.h "$nccl_inc"/nccl_device .deps/nccl/include/
du -sh .deps
