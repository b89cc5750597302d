"""weave's operators as PyTorch custom ops, ``torch.ops.weave.*``, so that torch.compile traces
through them (no graph break) and CUDA graphs capture them. Importing this module registers them
(it needs torch; ``import weave`` alone never imports torch).

    import torch, weave, weave.ops
    y = torch.ops.weave.gemm(a, b)                                    # [M, N] = a @ b.T (any quant)
    q, s = torch.ops.weave.quantize_rows(x, "ptpc")                   # e4m3 rows and their scales
    ar = weave.GemmAllReduce(comm, n=7168, k=2048, m_max=8192)       # built eagerly, as always
    h = weave.ops.handle(ar)                                          # an int the compiled graph carries
    y = torch.ops.weave.gemm_all_reduce(h, x, w_shard)                # a fresh [m, 7168] bf16 tensor
    agm = weave.AllGatherGemm(comm, n=2048, k=7168, m_max=1024)      # sequence parallel: rows per rank
    u = torch.ops.weave.all_gather_gemm(weave.ops.handle(agm), x_rows, w_cols)  # [world x m, 2048] bf16
    ag = weave.Collective(comm, "all-gather", max_count=1 << 24)
    z = torch.ops.weave.collective(weave.ops.handle(ag), t)            # every rank's t stacked along dim 0

Ops that hold state (a fused op's or collective's window and plans) are built eagerly and passed to the custom op
as an opaque integer handle (``handle(op)``): an int is a constant to torch.compile and a CUDA
graph, so the traced graph calls the same op object on every replay. The op must outlive every
graph that uses its handle; ``release(h)`` forgets it (a later call with it is a clear error).

Every custom op here returns a new tensor (no argument is mutated or aliased): the fused ops copy
their result out of the op's window into it (``run(..., out=)``: one device copy, stream-ordered,
graph-capturable; AllGatherGemm's GEMM stores into it directly). Their fake (meta)
implementations give the exact output shape and dtype, so torch.compile and torch.export can
trace them without a GPU. Like every weave call, each op enqueues on torch's current stream and
must be called in the same order on every rank (the compiled graph keeps the program's order of
these calls on every rank alike).
"""
from __future__ import annotations

import itertools
import threading

import torch

from . import _weave
from ._errors import arg_error
from ._comm import Collective, CollectiveOp
from ._fused import AllGatherGemm, GemmAllGather, GemmAllReduce, GemmReduceScatter
from ._gemm import gemm as _gemm
from ._quantize import quantize_rows as _quantize_rows, quantized_shapes
from ._tensors import DType

__all__ = ["all_gather_gemm", "collective", "gemm", "gemm_all_gather", "gemm_all_reduce", "gemm_reduce_scatter",
           "handle", "quantize_rows", "release"]

# torch's op registry holds the functions below until after nanobind's exit-time check, which would
# report weave's module objects they reach as leaks: the report is off once these ops exist.
_weave._set_leak_warnings(False)

_FUSED = (GemmAllReduce, GemmReduceScatter, GemmAllGather, AllGatherGemm)
_HELD = _FUSED + (Collective,)
_lock = threading.Lock()
_ids = itertools.count(1)
_live: dict = {}  # handle -> op (kept alive until release)


def handle(op) -> int:
    """The integer handle a custom op takes for `op` (a GemmAllReduce, GemmReduceScatter,
    GemmAllGather, AllGatherGemm or Collective); the same handle each time for the same op."""
    if not isinstance(op, _HELD):
        raise arg_error(f"argument 'op': must be a weave.GemmAllReduce, GemmReduceScatter, GemmAllGather, "
                        f"AllGatherGemm or Collective (got {type(op).__name__})")
    with _lock:
        for h, o in _live.items():
            if o is op:
                return h
        h = next(_ids)
        _live[h] = op
        return h


def release(h: int) -> None:
    """Forgets handle `h` (the op is then freed when nothing else holds it)."""
    with _lock:
        if _live.pop(h, None) is None:
            raise arg_error(f"argument 'handle': {h} is not a live weave.ops handle")


