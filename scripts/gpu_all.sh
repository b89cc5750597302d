#!/usr/bin/env bash
# One run on a GPU machine: build, run the GPU and multi-GPU tests, then the benchmarks, and print a
# short summary last. Full logs are packed into $OUT/logs.tgz, JSON results and the summary are
# copied to $OUT (few files: a remote run may bring back only a handful); multi also renders its
# bench JSON into PNGs ($OUT/plots/, or $OUT/plots.tgz past four).
#   on the GPU machine, with .deps/ copied along:  bash scripts/gpu_all.sh [quick|tests|bench|gemm|comm|fused|leg|multi]
# quick: tests + the default (short) bench suites; tests / bench: only that half; gemm: the GPU
# tests and the gemm and decode suites only; comm: the multi-GPU tests and the comm suite only; fused: the
# GPU and multi-GPU tests, then the emulated fused tests repeated and the gemm-ag / gemm-ar /
# gemm-rs / ag-gemm suites in the emulated world; leg: the fused operators' GEMM leg against
# weave::Gemm (below), benches only; multi: the run for a machine of 2+ GPUs (below); default: all.
# leg (issue 41 item 1, one GPU): each fused suite over every preset of its op (gemm-rs over the
# gemm-ar layers, ag-gemm over AG_GEMM_PRESET in bf16 and ptpc) with --arms gemm-only,weave-gemm,
# in the emulated world W = 2 (weave::Gemm planned for the rank's SM share) and at world 1
# (LEG_WORLDS, default "2 1"; LEG_ARGS, default "-m 64,256,1024,4096 -i 5 --no-idle-gate"), then
# every `gemm-only / weave-gemm` ratio in one table and how many pass LEG_TOLERANCE (default 1.02,
# the issue's target). A ratio past it is a finding for the notes, not a failure: the run fails
# only when a bench fails. About 10-15 s per run: 34 runs with the shipped presets, so split the
# worlds over two device calls (LEG_WORLDS=2, then 1) or set GPU_ALL_BUDGET.
# multi: every multi-GPU test (tests/multi_gpu, one rank per GPU over real NCCL: the collectives and
# the four fused operators, every mode, bitwise against split and against an NCCL-reduced
# reference, graph replays across the epoch wrap, a delayed rank, a PDL consumer, the soaks, a peer
# that never arrives, the negative controls; the fused-ce tests once more with
# CUDA_DEVICE_MAX_CONNECTIONS=1, in a process of their own),
# `weave bench comm` over every GPU, the fused suites over every model preset with --devices = every
# GPU (each mode against cuBLASLt + NCCL on plain and on symmetric buffers; gemm-rs over the gemm-ar
# presets, the row-parallel layers), ag-gemm over llama3-70b.gate_up_proj's column shard in bf16
# and ptpc (against ncclAllGather + cuBLASLt), the PNGs of those benches
# (scripts/plot_bench.py with the system python3's matplotlib, PLOT_PYTHON overrides the
# interpreter; a plot that fails is a RESULT line of its own), and with PY=1 the Python
# package's install and pytest suite
# (scripts/device_python.sh: torchrun multi-GPU parts included; needs .deps), then
# scripts/bench_torch_async_tp.py (the sequence-parallel pair against PyTorch's async-TP operators)
# and examples/python/llama_on_weave.py under torchrun over every GPU in bf16, ptpc, blockscale and
# mxfp8 (PY_EXAMPLE_TIMEOUT, default 300 s each). MULTI_PART=tests or bench runs one half, for two
# device calls where the whole would pass one call's 10 minutes; bench-ar (comm and the gemm-ar
# presets) and bench-rest (gemm-rs, gemm-ag, ag-gemm, the plots and PY=1's part) split the bench
# half again, for three calls where the bench half would pass 10 minutes. Expected on 2 H200s,
# prebuilt binaries: about 12 minutes without PY=1 (tests about 3, comm about 1, ten presets about 5,
# the seven row-parallel ones as gemm-rs about 3, ag-gemm about 1; estimated, not yet run), plus 6-10
# with it.
# GPU_ALL_BUDGET=S: the whole run, summary included, ends within S seconds (a device call's limit,
# e.g. 570 of 600): each step's timeout is cut to fit, a step with no time left is not run (and fails).
# GTEST_FILTER (GoogleTest reads it) narrows the tests. SANITIZE=1 adds compute-sanitizer memcheck
# and racecheck over GemmSanitizer.* after them.
# To save GPU-machine time, build here instead (scripts/pack_prebuilt.sh fills carry/), copy
# carry/ along and set WEAVE_PREBUILT=carry: the build step is then skipped.
# Bench arguments: COPY_ARGS, GEMM_ARGS (and a second gemm run GEMM_ARGS2), COMM_ARGS, GEMM_AG_ARGS,
# GEMM_AR_MS (the gemm-ar suites' M list), GEMM_AR_ARGS (their other options), GEMM_RS_ARGS
# (gemm-rs's; its M is the total rows, so every M must be a multiple of the GPU count) and
# AG_GEMM_ARGS (ag-gemm's; its m is rows per rank) and DECODE_ARGS (the decode suite's: every layer
# preset at tp 8 in its default quant with --compare-routes, each layer also on the GEMV and on the
# tiled kernels, unless given, e.g. "--tp 2,8 --quant bf16,ptpc,blockscale"). DECODE_PDL_VARIANTS
# (e.g. "ring,start ring,late l2:16,start"): the decode suite again on the tiled kernels once per
# WEAVE_GEMM_PDL value (DECODE_PDL_ARGS, default "--tp 2,8 -m 8,16,32 --quant bf16,ptpc").
# Tests run as their GoogleTest binaries (one process per label: much faster than one per case).
# Exit status: 0 when every step passed; 1 when a build, a test binary, a repeat, a sanitizer, a
# bench or a plot failed or a negative control passed; the summary's RESULT lines say which
# (scripts/gpu_verdict.sh decides).
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_verdict.sh
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/weave_logs.XXXX")
mode=${1:-full}
# MULTI_PART=tests / bench: only that half of `multi` (two device calls where one would pass 10
# minutes); bench-ar / bench-rest: the bench half's two parts (three calls).
multi_part=${MULTI_PART:-all}
case $multi_part in
  all|tests|bench|bench-ar|bench-rest) ;;
  *) echo "gpu_all: MULTI_PART='$multi_part': expected all, tests, bench, bench-ar or bench-rest" >&2; exit 2 ;;
