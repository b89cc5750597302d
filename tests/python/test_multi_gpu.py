"""A weave collective across processes: torch.multiprocessing spawns one process per visible GPU,
torch.distributed (NCCL) creates the process group, weave.Communicator.from_process_group
broadcasts the NCCL unique id over it. Each rank's all-reduce / all-gather / reduce-scatter is
checked against the exact sum of every rank's input in rank order (fp32, as weave sums), gathered
with torch.distributed. Skipped, with the reason, where fewer than 2 GPUs are visible."""
import os
import tempfile

import pytest

from conftest import GPU_SKIP

if GPU_SKIP:
    pytest.skip(GPU_SKIP, allow_module_level=True)
torch = pytest.importorskip("torch")
NGPU = torch.cuda.device_count()
if NGPU < 2:
    pytest.skip(f"needs 2 GPUs, {NGPU} visible", allow_module_level=True)


def _rank(rank, world, init_file, seed, errors):
    import torch.distributed as dist

    import weave

    try:
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", init_method=f"file://{init_file}", rank=rank, world_size=world)
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
        dist.barrier()
        dist.destroy_process_group()
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        errors.put(f"rank {rank}: {type(e).__name__}: {e}")
        raise


def test_collectives_across_processes(seed):
    import torch.multiprocessing as mp

    world = min(NGPU, 8)
    ctx = mp.get_context("spawn")
    errors = ctx.SimpleQueue()
    with tempfile.TemporaryDirectory() as d:
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
        mp.spawn(_rank, args=(world, os.path.join(d, "init"), seed, errors), nprocs=world, join=True)
    assert errors.empty(), errors.get()
