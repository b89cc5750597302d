"""One spawned process per GPU for the torch.distributed tests (test_multi_gpu*.py)."""
import os
import tempfile


def spawn_ranks(target, seed, world):
    """`target(rank, world, init_file, seed, errors)` in `world` spawned processes, one per GPU; the
    first error a rank reported (put on `errors`) fails the calling test."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    errors = ctx.SimpleQueue()
    with tempfile.TemporaryDirectory() as d:
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
        mp.spawn(target, args=(world, os.path.join(d, "init"), seed, errors), nprocs=world, join=True)
    assert errors.empty(), errors.get()
