"""Host time per call of weave's Python entry points at world 1, the host's cost alone (no sync
inside the timed loop: the GPU runs behind), against torch.nn.Linear of the same shape:

    python scripts/bench_python_host.py [--quant bf16,ptpc] [--m 1,512] [--calls 300]

For each quant and M: a ColumnParallelLinear 4096 -> 14336 and a RowParallelLinear 14336 -> 4096
(weave.nn, from torch.nn.Linear), their activation quantisation alone, torch.ops.weave.gemm,
weave.gemm (the same without torch's dispatcher), Gemm.run of a held plan,
torch.ops.weave.gemm_all_reduce and GemmAllReduce.run(out=). Each: 20 calls of warm-up, then
--calls calls between two time.perf_counter() reads, in microseconds per call. Exit 77 with the
reason without a Hopper GPU or torch with CUDA (docs/perf/python.md has the numbers).
"""
from __future__ import annotations

import argparse
import sys
import time

import weave


def per_call_us(fn, calls: int, torch) -> float:
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    host = (time.perf_counter() - t) / calls * 1e6
    torch.cuda.synchronize()
    return host


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quant", default="bf16,ptpc", help="comma-separated: bf16, ptpc, blockscale, mxfp8")
    ap.add_argument("--m", default="1,512", help="comma-separated token counts (default 1,512)")
    ap.add_argument("--calls", type=int, default=300, help="timed calls per entry (default 300)")
    args = ap.parse_args()
    quants = args.quant.split(",")
    if any(q not in ("bf16", "ptpc", "blockscale", "mxfp8") for q in quants):
        ap.error(f"--quant {args.quant}: expected bf16, ptpc, blockscale and/or mxfp8")
    try:
        ms = [int(v) for v in args.m.split(",")]
    except ValueError:
        ap.error(f"--m {args.m!r}: expected integers")
    if args.calls < 1 or any(m < 1 or m > 8192 for m in ms):
        ap.error("--calls must be >= 1 and each --m in 1..8192")
    why = weave.no_gpu_reason()
    try:
        import torch
    except ImportError:
        why = why or "needs torch with CUDA"
    if why:
        print(f"bench_python_host: skipped: {why}")
        return 77
    from weave import _gemm, nn as weave_nn, ops as weave_ops  # torch.ops.weave.* with them

    torch.cuda.set_device(0)
    (comm,) = weave.Communicator.create_local([0])
    linear = lambda i, o: torch.nn.Linear(i, o, bias=False, device="cuda", dtype=torch.bfloat16)
    us = lambda fn: per_call_us(fn, args.calls, torch)
    with torch.no_grad():
        for quant in quants:
            lin, lin2 = linear(4096, 14336), linear(14336, 4096)
            col = weave_nn.ColumnParallelLinear.from_linear(lin, comm=comm, quant=quant)
            row = weave_nn.RowParallelLinear.from_linear(lin2, comm=comm, quant=quant, max_tokens=max(ms))
            h = weave_ops.handle(row.op)
            for m in ms:
                x = torch.randn(m, 4096, device="cuda", dtype=torch.bfloat16)
                x2 = torch.randn(m, 14336, device="cuda", dtype=torch.bfloat16)
                a, b, sa, sb = col._operands(x)
                a2, b2, sa2, sb2 = row._operands(x2)
                out = torch.empty(m, 14336, device="cuda", dtype=torch.bfloat16)
                out2 = torch.empty(m, 4096, device="cuda", dtype=torch.bfloat16)
                held = weave.Gemm(a, b, out, scale_a=sa, scale_b=sb, mode=quant)
                rows = [("ColumnParallelLinear", lambda: col(x)), ("RowParallelLinear", lambda: row(x2)),
                        ("torch.nn.Linear", lambda: lin(x)), ("activation quantisation", lambda: col._operands(x)),
                        ("torch.ops.weave.gemm", lambda: torch.ops.weave.gemm(a, b, sa, sb, mode=quant)),
                        ("weave.gemm", lambda: _gemm.gemm(a, b, scale_a=sa, scale_b=sb, mode=quant, out=out)),
                        ("Gemm.run (held plan)", held.run),
                        ("torch.ops.weave.gemm_all_reduce", lambda: torch.ops.weave.gemm_all_reduce(h, a2, b2, sa2, sb2)),
                        ("GemmAllReduce.run(out=)", lambda: row.op.run(a2, b2, scale_a=sa2, scale_b=sb2, out=out2))]
                print(f"{quant} M {m}: " + " | ".join(f"{name} {us(fn):.1f}" for name, fn in rows), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
