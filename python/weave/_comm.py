"""weave.Communicator and weave.Collective (see include/weave/communicator.hpp, collectives.hpp).

Collective calls (creating a communicator or an op, barrier, self_test, destroying an op) must be
made by every rank in the same order. Destroy ops in the same order on every rank too (``del op``
then let them go, or keep them for the process's life).
"""
from __future__ import annotations

import sys

from . import _weave
from ._errors import arg_error, int_arg
from ._gemm import _enum
from ._tensors import DType, describe, resolve_stream

Transport = _weave.Transport
CollectiveOp = _weave.CollectiveOp
Algorithm = _weave.Algorithm


class Communicator:
    """One rank of an NCCL communicator (weave::Communicator). Make one with from_process_group
    (torch.distributed), create (a unique id your launcher exchanged), or create_local (every GPU
    of this process, one rank each; drive each from its own thread).

    Every way in first checks that the NCCL loaded in the process (torch's, when torch is there)
    is the release weave was built against, and raises weave.Error (Status.UNSUPPORTED) naming
    both otherwise (weave.nccl_versions()); create and create_local then raise Status.NO_DEVICE
    with weave.no_gpu_reason() when the GPU is missing, before NCCL touches it."""

    def __init__(self, impl):
        if not isinstance(impl, _weave.Communicator):
            raise TypeError("use Communicator.from_process_group, .create or .create_local")
        self._impl = impl

    @staticmethod
    def new_unique_id() -> bytes:
        return _weave.Communicator.new_unique_id()

    @staticmethod
    def unique_id_via_file(path: str, rank: int, timeout_s: float = 60.0) -> bytes:
        """Rank 0 writes a new id to `path`; the others wait for it (at most timeout_s)."""
        return _weave.Communicator.unique_id_via_file(str(path), rank, timeout_s)

    @classmethod
    def create(cls, unique_id: bytes, rank: int, world_size: int, device: int, *, timeout_s: float = 0.0,
               tag: str = "") -> "Communicator":
        """Collective. timeout_s <= 0: WEAVE_COMM_TIMEOUT_S, else 10 s."""
        return cls(_weave.Communicator.create(bytes(unique_id), rank, world_size, device, timeout_s, tag))

    @classmethod
    def create_local(cls, devices, *, timeout_s: float = 0.0, tag: str = "") -> list["Communicator"]:
        return [cls(c) for c in _weave.Communicator.create_local(list(devices), timeout_s, tag)]

    @classmethod
    def from_process_group(cls, group=None, device=None, *, timeout_s: float = 0.0, tag: str = "") -> "Communicator":
        """Collective over a torch.distributed process group (default: the world): the group's rank
        0 creates the NCCL unique id and broadcasts it over the group; each rank binds `device`
        (default: torch.cuda.current_device())."""
        import torch
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_initialized():
            raise arg_error("argument 'group': torch.distributed is not initialised (call init_process_group first)")
        group = group if group is not None else dist.group.WORLD
        rank, world = dist.get_rank(group), dist.get_world_size(group)
        if device is None:
            device = torch.cuda.current_device()
        device = torch.device(device).index if not isinstance(device, int) else device
        payload = [cls.new_unique_id() if rank == 0 else None]
        backend = str(dist.get_backend(group))
        kw = {"device": torch.device("cuda", device)} if "nccl" in backend else {}
        dist.broadcast_object_list(payload, src=dist.get_global_rank(group, 0), group=group, **kw)
        return cls.create(payload[0], rank, world, device, timeout_s=timeout_s, tag=tag)

    rank = property(lambda self: self._impl.rank)
    world_size = property(lambda self: self._impl.world_size)
    device = property(lambda self: self._impl.device)
    timeout_s = property(lambda self: self._impl.timeout_s)
    lsa_team_size = property(lambda self: self._impl.lsa_team_size)
    broken = property(lambda self: self._impl.broken)

    def transports(self) -> list[dict]:
        """Each transport, whether it can run on this communicator, and why not."""
        return [{"transport": _weave.name(t.transport), "compiled_in": t.compiled_in, "available": t.available,
                 "reason": t.reason} for t in self._impl.transports()]

    def barrier(self) -> None:
        self._impl.barrier()

    def __repr__(self) -> str:
        return f"weave.Communicator(rank={self.rank}, world_size={self.world_size}, device={self.device})"