def _op_of(h: int, kind):
    h = int(h)  # a handle traced as a symbolic int (compile's automatic dynamic shapes) is specialised here
    with _lock:
        op = _live.get(h)
    if op is None:
        raise arg_error(f"argument 'handle': {h} is not a live weave.ops handle (made by weave.ops.handle(op), "
                        f"not released)")
    if not isinstance(op, kind):
        raise arg_error(f"argument 'handle': {h} is a {type(op).__name__}, this op takes a {kind.__name__}")
    return op


def _torch_dtype(dt) -> torch.dtype:
    return torch.float32 if dt == DType.F32 else torch.bfloat16


def _empty_output(op, a: torch.Tensor) -> torch.Tensor:
    rows, cols, dt = op._out_spec(a.shape[0])
    return torch.empty((rows, cols), dtype=_torch_dtype(dt), device=a.device)


# The ops are defined on a torch.library.Library (a schema, a CUDA and a CPU kernel, a fake), not
# with torch.library.custom_op: custom_op's Python layers around every eager call (its autograd
# wrapper, redispatch and output checks) cost more host time than a decode-size GEMM takes on the
# GPU (docs/perf/python.md). The schemas say what custom_op inferred: nothing mutated or aliased.
# No autograd formula (inference ops): torch's autograd fallback gives an input that requires grad
# no gradient through them and, by default, warns at backward.
_lib = torch.library.Library("weave", "DEF")


def _define(name: str, schema: str, kernel, fake):
    """Defines weave::<name><schema> with `kernel` for CUDA tensors (and CPU ones, so that weave's
    own error names the argument not on a GPU) and `fake` for tracing; returns torch.ops.weave.<name>."""
    _lib.define(name + schema)
    for key in ("CUDA", "CPU"):
        _lib.impl(name, kernel, key)
    torch.library.register_fake(f"weave::{name}", fake, lib=_lib)
    return getattr(torch.ops.weave, name)


# --- weave::gemm -------------------------------------------------------------------------------

def _gemm_op(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor | None = None,
             scale_b: torch.Tensor | None = None, mode: str = "", out_dtype: str = "bf16",
             scale_layout: str = "raw") -> torch.Tensor:
    """C [M, N] = A [M, K] @ B [N, K]^T in A's quantisation (mode "" infers it from the operands,
    as weave.gemm); out_dtype bf16 or fp32."""
    return _gemm(a, b, scale_a=scale_a, scale_b=scale_b, mode=mode or None, out_dtype=out_dtype,
                 scale_layout=scale_layout)


def _gemm_fake(a, b, scale_a=None, scale_b=None, mode="", out_dtype="bf16", scale_layout="raw"):
    if out_dtype not in ("bf16", "fp32"):
        raise arg_error(f"argument 'out_dtype': must be bf16 or fp32 (got {out_dtype!r})")
    dt = torch.bfloat16 if out_dtype == "bf16" else torch.float32
    return a.new_empty((a.shape[0], b.shape[0]), dtype=dt)


gemm = _define("gemm", '(Tensor a, Tensor b, Tensor? scale_a=None, Tensor? scale_b=None, str mode="", '
                       'str out_dtype="bf16", str scale_layout="raw") -> Tensor', _gemm_op, _gemm_fake)


# --- weave::quantize_rows -------------------------------------------------------------------------

def _quantize_fake(x, mode):
    if x.ndim != 2:
        raise arg_error(f"argument 'x': must be a 2-D matrix [M, K] (got rank {x.ndim})")
    shape, ue8m0 = quantized_shapes(mode, x.shape[0], x.shape[1])
    return (x.new_empty(tuple(x.shape), dtype=torch.float8_e4m3fn),
            x.new_empty(shape, dtype=torch.uint8 if ue8m0 else torch.float32))


