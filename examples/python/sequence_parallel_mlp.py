"""A sequence-parallel MLP block under torchrun on weave's fused operators, checked against torch
doing the same with its own GEMMs and torch.distributed collectives.

Sequence parallelism (Megatron's) keeps each rank's tokens / world rows between blocks. The block:
  up    weave.AllGatherGemm      every rank's rows [tokens / world, hidden] gathered inside the op,
                                 times this rank's ffn / world rows of W_up: [tokens, ffn / world]
  act   gelu                     elementwise: stays on this rank's features
  down  weave.GemmReduceScatter  that times this rank's ffn / world columns of W_down, summed over
                                 ranks, each rank keeping its own rows: [tokens / world, hidden]
torch's reference: dist.all_gather_into_tensor, torch.matmul, gelu, torch.matmul, then
dist.reduce_scatter_tensor of the fp32 partial sums. The weave block then replays from one CUDA
graph and is timed. weave.nn.ColumnParallelLinear / RowParallelLinear(sequence_parallel=True) wrap
the same two ops as torch.nn.Modules, with fp8 weights if asked (quant=).

    torchrun --nproc_per_node=2 examples/python/sequence_parallel_mlp.py [--tokens 2048 --hidden 4096 --ffn 14336]

Without a Hopper GPU (or torch with CUDA) each rank says why and exits 77 ("skipped": it could not
run), like the C++ examples; 0: the block matched torch's; 1: it did not; 2: bad arguments.
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


class SequenceParallelMLP:
    """y_r [tokens / world, hidden] = this rank's rows of sum over ranks of
    gelu([x_0; ...; x_{world-1}] @ W_up_r^T) @ W_down_r^T, bf16. Reads self.x, writes self.y."""

    def __init__(self, comm: weave.Communicator, w_up: torch.Tensor, w_down: torch.Tensor, tokens: int):
        ffn_r, hidden = w_up.shape                      # this rank's rows of W_up [ffn, hidden]
        rows = tokens // comm.world_size
        self.w_up, self.w_down = w_up, w_down           # w_down: this rank's columns of W_down [hidden, ffn]
        # Collective: every rank builds the same ops in the same order (each allocates its window).
        self.up = weave.AllGatherGemm(comm, n=ffn_r, k=hidden, m_max=rows)
        self.down = weave.GemmReduceScatter(comm, n=hidden, k=ffn_r, m_max=tokens)
        bf16 = dict(device=w_up.device, dtype=torch.bfloat16)
        self.x = torch.empty(rows, hidden, **bf16)      # this rank's token rows
        self.hid = torch.empty(tokens, ffn_r, **bf16)   # every token, this rank's ffn features
        self.y = torch.empty(rows, hidden, **bf16)

    def __call__(self) -> torch.Tensor:  # only enqueues: graph-capturable
        self.up.run(self.x, self.w_up, out=self.hid)    # the GEMM stores straight into hid
        act = torch.nn.functional.gelu(self.hid)
        return self.down.run(act, self.w_down, out=self.y)


def torch_block(x_rows: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor, tokens: int) -> torch.Tensor:
    """The same block with torch's GEMMs and NCCL collectives (fp32 result)."""
    gathered = x_rows.new_empty(tokens, x_rows.shape[1])
    dist.all_gather_into_tensor(gathered, x_rows)       # rank s's rows at [s rows, (s + 1) rows)
    hid = torch.nn.functional.gelu(gathered @ w_up.T)
    partial = (hid @ w_down.T).float()
    out = partial.new_empty(x_rows.shape[0], partial.shape[1])
    dist.reduce_scatter_tensor(out, partial)            # this rank's rows of the sum
    return out


def skip_reason() -> str:
    """'' when this machine can run the example, else why not (the C++ examples skip alike: exit 77)."""
    if weave.no_gpu_reason():
        return weave.no_gpu_reason()
    if torch is None:
        return "this example needs PyTorch with CUDA (pip install torch)"
    return "" if torch.cuda.is_available() else "torch sees no CUDA device"


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=2048,
                    help="tokens of one call, all ranks' together (a multiple of the world; default 2048)")
    ap.add_argument("--hidden", type=int, default=4096, help="the model's hidden size (default 4096)")
    ap.add_argument("--ffn", type=int, default=14336,
                    help="the MLP's intermediate size (a multiple of the world; default 14336)")
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
    if args.tokens % world or args.ffn % world:
        print(f"--tokens ({args.tokens}) and --ffn ({args.ffn}) must be multiples of the world ({world})")
        dist.destroy_process_group()
        return 2
    comm = weave.Communicator.from_process_group()    # NCCL unique id broadcast over the group

    torch.manual_seed(0)                               # the same full weights and input on every rank
    h, f, t = args.hidden, args.ffn, args.tokens
    w_up = (torch.randn(f, h, device="cuda") * h ** -0.5).to(torch.bfloat16)
    w_down = (torch.randn(h, f, device="cuda") * f ** -0.5).to(torch.bfloat16)
    x = torch.randn(t, h, device="cuda").to(torch.bfloat16)
    f_r, rows = f // world, t // world
    w_up_r = w_up[rank * f_r:(rank + 1) * f_r].contiguous()          # column-parallel: rows of W_up
    w_down_r = w_down[:, rank * f_r:(rank + 1) * f_r].contiguous()    # row-parallel: columns of W_down
    x_r = x[rank * rows:(rank + 1) * rows]

    mlp = SequenceParallelMLP(comm, w_up_r, w_down_r, t)
    mlp.x.copy_(x_r)
    mlp()
    ref = torch_block(x_r, w_up_r, w_down_r, t)
    torch.cuda.synchronize()
    err = ((mlp.y.float() - ref).norm() / ref.norm()).item()

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        mlp()
    graph.replay()
    torch.cuda.synchronize()
    replay_err = ((mlp.y.float() - ref).norm() / ref.norm()).item()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(args.iters):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    if rank == 0:
        print(f"world {world}: up   {mlp.up.describe()}\n  plan: {mlp.up.plan(rows)['reason']}")
        print(f"world {world}: down {mlp.down.describe()}\n  plan: {mlp.down.plan(t)['reason']}")
        print(f"  rel L2 vs torch (all_gather_into_tensor, matmul, gelu, matmul, reduce_scatter_tensor): {err:.2e} "
              f"(graph replay {replay_err:.2e}); {start.elapsed_time(end) * 1000 / args.iters:.1f} us per block")
    ok = err < 1e-2 and replay_err < 1e-2
    if not ok:
        print(f"rank {rank}: weave's block differs from torch's: rel L2 {err:.2e}, replayed {replay_err:.2e}")
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
