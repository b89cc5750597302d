#!/usr/bin/env bash
# On a GPU machine (Ubuntu, the PyTorch venv in /opt/torch/.venv, no package registries): installs
# the Python package into that venv (--no-build-isolation with its scikit-build-core and nanobind;
# NCCL headers from .deps/, the NCCL library torch itself loads), checks libweave.so's exports, then
# runs the pytest suite (GPU and multi-GPU parts included; the foreign-process check in every
# import order). Run scripts/make_device_deps.sh on a machine with registries first and bring
# .deps along (or pass WEAVE_WHEEL=FILE, a wheel built elsewhere for this Python against the NCCL
# torch ships: no build here). Logs and the pytest JUnit XML go to $OUT (or ./out). Exit status 1 when the install,
# the import, the exports check or pytest failed; the RESULT lines say which.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_verdict.sh
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
nccl_lib=$(ls -d /opt/torch/.venv/lib/python3.*/site-packages/nvidia/nccl/lib 2>/dev/null | head -1)
t0=$(date +%s)
# The headers of the NCCL torch loads when its wheel ships them (weave refuses a communicator whose
# loaded NCCL is not the release it was compiled against), else .deps' copy.
nccl_inc=$PWD/.deps/nccl/include
[ -n "$nccl_lib" ] && [ -f "$nccl_lib/../include/nccl.h" ] && nccl_inc=$(cd "$nccl_lib/../include" && pwd)
[ -f "$nccl_inc/nccl.h" ] || { echo "device_python: no NCCL headers: torch's nvidia-nccl wheel has none and .deps is missing (run scripts/make_device_deps.sh where registries are reachable and bring .deps along)" >&2; exit 1; }
export CMAKE_ARGS="-DNCCL_INCLUDE_DIR=$nccl_inc ${nccl_lib:+-DNCCL_LIBRARY=$nccl_lib/libnccl.so.2} ${CMAKE_ARGS:-}"
export CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)
if [ -n "${WEAVE_WHEEL:-}" ]; then
  # A wheel built elsewhere for this Python and against the NCCL torch ships (saves the on-device
  # build): `pip wheel .` with CMAKE_ARGS naming that NCCL's headers and library.
  [ -f "$WEAVE_WHEEL" ] || { echo "device_python: WEAVE_WHEEL=$WEAVE_WHEEL is not a file" >&2; exit 1; }
  if ! $py -m pip install --no-deps --force-reinstall -q "$WEAVE_WHEEL" >"$OUT/pip_install.log" 2>&1; then
    tail -40 "$OUT/pip_install.log"; echo "device_python: pip install $WEAVE_WHEEL FAILED" >&2; exit 1
  fi
elif ! $py -m pip install --no-build-isolation --no-deps -q . >"$OUT/pip_install.log" 2>&1; then
  tail -40 "$OUT/pip_install.log"; echo "device_python: pip install FAILED" >&2; exit 1
fi
echo "== pip install . ok in $(( $(date +%s) - t0 )) s"
site=$($py -c 'import os, weave; print(os.path.dirname(weave.__file__))' 2>/dev/null || true)
(cd /tmp && $py -c 'import torch, weave; print("weave", weave.__version__, weave.nccl_versions(), weave.devices())')
verdict_pass "import torch, weave" $?
if [ -n "${WEAVE_WHEEL:-}" ]; then  # no build folder: the installed copy (its dynamic symbols)
  bash scripts/check_exports.sh "$(ls "$site"/libweave.so* 2>/dev/null | head -1)"
else
  bash scripts/check_exports.sh build-py/src/libweave.so  # unstripped (the installed copy is stripped)
fi
verdict_pass "check_exports.sh" $?
$py -m pytest -q -rs tests/python --junitxml="$OUT/pytest.xml" 2>&1 | tee "$OUT/pytest.log" | tail -40
rc=${PIPESTATUS[0]}
verdict_pass pytest $rc
echo "== pytest exit $rc, $(( $(date +%s) - t0 )) s in all"
verdict_end
