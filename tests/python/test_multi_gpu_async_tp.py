"""weave's sequence-parallel pair against PyTorch's own async-TP operators, across processes (one
per visible GPU): weave.AllGatherGemm against torch.ops.symm_mem.fused_all_gather_matmul (bf16)
and fused_all_gather_scaled_matmul (fp8 e4m3, row-wise scales: weave's ptpc), and
weave.GemmReduceScatter against fused_matmul_reduce_scatter (bf16). Both sides get the same
operands; the gathered activations must be bitwise equal, the products agree within bf16 rounding
of differently ordered fp32 sums. This is what a torchtitan or vLLM async-TP user runs today, so
the check is that weave can replace it in place. Skipped, with the reason, where fewer than 2 GPUs
are visible or torch has no symmetric-memory operators."""
import pytest

from spawn_ranks import rank_process, spawn_ranks, torch_with_gpus

torch, NGPU = torch_with_gpus(2)
try:
    import torch.distributed._symmetric_memory  # noqa: F401  (defines torch.ops.symm_mem)

    _OPS = ("fused_all_gather_matmul", "fused_all_gather_scaled_matmul", "fused_matmul_reduce_scatter")
    _MISSING = [op for op in _OPS if not hasattr(torch.ops.symm_mem, op)]
except ImportError as e:
    _MISSING = [f"torch.distributed._symmetric_memory ({e})"]
if _MISSING:
    pytest.skip(f"this torch has no {', '.join(_MISSING)}", allow_module_level=True)


def _close(got, want, what, rank):
    assert got.shape == want.shape, f"rank {rank} {what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    err = (got.float() - want.float()).norm() / want.float().norm()
    assert err < 1e-2, f"rank {rank} {what}: relative L2 {err:.3g} against torch's"
    atol = 2e-2 * want.float().abs().max().item()
    assert torch.allclose(got.float(), want.float(), rtol=2e-2, atol=atol), f"rank {rank} {what}: per element"


def _rank(rank, world, init_file, seed, errors):
    import torch.distributed as dist
    from torch.distributed import _symmetric_memory as symm_mem

    import weave

    with rank_process(rank, world, init_file, errors):
        group_name = dist.group.WORLD.group_name
        if hasattr(symm_mem, "enable_symm_mem_for_group"):  # a no-op or gone in newer torch
            symm_mem.enable_symm_mem_for_group(group_name)
        comm = weave.Communicator.from_process_group()
        gen = torch.Generator(device="cuda").manual_seed(seed + rank)
        m, n, k = 256, 1024, 2048  # m: this rank's rows; n: the column shard

        # AllGatherGemm, bf16: torch's returns (gathered A, [A @ B]) with B given as [K, N].
        a = torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16)
        b = (torch.randn(n, k, device="cuda", generator=gen) * 0.05).to(torch.bfloat16)
        dist.broadcast(b, 0)  # the column shard is one weight; here every rank holds rank 0's
        ag_torch, (mm_torch,) = torch.ops.symm_mem.fused_all_gather_matmul(a, [b.t()], 0, group_name)
        agm = weave.AllGatherGemm(comm, n=n, k=k, m_max=m)
        out = agm.run(a, b)
        torch.cuda.synchronize()
        assert torch.equal(agm.gathered_a(m), ag_torch), f"rank {rank}: gathered A differs from torch's"
        _close(out, mm_torch, "AllGatherGemm bf16 vs fused_all_gather_matmul", rank)

        # AllGatherGemm, fp8 e4m3 with row-wise scales (weave's ptpc): torch's scaled variant takes
        # A's scales [m, 1] (row-wise, sharded: gathered with A) and B's [1, N].
        import quant

        a8, sa = quant.ptpc(torch.randn(m, k, device="cuda", generator=gen))
        b8, sb = quant.ptpc(torch.randn(n, k, device="cuda", generator=gen))
        dist.broadcast(b8.view(torch.uint8), 0)
        dist.broadcast(sb, 0)
        _, (mm8_torch,) = torch.ops.symm_mem.fused_all_gather_scaled_matmul(
            a8, [b8.t()], sa[:, None].contiguous(), [sb[None, :].contiguous()], 0, group_name, [None], [None],
            [torch.bfloat16], [False])
        agm8 = weave.AllGatherGemm(comm, n=n, k=k, m_max=m, quant="ptpc")
        out8 = agm8.run(a8, b8, scale_a=sa, scale_b=sb)
        torch.cuda.synchronize()
        _close(out8, mm8_torch, "AllGatherGemm ptpc vs fused_all_gather_scaled_matmul", rank)

        # GemmReduceScatter, bf16: every rank's partial A_r @ B_r^T, rank r receives rows
        # [r M/W, (r+1) M/W) of the sum. torch's takes B as [K_r, N].
        rows = 128 * world * 2
        a_r = torch.randn(rows, k, device="cuda", generator=gen).to(torch.bfloat16)
        b_r = (torch.randn(n, k, device="cuda", generator=gen) * 0.05).to(torch.bfloat16)
        rs_torch = torch.ops.symm_mem.fused_matmul_reduce_scatter(a_r, b_r.t(), "sum", 0, group_name)
        grs = weave.GemmReduceScatter(comm, n=n, k=k, m_max=rows)
        band = grs.run(a_r, b_r)
        torch.cuda.synchronize()
        _close(band, rs_torch, "GemmReduceScatter bf16 vs fused_matmul_reduce_scatter", rank)


def test_sequence_parallel_pair_matches_torch_async_tp(seed):
    spawn_ranks(_rank, seed, min(NGPU, 8))