esac
multi_tests=1; [[ $multi_part == bench* ]] && multi_tests=0
multi_ar=1; multi_rest=1
[ "$multi_part" = bench-ar ] && multi_rest=0
[ "$multi_part" = bench-rest ] && multi_ar=0
t0=$(date +%s)
summary=()
note() { summary+=("$1"); echo "== $1"; }
# GPU_ALL_BUDGET=S (seconds; a device call's limit): the run ends within S of its start, summary
# included. Every step's timeout is cut to what is left less 30 s for the summary, and a step with
# under 10 s left is not run (exit 124, as a timeout; its RESULT line fails and a note names it).
run_bounded() {  # run_bounded LIMIT CMD...: CMD under `timeout` LIMIT (capped as above)
  local lim=$1; shift
  if [ "${GPU_ALL_BUDGET:-0}" -gt 0 ]; then
    local left=$(( t0 + GPU_ALL_BUDGET - $(date +%s) - 30 ))
    [ "$left" -lt "$lim" ] && lim=$left
    if [ "$lim" -lt 10 ]; then
      note "not run (GPU_ALL_BUDGET=$GPU_ALL_BUDGET spent): ${*##*/}"
      return 124
    fi
  fi
  timeout "$lim" "$@"
}
finish() {
  tar -czf "$OUT/logs.tgz" -C "$LOGS" . 2>/dev/null
  # A remote run brings back a handful of files: many JSON results (multi: one per preset) travel
  # as one archive, a few as themselves.
  local jsons=("$LOGS"/*.json)
  if [ -e "${jsons[0]}" ] && [ ${#jsons[@]} -gt 4 ]; then
    tar -czf "$OUT/bench_json.tgz" -C "$LOGS" $(cd "$LOGS" && ls *.json) 2>/dev/null
  else
    cp "$LOGS"/*.json "$OUT"/ 2>/dev/null
  fi
  cp "$LOGS"/calibration_*.txt "$OUT"/ 2>/dev/null
  local result rc=0
  result=$(verdict_end) || rc=1
  { echo "===== summary ($(( $(date +%s) - t0 )) s, mode $mode) ====="; printf '%s\n' "${summary[@]}" "$result"; } |
    tee "$OUT/summary.txt"
  exit $rc
}
trap finish EXIT

nvidia-smi --query-gpu=index,name,utilization.gpu,clocks.sm,clocks.mem --format=csv >"$LOGS/nvidia-smi.txt" 2>&1
if [ -n "${WEAVE_PREBUILT:-}" ]; then
  case $WEAVE_PREBUILT in /*) BIN=$WEAVE_PREBUILT ;; *) BIN=$PWD/$WEAVE_PREBUILT ;; esac; TBIN=$BIN
  nccl_lib=$(ls -d /opt/torch/.venv/lib/python3.*/site-packages/nvidia/nccl/lib 2>/dev/null | head -1)
  export LD_LIBRARY_PATH=$BIN:$nccl_lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 CUDA_MODULE_LOADING=EAGER
  note "prebuilt binaries from $WEAVE_PREBUILT"
else
  if ! bash scripts/device_build.sh >"$LOGS/build.log" 2>&1; then
    tail -60 "$LOGS/build.log"; note "BUILD FAILED"; verdict_pass build 1; exit 1
  fi
  note "build ok in $(( $(date +%s) - t0 )) s"
  cp build-gpu.build.log "$LOGS/" 2>/dev/null
  source build-gpu/env.sh
  BIN=$PWD/build-gpu; TBIN=$PWD/build-gpu/tests
fi
"$BIN"/weave info >"$LOGS/info.txt" 2>&1
verdict_pass "weave info" $?
cat "$LOGS/info.txt"

if [ "$mode" != bench ] && [ "$mode" != leg ] && ! { [ "$mode" = multi ] && [ "$multi_tests" = 0 ]; }; then
  labels="gpu multi_gpu"; [ "$mode" = gemm ] && labels=gpu; { [ "$mode" = comm ] || [ "$mode" = multi ]; } && labels=multi_gpu
  for label in $labels; do
    t1=$(date +%s)
    # The GPU binary took 208 s on an H100 (2026-12-05) before GemmReduceScatter's tests: 480 s leaves room.
    # The multi-GPU one holds the fused ops' soaks, graph replays, timeouts and controls: 900 s (not yet run).
    limit=480; [ "$label" = multi_gpu ] && limit=900
    run_bounded ${TEST_TIMEOUT:-$limit} "$TBIN/weave_tests_$label" --gtest_brief=1 >"$LOGS/tests_$label.log" 2>&1
    rc=$?
    verdict_pass "tests $label" $rc
    note "tests $label (exit $rc, $(( $(date +%s) - t1 )) s): $(grep -E '^\[  PASSED  \]' "$LOGS/tests_$label.log" | tail -1) $(grep -E '^\[  SKIPPED \] [0-9]' "$LOGS/tests_$label.log" | tail -1) $(grep -E '^\[  FAILED  \] [0-9]' "$LOGS/tests_$label.log" | tail -1)"
    grep -E '^\[  FAILED  \] [A-Z]' "$LOGS/tests_$label.log" | head -20
  done
  # fused-ce with every stream on one hardware queue (Megatron-style CUDA_DEVICE_MAX_CONNECTIONS=1):
  # the variable must be set before CUDA starts, so these tests (GemmAllReduce's and GemmAllGather's)
  # run in a process of their own.
  if [ "$mode" = multi ]; then
    t1=$(date +%s)
    CUDA_DEVICE_MAX_CONNECTIONS=1 run_bounded ${TEST_TIMEOUT:-300} "$TBIN/weave_tests_multi_gpu" --gtest_brief=1 \
      --gtest_filter='MultiGpu*.FusedCeOnOneHardwareQueue*' >"$LOGS/tests_one_queue.log" 2>&1
    rc=$?
    verdict_pass "tests multi_gpu, one hardware queue" $rc
    note "tests multi_gpu with CUDA_DEVICE_MAX_CONNECTIONS=1 (exit $rc, $(( $(date +%s) - t1 )) s): $(grep -E '^\[  (PASSED|SKIPPED|FAILED) +\] [0-9]' "$LOGS/tests_one_queue.log" | tr '\n' ' ')"
  fi
fi

# SANITIZE=1: compute-sanitizer memcheck and racecheck over GemmSanitizer.* (every GEMM instance
# once, the mxfp8 route with and without its rerun) after the tests; each bounded by SANITIZE_TIMEOUT.
if [ "${SANITIZE:-0}" = 1 ] && [ "$mode" != bench ] && [ "$mode" != leg ]; then
  cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1)
  if [ -z "$cs" ]; then
    note "sanitizers: compute-sanitizer not found (skipped)"
  else
    for tool in memcheck racecheck; do
      t1=$(date +%s)
      # --error-exitcode: a hazard the tool reports fails the step even when the tests pass.
      run_bounded ${SANITIZE_TIMEOUT:-120} "$cs" --tool $tool --error-exitcode 1 "$TBIN/weave_tests_gpu" \
        --gtest_filter='GemmSanitizer.*' >"$LOGS/sanitize_$tool.log" 2>&1
      rc=$?
      verdict_pass "compute-sanitizer $tool" $rc
      note "compute-sanitizer $tool (exit $rc, $(( $(date +%s) - t1 )) s): $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$LOGS/sanitize_$tool.log" | tail -1)"
    done
  fi
