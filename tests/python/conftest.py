"""pytest for the weave Python package. CPU tests run everywhere; GPU tests skip, with the reason,
where no Hopper GPU (or no torch with CUDA) is visible, and are never reported as passed there."""
import os
import random

import pytest

import weave


def _gpu_skip_reason() -> str:
    reason = weave.no_gpu_reason()
    if reason:
        return reason
    try:
        import torch
    except ImportError:
        return "the GPU tests compare against torch, which is not installed here"
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    return ""


GPU_SKIP = _gpu_skip_reason()
requires_gpu = pytest.mark.skipif(bool(GPU_SKIP), reason=GPU_SKIP or "GPU present")


@pytest.fixture
def seed(request):
    """A fresh seed per test, printed on failure (set WEAVE_TEST_SEED to replay one)."""
    s = int(os.environ.get("WEAVE_TEST_SEED", random.SystemRandom().randrange(1 << 31)))
    request.node.user_properties.append(("seed", s))
    print(f"seed {s}")
    return s
