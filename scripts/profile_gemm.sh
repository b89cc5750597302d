#!/usr/bin/env bash
# Nsight Compute profile of weave's GEMM kernels and cuBLASLt's, side by side, one launch each,
# L2-hot (`weave bench gemm --hot -w 0 -i 1 --calls 1`), clocks left alone (--clock-control none).
#   bash scripts/profile_gemm.sh BIN_DIR OUT_CSV "MxNxK:quant[:out] ..."
# BIN_DIR holds the `weave` CLI (and libweave.so); the environment must already let it run (see
# scripts/gpu_all.sh). Prints one line per kernel: duration, tensor-pipe and issue-slot use, SM
# clock, global-store sectors per request, shared-store bank conflicts, DRAM throughput. Exits 1,
# naming the specs, when ncu or weave failed for one or it profiled no kernel.
set -uo pipefail
bin=$1; out=$2; shift 2
metrics=gpu__time_duration.sum,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active
metrics+=,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__cycles_elapsed.avg.per_second
metrics+=,l1tex__t_requests_pipe_lsu_mem_global_op_st.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum
metrics+=,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
metrics+=,smsp__inst_executed.sum,launch__grid_size,launch__registers_per_thread
# EXTRA_METRICS (comma-separated) adds metrics, e.g. L2 and shared-memory throughput.
[ -n "${EXTRA_METRICS:-}" ] && metrics+=,$EXTRA_METRICS
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$ncu" ] || { echo "profile_gemm: ncu not found" >&2; exit 1; }
: >"$out"
failed=()
for spec in "$@"; do
  IFS=: read -r shape quant outdt <<<"$spec"
  outdt=${outdt:-bf16}
  # weave's kernels are sm90_gemm_kernel<...> (and the mxfp8 route's mx_dequant_kernel, blockscale's scale_a_mn_copy_kernel); cuBLASLt's Hopper GEMMs are nvjet_* / sm90_xmma_*.
  "$ncu" --clock-control none --csv --metrics "$metrics" \
    --kernel-name regex:'sm90_gemm_kernel|mx_dequant|scale_a_mn_copy|nvjet|sm90_xmma|cutlass' --launch-count 12 \
    "$bin/weave" bench gemm --hot -w 0 -i 1 --calls 1 --no-idle-gate --cpu-ref-max 0 \
    --shapes "$shape" --quant "$quant" --out "$outdt" 2>/dev/null |
    grep '^"' | sed "s/^/\"$shape:$quant:$outdt\",/" >>"$out"
  # ncu, weave or an empty profile (no kernel matched): the table below would silently miss the row.
  st=("${PIPESTATUS[@]}")
  [ "${st[0]}" = 0 ] && [ "${st[1]}" = 0 ] || failed+=("$spec")
done
# Compact view: shape, kernel (first 60 chars), metric name, value.
python3 - "$out" <<'PY'
import csv, sys, collections
rows = list(csv.reader(open(sys.argv[1])))
data = collections.OrderedDict()
for r in rows:
    if len(r) < 10 or r[1] == "ID": continue
    spec, kid, kname, metric, value = r[0], r[1], r[5], r[-3], r[-1]
    data.setdefault((spec, kid, kname), {})[metric] = value
short = {"gpu__time_duration.sum": "us", "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active": "tc%",
         "smsp__issue_active.avg.pct_of_peak_sustained_active": "issue%", "sm__cycles_elapsed.avg.per_second": "GHz",
         "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum": "st_req", "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum": "st_sect",
         "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum": "smem_st_confl",
         "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram%", "smsp__inst_executed.sum": "inst",
         "launch__grid_size": "grid", "launch__registers_per_thread": "regs"}
for r in rows:  # EXTRA_METRICS: shown under their own names
    if len(r) >= 10 and r[1] != "ID" and r[-3] not in short: short[r[-3]] = r[-3]
for (spec, kid, kname), m in data.items():
    def num(k):
        try: return float(m.get(k, "nan").replace(",", ""))
        except ValueError: return float("nan")
    us = num("gpu__time_duration.sum") / 1000.0  # ncu reports ns (or us: the unit column says)
    print(f"{spec:28s} {kname[:58]:58s} " + " ".join(f"{short[k]}={m.get(k,'?')}" for k in short))
PY
[ ${#failed[@]} -eq 0 ] || { echo "profile_gemm: FAILED for: ${failed[*]}" >&2; exit 1; }