fi

bench() {  # bench <name> <weave bench args...>
  local name=$1; shift
  run_bounded ${BENCH_TIMEOUT:-300} "$BIN"/weave bench "$@" --json "$LOGS/bench_$name.json" >"$LOGS/bench_$name.txt" 2>"$LOGS/bench_$name.err"
  local rc=$?
  verdict_pass "bench $name" $rc
  note "bench $name: exit $rc"
  cat "$LOGS/bench_$name.txt"; tail -3 "$LOGS/bench_$name.err"
}
# The presets of the table `weave plan --presets` prints whose op column is $1 (gemm-ar, gemm-ag).
presets_of() { "$BIN"/weave plan --presets 2>/dev/null | awk -v op="$1" '$2 == op {print $1}'; }
# Every bench JSON of this run rendered into PNGs by scripts/plot_bench.py (the GPU machine's system
# python3 has matplotlib; PLOT_PYTHON overrides the interpreter): to $OUT/plots/, or packed into
# $OUT/plots.tgz past four (a remote run brings back a handful of files). A plot that fails is a
# RESULT line of its own and leaves every test and bench verdict as it was.
plot_benches() {
  local jsons=("$LOGS"/bench_*.json)
  if [ ! -e "${jsons[0]}" ]; then
    note "plots: no bench JSON to render"
    return
  fi
  mkdir -p "$LOGS/plots"
  ${PLOT_PYTHON:-python3} scripts/plot_bench.py "${jsons[@]}" --out "$LOGS/plots" >"$LOGS/plots.log" 2>&1
  local rc=$?
  verdict_pass "plots (scripts/plot_bench.py)" $rc
  local pngs=() f
  for f in "$LOGS"/plots/*.png; do [ -e "$f" ] && pngs+=("$f"); done
  if [ ${#pngs[@]} -gt 4 ]; then
    tar -czf "$OUT/plots.tgz" -C "$LOGS/plots" $(cd "$LOGS/plots" && ls *.png) 2>/dev/null
  elif [ ${#pngs[@]} -gt 0 ]; then
    mkdir -p "$OUT/plots" && cp "${pngs[@]}" "$OUT/plots/"
  fi
  note "plots: exit $rc, ${#pngs[@]} PNG(s) from ${#jsons[@]} bench JSON file(s)"
  [ "$rc" = 0 ] || tail -5 "$LOGS/plots.log"
}
if [ "$mode" = quick ]; then
  bench default
elif [ "$mode" = multi ] && [ "$multi_part" = tests ]; then
  note "multi: tests only (MULTI_PART=tests)"
elif [ "$mode" = multi ]; then
  nvidia-smi -L >"$LOGS/gpus.txt" 2>&1
  # Every GPU, one rank each (DEVICES overrides: a comma-separated list of ordinals).
  DEVICES=${DEVICES:-$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | paste -sd, -)}
  note "GPUs: ${DEVICES:-none found}"
  [ "$multi_part" = all ] || note "multi: MULTI_PART=$multi_part"
  [ "$multi_ar" = 1 ] && bench comm comm ${COMM_ARGS:-}
  # Every preset of each fused op over every GPU (--devices: real NCCL, the cuBLASLt + NCCL
  # baselines beside the modes), one run and one JSON per preset. gemm-rs takes the gemm-ar
  # (row-parallel) layers; its M (the total rows) must divide among the GPUs: the default list suits
  # 1, 2, 4 or 8, with 128 and 1000 split only (not whole 128-row bands) and 4096, 8192 fused-able.
  for op in gemm-ar gemm-rs gemm-ag; do
    if [ "$op" = gemm-ar ]; then [ "$multi_ar" = 1 ] || continue; else [ "$multi_rest" = 1 ] || continue; fi
    layers=$op; [ "$op" = gemm-rs ] && layers=gemm-ar
    presets=$(presets_of "$layers")
    if [ -z "$presets" ]; then
      verdict_pass "weave plan --presets ($op)" 1
      note "no $layers preset listed by weave plan --presets (for $op)"
      continue
    fi
    for p in $presets; do
      case $op in
        # m 1, 8 and 32: decode batches, where decode and decode-fused (its one-kernel arm) run.
        gemm-ar) args=${GEMM_AR_ARGS:--m 1,8,32,128,1024,8192 -i 5} ;;
        gemm-rs) args=${GEMM_RS_ARGS:--m 128,1000,4096,8192 -i 5} ;;
        *) args=${GEMM_AG_ARGS:--m 128,1024,4096 -i 5} ;;
      esac
      bench "${op//-/_}_$p" "$op" --preset "$p" ${DEVICES:+--devices "$DEVICES"} $args
    done
  done
  # ag-gemm (AllGatherGemm) over Llama-3-70B's gate_up_proj column shard (the decoder layer table's),
  # bf16 and ptpc (whose scales travel too); AG_GEMM_PRESET picks another column GEMM. --calibrate
  # writes auto's table (split-lsa or fused-ce per m, measured here: the first NVLink one), and
  # the planner reading it back shows auto's choices.
  ngpu=$(echo "${DEVICES:-0}" | tr ',' '\n' | wc -l)  # ranks: one per GPU (also the Python runs' TP below)
  for q in bf16 ptpc; do
    [ "$multi_rest" = 1 ] || break
    bench "ag_gemm_$q" ag-gemm --preset ${AG_GEMM_PRESET:-llama3-70b.gate_up_proj} --quant $q \
      ${DEVICES:+--devices "$DEVICES"} ${AG_GEMM_ARGS:--m 128,1024,4096 -i 5} \
      --calibrate "$LOGS/calibration_ag_gemm_$q.txt"
    if [ -e "$LOGS/calibration_ag_gemm_$q.txt" ]; then
      "$BIN"/weave plan ag-gemm --preset ${AG_GEMM_PRESET:-llama3-70b.gate_up_proj} --quant $q --world "$ngpu" \
        -m 128,1024,4096 --calibration "$LOGS/calibration_ag_gemm_$q.txt" >"$LOGS/plan_ag_gemm_${q}_calibrated.txt" 2>&1
      rc=$?
      verdict_pass "plan ag-gemm --calibration ($q)" $rc
      note "plan ag-gemm --calibration ($q, the table the bench wrote): exit $rc"
      grep -E '^ +[0-9]' "$LOGS/plan_ag_gemm_${q}_calibrated.txt" | cut -c1-8,120-260 | head -4
    fi
  done
  plot_benches
  if [ "${PY:-0}" = 1 ] && [ "$multi_rest" = 1 ]; then
    OUT="$LOGS/python" run_bounded ${PY_SUITE_TIMEOUT:-900} bash scripts/device_python.sh >"$LOGS/python.log" 2>&1
    rc=$?
    verdict_pass "python (scripts/device_python.sh)" $rc
    note "python: exit $rc ($(grep -E '[0-9]+ passed' "$LOGS/python.log" | tail -1))"
    # A Hugging Face Llama on weave (examples/python/llama_on_weave.py) at TP = every GPU, each quant:
    # exit 0 when its logits are within weave.hf.TOLERANCE of the unmodified model; its times noted.
    # The sequence-parallel pair against PyTorch's async-TP operators and torch's GEMM + NCCL.
    run_bounded ${PY_EXAMPLE_TIMEOUT:-300} env ${DEVICES:+CUDA_VISIBLE_DEVICES=$DEVICES} ${PYTHON:-python3} \
      -m torch.distributed.run --nproc_per_node="$ngpu" scripts/bench_torch_async_tp.py \
      --json "$LOGS/bench_torch_async_tp.json" >"$LOGS/bench_torch_async_tp.txt" 2>&1
    rc=$?
    verdict_pass "bench_torch_async_tp.py (TP $ngpu)" $rc
    note "bench_torch_async_tp (TP $ngpu): exit $rc"; cat "$LOGS/bench_torch_async_tp.txt" | tail -20
    for q in bf16 ptpc blockscale mxfp8; do
      run_bounded ${PY_EXAMPLE_TIMEOUT:-300} env ${DEVICES:+CUDA_VISIBLE_DEVICES=$DEVICES} ${PYTHON:-python3} \
        -m torch.distributed.run --nproc_per_node="$ngpu" examples/python/llama_on_weave.py --quant $q \
        >"$LOGS/llama_on_weave_$q.log" 2>&1
      rc=$?
      verdict_pass "llama_on_weave.py --quant $q (TP $ngpu)" $rc
      note "llama_on_weave $q, TP $ngpu: exit $rc; $(grep -E '^  (prefill|decode)' "$LOGS/llama_on_weave_$q.log" | tr -s ' ' | paste -sd ';')"
    done
  fi
elif [ "$mode" = leg ]; then
  leg_benches=()
  for op in gemm-ar gemm-rs gemm-ag ag-gemm; do
    case $op in
      gemm-rs) presets=$(presets_of gemm-ar) ;;
      ag-gemm) presets=${AG_GEMM_PRESET:-llama3-70b.gate_up_proj} ;;
      *) presets=$(presets_of "$op") ;;
    esac
    if [ -z "$presets" ]; then
      verdict_pass "weave plan --presets ($op)" 1
      note "leg: no preset listed by weave plan --presets for $op"
      continue
    fi
    for p in $presets; do
      quants=default; [ "$op" = ag-gemm ] && quants="bf16 ptpc"
      for q in $quants; do
        for w in ${LEG_WORLDS:-2 1}; do
          name="leg_${op//-/_}_${p}_w$w"; [ "$q" = default ] || name="${name}_$q"
          bench "$name" "$op" --preset "$p" $([ "$q" = default ] || echo --quant "$q") \
            $([ "$w" = 1 ] || echo --emulate-world "$w") --arms gemm-only,weave-gemm \
            ${LEG_ARGS:--m 64,256,1024,4096 -i 5 --no-idle-gate}
          leg_benches+=("$name")
        done
      done
    done
  done
  # Every ratio the benches printed ("m=M: gemm-only / weave-gemm = R (...)"), one line each.
  for name in "${leg_benches[@]}"; do
    sed -n 's/^m=\([0-9]*\): gemm-only \/ weave-gemm = \([0-9.]*\).*/\1 \2/p' "$LOGS/bench_$name.txt" |
      while read -r m ratio; do echo "$name $m $ratio"; done
  done >"$LOGS/leg_ratios.txt"
  cp "$LOGS/leg_ratios.txt" "$OUT/" 2>/dev/null
  tol=${LEG_TOLERANCE:-1.02}
  note "leg: $(awk -v tol="$tol" '{n++; if ($3 > tol) {k++; if ($3 > max) {max = $3; at = $1 " m " $2}}}
    END {printf "%d ratios (gemm-only / weave-gemm), %d past %s", n, k, tol; if (k) printf " (max %.3f: %s)", max, at}' \
    "$LOGS/leg_ratios.txt")"
  awk -v tol="$tol" '$3 > tol' "$LOGS/leg_ratios.txt" | head -40
elif [ "$mode" != tests ] && [ "$mode" != fused ]; then
  if [ "$mode" != gemm ] && [ "$mode" != comm ]; then
    bench copy copy ${COPY_ARGS:-}
    "$BIN"/weave bench copy --sizes 64 --inject-skip >"$LOGS/bench_copy_negative.txt" 2>&1
    rc=$?
    verdict_fail "bench copy --inject-skip" $rc 1
    note "bench copy --inject-skip (negative control, must exit 1): exit $rc"
  fi
  if [ "$mode" != comm ]; then
    bench gemm gemm ${GEMM_ARGS:-}
    [ -n "${GEMM_ARGS2:-}" ] && bench gemm2 gemm ${GEMM_ARGS2}
    bench decode decode ${DECODE_ARGS:---compare-routes}
    # The tiled kernel's PDL variants side by side (a diagnostic; off unless listed).
    for v in ${DECODE_PDL_VARIANTS:-}; do
      WEAVE_GEMM_PDL=$v bench "decode_pdl_$(echo "$v" | tr ':,' '__')" decode --decode-route tiles \
        ${DECODE_PDL_ARGS:---tp 2,8 -m 8,16,32 --quant bf16,ptpc}
    done
  fi
  [ "$mode" != gemm ] && bench comm comm ${COMM_ARGS:-}
fi
# The fused operators (mode fused, or full): on one GPU in the emulated world (labelled, not NVLink
# numbers), W = 2 and 4, the emulated tests repeated (the W = 4 queue stalls of
# testing/emulated_world.hpp show up in about one run of four).
if [ "$mode" = fused ] || [ "$mode" = full ]; then
  t1=$(date +%s)
  run_bounded ${TEST_TIMEOUT:-300} "$TBIN/weave_tests_gpu" --gtest_brief=1 --gtest_repeat=${FUSED_REPEAT:-3} \
    --gtest_filter='Emulated*' >"$LOGS/tests_fused.log" 2>&1
  rc=$?
  failed_runs=$(grep -cE '^\[  FAILED  \] [A-Z]' "$LOGS/tests_fused.log")
  verdict_pass "tests Emulated* x${FUSED_REPEAT:-3}" $rc
  verdict_none "tests Emulated* x${FUSED_REPEAT:-3}: failed case runs" "$failed_runs"
  note "tests Emulated* x${FUSED_REPEAT:-3} (exit $rc, $(( $(date +%s) - t1 )) s): $failed_runs failed case runs"
  grep -E '^\[  FAILED  \] [A-Z]' "$LOGS/tests_fused.log" | sort | uniq -c | head -20
  bench gemm_ag_emu2 gemm-ag --emulate-world 2 ${GEMM_AG_ARGS:--m 1024,4096 -i 5}
  ar_ms=${GEMM_AR_MS:-128,1024,4096,8192}
  bench gemm_ar_emu2 gemm-ar --emulate-world 2 -m "$ar_ms" ${GEMM_AR_ARGS:--i 5} --calibrate "$LOGS/calibration_gemm_ar.txt"
  # The table it wrote, read back by the planner (auto's choice per M and why).
  "$BIN"/weave plan gemm-ar --world 2 -m "$ar_ms" --calibration "$LOGS/calibration_gemm_ar.txt" \
    >"$LOGS/plan_gemm_ar_calibrated.txt" 2>&1
  rc=$?
  verdict_pass "plan gemm-ar --calibration" $rc
  note "plan gemm-ar --calibration (the table the bench wrote): exit $rc"
  grep -E '^ +[0-9]' "$LOGS/plan_gemm_ar_calibrated.txt" | cut -c1-8,190-300 | head -8
  bench gemm_ar_emu2_bs gemm-ar --emulate-world 2 --quant blockscale -m "$ar_ms" ${GEMM_AR_ARGS:--i 5}
  # Decode batches at a model layer: decode (GEMV + LL all-reduce) against decode-fused (one kernel).
  for q in bf16 ptpc; do
    bench "gemm_ar_emu2_decode_$q" gemm-ar --emulate-world 2 --quant $q -n 7168 -k 2048 -m 1,4,8,16,32 \
      --arms split-lsa,decode,decode-fused -i 9
  done
  bench gemm_ar_emu4 gemm-ar --emulate-world 4 -m 4096 ${GEMM_AR_ARGS:--i 5}
  bench gemm_rs_emu2 gemm-rs --emulate-world 2 ${GEMM_RS_ARGS:--m 1024,4096 -i 5}
  bench ag_gemm_emu2 ag-gemm --emulate-world 2 ${AG_GEMM_ARGS:--m 1024,4096 -i 5}
fi
