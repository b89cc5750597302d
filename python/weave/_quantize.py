"""weave.quantize_rows: a bf16 activation matrix's rows into an fp8 GEMM's A operand on the GPU,
one kernel (include/weave/quantize.hpp; the rule of weave::ref::quantize, bit for bit)."""
from __future__ import annotations

import sys

from . import _weave
from ._errors import arg_error
from ._gemm import ScaleMode, _mode_of
from ._tensors import DType, describe, resolve_stream


def quantized_shapes(mode, m: int, k: int) -> tuple:
    """(scales' shape, whether the scales are ue8m0 bytes) for x [m, k] in `mode`."""
    mode = _mode_of(mode)
    group = _weave.quantize_group(mode, k)
    if mode == ScaleMode.PTPC:
        return (m,), False
    return (m, k // group), mode == ScaleMode.MXFP8


def quantize_rows(x, mode, *, q=None, scales=None, stream=None):
    """(q, scales) for a bf16 CUDA tensor x [M, K]: q e4m3 [M, K] (torch.float8_e4m3fn) and the scales
    of A in `mode`: "ptpc" fp32 [M] (amax / 448 per row), "blockscale" fp32 [M, K/128] (per row and
    128-wide K group), "mxfp8" ue8m0 bytes as uint8 [M, K/32] (OCP MX). K a multiple of 16 (and of
    the group). New torch tensors unless q / scales are given; enqueued on `stream` (torch's current
    stream by default). Raises weave.ArgumentError naming the argument before any GPU work."""
    tx = describe(x, "x")
    if not tx.is_torch and (q is None or scales is None):
        raise arg_error("arguments 'q' and 'scales': required unless x is a torch tensor")
    if tx.ndim != 2:
        raise arg_error(f"argument 'x': must be a 2-D matrix [M, K] (got rank {tx.ndim}: {list(tx.shape)})")
    m, k = tx.shape
    mode = _mode_of(mode)
    shape, ue8m0 = quantized_shapes(mode, m, k)
    torch = sys.modules.get("torch") if tx.is_torch else None
    if q is None:
        q = torch.empty((m, k), dtype=torch.float8_e4m3fn, device=x.device)
    if scales is None:
        scales = torch.empty(shape, dtype=torch.uint8 if ue8m0 else torch.float32, device=x.device)
    tq, ts = describe(q, "q"), describe(scales, "scales")
    s = resolve_stream(stream, tx.device, (tx,))
    args = (mode, tx.view(DType.BF16), tq.view(DType.E4M3), ts.view(DType.UE8M0 if ue8m0 else DType.F32), s)
    if torch is not None and tx.device >= 0 and torch.cuda.current_device() != tx.device:
        with torch.cuda.device(tx.device):
            _weave.quantize_rows(*args)
    else:
        _weave.quantize_rows(*args)
    return q, scales