class _CudaBuffer:
    """A device range as __cuda_array_interface__, holding its owner alive (for torch.as_tensor)."""

    def __init__(self, ptr: int, shape, typestr: str, owner):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr, "data": (ptr, False),
                                         "version": 3, "strides": None, "stream": None}
        self._owner = owner


def _collective_config(op, max_count, dtype, transport, algorithm, ce_sm_share):
    """Collective's arguments checked and parsed into its C++ config (CPU only)."""
    op = _enum(op, _weave.parse_collective_op, "collective op (all-gather, reduce-scatter, all-reduce)", "op",
               CollectiveOp)
    if dtype is not None and not isinstance(dtype, (str, DType)):
        dtype = {"torch.bfloat16": "bf16", "torch.float32": "fp32"}.get(str(dtype), str(dtype))
    dtype = _enum(dtype, _weave.parse_dtype, "dtype", "dtype", DType)
    tr = None if transport is None else _enum(transport, _weave.parse_transport, "transport (nccl, ce, lsa)",
                                              "transport", Transport)
    alg = _enum(algorithm, _weave.parse_algorithm, "algorithm", "algorithm", Algorithm)
    max_count = int_arg("max_count", max_count, 1, 2**64 - 1)  # size_t
    if not isinstance(ce_sm_share, (int, float)) or isinstance(ce_sm_share, bool):
        raise arg_error(f"argument 'ce_sm_share': must be a number in [0, 0.9] (got {ce_sm_share!r})")
    c = _weave.CollectiveConfig()
    c.op, c.algorithm, c.dtype, c.max_count, c.ce_sm_share = op, alg, dtype, max_count, float(ce_sm_share)
    if tr is not None:
        c.set_transport(tr)  # else: the op chooses
    return c


