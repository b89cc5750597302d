"""A row-parallel (tensor-parallel) linear layer under torchrun, on weave's fused operators: each
rank holds a K-slice of the weight and multiplies its slice of the activations; weave.GemmAllReduce
sums the partial outputs inside the same op (GEMM and all-reduce overlapped). With
--sequence-parallel it is the second half of a sequence-parallel block: a column-parallel layer on
weave.AllGatherGemm gathers every rank's m / world rows of the input [m, n] into its K-slice of an
up projection ([m, k / world], the row layer's input), and weave.GemmReduceScatter gives each rank
its m / world rows of the sum. Everything replays from one CUDA graph.

    torchrun --nproc_per_node=2 examples/python/tp_linear.py [--m 128 --n 4096 --k 8192] [--sequence-parallel]

Without a Hopper GPU (or torch with CUDA) each rank says why and exits 77 ("skipped": it could not run), like the C++ examples.
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


class RowParallelLinear:
    """y = sum over ranks of x_r[M, K/world] @ w_r[N, K/world]^T, bf16: all of its M rows
    (GemmAllReduce), or with sequence_parallel this rank's M / world rows (GemmReduceScatter)."""

    def __init__(self, comm: weave.Communicator, w_shard: torch.Tensor, m: int, sequence_parallel: bool = False):
        n, k_shard = w_shard.shape
        self.w = w_shard
        self.x = torch.empty(m, k_shard, device=w_shard.device, dtype=torch.bfloat16)
        op = weave.GemmReduceScatter if sequence_parallel else weave.GemmAllReduce
        self.op = op(comm, n=n, k=k_shard, m_max=m)   # collective: every rank, in the same order
        rows = m // comm.world_size if sequence_parallel else m
        self.y = torch.empty(rows, n, device=w_shard.device, dtype=torch.bfloat16)

    def __call__(self):  # reads self.x, writes self.y; only enqueues (graph-capturable)
        return self.op.run(self.x, self.w, out=self.y)


class ColumnParallelLinear:
    """y = [x_0; ...; x_{world-1}] @ w_r[K/world, H]^T, bf16, [M, K/world]: every rank's M / world rows
    of the input gathered inside the op (AllGatherGemm), times this rank's rows of the weight; the
    output is the K-slice a row-parallel layer takes."""

    def __init__(self, comm: weave.Communicator, w_shard: torch.Tensor, m: int):
        k_shard, h = w_shard.shape
        self.w = w_shard
        self.x = torch.empty(m // comm.world_size, h, device=w_shard.device, dtype=torch.bfloat16)
        self.op = weave.AllGatherGemm(comm, n=k_shard, k=h, m_max=m // comm.world_size)  # collective
        self.y = torch.empty(m, k_shard, device=w_shard.device, dtype=torch.bfloat16)

    def __call__(self):  # reads self.x, writes self.y (the GEMM stores into it); graph-capturable
        return self.op.run(self.x, self.w, out=self.y)


def skip_reason() -> str:
    """'' when this machine can run the example, else why not (the C++ examples skip alike: exit 77)."""
    if weave.no_gpu_reason():
        return weave.no_gpu_reason()
    if torch is None:
        return "this example needs PyTorch with CUDA (pip install torch)"
    return "" if torch.cuda.is_available() else "torch sees no CUDA device"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, default=128)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--k", type=int, default=8192)
    ap.add_argument("--sequence-parallel", action="store_true",
                    help="AllGatherGemm gathers each rank's m / world input rows into the row layer's input first; "
                         "GemmReduceScatter: each rank keeps its m / world rows of the sum (m a multiple of the world)")
    args = ap.parse_args()
    why = skip_reason()
    if why:
        print(f"GPU part skipped: {why}")
        return 77  # the usual "skipped" status, as the C++ examples
    local = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    comm = weave.Communicator.from_process_group()    # NCCL unique id broadcast over the group

    torch.manual_seed(0)                                # the same full weights and input everywhere
    w = (torch.randn(args.n, args.k, device="cuda") * 0.02).to(torch.bfloat16)
    shard = args.k // world
    layer = RowParallelLinear(comm, w[:, rank * shard:(rank + 1) * shard].contiguous(), args.m, args.sequence_parallel)
    if args.sequence_parallel:  # x = [x_0; ...] @ w_up^T, x_r: rank r's m / world rows of the block's input
        rows = args.m // world
        inp = torch.randn(args.m, args.n, device="cuda").to(torch.bfloat16)
        w_up = (torch.randn(args.k, args.n, device="cuda") * 0.02).to(torch.bfloat16)
        up = ColumnParallelLinear(comm, w_up[rank * shard:(rank + 1) * shard].contiguous(), args.m)
        up.x.copy_(inp[rank * rows:(rank + 1) * rows])
        layer.x = up.y                                  # the column layer's output is the row layer's input
        x = (inp.float() @ w_up.float().T).to(torch.bfloat16)
        layers = (up, layer)
    else:
        x = torch.randn(args.m, args.k, device="cuda").to(torch.bfloat16)
        layer.x.copy_(x[:, rank * shard:(rank + 1) * shard])
        layers = (layer,)

    def step():
        for f in layers:
            f()

    step()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    graph.replay()
    torch.cuda.synchronize()
    ref = x.float() @ w.float().T
    if args.sequence_parallel:  # this rank's rows of the sum
        ref = ref[rank * rows:(rank + 1) * rows]
    err = ((layer.y.float() - ref).norm() / ref.norm()).item()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(20):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    if rank == 0:
        for f in layers:
            print(f"world {world}: {f.op.describe()}")
        print(f"  rel L2 vs the unsharded fp32 product {err:.2e}; {start.elapsed_time(end) * 1000 / 20:.1f} us per "
              f"{'block' if args.sequence_parallel else 'layer'}")
    assert err < 1e-2, err
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
