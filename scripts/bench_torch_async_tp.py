"""weave's sequence-parallel pair against what PyTorch users run today, one process per GPU:

    torchrun --nproc_per_node=2 scripts/bench_torch_async_tp.py [--tokens 1024,4096] [--json FILE]

For the column-parallel GEMMs of the decoder layer presets (weave.layer_preset: qkv_proj,
gate_up_proj, ...) at the run's world size, AllGatherGemm's arms:
  weave          weave.AllGatherGemm (auto), A_r passed as a torch tensor
  torch-async    torch.ops.symm_mem.fused_all_gather_matmul (PyTorch's async-TP, symmetric memory)
  torch-split    dist.all_gather_into_tensor, then torch.matmul (NCCL, then cuBLAS)
and for the row-parallel GEMMs (o_proj, down_proj), GemmReduceScatter's:
  weave          weave.GemmReduceScatter (auto)
  torch-async    torch.ops.symm_mem.fused_matmul_reduce_scatter
  torch-split    torch.matmul, then dist.reduce_scatter_tensor
in bf16, with the same operands on every arm. With --quant ptpc (fp8 e4m3, one fp32 scale per row
of A and of B: torch's "row-wise" recipe), the column GEMMs run as
  weave          weave.AllGatherGemm(quant="ptpc"): e4m3 rows and their scales travel
  torch-async    torch.ops.symm_mem.fused_all_gather_scaled_matmul
  torch-split    dist.all_gather_into_tensor of A and of its scales, then torch._scaled_mm
(the row GEMMs are bf16 only here: their partial sums travel in bf16 either way). --tokens is the sequence's tokens over all ranks (each
rank holds tokens / world rows of the activations). Each arm: warm-up calls, then --iters timed
calls between CUDA events (arms interleaved, a barrier before each), the median per rank and the
maximum over ranks reported; every arm's output is compared with torch-split's first (relative L2
< 1e-2), so a fast wrong arm fails the run (exit 1). Times are per call, in microseconds; `ratio` is
weave's time over the faster torch arm (< 1: weave faster). Without 2+ GPUs or without torch's
symmetric-memory operators it says why and exits 77.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

SKIP = 77


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", default="1024,4096,16384",
                   help="tokens over all ranks, comma-separated (each a multiple of 128 x world)")
    p.add_argument("--presets", default="llama3-70b,qwen3-32b",
                   help="decoder layer presets whose GEMMs to run (weave.layer_presets())")
    p.add_argument("--quant", default="bf16,ptpc",
                   help="bf16 and/or ptpc (fp8 row-wise: the column GEMMs only), comma-separated")
    p.add_argument("--iters", type=int, default=20, help="timed calls per arm (median)")
    p.add_argument("--warmup", type=int, default=5, help="untimed calls per arm first")
    p.add_argument("--json", default="", help="also write the rows to this file (rank 0)")
    args = p.parse_args(argv)
    try:
        args.tokens = [int(t) for t in args.tokens.split(",")]
    except ValueError:
        p.error(f"--tokens '{args.tokens}': expected integers separated by commas")
    if args.iters < 1 or args.warmup < 0:
        p.error("--iters must be >= 1 and --warmup >= 0")
    args.quant = args.quant.split(",")
    bad = [q for q in args.quant if q not in ("bf16", "ptpc")]
    if bad or not args.quant:
        p.error(f"--quant {','.join(bad) or '(empty)'}: expected bf16 and/or ptpc")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        import torch
        import torch.distributed as dist
        from torch.distributed import _symmetric_memory as symm_mem
    except ImportError as e:
        print(f"bench_torch_async_tp: skipped: torch with torch.distributed is needed ({e})")
        return SKIP
    import weave

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world < 2 or not torch.cuda.is_available() or weave.no_gpu_reason():
        print(f"bench_torch_async_tp: skipped: needs torchrun over 2+ GPUs (WORLD_SIZE {world}; "
              f"{weave.no_gpu_reason() or 'torch CUDA ' + str(torch.cuda.is_available())})")
        return SKIP
    for op in ("fused_all_gather_matmul", "fused_matmul_reduce_scatter"):
        if not hasattr(torch.ops.symm_mem, op):
            print(f"bench_torch_async_tp: skipped: this torch has no torch.ops.symm_mem.{op}")
            return SKIP
    bad = [t for t in args.tokens if t < 1 or t % (128 * world)]
    if bad:
        print(f"bench_torch_async_tp: --tokens {bad}: each must be a positive multiple of 128 x world ({128 * world})",
              file=sys.stderr)
        return 2

    rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl")
    group = dist.group.WORLD
    if hasattr(symm_mem, "enable_symm_mem_for_group"):
        symm_mem.enable_symm_mem_for_group(group.group_name)
    comm = weave.Communicator.from_process_group()
    gen = torch.Generator(device="cuda").manual_seed(1234 + rank)

    def timed(fn) -> float:
        """Median of args.iters calls (us) on this rank; the max over ranks."""
        for _ in range(args.warmup):
            fn()
        times = []
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(args.iters):
            dist.barrier()
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            times.append(1000 * start.elapsed_time(stop))
        t = torch.tensor([statistics.median(times)], device="cuda")
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.item()

    def rel_l2(got, want) -> float:
        return ((got.float() - want.float()).norm() / want.float().norm()).item()

    def rowwise_e4m3(x):
        """e4m3 rows and their fp32 scales (amax / 448 per row; weave's ptpc, torch's row-wise)."""
        scale = (x.abs().amax(dim=1).float() / 448.0).clamp_min(1e-12)
        return (x / scale[:, None]).to(torch.float8_e4m3fn), scale

    def column_fp8_arms(m, tokens, g):
        """The ptpc AllGatherGemm arms of one column GEMM (see the header)."""
        a, sa = rowwise_e4m3(torch.randn(m, g.k, device="cuda", generator=gen))
        b, sb = rowwise_e4m3(torch.randn(g.n, g.k, device="cuda", generator=gen))
        dist.broadcast(b.view(torch.uint8), 0)
        dist.broadcast(sb, 0)
        op = weave.AllGatherGemm(comm, n=g.n, k=g.k, m_max=m, quant="ptpc")
        gathered = torch.empty(tokens, g.k, device="cuda", dtype=torch.uint8)
        gathered_scales = torch.empty(tokens, device="cuda")

        def split():
            dist.all_gather_into_tensor(gathered, a.view(torch.uint8))
            dist.all_gather_into_tensor(gathered_scales, sa)
            return torch._scaled_mm(gathered.view(torch.float8_e4m3fn), b.t(), scale_a=gathered_scales[:, None],
                                    scale_b=sb[None, :], out_dtype=torch.bfloat16)

        return op, {"torch-split": split,
                    "torch-async": lambda: torch.ops.symm_mem.fused_all_gather_scaled_matmul(
                        a, [b.t()], sa[:, None].contiguous(), [sb[None, :].contiguous()], 0, group.group_name,
                        [None], [None], [torch.bfloat16], [False])[1][0],
                    "weave": lambda: op.run(a, b, scale_a=sa, scale_b=sb)}

    rows, failed = [], False
    cases = [(name, g, quant) for name in args.presets.split(",")
             for g in weave.layer_preset(name, world=world, quant="bf16").gemms
             for quant in args.quant if g.split == "column" or (g.split == "row" and quant == "bf16")]
    for name, g, quant in cases:
        for tokens in args.tokens:
            m = tokens // world  # this rank's rows
            if quant == "ptpc":
                op, arms = column_fp8_arms(m, tokens, g)
            elif g.split == "column":  # AllGatherGemm: gather A's rows, then one GEMM of all of them
                a = torch.randn(m, g.k, device="cuda", generator=gen).to(torch.bfloat16)
                b = (torch.randn(g.n, g.k, device="cuda", generator=gen) * 0.05).to(torch.bfloat16)
                dist.broadcast(b, 0)
                op = weave.AllGatherGemm(comm, n=g.n, k=g.k, m_max=m)
                gathered = torch.empty(tokens, g.k, device="cuda", dtype=torch.bfloat16)
                out = torch.empty(tokens, g.n, device="cuda", dtype=torch.bfloat16)

                def split():
                    dist.all_gather_into_tensor(gathered, a)
                    return torch.matmul(gathered, b.t(), out=out)

                arms = {"torch-split": split,
                        "torch-async": lambda: torch.ops.symm_mem.fused_all_gather_matmul(
                            a, [b.t()], 0, group.group_name, return_A=False)[1][0],
                        "weave": lambda: op.run(a, b)}
            else:  # GemmReduceScatter: every rank's partial over its K shard, rank r gets band r of the sum
                a = torch.randn(tokens, g.k, device="cuda", generator=gen).to(torch.bfloat16)
                b = (torch.randn(g.n, g.k, device="cuda", generator=gen) * 0.05).to(torch.bfloat16)
                op = weave.GemmReduceScatter(comm, n=g.n, k=g.k, m_max=tokens)
                partial = torch.empty(tokens, g.n, device="cuda", dtype=torch.bfloat16)
                band = torch.empty(m, g.n, device="cuda", dtype=torch.bfloat16)

                def split():
                    torch.matmul(a, b.t(), out=partial)
                    dist.reduce_scatter_tensor(band, partial)
                    return band

                arms = {"torch-split": split,
                        "torch-async": lambda: torch.ops.symm_mem.fused_matmul_reduce_scatter(
                            a, b.t(), "sum", 0, group.group_name),
                        "weave": lambda: op.run(a, b)}
            want = arms["torch-split"]().clone()
            times, errs = {}, {}
            for arm, fn in arms.items():
                errs[arm] = rel_l2(fn(), want)
                torch.cuda.synchronize()
                times[arm] = timed(fn)
                errs[arm] = max(errs[arm], rel_l2(fn(), want))  # again after the timed calls
            wrong = {arm: e for arm, e in errs.items() if not e < 1e-2}
            failed = failed or bool(wrong)
            best_torch = min(times["torch-async"], times["torch-split"])
            row = {"layer": name, "gemm": g.name, "op": "ag-gemm" if g.split == "column" else "gemm-rs",
                   "quant": quant, "tokens": tokens, "n": g.n, "k": g.k, "world": world, **{f"{a}_us": t for a, t in times.items()},
                   "ratio": times["weave"] / best_torch, "rel_l2": errs, "wrong": sorted(wrong)}
            rows.append(row)
            if rank == 0:
                print(f"{name}.{g.name:13s} {row['op']:8s} {quant:5s} tokens {tokens:6d} n {g.n:6d} k {g.k:6d}  "
                      + "  ".join(f"{a} {t:9.1f}" for a, t in times.items())
                      + f"  ratio {row['ratio']:.3f}" + (f"  WRONG {sorted(wrong)}" if wrong else ""), flush=True)
    if rank == 0:
        print("# ratio = weave / the faster torch arm (< 1: weave faster); times: median us per call, max over ranks")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"world": world, "device": torch.cuda.get_device_name(), "torch": torch.__version__,
                           "weave": weave.__version__, "rows": rows}, f, indent=1)
    dist.barrier()
    dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
