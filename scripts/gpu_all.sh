#!/usr/bin/env bash
# One device call: build, run the GPU and multi-GPU tests, then the benchmarks, and print a
# short summary last. Logs and JSON go to $OUT (the device tool brings that folder back).
#   device run (kind nvidia-h200-x2, carry [".deps"]):  bash scripts/gpu_all.sh [quick]
# "quick" runs the default (short) bench suites instead of the full shape lists.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
mode=${1:-full}
t0=$(date +%s)
summary=()
note() { summary+=("$1"); echo "== $1"; }

nvidia-smi --query-gpu=index,name,utilization.gpu,clocks.sm,clocks.mem --format=csv >"$OUT/nvidia-smi.txt" 2>&1
if ! bash scripts/device_build.sh >"$OUT/build.log" 2>&1; then
  tail -60 "$OUT/build.log"; echo "BUILD FAILED"; exit 1
fi
note "build ok in $(( $(date +%s) - t0 )) s"
source build-gpu/env.sh
./build-gpu/weave info >"$OUT/info.txt" 2>&1; cat "$OUT/info.txt"

for label in gpu multi_gpu; do
  ctest --test-dir build-gpu -L "$label" --output-on-failure --timeout 600 >"$OUT/ctest_$label.log" 2>&1
  note "ctest $label: $(grep -E 'tests passed|tests failed' "$OUT/ctest_$label.log" | tail -1) ($(grep -c '(Skipped)' "$OUT/ctest_$label.log") skipped)"
done

bench() {  # bench <suite> [args...]
  local suite=$1; shift
  ./build-gpu/weave bench "$suite" "$@" --json "$OUT/bench_$suite.json" >"$OUT/bench_$suite.txt" 2>"$OUT/bench_$suite.err"
  local rc=$?
  note "bench $suite: exit $rc"
  cat "$OUT/bench_$suite.txt"
}
if [ "$mode" = quick ]; then
  ./build-gpu/weave bench --json "$OUT/bench_default.json" >"$OUT/bench_default.txt" 2>&1; note "bench default: exit $?"
  cat "$OUT/bench_default.txt"
else
  bench copy
  ./build-gpu/weave bench copy --sizes 64 --inject-skip >"$OUT/bench_copy_negative.txt" 2>&1
  note "bench copy --inject-skip (negative control, must exit 1): exit $?"
  for s in gemm comm; do
    if ./build-gpu/weave bench "$s" --help >/dev/null 2>&1; then bench "$s"; else note "bench $s: suite not built"; fi
  done
fi
echo
echo "===== summary ($(( $(date +%s) - t0 )) s) ====="
printf '%s\n' "${summary[@]}"
