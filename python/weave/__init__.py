"""weave: fused GEMM + collectives for NVIDIA Hopper, from Python.

Tensors come in as torch tensors (read directly: no libtorch link, nothing synchronises), objects
with __cuda_array_interface__ (cupy, numba) or DLPack producers. Work is enqueued on
torch.cuda.current_stream() unless a stream is given, and every op only enqueues, so it can be
captured in a CUDA graph. Bad input raises weave.ArgumentError (a weave.Error and a ValueError)
naming the argument and the rule it broke.

    import torch, weave
    a = torch.randn(512, 1024, device="cuda").to(torch.bfloat16)
    b = torch.randn(2048, 1024, device="cuda").to(torch.bfloat16)
    c = weave.gemm(a, b)                      # [512, 2048] bf16 = a @ b.T
"""
from __future__ import annotations

from . import _loader

_loader.preload()

from . import _weave  # noqa: E402
from ._comm import Algorithm, Collective, CollectiveOp, Communicator, Transport  # noqa: E402
from ._errors import ArgumentError, Error, Status  # noqa: E402
from ._fused import (AllGatherGemm, AllGatherGemmMode, GemmAllGather, GemmAllGatherMode,  # noqa: E402
                     GemmAllReduce, GemmAllReduceMode, GemmReduceScatter, GemmReduceScatterMode)
from ._shared import SharedWindowOps, create_sharing_window  # noqa: E402
from ._gemm import Gemm, GemmPlan, ScaleLayout, ScaleMode, gemm, plan_gemm, validate_gemm  # noqa: E402
from ._quantize import quantize_rows  # noqa: E402
from ._presets import (LayerPreset, LayerShard, Preset, PresetShard, layer_preset, layer_presets,  # noqa: E402
                       preset, presets)
from ._tensors import DType  # noqa: E402

__version__ = "0.1.0"
nccl_build_version: str = _weave.nccl_build_version

__all__ = ["Algorithm", "AllGatherGemm", "AllGatherGemmMode", "ArgumentError", "Collective", "CollectiveOp",
           "Communicator", "DType", "Error", "Gemm", "GemmAllGather", "GemmAllGatherMode", "GemmAllReduce",
           "GemmAllReduceMode", "GemmPlan", "GemmReduceScatter", "GemmReduceScatterMode", "ScaleLayout",
           "ScaleMode", "SharedWindowOps", "Status", "Transport", "create_sharing_window", "devices", "gemm",
           "nccl_versions", "no_gpu_reason",
           "pack_mxfp8_scales", "plan_gemm", "Preset", "PresetShard", "preset", "presets", "quantize_rows",
           "LayerPreset", "LayerShard", "layer_preset", "layer_presets", "validate_gemm"]


def devices() -> list[dict]:
    """Visible CUDA devices (empty without a driver; no_gpu_reason() then says why)."""
    return [{"ordinal": d.ordinal, "name": d.name, "cc": (d.cc_major, d.cc_minor), "sms": d.sms,
             "l2_bytes": d.l2_bytes, "mem_bytes": d.mem_bytes, "pci_bus_id": d.pci_bus_id, "hopper": d.is_hopper()}
            for d in _weave.list_devices()]


def no_gpu_reason() -> str:
    """'' when a Hopper GPU is visible, else what is missing."""
    return _weave.no_gpu_reason()


def nccl_versions() -> dict:
    """The NCCL weave was built against and the one loaded in this process (torch's, when torch
    is there). They must be the same release ("match"): weave compiles NCCL's device-API
    structures into its kernels, so Communicator creation refuses a mismatch with weave.Error
    (Status.UNSUPPORTED) naming both. To build against torch's NCCL:
    NCCL_ROOT=<site-packages>/nvidia/nccl pip install . (README, Python)."""
    v = _weave.nccl_runtime_version()
    runtime = f"{v // 10000}.{(v % 10000) // 100}.{v % 100}"
    return {"build": nccl_build_version, "runtime": runtime, "match": runtime == nccl_build_version,
            "preloaded": dict(_loader._PRELOADED)}


def pack_mxfp8_scales(raw):
    """mxfp8 raw scale bytes [rows, K/32] (a CPU torch tensor or numpy array of uint8 or
    float8_e8m0fnu) -> the packed words weave reads with scale_layout="packed", int32
    [ceil(K/128), rows], same framework as the input (weave::ref::pack_mxfp8_scales)."""
    if hasattr(raw, "numpy") and hasattr(raw, "data_ptr"):  # torch
        import torch

        if raw.device.type != "cpu":
            raise ArgumentError(Status.INVALID_ARGUMENT, "argument 'raw': must be a CPU tensor (pack once on the host)")
        if raw.ndim != 2 or raw.element_size() != 1:
            raise ArgumentError(Status.INVALID_ARGUMENT,
                                f"argument 'raw': must be 2-D 1-byte ue8m0 [rows, K/32] (got {list(raw.shape)} {raw.dtype})")
        rows, groups = raw.shape
        words = _weave.pack_mxfp8_scales(raw.contiguous().view(torch.uint8).numpy().tobytes(), rows, groups)
        return torch.frombuffer(bytearray(words), dtype=torch.int32).view(-1, rows).clone()
    import numpy as np

    a = np.ascontiguousarray(raw)
    if a.ndim != 2 or a.itemsize != 1:
        raise ArgumentError(Status.INVALID_ARGUMENT, f"argument 'raw': must be 2-D 1-byte ue8m0 [rows, K/32] (got {a.shape})")
    rows, groups = a.shape
    return np.frombuffer(_weave.pack_mxfp8_scales(a.tobytes(), rows, groups), dtype=np.int32).reshape(-1, rows).copy()
