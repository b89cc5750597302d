"""Tensors from torch, __cuda_array_interface__ producers (cupy, numba, ...) and DLPack producers,
described as what the C++ API reads: pointer, weave dtype, shape, strides in elements, device.

torch tensors are read directly (data_ptr, shape, stride, dtype, device): no DLPack export, so
nothing synchronises and everything works inside CUDA graph capture. torch is never imported
here; a tensor is recognised by its type's module.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from . import _weave
from ._errors import arg_error

DType = _weave.DType
HOST = -1

# torch dtype name -> weave dtype. uint8 is raw bytes: it is read as e4m3 where an e4m3 operand is
# expected and as ue8m0 where mxfp8 scales are (cupy and numba have no fp8 dtypes).
_TORCH = {
    "torch.bfloat16": DType.BF16,
    "torch.float32": DType.F32,
    "torch.float8_e4m3fn": DType.E4M3,
    "torch.float8_e8m0fnu": DType.UE8M0,
    "torch.uint8": "bytes",
}
# __cuda_array_interface__ typestr (byte order dropped) -> weave dtype; V2 is a 2-byte void type,
# which is how bfloat16 (ml_dtypes) arrays describe themselves.
_TYPESTR = {"f4": DType.F32, "V2": DType.BF16, "u1": "bytes"}
# DLPack (code, bits) -> weave dtype. Codes: 2 float, 1 uint, 4 bfloat, 10 float8_e4m3fn, 14 float8_e8m0fnu.
_DLPACK = {(2, 32): DType.F32, (4, 16): DType.BF16, (1, 8): "bytes", (10, 8): DType.E4M3, (14, 8): DType.UE8M0}
_DLPACK_CUDA = (2, 13)  # kDLCUDA, kDLCUDAManaged
_DLPACK_CPU = (1, 3)    # kDLCPU, kDLCUDAHost


@dataclass
class Tensor:
    obj: Any            # the caller's object (kept alive by whoever holds this)
    name: str           # argument name, for messages
    ptr: int
    dtype: Any          # a weave DType, "bytes", or None (no weave dtype)
    dtype_text: str     # the producer's spelling, for messages
    shape: tuple
    strides: tuple      # in elements
    device: int         # CUDA ordinal, or HOST
    itemsize: int
    is_torch: bool

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize

    def contiguous(self) -> bool:
        expect = 1
        for size, stride in zip(reversed(self.shape), reversed(self.strides)):
            if size != 1 and stride != expect:
                return False
            expect *= size
        return True

    def view(self, want):
        """A C++ TensorView with weave dtype `want` if this tensor's dtype can be read as it,
        else its own dtype (so the C++ check names both); raises for dtypes weave never reads."""
        if self.dtype == "bytes":
            dt = want if _weave.dtype_bytes(want) == 1 else DType.UE8M0
        elif self.dtype is None:
            raise arg_error(f"argument '{self.name}': dtype {self.dtype_text} is not one weave reads "
                            f"(expected {_dtype_words(want)})")
        else:
            dt = self.dtype
        if self.ndim > 4:
            raise arg_error(f"argument '{self.name}': rank {self.ndim} is more than weave's tensors have (at most 4)")
        return _weave.TensorView(self.ptr, dt, list(self.shape), self.normalised_strides(), self.device)

    def normalised_strides(self) -> list:
        """Strides with those of size-1 dimensions (which address nothing, and which torch leaves
        arbitrary) replaced by the row-major value, so leading dimensions read as expected."""
        out, acc = list(self.strides), 1
        for i in range(self.ndim - 1, -1, -1):
            if self.shape[i] == 1:
                out[i] = acc
            acc = max(acc, out[i] * self.shape[i]) if self.shape[i] != 1 else acc
        return out


def _dtype_words(d) -> str:
    return {DType.BF16: "bf16 (torch.bfloat16)", DType.F32: "fp32 (torch.float32)",
            DType.E4M3: "e4m3 (torch.float8_e4m3fn, or uint8 bytes)",
            DType.UE8M0: "ue8m0 (torch.float8_e8m0fnu, or uint8 bytes)"}[d]


def is_torch(x) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "data_ptr") and hasattr(x, "stride")


def describe(x, name: str) -> Tensor:
    if x is None:
        raise arg_error(f"argument '{name}': required (got None)")
    if is_torch(x):
        dev = x.device
        if dev.type == "cuda":
            device = dev.index if dev.index is not None else 0
        elif dev.type == "cpu":
            device = HOST
        else:
            raise arg_error(f"argument '{name}': must be a CUDA tensor (got device {dev})")
        text = str(x.dtype)
        return Tensor(x, name, int(x.data_ptr()), _TORCH.get(text), text, tuple(x.shape), tuple(x.stride()),
                      device, x.element_size(), True)
    cai = getattr(x, "__cuda_array_interface__", None)
    if cai is not None:
        return _from_cai(x, cai, name)
    if hasattr(x, "__dlpack__"):
        return _from_dlpack(x, name)
    raise arg_error(f"argument '{name}': expected a torch tensor or an object with __cuda_array_interface__ "
                    f"or __dlpack__ (got {type(x).__name__})")


def _from_cai(x, cai: dict, name: str) -> Tensor:
    typestr = cai.get("typestr", "")
    itemsize = int(typestr[2:]) if typestr[2:].isdigit() else 0
    shape = tuple(int(s) for s in cai.get("shape", ()))
    strides_b = cai.get("strides")
    if strides_b is None:
        strides, acc = [], 1
        for s in reversed(shape):
            strides.append(acc)
            acc *= s
        strides = tuple(reversed(strides))
    else:
        if itemsize == 0 or any(s % itemsize for s in strides_b):
            raise arg_error(f"argument '{name}': strides {tuple(strides_b)} bytes are not whole elements of {typestr}")
        strides = tuple(int(s) // itemsize for s in strides_b)
    ptr = int(cai["data"][0]) if cai.get("data") else 0
    # The interface carries no device ordinal; cupy and numba arrays say it (.device.id).
    dev = cai_device(x)
    device = dev if dev is not None else 0
    return Tensor(x, name, ptr, _TYPESTR.get(typestr[1:]), typestr, shape, strides, device, itemsize, False)


def _from_dlpack(x, name: str) -> Tensor:
    dev_type, dev_id = x.__dlpack_device__()
    if dev_type not in _DLPACK_CUDA + _DLPACK_CPU:
        raise arg_error(f"argument '{name}': DLPack device type {dev_type} is neither CUDA nor CPU")
    ptr, code, bits, lanes, shape, strides, _, _ = _weave.dlpack_describe(x)
    if lanes != 1:
        raise arg_error(f"argument '{name}': vector dtypes (lanes {lanes}) are not supported")
    device = int(dev_id) if dev_type in _DLPACK_CUDA else HOST
    kind = {0: "int", 1: "uint", 2: "float", 4: "bfloat", 6: "bool", 10: "float8_e4m3fn", 14: "float8_e8m0fnu"}
    text = kind.get(code, f"dlpack type code {code} ") + ("" if code in (10, 14) else str(bits))
    return Tensor(x, name, int(ptr), _DLPACK.get((code, bits)), text, tuple(shape),
                  tuple(strides), device, bits // 8, False)


def cai_device(x) -> int | None:
    dev = getattr(x, "device", None)
    for attr in ("id", "index"):
        v = getattr(dev, attr, None)
        if isinstance(v, int):
            return v
    return None


def resolve_stream(stream, device: int, tensors=()) -> int:
    """cudaStream_t as an int: the given stream (an int, a torch.cuda.Stream, a cupy/numba stream,
    or anything with __cuda_stream__), else torch.cuda.current_stream(device) when torch is loaded,
    else 0 (the default stream)."""
    if stream is None:
        torch = sys.modules.get("torch")
        if torch is not None and (any(t.is_torch for t in tensors) or not tensors):
            return int(torch.cuda.current_stream(device).cuda_stream)
        return 0
    if isinstance(stream, int):
        return stream
    if hasattr(stream, "__cuda_stream__"):
        return int(stream.__cuda_stream__()[1])
    for attr in ("cuda_stream", "ptr", "handle"):
        v = getattr(stream, attr, None)
        if isinstance(v, int):
            return v
    raise arg_error(f"argument 'stream': expected a stream (int handle, torch.cuda.Stream, an object with "
                    f"__cuda_stream__, .cuda_stream or .ptr), got {type(stream).__name__}")