def _quantize_op(x: torch.Tensor, mode: str):
    """(e4m3 [M, K], scales) of a bf16 x [M, K] (weave.quantize_rows); rows the kernel cannot read
    (not K-contiguous, or not 16-byte aligned) are copied first."""
    if x.ndim == 2 and (x.stride(1) != 1 or x.data_ptr() % 16 or (x.shape[0] > 1 and x.stride(0) % 8)):
        x = x.clone(memory_format=torch.contiguous_format)
    return _quantize_rows(x, mode)


quantize_rows = _define("quantize_rows", "(Tensor x, str mode) -> (Tensor, Tensor)", _quantize_op, _quantize_fake)


# --- the fused operators (op by handle) ----------------------------------------------------------

def run_fused(op, a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor | None = None,
              scale_b: torch.Tensor | None = None) -> torch.Tensor:
    """What torch.ops.weave.<fused op> does with the op behind its handle: one call, its output in a
    new tensor. weave.nn's layers call it themselves when they skip the dispatcher (nn._direct)."""
    return op.run(a, b, scale_a=scale_a, scale_b=scale_b, out=_empty_output(op, a))


def _register_fused(name: str, kind, doc: str):
    """torch.ops.weave.<name>(handle, a, b, scale_a=None, scale_b=None): one call of the op behind
    `handle` (a `kind`), its output copied into a new tensor; the fake gives that tensor's shape."""

    def run(handle: int, a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor | None = None,
            scale_b: torch.Tensor | None = None) -> torch.Tensor:
        return run_fused(_op_of(handle, kind), a, b, scale_a, scale_b)

    def fake(handle, a, b, scale_a=None, scale_b=None):
        return _empty_output(_op_of(handle, kind), a)

    run.__doc__ = doc
    return _define(name, "(SymInt handle, Tensor a, Tensor b, Tensor? scale_a=None, Tensor? scale_b=None) -> Tensor",
                   run, fake)


gemm_all_reduce = _register_fused("gemm_all_reduce", GemmAllReduce,
                                  "weave.GemmAllReduce: [m, N] bf16, the sum over ranks of A_r @ B_r^T.")
gemm_reduce_scatter = _register_fused("gemm_reduce_scatter", GemmReduceScatter,
                                      "weave.GemmReduceScatter: [m / world, N] bf16, this rank's rows of the sum.")
gemm_all_gather = _register_fused("gemm_all_gather", GemmAllGather,
                                  "weave.GemmAllGather: [world x m, N] of the op's out dtype, every rank's rows.")
all_gather_gemm = _register_fused("all_gather_gemm", AllGatherGemm,
                                  "weave.AllGatherGemm: [world x m, N] of the op's out dtype, every rank's A rows "
                                  "gathered, times B^T (the GEMM stores into the new tensor).")


# --- the collectives (op by handle) ---------------------------------------------------------------

def _collective_output(op: Collective, inp: torch.Tensor) -> torch.Tensor:
    """The output of one call on `inp`: all-gather stacks every rank's tensor along dim 0,
    reduce-scatter keeps this rank's 1 / world of dim 0, all-reduce keeps the shape."""
    world, kind = op.comm.world_size, op._impl.op
    if inp.ndim < 1:
        raise arg_error("argument 'inp': must have at least one dimension (the one the collective splits or stacks)")
    rows = inp.shape[0]
    if kind == CollectiveOp.ALL_GATHER:
        rows = world * rows
    elif kind == CollectiveOp.REDUCE_SCATTER:
        if rows % world:
            raise arg_error(f"argument 'inp': reduce-scatter splits dim 0 ({rows}) among the world ({world}): it must "
                            f"be a multiple of it")
        rows = rows // world
    return inp.new_empty((rows, *inp.shape[1:]))


def _collective_op(handle: int, inp: torch.Tensor) -> torch.Tensor:
    """weave.Collective (all-gather, reduce-scatter or all-reduce, the op behind `handle`) of a
    contiguous tensor, into a new tensor (_collective_output's shape)."""
    op = _op_of(handle, Collective)
    return op.run(inp.contiguous(), _collective_output(op, inp))


collective = _define("collective", "(SymInt handle, Tensor inp) -> Tensor", _collective_op,
                     lambda handle, inp: _collective_output(_op_of(handle, Collective), inp))