class Collective:
    """All-gather, reduce-scatter or all-reduce over the nccl, ce or lsa transport
    (weave::Collective). Construction is collective and creates the op's symmetric window.

    max_count is the largest call: all-gather bytes per rank; reduce-scatter output elements per
    rank; all-reduce elements. dtype (reductions): bf16 or fp32, summed in fp32 in rank order."""

    def __init__(self, comm: Communicator, op, *, max_count: int, dtype="bf16", transport=None, algorithm="auto",
                 ce_sm_share: float = 0.0):
        if not isinstance(comm, Communicator):
            raise arg_error(f"argument 'comm': must be a weave.Communicator (got {type(comm).__name__})")
        config = _collective_config(op, max_count, dtype, transport, algorithm, ce_sm_share)
        self.comm = comm
        self._impl = _weave.Collective(comm._impl, config)

    @classmethod
    def _wrap(cls, comm: Communicator, impl) -> "Collective":
        """A Collective around an op the C++ side already built (weave.create_sharing_window)."""
        self = cls.__new__(cls)
        self.comm, self._impl = comm, impl
        return self

    op = property(lambda self: _weave.name(self._impl.op))
    dtype = property(lambda self: _weave.name(self._impl.dtype))
    max_count = property(lambda self: self._impl.max_count)
    transport = property(lambda self: _weave.name(self._impl.transport))
    algorithm = property(lambda self: _weave.name(self._impl.algorithm))

    def describe(self) -> str:
        return self._impl.describe()

    def __repr__(self) -> str:
        return f"weave.Collective({self.describe()})"

    def _count(self, ti, to) -> int:
        world, op = self.comm.world_size, self._impl.op
        for t in (ti, to):
            if t.device != self.comm.device:
                where = "host memory" if t.device < 0 else f"cuda:{t.device}"
                raise arg_error(f"argument '{t.name}': must live in cuda:{self.comm.device}, this rank's GPU (got {where})")
            if not t.contiguous():
                raise arg_error(f"argument '{t.name}': must be contiguous (got shape {list(t.shape)} strides "
                                f"{list(t.strides)})")
        if op == CollectiveOp.ALL_GATHER:
            if to.nbytes != world * ti.nbytes:
                raise arg_error(f"argument 'out': all-gather output must be world_size x input = {world} x {ti.nbytes} "
                                f"bytes (got {to.nbytes})")
            return ti.nbytes
        want = self._impl.dtype
        for t in (ti, to):
            if t.dtype != want:
                raise arg_error(f"argument '{t.name}': dtype must be {_weave.name(want)}, the op's dtype (got {t.dtype_text})")
        if op == CollectiveOp.REDUCE_SCATTER:
            if ti.numel != world * to.numel:
                raise arg_error(f"argument 'inp': reduce-scatter input must be world_size x output = {world} x "
                                f"{to.numel} elements (got {ti.numel})")
            return to.numel
        if ti.numel != to.numel:
            raise arg_error(f"argument 'out': all-reduce output must have the input's {ti.numel} elements (got {to.numel})")
        return ti.numel

    def run(self, inp, out, stream=None):
        """Enqueues one call on `stream` (default: torch's current stream when torch is loaded).
        Only enqueues: graph-capturable. Returns out."""
        ti, to = describe(inp, "inp"), describe(out, "out")
        count = self._count(ti, to)
        if count < 1 or count > self._impl.max_count:
            raise arg_error(f"argument 'inp': the call's count {count} must be in [1, max_count = {self._impl.max_count}]")
        s = resolve_stream(stream, self.comm.device, (ti, to))
        torch = sys.modules.get("torch") if ti.is_torch else None
        if torch is not None and torch.cuda.current_device() != self.comm.device:
            with torch.cuda.device(self.comm.device):
                self._impl.run(ti.ptr, to.ptr, count, s)
        else:
            self._impl.run(ti.ptr, to.ptr, count, s)
        return out

    __call__ = run

    def _window(self, ptr: int, elems: int, dtype):
        import torch

        if ptr == 0:
            raise arg_error(f"this op ({self.describe()}) has no window buffers (the nccl default algorithm needs none)")
        if self._impl.op == CollectiveOp.ALL_GATHER:
            dtype = dtype or torch.uint8
            elems_t = elems // torch.empty((), dtype=dtype).element_size()
        else:
            dtype = dtype or (torch.bfloat16 if self._impl.dtype == DType.BF16 else torch.float32)
            elems_t = elems
        size = torch.empty((), dtype=dtype).element_size()
        raw = torch.as_tensor(_CudaBuffer(ptr, (elems_t * size,), "|u1", self), device=f"cuda:{self.comm.device}")
        return raw.view(dtype)

    def window_input(self, dtype=None):
        """The op's zero-copy input buffer as a torch tensor (1-D; all-gather: max_count bytes,
        reduce-scatter: world_size * max_count elements, all-reduce: max_count elements). A call
        whose input lies there at the same offset on every rank skips the staging copy."""
        world = self.comm.world_size
        elems = {CollectiveOp.ALL_GATHER: self.max_count, CollectiveOp.REDUCE_SCATTER: world * self.max_count,
                 CollectiveOp.ALL_REDUCE: self.max_count}[self._impl.op]
        return self._window(self._impl.window_input, elems, dtype)

    def window_output(self, dtype=None):
        """The op's zero-copy output buffer (all-gather: world_size * max_count bytes, reduce-scatter
        and all-reduce: max_count elements)."""
        world = self.comm.world_size
        elems = world * self.max_count if self._impl.op == CollectiveOp.ALL_GATHER else self.max_count
        return self._window(self._impl.window_output, elems, dtype)

    def check(self) -> None:
        """Raises weave.Error(TIMEOUT) with (rank, peer, flag, expected, seen) if a device wait timed out."""
        self._impl.check()

    def self_test(self, count: int = 0) -> dict:
        """Collective and synchronizing: moves known per-rank values through the real path."""
        r = self._impl.self_test(count)
        return {"ok": r.ok, "caller_buffers_ok": r.caller_buffers_ok, "window_buffers_ok": r.window_buffers_ok,
                "wrong_from_rank": list(r.wrong_from_rank), "detail": r.detail}
