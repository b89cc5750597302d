"""weave's collectives and fused operators across processes: torch.multiprocessing spawns one process per visible GPU,
torch.distributed (NCCL) creates the process group, weave.Communicator.from_process_group
broadcasts the NCCL unique id over it. Each rank's all-reduce / all-gather / reduce-scatter is
checked against the exact sum of every rank's input in rank order (fp32, as weave sums), gathered
with torch.distributed. Skipped, with the reason, where fewer than 2 GPUs are visible."""
import pytest

from spawn_ranks import rank_process, spawn_ranks, torch_with_gpus

torch, NGPU = torch_with_gpus(2)


def _rank(rank, world, init_file, seed, errors):
    import torch.distributed as dist

    import weave

    with rank_process(rank, world, init_file, errors):
        comm = weave.Communicator.from_process_group()
        assert (comm.rank, comm.world_size, comm.device) == (rank, world, rank)
        gen = torch.Generator(device="cuda").manual_seed(seed + rank)
        n = 3 * 4096 + 8 * world
        for transport in (None, "nccl"):
            ar = weave.Collective(comm, "all-reduce", max_count=n, dtype="bf16", transport=transport)
            x = torch.randn(n, device="cuda", generator=gen).to(torch.bfloat16)
            out = torch.full_like(x, float("nan"))
            ar.run(x, out)
            parts = [torch.empty_like(x) for _ in range(world)]
            dist.all_gather(parts, x)
            expect = parts[0].float()
            for p in parts[1:]:
                expect = expect + p.float()
            torch.cuda.synchronize()
            if transport is None:  # weave's transports sum in fp32 in rank order: exact
                assert torch.equal(out, expect.to(torch.bfloat16)), f"rank {rank}: {ar.describe()}"
            else:  # NCCL's own order and precision
                assert torch.allclose(out.float(), expect, rtol=2e-2, atol=2e-2), f"rank {rank}: {ar.describe()}"
        ag = weave.Collective(comm, "all-gather", max_count=n * 2)
        x = torch.randn(n, device="cuda", generator=gen).to(torch.bfloat16)
        out = torch.full((world * n,), float("nan"), device="cuda", dtype=torch.bfloat16)
        ag.run(x, out)
        parts = [torch.empty_like(x) for _ in range(world)]
        dist.all_gather(parts, x)
        torch.cuda.synchronize()
        assert torch.equal(out, torch.cat(parts)), f"rank {rank}: {ag.describe()}"
        assert ag.self_test()["ok"]


def _spawn_ranks(target, seed, world=None):
    """`target(rank, world, init_file, seed, errors)` in one spawned process per visible GPU (up to
    8; or `world` of them); the first error a rank reported fails the test."""
    spawn_ranks(target, seed, world or min(NGPU, 8))


def test_collectives_across_processes(seed):
    _spawn_ranks(_rank, seed)


