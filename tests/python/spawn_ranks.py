"""One spawned process per GPU for the torch.distributed tests (test_multi_gpu*.py)."""
import os
import tempfile
from contextlib import contextmanager


def torch_with_gpus(count):
    """torch and the visible GPU count, at a test module's import; the whole module is skipped,
    with the reason, where there is no usable GPU, no torch or fewer than `count` GPUs."""
    import pytest

    from conftest import GPU_SKIP

    if GPU_SKIP:
        pytest.skip(GPU_SKIP, allow_module_level=True)
    torch = pytest.importorskip("torch")
    ngpu = torch.cuda.device_count()
    if ngpu < count:
        pytest.skip(f"needs {count} GPUs, {ngpu} visible", allow_module_level=True)
    return torch, ngpu


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


@contextmanager
def rank_process(rank, world, init_file, errors):
    """The body of a rank: this process's GPU and an NCCL process group over `init_file`, torn down
    after a barrier; an error is put on `errors` (the parent's report) and raised again."""
    import torch
    import torch.distributed as dist

    try:
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", init_method=f"file://{init_file}", rank=rank, world_size=world)
        yield
        torch.cuda.synchronize()
        dist.barrier()
        dist.destroy_process_group()
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        errors.put(f"rank {rank}: {type(e).__name__}: {e}")
        raise
