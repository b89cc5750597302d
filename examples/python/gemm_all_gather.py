"""weave.GemmAllGather under torchrun: every rank multiplies its own rows A_r [m, k] by the same
weight B [n, k], and every rank gets every rank's products, [world x m, n] with rank s's rows at
[s m, (s + 1) m): the GEMM and the all-gather of its output in one op (overlapped where its planner
says it pays; plan(m) says what it runs and why). It fits where each rank runs a replicated layer on
its own tokens and the next step needs every token's result on every rank, e.g. the end of a
sequence-parallel region. Checked against torch doing the same: torch.matmul of this rank's rows,
then dist.all_gather_into_tensor. Then the op replays from one CUDA graph and is timed.

GemmAllGather gathers the GEMM's outputs (m x n per rank); weave.AllGatherGemm gathers its inputs
(m x k per rank, e4m3 in the fp8 quants) and multiplies them by a column shard
(sequence_parallel_mlp.py): which one fits is which tensor the layer shards and which is smaller.

    torchrun --nproc_per_node=2 examples/python/gemm_all_gather.py [--m 512 --n 4096 --k 4096] [--out-dtype fp32]

Without a Hopper GPU (or torch with CUDA) each rank says why and exits 77 ("skipped": it could not
run), like the C++ examples; 0: the output matched torch's; 1: it did not.
"""
from __future__ import annotations  # the torch annotations stay unevaluated where torch is missing

import argparse
import os
import sys

import weave

try:
    import torch
    import torch.distributed as dist
except ImportError:  # skip_reason() says so
    torch = None


def skip_reason() -> str:
    """'' when this machine can run the example, else why not (the C++ examples skip alike: exit 77)."""
    if weave.no_gpu_reason():
        return weave.no_gpu_reason()
    if torch is None:
        return "this example needs PyTorch with CUDA (pip install torch)"
    return "" if torch.cuda.is_available() else "torch sees no CUDA device"


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", type=int, default=512, help="rows per rank (the same on every rank; default 512)")
    ap.add_argument("--n", type=int, default=4096, help="output features: rows of the shared weight (default 4096)")
    ap.add_argument("--k", type=int, default=4096, help="input features (default 4096)")
    ap.add_argument("--out-dtype", choices=["bf16", "fp32"], default="bf16",
                    help="the gathered output's dtype (fp32: bf16 inputs only, as here; default bf16)")
    ap.add_argument("--iters", type=int, default=20, help="graph replays timed (default 20)")
    return ap.parse_args()


def main():
    args = parse_args()
    why = skip_reason()
    if why:
        print(f"GPU part skipped: {why}")
        return 77  # the usual "skipped" status, as the C++ examples
    local = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    comm = weave.Communicator.from_process_group()    # NCCL unique id broadcast over the group

    torch.manual_seed(0)                               # the same weight on every rank
    m, n, k = args.m, args.n, args.k
    b = (torch.randn(n, k, device="cuda") * k ** -0.5).to(torch.bfloat16)
    torch.manual_seed(1 + rank)                        # each rank its own rows
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    out_dtype = torch.float32 if args.out_dtype == "fp32" else torch.bfloat16
    out = torch.empty(world * m, n, device="cuda", dtype=out_dtype)

    # Collective: every rank builds the same op (it allocates its window for m_max rows per rank).
    op = weave.GemmAllGather(comm, n=n, k=k, m_max=m, out_dtype=args.out_dtype)
    op.run(a, b, out=out)                              # enqueued on torch's current stream; copied into out

    # torch: this rank's rows (in the output's precision), then the gather.
    mine = a @ b.T if out_dtype == torch.bfloat16 else a.float() @ b.float().T
    ref = torch.empty_like(out)
    dist.all_gather_into_tensor(ref, mine)
    torch.cuda.synchronize()
    err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        op.run(a, b, out=out)
    out.zero_()
    graph.replay()
    torch.cuda.synchronize()
    replay_err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(args.iters):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    if rank == 0:
        plan = op.plan(m)
        print(f"world {world}: {op.describe()}\n  plan: {plan['mode']} ({plan['reason']})")
        print(f"  [{world} x {m}, {n}] {args.out_dtype}: rel L2 vs torch (matmul, all_gather_into_tensor) {err:.2e} "
              f"(graph replay {replay_err:.2e}); {start.elapsed_time(end) * 1000 / args.iters:.1f} us per call")
    ok = err < 1e-2 and replay_err < 1e-2
    if not ok:
        print(f"rank {rank}: weave's gathered output differs from torch's: rel L2 {err:.2e}, replayed {replay_err:.2e}")
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