def _fused_rank(rank, world, init_file, seed, errors):
    """Each fused operator across the processes, bf16 and ptpc (fp8), against torch: every rank's
    CUDA-core-independent reference (torch matmul of its dequantised operands in fp32) reduced,
    reduce-scattered or gathered by torch.distributed, within bf16 rounding of the sums.
    AllGatherGemm (every rank's rows of A gathered, then one GEMM with the common B) gives
    GemmAllGather's output, bitwise weave.Gemm of the rows torch.distributed gathers (every mode the
    same bytes), and its gathered A (and ptpc scales) bitwise those rows."""
    import torch.distributed as dist

    import quant
    import weave
    import weave.ops

    with rank_process(rank, world, init_file, errors):
        comm = weave.Communicator.from_process_group()
        gen = torch.Generator(device="cuda").manual_seed(seed + rank)
        n, k, m = 1024, 512, 256 * world  # m: a multiple of world x 128, so reduce-scatter's fused mode runs too

        def operands(mode, rows):
            x = torch.randn(rows, k, device="cuda", generator=gen)
            w = torch.randn(n, k, device="cuda", generator=gen) * 0.05
            if mode == "bf16":
                a, b = x.to(torch.bfloat16), w.to(torch.bfloat16)
                return a, b, None, None, a.float() @ b.float().T
            a, sa = quant.ptpc(x)
            b, sb = quant.ptpc(w)
            return a, b, sa, sb, (a.float() * sa[:, None]) @ (b.float() * sb[:, None]).T

        def close(got, want, what):
            assert got.shape == want.shape, f"rank {rank} {what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
            atol = 2e-2 * want.abs().max().item()
            assert torch.allclose(got.float(), want, rtol=2e-2, atol=atol), f"rank {rank} {what}"

        for mode in ("bf16", "ptpc"):
            a, b, sa, sb, partial = operands(mode, m)
            total = partial.clone()
            dist.all_reduce(total)
            band = torch.empty(m // world, n, device="cuda")
            dist.reduce_scatter_tensor(band, partial.contiguous())
            for op_mode in ("auto", "fused", "split-lsa", "split-nccl"):
                ar = weave.GemmAllReduce(comm, n=n, k=k, m_max=m, quant=mode, mode=op_mode)
                close(ar.run(a, b, scale_a=sa, scale_b=sb), total, f"GemmAllReduce {mode} {op_mode}")
                rs = weave.GemmReduceScatter(comm, n=n, k=k, m_max=m, quant=mode, mode=op_mode)
                close(rs.run(a, b, scale_a=sa, scale_b=sb), band, f"GemmReduceScatter {mode} {op_mode}")
            # GemmAllGather: the same B on every rank (rank 0's), each rank its own rows.
            a, _, sa, _, _ = operands(mode, m // world)
            dist.broadcast(b.view(torch.uint8) if b.dtype == torch.float8_e4m3fn else b, 0)  # fp8 as bytes
            if sb is not None:
                dist.broadcast(sb, 0)
            own = (a.float() * (sa[:, None] if sa is not None else 1)) @ (b.float() * (sb[:, None] if sb is not None else 1)).T
            gathered = torch.empty(m, n, device="cuda")
            dist.all_gather_into_tensor(gathered, own.contiguous())
            for op_mode in ("auto", "fused-lsa", "split-lsa", "split-nccl"):
                ag = weave.GemmAllGather(comm, n=n, k=k, m_max=m // world, quant=mode, mode=op_mode)
                close(ag.run(a, b, scale_a=sa, scale_b=sb), gathered, f"GemmAllGather {mode} {op_mode}")
            # AllGatherGemm: the same rows, A gathered (e4m3 with its scales in ptpc) before one GEMM.
            a_all = torch.empty(m, a.shape[1] * a.element_size(), device="cuda", dtype=torch.uint8)
            dist.all_gather_into_tensor(a_all, a.view(torch.uint8).contiguous())
            sa_all = None
            if sa is not None:
                sa_all = torch.empty(m, device="cuda")
                dist.all_gather_into_tensor(sa_all, sa.contiguous())
            # weave.Gemm of the gathered rows, without a K split: what the op's GEMM computes. (Its plan
            # is for this rank's SMs, as a one-process-per-GPU op has them all.)
            stacked = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            weave.Gemm(a_all.view(a.dtype), b, stacked, scale_a=sa_all, scale_b=sb, mode=mode, split_k=1).run()
            for op_mode in ("auto", "split-lsa", "split-ce", "split-nccl"):
                agm = weave.AllGatherGemm(comm, n=n, k=k, m_max=m // world, quant=mode, mode=op_mode)
                what = f"AllGatherGemm {mode} {op_mode}"
                out = agm.run(a, b, scale_a=sa, scale_b=sb)
                close(out, gathered, what)
                assert torch.equal(out, stacked), f"rank {rank} {what}: differs from weave.Gemm of the gathered rows"
                assert torch.equal(agm.gathered_a(m // world).view(torch.uint8), a_all), f"rank {rank} {what}: A"
                if sa is not None:
                    assert torch.equal(agm.gathered_scale_a(m // world), sa_all), f"rank {rank} {what}: scales"
                assert agm.self_test()["ok"], f"rank {rank} {what}: {agm.describe()}"
        # The compiled path: torch.ops.weave over the same communicator, one graph.
        a, b, _, _, partial = operands("bf16", m)
        dist.all_reduce(partial)
        h = weave.ops.handle(weave.GemmAllReduce(comm, n=n, k=k, m_max=m))
        close(torch.compile(lambda x, w: torch.ops.weave.gemm_all_reduce(h, x, w), fullgraph=True)(a, b), partial,
              "torch.ops.weave.gemm_all_reduce compiled")
        rows = a[: m // world]  # this rank's rows; B the same everywhere (rank 0's)
        dist.broadcast(b, 0)
        want = torch.empty(m, n, device="cuda")
        dist.all_gather_into_tensor(want, rows.float() @ b.float().T)
        h_agm = weave.ops.handle(weave.AllGatherGemm(comm, n=n, k=k, m_max=m // world))
        close(torch.compile(lambda x, w: torch.ops.weave.all_gather_gemm(h_agm, x, w), fullgraph=True)(rows, b), want,
              "torch.ops.weave.all_gather_gemm compiled")


def test_fused_ops_across_processes(seed):
    _spawn_ranks(_fused_rank, seed)


def _llama_rank(rank, world, init_file, seed, errors):
    """A small transformers Llama (small_llama.py), rank 0's random weights on
    every rank, its projections swapped onto weave at this world (bf16, ptpc, blockscale, mxfp8): each
    rank's prefill and greedy decode logits within weave.hf.TOLERANCE of the unmodified model run
    whole on the rank's GPU, bitwise the same on every rank, with this rank's heads in its config."""
    import copy

    import torch.distributed as dist

    import weave
    import weave.hf
    from small_llama import BATCH, CONFIG, PROMPT, prefill_and_decode, small_llama

    with rank_process(rank, world, init_file, errors):
        comm = weave.Communicator.from_process_group()
        for quant in ("bf16", "ptpc", "blockscale", "mxfp8"):
            ref = small_llama(seed)
            for t in list(ref.parameters()) + list(ref.buffers()):
                dist.broadcast(t.data, 0)
            model = copy.deepcopy(ref)
            plan = weave.hf.swap_to_weave(model, comm=comm, quant=quant, max_tokens=BATCH * PROMPT)
            assert (model.config.num_attention_heads, model.config.num_key_value_heads) == \
                (CONFIG["num_attention_heads"] // world, CONFIG["num_key_value_heads"] // world), plan.describe()
            ids = torch.randint(0, CONFIG["vocab_size"], (BATCH, PROMPT), device="cuda")
            dist.broadcast(ids, 0)
            want, tokens = prefill_and_decode(ref, ids)
            got, _ = prefill_and_decode(model, ids, tokens)
            for i, (g, w) in enumerate(zip(got, want)):
                agree = weave.hf.logits_agreement(g, w)
                assert weave.hf.within_tolerance(agree, quant), f"rank {rank} {quant} call {i}: {agree}"
                first = g.clone()
                dist.broadcast(first, 0)
                assert torch.equal(g, first), f"rank {rank} {quant} call {i}: logits differ from rank 0's"


def test_a_llama_on_weave_at_world_two(seed):
    pytest.importorskip("transformers")
    _spawn_ranks(_llama_rank, seed, world=2)
