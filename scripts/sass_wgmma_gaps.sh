#!/usr/bin/env bash
# What ptxas placed between the wgmmas of one group (WARPGROUP.ARRIVE ... WARPGROUP.DEPBAR), per
# kernel of a binary. The warp issues in order, so an instruction there that waits on a load (a
# shared-memory load's result multiplied before the next wgmma) holds back the rest of the group;
# PTX order does not prevent it (docs/perf/gemm.md "scale loads": there, measured, the stall cost
# less than holding the loads back, so a gap is a lead for a profile, not a fault). Needs only cuobjdump.
#
#   scripts/sass_wgmma_gaps.sh [--check] BINARY [NAME_FILTER]
#
# Prints one line per kernel with anything between its wgmmas (the gaps' loads and floating-point
# instructions, in order), and a count of kernels where a gap holds a load and then an FMUL or
# FFMA (the stall pattern). Exit 0; with --check, 1 when any kernel has the pattern; 2 on bad
# arguments, without cuobjdump or when it fails (it needs nvdisasm too).
set -euo pipefail
check=0
if [ "${1:-}" = --check ]; then check=1; shift; fi
if [ $# -lt 1 ] || [ ! -f "$1" ]; then
  echo "usage: $0 [--check] BINARY [NAME_FILTER]  (BINARY: libweave.so, weave, a cubin; a readable file)" >&2
  exit 2
fi
cuobjdump=${CUOBJDUMP:-$(command -v cuobjdump || true)}
[ -n "$cuobjdump" ] || cuobjdump=/usr/local/cuda/bin/cuobjdump
if [ ! -x "$cuobjdump" ]; then
  echo "$0: cuobjdump not found (set CUOBJDUMP=path; it ships with the CUDA toolkit)" >&2
  exit 2
fi
# cuobjdump -sass runs nvdisasm: look beside cuobjdump too (PyPI's packages share a bin/).
export PATH="$(dirname "$cuobjdump"):$PATH"
sass=$(mktemp)
trap 'rm -f "$sass"' EXIT
if ! "$cuobjdump" -sass "$1" >"$sass"; then
  echo "$0: '$cuobjdump -sass $1' failed (above); nothing was checked" >&2
  exit 2
fi
awk -v filter="${2:-}" -v check=$check '
  /Function :/ { fn = $3; in_group = 0; next }
  filter != "" && index(fn, filter) == 0 { next }
  /WARPGROUP.ARRIVE/ { in_group = 1; seen = 0; gap = ""; next }
  /[QH]GMMA/ {
    if (in_group) { if (seen && gap != "") gaps[fn] = gaps[fn] " [" gap " ]"; seen = 1; gap = "" }
    next
  }
  /WARPGROUP.DEPBAR/ { in_group = 0; next }
  in_group && seen {
    for (i = 1; i <= NF; ++i) if ($i ~ /^(LDS|LDG|FMUL|FFMA|FADD)/) { gap = gap " " $i; break }
  }
  END {
    stalls = 0
    for (f in gaps) { print f ":" gaps[f]; if (gaps[f] ~ /LD[SG][^]]*F(MUL|FMA)/) ++stalls }
    printf "%d kernel(s) with instructions between their wgmmas, %d with a load and then an FMUL/FFMA in one gap\n",
           length(gaps), stalls
    if (check && stalls > 0) exit 1
  }' "$sass"
