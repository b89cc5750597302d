#!/usr/bin/env bash
# Where weave's GEMM kernel stalls, per SASS instruction: Nsight Compute's warp-state sampling
# (SourceCounters) for one launch of the planner's kernel at one shape, L2-hot (HOT=0: cold), clocks
# left alone.
#   bash scripts/profile_gemm_stalls.sh BIN_DIR OUT_DIR MxNxK:quant[:out] [TOP]
# LAUNCH_SKIP=n profiles the (n+1)-th GEMM launch instead: the bench validates its weave arms in
# order, so for blockscale LAUNCH_SKIP=1 is the mn-major arm (weave-mn) after the raw one.
# KERNEL_REGEX (default sm90_gemm_kernel) picks another kernel, e.g. gemv_stream_kernel for the bf16
# decode GEMV at M <= 8; HOT=0 runs the bench with cold weights (ncu flushes the caches before the
# launch too), which a memory-bound GEMV needs to be profiled as it runs.
# Writes OUT_DIR/<spec>.ncu-rep and OUT_DIR/<spec>.source.csv, then prints the TOP (default 30)
# instructions by stall samples with their leading stall reasons, and the kernel's warp-state summary.
set -uo pipefail
bin=$1; outdir=$2; spec=$3; top=${4:-30}
mkdir -p "$outdir"
IFS=: read -r shape quant outdt <<<"$spec"
outdt=${outdt:-bf16}
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$ncu" ] || { echo "profile_gemm_stalls: ncu not found" >&2; exit 1; }
name=$(echo "$spec" | tr ':x' '__')
"$ncu" --clock-control none --set none --section SourceCounters --section WarpStateStats \
  --kernel-name regex:"${KERNEL_REGEX:-sm90_gemm_kernel}" --launch-skip "${LAUNCH_SKIP:-0}" --launch-count 1 -f -o "$outdir/$name" \
  "$bin/weave" bench gemm $([ "${HOT:-1}" = 0 ] || echo --hot) -w 0 -i 1 --calls 1 --no-idle-gate --cpu-ref-max 0 \
  --shapes "$shape" --quant "$quant" --out "$outdt" >"$outdir/$name.log" 2>&1 || { tail -20 "$outdir/$name.log"; exit 1; }
"$ncu" -i "$outdir/$name.ncu-rep" --page details --section WarpStateStats --csv 2>/dev/null |
  awk -F'","' '{print $(NF-2) " = " $NF}' | tr -d '"' | grep -v "^Metric Name" | head -40
"$ncu" -i "$outdir/$name.ncu-rep" --page source --print-source sass --csv >"$outdir/$name.source.csv" 2>"$outdir/$name.source.err"
python3 - "$outdir/$name.source.csv" "$top" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
top = int(sys.argv[2])
hdr_i = next((i for i, r in enumerate(rows) if any("Source" == c or "Address" == c for c in r)), None)
if hdr_i is None:
    print("no source table:", rows[:3]); sys.exit(0)
hdr = rows[hdr_i]; body = rows[hdr_i + 1:]
print("columns:", " | ".join(hdr))
def col(name):
    return next((i for i, h in enumerate(hdr) if h.startswith(name)), None)
c_src, c_all = col("Source"), col("Warp Stall Sampling (All")
reasons = [i for i, h in enumerate(hdr) if h.startswith("stall_") or "Stall" in h and "Sampling" not in h]
def num(v):
    try: return float(v.replace(",", ""))
    except: return 0.0
tot = sum(num(r[c_all]) for r in body if len(r) > c_all)
print(f"total stall samples {tot:.0f}")
for r in sorted(body, key=lambda r: -num(r[c_all]) if len(r) > c_all else 0)[:top]:
    rs = sorted(((num(r[i]), hdr[i]) for i in reasons if i < len(r)), reverse=True)[:3]
    print(f"{num(r[c_all]) / max(tot, 1) * 100:5.1f}%  {r[c_src][:70]:70s}  " + ", ".join(f"{h}={v:.0f}" for v, h in rs if v > 0))
PY
