"""weave.GemmAllReduce, weave.GemmReduceScatter, weave.GemmAllGather and weave.AllGatherGemm, the
fused operators (include/weave/gemm_all_reduce.hpp, gemm_reduce_scatter.hpp, gemm_all_gather.hpp,
all_gather_gemm.hpp; docs/fused.md).

    comm = weave.Communicator.from_process_group()
    ar = weave.GemmAllReduce(comm, n=7168, k=2048, m_max=8192, quant="blockscale")   # collective
    out = ar.run(a, b, scale_a=sa, scale_b=sb)   # [m, 7168] bf16 = sum over ranks of a_r @ b_r.T
    ar.run(a, b, scale_a=sa, scale_b=sb, out=y)  # the same, copied into y (returns y)
    rs = weave.GemmReduceScatter(comm, n=7168, k=2048, m_max=8192)   # collective
    part = rs.run(a, b)   # [m / world, 7168] bf16: this rank's rows of sum over ranks of a_r @ b_r.T
    agm = weave.AllGatherGemm(comm, n=2048, k=7168, m_max=1024, quant="ptpc")   # collective
    y = agm.run(a, b, scale_a=sa, scale_b=sb)  # [world * m, 2048] bf16 = [a_0; ...; a_{W-1}] @ b.T
    x = agm.gathered_a(m)                      # [world * m, 7168] e4m3: every rank's a (window view)

Construction is collective (every rank the same config, in the same order as its other collective
calls) and allocates the op's window at m_max; run() only enqueues (graph-capturable); its result
is a view into the op's window, valid until the next run() of the op, or, with out=, a copy in the
caller's tensor (stream-ordered after the call; AllGatherGemm's GEMM stores into it directly). The
operands are those of weave.Gemm in the op's quant: A [m, K] (GemmAllReduce, GemmReduceScatter: this
rank's K shard; GemmReduceScatter: m a multiple of the world; GemmAllGather, AllGatherGemm: this
rank's rows), B [N, K], and the quant's scales.
"""
from __future__ import annotations

import sys

from . import _weave
from ._comm import Communicator, _CudaBuffer
from ._errors import INT32, INT64, arg_error, int_arg
from ._gemm import _MX_ROUTES, ScaleMode, _enum, _layout_of, _mode_of, _out_dtype_of, _scale_view
from ._tensors import DType, describe, resolve_stream

GemmAllReduceMode = _weave.GemmAllReduceMode
GemmReduceScatterMode = _weave.GemmReduceScatterMode
GemmAllGatherMode = _weave.GemmAllGatherMode
AllGatherGemmMode = _weave.AllGatherGemmMode

_AR_MODES = "mode (auto, gemm-only, split-nccl, split-lsa, split-ce, decode, decode-fused, fused, fused-rs, fused-ce)"
_RS_MODES = "mode (auto, gemm-only, split-nccl, split-lsa, split-ce, fused)"
_AG_MODES = "mode (auto, gemm-only, split-nccl, split-lsa, split-ce, fused-lsa, fused-ce)"
_AGM_MODES = "mode (auto, gemm-only, split-nccl, split-lsa, split-ce, fused-ce)"
# GemmAllReduce's and GemmReduceScatter's configs have the same fields, their modes aside:
# (config type, mode parser, mode choices, mode enum) of each.
_AR_KIND = (_weave.GemmAllReduceConfig, _weave.parse_gemm_all_reduce_mode, _AR_MODES, GemmAllReduceMode)
_RS_KIND = (_weave.GemmReduceScatterConfig, _weave.parse_gemm_reduce_scatter_mode, _RS_MODES, GemmReduceScatterMode)


def _int(name: str, v, low: int = 1, high: int = INT64[1]) -> int:
    return int_arg(name, v, low, high)


def _mx_route(mx_route) -> int:
    if not isinstance(mx_route, str) or mx_route not in _MX_ROUTES:
        raise arg_error(f"argument 'mx_route': must be one of auto, native, bf16 (got {mx_route!r})")
    return _MX_ROUTES[mx_route]


def _ar_config(n, k, m_max, quant, scale_layout, mode, exact_own, chunks, calibration="", mx_route="auto", max_sms=0,
               allow_pdl=False, *, kind=_AR_KIND):
    """GemmAllReduce's config (kind=_RS_KIND: GemmReduceScatter's, _rs_config)."""
    config_type, parse, choices, mode_enum = kind
    if not isinstance(allow_pdl, bool):
        raise arg_error(f"argument 'allow_pdl': must be a bool (got {allow_pdl!r})")
    if allow_pdl and kind is not _AR_KIND:
        raise arg_error("argument 'allow_pdl': GemmReduceScatter has no decode mode (allow_pdl applies to "
                        "GemmAllReduce's decode GEMV)")
    c = config_type()
    c.n, c.k, c.m_max = _int("n", n), _int("k", k), _int("m_max", m_max)
    c.quant, c.scale_layout = _mode_of(quant), _layout_of(scale_layout)
    c.mode = _enum(mode, parse, choices, "mode", mode_enum)
    c.exact_own = bool(exact_own)
    c.chunks = _int("chunks", chunks, 0, INT32[1])
    c.calibration = _calibration_path(calibration)
    c.mx_route = _mx_route(mx_route)
    c.max_sms = _int("max_sms", max_sms, 0, 1024)
    if allow_pdl:
        c.allow_pdl = True
    return c


def _rs_config(*args, **kw):
    """GemmReduceScatter's config, from _ar_config's arguments."""
    return _ar_config(*args, **kw, kind=_RS_KIND)


def _calibration_path(calibration) -> str:
    if not isinstance(calibration, str):
        raise arg_error(f"argument 'calibration': must be a path (str), '' for none (got {type(calibration).__name__})")
    return calibration


def _ag_config(n, k, m_max, quant, scale_layout, out_dtype, mode, calibration="", mx_route="auto", max_sms=0):
    c = _weave.GemmAllGatherConfig()
    c.n, c.k, c.m_max = _int("n", n), _int("k", k), _int("m_max", m_max)
    c.quant, c.scale_layout, c.out_dtype = _mode_of(quant), _layout_of(scale_layout), _out_dtype_of(out_dtype)
    c.mode = _enum(mode, _weave.parse_gemm_all_gather_mode, _AG_MODES, "mode", GemmAllGatherMode)
    c.calibration = _calibration_path(calibration)
    c.mx_route = _mx_route(mx_route)
    c.max_sms = _int("max_sms", max_sms, 0, 1024)
    return c


def _agm_config(n, k, m_max, quant, scale_layout, out_dtype, mode, calibration="", mx_route="auto", max_sms=0):
    """AllGatherGemm's config: GemmAllGather's fields."""
    c = _weave.AllGatherGemmConfig()
    c.n, c.k, c.m_max = _int("n", n), _int("k", k), _int("m_max", m_max)
    c.quant, c.scale_layout, c.out_dtype = _mode_of(quant), _layout_of(scale_layout), _out_dtype_of(out_dtype)
    c.mode = _enum(mode, _weave.parse_all_gather_gemm_mode, _AGM_MODES, "mode", AllGatherGemmMode)
    c.calibration = _calibration_path(calibration)
    c.mx_route = _mx_route(mx_route)
    c.max_sms = _int("max_sms", max_sms, 0, 1024)
    return c


_AR_PLAN_FIELDS = ("block_m", "block_n", "tiles", "waves", "grid", "band_blocks", "chunks", "chunk_blocks", "rounds",
                   "bytes_rs", "bytes_ag", "window_bytes", "model_gemm_us", "model_comm_us", "model_split_us",
                   "model_fused_us", "reason")
_RS_PLAN_FIELDS = tuple(f for f in _AR_PLAN_FIELDS if f != "bytes_ag")  # no gather leg
# GemmReduceScatter's fused bands are whole tiles of this many rows (include/weave/gemm_reduce_scatter.hpp).
_RS_FUSED_BLOCK_M = 128
_AG_PLAN_FIELDS = ("block_m", "block_n", "tiles", "waves", "grid", "chunks", "bytes_per_peer", "window_bytes",
                   "model_gemm_us", "model_comm_us", "model_split_us", "model_fused_us", "gemm_gemv", "gemm_split_k",
                   "reason")
_AGM_PLAN_FIELDS = ("gemm_kernel", "gemm_reason", "block_m", "block_n", "gemm_split_k", "rows", "tiles", "waves", "grid", "bytes_per_peer", "window_bytes",
                    "model_gemm_us", "model_comm_us", "model_split_us", "model_fused_us", "reason")


def _plan_dict(p, fields) -> dict:
    d = {f: getattr(p, f) for f in fields}
    d["mode"] = _weave.name(p.mode)
    return d


def _window_tensor(view, owner):
    """A C++ view into an op's window as a torch tensor of its dtype, shape and strides on its GPU,
    holding `owner` (the op) alive; None for an empty view (bf16 has no scales)."""
    import torch

    if view.ptr == 0:
        return None
    dtype = {DType.BF16: torch.bfloat16, DType.F32: torch.float32, DType.E4M3: torch.float8_e4m3fn,
             DType.UE8M0: getattr(torch, "float8_e8m0fnu", torch.uint8)}[view.dtype]
    shape, strides = list(view.shape), list(view.strides)
    span = 1 + sum((size - 1) * stride for size, stride in zip(shape, strides))  # elements addressed
    size = torch.empty((), dtype=dtype).element_size()
    raw = torch.as_tensor(_CudaBuffer(view.ptr, (span * size,), "|u1", owner), device=f"cuda:{view.device}")
    return raw.view(dtype).as_strided(shape, strides)


class _FusedOp:
    """What the fused ops share: argument checks, the call, the output view."""

    _kind = ""

    def __init__(self, comm, config):
        if not isinstance(comm, Communicator):
            raise arg_error(f"argument 'comm': must be a weave.Communicator (got {type(comm).__name__})")
        self._check_config(config, comm.world_size, self._kind)
        self.comm = comm
        self._cfg = config
        self._impl = self._op(comm._impl, config)
        self._keep = ()

    @classmethod
    def _check_config(cls, config, world: int, where: str) -> None:
        """Raises ArgumentError "<where>: <every rule the config breaks>" before any GPU work."""
        bad = cls._validate(config, world)
        if bad:
            raise arg_error(f"{where}: {bad}")

    @classmethod
    def _wrap(cls, comm: Communicator, config, impl):
        """An op around one the C++ side already built (weave.create_sharing_window)."""
        self = cls.__new__(cls)
        self.comm, self._cfg, self._impl, self._keep = comm, config, impl, ()
        return self

    def describe(self) -> str:
        return self._impl.describe()

    def __repr__(self) -> str:
        return f"weave.{self._kind}({self.describe()})"

    @property
    def last_mode(self) -> str:
        """The mode the last run took (auto resolves per call)."""
        return _weave.name(self._impl.last_mode)

    def run(self, a, b, *, scale_a=None, scale_b=None, stream=None, out=None):
        """Enqueues one call with this rank's operands (m = a's rows, 1 <= m <= m_max; every rank
        the same m) on `stream` (default: torch's current stream when torch is loaded) and returns
        the output: a view into the op's window, valid until the next run(). With `out` (a tensor
        of the output's shape and dtype on this rank's GPU, rows may be strided, outside the op's
        window), the call also copies the output into it, stream-ordered after the call (still only
        enqueued: graph-capturable), and returns `out`; it is checked before any GPU work."""
        ta, tb = describe(a, "A"), describe(b, "B")
        for t in (ta, tb):
            if t.ndim != 2:
                raise arg_error(f"argument '{t.name}': must be a 2-D matrix (got rank {t.ndim}: {list(t.shape)})")
        m = ta.shape[0]
        if m < 1 or m > self._cfg.m_max:
            raise arg_error(f"argument 'A': its rows m = {m} must be in 1..m_max = {self._cfg.m_max}")
        self._check_rows(m)
        mode, layout = self._cfg.quant, self._cfg.scale_layout
        want = DType.BF16 if mode == ScaleMode.BF16 else DType.E4M3
        sa = _scale_view(scale_a, "scale_a", mode, layout, m, "M")
        sb = _scale_view(scale_b, "scale_b", mode, layout, self._cfg.n, "N")
        to = None if out is None else self._out_view(out, m)
        s = resolve_stream(stream, self.comm.device, (ta, tb))
        torch = sys.modules.get("torch") if ta.is_torch else None
        if torch is not None and torch.cuda.current_device() != self.comm.device:
            with torch.cuda.device(self.comm.device):
                self._impl.run(m, ta.view(want), tb.view(want), sa, sb, s, to)
        else:
            self._impl.run(m, ta.view(want), tb.view(want), sa, sb, s, to)
        self._keep = (a, b, scale_a, scale_b, out)  # alive while the call may still read (write) them
        return self.output(m) if out is None else out

    __call__ = run

    def _check_rows(self, m: int) -> None:
        """Raises ArgumentError naming 'A' where the op takes no call of m rows (past 1..m_max)."""

    def _out_view(self, out, m: int):
        """The C++ view of a caller's `out` for a call of m rows; raises ArgumentError naming 'out'
        and the rule for what can be told here (rank, dtype, shape, device). Strides, alignment and
        the window are checked by the op, before any GPU work, with the same kind of error."""
        t = describe(out, "out")
        rows, cols, dtype = self._out_spec(m)
        if t.ndim != 2:
            raise arg_error(f"argument 'out': must be a 2-D matrix (got rank {t.ndim}: {list(t.shape)})")
        if t.dtype != dtype:
            raise arg_error(f"argument 'out': dtype must be {_weave.name(dtype)}, the op's output dtype "
                            f"(got {t.dtype_text})")
        if tuple(t.shape) != (rows, cols):
            raise arg_error(f"argument 'out': shape must be [{rows}, {cols}] (got {list(t.shape)})")
        if t.device != self.comm.device:
            where = "host memory" if t.device < 0 else f"cuda:{t.device}"
            raise arg_error(f"argument 'out': must live in cuda:{self.comm.device}, this rank's GPU (got {where})")
        return t.view(dtype)

    def output(self, m: int):
        """The output of the last run of m rows, as a torch tensor viewing the op's window."""
        import torch

        rows, cols, dtype = self._out_spec(_int("m", m))
        dtype = torch.float32 if dtype == DType.F32 else torch.bfloat16
        size = torch.empty((), dtype=dtype).element_size()
        raw = torch.as_tensor(_CudaBuffer(self._impl.output_ptr(m), (rows * cols * size,), "|u1", self),
                              device=f"cuda:{self.comm.device}")
        return raw.view(dtype).view(rows, cols)

    def check(self) -> None:
        """Raises weave.Error(TIMEOUT) naming rank, peer and flag if a device wait timed out."""
        self._impl.check()

    def self_test(self, m: int = 0) -> dict:
        """Collective and synchronising: known per-rank values through the op's real path, every
        source rank's contribution checked on every rank."""
        r = self._impl.self_test(_int("m", m, 0))
        return {"ok": r.ok, "wrong_from_rank": list(r.wrong_from_rank), "detail": r.detail}


class _ReducingOp(_FusedOp):
    """What GemmAllReduce and GemmReduceScatter share: one configuration (n, k = this rank's K
    shard, m_max, quant, mode, ...; only the modes differ), one planner, a bf16 output. A subclass
    names its config builder, C++ validate / window / planner functions and plan fields."""

    _config = None        # staticmethod: _ar_config or _rs_config
    _window_bytes = None  # staticmethod: _weave.gemm_*_window_bytes
    _plan_fn = None       # staticmethod: _weave.gemm_*_plan
    _plan_fields = ()

    def __init__(self, comm: Communicator, *, n: int, k: int, m_max: int, quant="bf16", scale_layout="raw",
                 mode="auto", exact_own: bool = False, chunks: int = 0, calibration: str = "", mx_route="auto",
                 max_sms: int = 0, allow_pdl: bool = False):
        """calibration: a `weave bench gemm-ar --calibrate` table (GemmReduceScatter: `gemm-rs`); auto
        then takes the mode measured fastest per M on this machine (the table must be for this quant,
        n, k and world).
        mx_route (mxfp8): "auto" (the planner's model per call), "native" (the fp8 kernel, no
        workspace) or "bf16" (A and B converted exactly to bf16 per call, then the bf16 kernel; a rank
        whose scales cannot be carried runs the native kernel instead); the op allocates bf16 copies
        of A (m_max x k) and B (n x k) unless "native".
        max_sms: CTAs per rank at most (0: every SM); leaves SMs free for kernels that must run beside
        the op's persistent kernel (another communicator's collectives on the same GPUs). Every rank
        must pass the same value.
        allow_pdl (GemmAllReduce): modes decode's and decode-fused's GEMV launched with programmatic dependent launch,
        under weave.Gemm's allow_pdl contract (no kernel right before the call writes B); this
        rank's launch only."""
        super().__init__(comm, self._config(n, k, m_max, quant, scale_layout, mode, exact_own, chunks, calibration,
                                            mx_route, max_sms, allow_pdl))

    @classmethod
    def validate(cls, *, n: int, k: int, m_max: int, world: int, quant="bf16", scale_layout="raw", mode="auto",
                 exact_own: bool = False, chunks: int = 0) -> str:
        """'' if the op can run in a world of `world` ranks, else every rule it breaks. CPU only."""
        return cls._validate(cls._config(n, k, m_max, quant, scale_layout, mode, exact_own, chunks),
                             _int("world", world, *INT32))

    @classmethod
    def window_bytes(cls, *, n: int, k: int, m_max: int, world: int, quant="bf16", scale_layout="raw",
                     mode="auto", calibration="") -> int:
        """Bytes of the op's window per rank (size before allocating). CPU only. calibration: the table an
        auto op will read (GemmAllReduce: one that names decode-fused adds its low-latency lines)."""
        return cls._window_bytes(cls._config(n, k, m_max, quant, scale_layout, mode, False, 0, calibration),
                                 _int("world", world, *INT32))

    def plan(self, m: int) -> dict:
        """What a call of m rows runs and why: tiles, waves, bands, chunks, bytes per leg, the model."""
        return _plan_dict(self._impl.plan(_int("m", m)), self._plan_fields)

    @classmethod
    def plan_for(cls, m: int, *, n: int, k: int, m_max: int, world: int, quant="bf16", scale_layout="raw",
                 mode="auto", exact_own: bool = False, chunks: int = 0, calibration="", num_sms: int = 132,
                 nvlink_domain: bool = True, nccl: bool = True) -> dict:
        """What an op of this configuration would run for m rows, and why, without an op or a GPU (the
        planner behind plan(m); `weave plan gemm-ar` prints GemmAllReduce's). num_sms: CTAs per rank;
        nvlink_domain / nccl: what the machine would offer. CPU only."""
        cfg = cls._config(n, k, m_max, quant, scale_layout, mode, exact_own, chunks, calibration)
        return _plan_dict(cls._plan_fn(cfg, _int("world", world), _int("m", m), _int("num_sms", num_sms),
                                       bool(nvlink_domain), bool(nccl)),
                          cls._plan_fields)


class GemmAllReduce(_ReducingOp):
    """The row-parallel linear layer: every rank r passes A_r [m, K_r] and its K shard B_r [N, K_r];
    every rank gets sum over r of A_r @ B_r.T, [m, N] bf16, bitwise identical on every rank (summed
    once per element in fp32 in rank order). Modes: auto (default), gemm-only, split-nccl,
    split-lsa, split-ce, decode (m <= 32: the decode GEMV + the low-latency all-reduce; auto takes
    it there), decode-fused (m <= 32: the same as one kernel, the GEMV's clusters exchanging their
    rows as low-latency lines; bitwise equal to decode (whose GEMV runs its K split);
    explicit, or auto where its calibration table measured it fastest; only where every rank's GEMV
    grid is resident at once), fused (both legs under the GEMM; bitwise equal to split-lsa),
    fused-rs (MORI's structure, a control arm: the scatter in the GEMM's epilogue, reduce + gather in a tail),
    fused-ce (the fused schedule with both legs pulled by copy engines, chunk by chunk; bitwise
    equal to fused)."""

    _kind = "GemmAllReduce"
    _validate = staticmethod(_weave.gemm_all_reduce_validate)
    _op = _weave.GemmAllReduce
    _config = staticmethod(_ar_config)
    _window_bytes = staticmethod(_weave.gemm_all_reduce_window_bytes)
    _plan_fn = staticmethod(_weave.gemm_all_reduce_plan)
    _plan_fields = _AR_PLAN_FIELDS

    def _out_spec(self, m: int):
        """The output of m rows: (rows, cols, weave dtype)."""
        return m, self._cfg.n, DType.BF16


class GemmReduceScatter(_ReducingOp):
    """The row-parallel linear layer of sequence parallelism: every rank r passes A_r [m, K_r] and
    its K shard B_r [N, K_r] (m a multiple of the world W); rank r gets rows [r m/W, (r+1) m/W) of
    sum over ranks of A_q @ B_q.T, [m / W, N] bf16 (summed once per element in fp32 in rank order:
    GemmAllReduce's numbers for those rows). Modes: auto (default), gemm-only, split-nccl,
    split-lsa, split-ce, fused (one kernel; needs m a multiple of W x 128, auto takes split-lsa
    where it is not). No decode mode."""

    _kind = "GemmReduceScatter"
    _validate = staticmethod(_weave.gemm_reduce_scatter_validate)
    _op = _weave.GemmReduceScatter
    _config = staticmethod(_rs_config)
    _window_bytes = staticmethod(_weave.gemm_reduce_scatter_window_bytes)
    _plan_fn = staticmethod(_weave.gemm_reduce_scatter_plan)
    _plan_fields = _RS_PLAN_FIELDS

    def _check_rows(self, m: int) -> None:
        w = self.comm.world_size
        if m % w:
            raise arg_error(f"argument 'A': its rows m = {m} must be a multiple of the world ({w}): each rank "
                            f"receives m / world rows")
        tile = w * _RS_FUSED_BLOCK_M
        if w > 1 and self._cfg.mode == GemmReduceScatterMode.FUSED and m % tile:
            raise arg_error(f"argument 'A': its rows m = {m} must be a multiple of world x {_RS_FUSED_BLOCK_M} = "
                            f"{tile} in mode fused (its bands are whole tiles); use mode auto or a split mode")

    def _out_spec(self, m: int):
        """This rank's rows of a call of m rows: (rows, cols, weave dtype)."""
        return m // self.comm.world_size, self._cfg.n, DType.BF16


class GemmAllGather(_FusedOp):
    """Every rank r passes A_r [m, K]; B [N, K] is the same on every rank; every rank gets
    [world * m, N] with rank s's rows A_s @ B.T at [s*m, (s+1)*m) (bf16 or fp32 out for bf16
    inputs, bf16 for fp8). Modes: auto (default), gemm-only, split-nccl, split-lsa, split-ce,
    fused-lsa, fused-ce."""

    _kind = "GemmAllGather"
    _validate = staticmethod(_weave.gemm_all_gather_validate)
    _op = _weave.GemmAllGather

    def __init__(self, comm: Communicator, *, n: int, k: int, m_max: int, quant="bf16", scale_layout="raw",
                 out_dtype="bf16", mode="auto", calibration: str = "", mx_route="auto", max_sms: int = 0):
        """calibration: as GemmAllReduce's. mx_route (mxfp8): as GemmAllReduce's; fused-ce runs native.
        max_sms: as GemmAllReduce's."""
        super().__init__(comm, _ag_config(n, k, m_max, quant, scale_layout, out_dtype, mode, calibration, mx_route,
                                          max_sms))

    def self_test(self, m: int = 0, *, b=None, scale_b=None) -> dict:
        """Collective and synchronising: known per-rank values through the op's real path. With b
        (this rank's B [N, K], and scale_b for the fp8 modes), also checks that every rank passed
        the same B: ok is False on every rank if any differs, naming the ranks outside the majority."""
        if b is None:
            return super().self_test(m)
        tb = describe(b, "B")
        if tb.ndim != 2:
            raise arg_error(f"argument 'B': must be a 2-D matrix (got rank {tb.ndim}: {list(tb.shape)})")
        mode = self._cfg.quant
        want = DType.BF16 if mode == ScaleMode.BF16 else DType.E4M3
        sb = _scale_view(scale_b, "scale_b", mode, self._cfg.scale_layout, self._cfg.n, "N")
        r = self._impl.self_test_b(_int("m", m, 0), tb.view(want), sb)
        return {"ok": r.ok, "wrong_from_rank": list(r.wrong_from_rank), "detail": r.detail}

    @staticmethod
    def validate(*, n: int, k: int, m_max: int, world: int, quant="bf16", scale_layout="raw", out_dtype="bf16",
                 mode="auto") -> str:
        """'' if the op can run in a world of `world` ranks, else every rule it breaks. CPU only."""
        return _weave.gemm_all_gather_validate(_ag_config(n, k, m_max, quant, scale_layout, out_dtype, mode),
                                                  _int("world", world, *INT32))

    @staticmethod
    def window_bytes(*, n: int, k: int, m_max: int, world: int, quant="bf16", scale_layout="raw", out_dtype="bf16",
                     mode="auto") -> int:
        """Bytes of the op's window per rank (size before allocating). CPU only."""
        return _weave.gemm_all_gather_window_bytes(_ag_config(n, k, m_max, quant, scale_layout, out_dtype, mode),
                                                  _int("world", world, *INT32))

    def plan(self, m: int) -> dict:
        """What a call of m rows per rank runs and why."""
        return _plan_dict(self._impl.plan(_int("m", m)), _AG_PLAN_FIELDS)

    @staticmethod
    def plan_for(m: int, *, n: int, k: int, m_max: int, world: int, quant="bf16", scale_layout="raw",
                 out_dtype="bf16", mode="auto", calibration="", num_sms: int = 132, nvlink_domain: bool = True,
                 nccl: bool = True) -> dict:
        """What an op of this configuration would run for m rows per rank, and why, without an op or a
        GPU (the planner behind plan(m); `weave plan gemm-ag` prints the same). CPU only."""
        cfg = _ag_config(n, k, m_max, quant, scale_layout, out_dtype, mode, calibration)
        return _plan_dict(_weave.gemm_all_gather_plan(cfg, _int("world", world), _int("m", m),
                                                      _int("num_sms", num_sms), bool(nvlink_domain), bool(nccl)),
                          _AG_PLAN_FIELDS)

    def _out_spec(self, m: int):
        """The output of m rows per rank: (rows, cols, weave dtype)."""
        return self.comm.world_size * m, self._cfg.n, self._cfg.out_dtype


class AllGatherGemm(_FusedOp):
    """The column-parallel linear layer of sequence parallelism: every rank r passes its rows of the
    activations A_r [m, K] (the same m on every rank) and the column shard B [N, K] (the same on
    every rank); every rank gets [A_0; ...; A_{W-1}] @ B.T, [world * m, N] with rank s's rows at
    [s*m, (s+1)*m) (bf16 or fp32 out for bf16 inputs, bf16 for fp8). A travels as the GEMM reads it
    (e4m3 with its per-row scales in the fp8 modes: half bf16's bytes), and gathered_a(m) /
    gathered_scale_a(m) keep the gathered activations (for the backward pass or the next layer).
    Modes: auto (default), gemm-only, split-nccl, split-lsa, split-ce, fused-ce (copy engines pull
    the peers' rows chunk by chunk while the GEMM runs; bf16, ptpc and blockscale with bf16 output;
    auto takes it only from a calibration table). A's scales travel with their rows, so the scale
    layout is raw (ptpc fp32 [m]; blockscale fp32 [m, K/128]; mxfp8 ue8m0 [m, K/32])."""

    _kind = "AllGatherGemm"
    _validate = staticmethod(_weave.all_gather_gemm_validate)
    _op = _weave.AllGatherGemm

    def __init__(self, comm: Communicator, *, n: int, k: int, m_max: int, quant="bf16", scale_layout="raw",
                 out_dtype="bf16", mode="auto", calibration: str = "", mx_route="auto", max_sms: int = 0):
        """m_max: the largest m per rank (the window holds world x m_max rows of A and of the output).
        calibration (auto only): a `weave bench ag-gemm --calibrate` table for this quant, out dtype,
        N, K and world; auto then runs, per call, the mode it measured fastest near m (split-lsa or
        fused-ce); '' = the model (split-lsa). mx_route (mxfp8): the GEMM's route as weave.Gemm's
        (auto, native, bf16). max_sms: CTAs per rank at most (0: every SM), every rank the same value."""
        super().__init__(comm, _agm_config(n, k, m_max, quant, scale_layout, out_dtype, mode, calibration, mx_route,
                                           max_sms))

    def run(self, a, b, *, scale_a=None, scale_b=None, stream=None, out=None):
        """Enqueues one call with this rank's rows a [m, K] (1 <= m <= m_max; every rank the same m)
        and B [N, K] on `stream` (default: torch's current stream when torch is loaded) and returns
        the output [world * m, N]: a view into the op's window, valid until the next run(). With
        `out` (a tensor of that shape and the op's out dtype on this rank's GPU, outside the op's
        window, rows may be strided with a row stride of a multiple of 16 bytes), the GEMM stores
        straight into it (no copy; output(m) then holds nothing of this call) and run() returns it.
        a (and scale_a) may be input(m) (and input_scales(m)) written beforehand on the op's stream:
        then nothing is copied into the window first. Everything is checked before any GPU work."""
        return super().run(a, b, scale_a=scale_a, scale_b=scale_b, stream=stream, out=out)

    __call__ = run

    def _m(self, m) -> int:
        return _int("m", m, 1, self._cfg.m_max)

    def gathered_a(self, m: int):
        """Every rank's A of the last run of m rows per rank, [world * m, K] (bf16, or e4m3 as
        torch.float8_e4m3fn), as a torch tensor viewing the op's window, valid until the next run()
        (gemm-only: only this rank's rows are there)."""
        m = self._m(m)
        return _window_tensor(self._impl.gathered_a(m), self)

    def gathered_scale_a(self, m: int):
        """Their scales, viewing the op's window: ptpc fp32 [world * m], blockscale fp32
        [world * m, K/128], mxfp8 ue8m0 [world * m, K/32]; None for bf16."""
        m = self._m(m)
        return _window_tensor(self._impl.gathered_scale_a(m), self)

    def input(self, m: int):
        """This rank's slot of the gathered A for a call of m rows, [m, K] in the op's window: write
        A there (on the op's stream, after the previous call was enqueued) and pass it as `a` to
        save the copy."""
        m = self._m(m)
        return _window_tensor(self._impl.input(m), self)

    def input_scales(self, m: int):
        """This rank's slot of the gathered scales for a call of m rows (pass it as `scale_a`);
        None for bf16."""
        m = self._m(m)
        return _window_tensor(self._impl.input_scales(m), self)

    @staticmethod
    def validate(*, n: int, k: int, m_max: int, world: int, quant="bf16", scale_layout="raw", out_dtype="bf16",
                 mode="auto") -> str:
        """'' if the op can run in a world of `world` ranks, else every rule it breaks. CPU only."""
        return _weave.all_gather_gemm_validate(_agm_config(n, k, m_max, quant, scale_layout, out_dtype, mode),
                                               _int("world", world, *INT32))

    @staticmethod
    def window_bytes(*, n: int, k: int, m_max: int, world: int, quant="bf16", scale_layout="raw", out_dtype="bf16",
                     mode="auto", calibration="") -> int:
        """Bytes of the op's window per rank (size before allocating). CPU only. calibration: the table an
        auto op would read (its fused-ce rows add fused-ce's words)."""
        return _weave.all_gather_gemm_window_bytes(
            _agm_config(n, k, m_max, quant, scale_layout, out_dtype, mode, calibration), _int("world", world, *INT32))

    def plan(self, m: int) -> dict:
        """What a call of m rows per rank runs and why: rows of the GEMM, tiles, waves, bytes per
        peer, the model (model_fused_us: fused-ce's, 0 where it cannot run)."""
        return _plan_dict(self._impl.plan(_int("m", m)), _AGM_PLAN_FIELDS)

    @staticmethod
    def plan_for(m: int, *, n: int, k: int, m_max: int, world: int, quant="bf16", scale_layout="raw",
                 out_dtype="bf16", mode="auto", calibration="", num_sms: int = 132, nvlink_domain: bool = True,
                 nccl: bool = True) -> dict:
        """What an op of this configuration would run for m rows per rank, and why, without an op or a
        GPU (the planner behind plan(m); `weave plan ag-gemm` prints the same). CPU only."""
        cfg = _agm_config(n, k, m_max, quant, scale_layout, out_dtype, mode, calibration)
        return _plan_dict(_weave.all_gather_gemm_plan(cfg, _int("world", world), _int("m", m),
                                                      _int("num_sms", num_sms), bool(nvlink_domain), bool(nccl)),
                          _AGM_PLAN_FIELDS)

    def _out_spec(self, m: int):
        """The output of m rows per rank: (rows, cols, weave dtype)."""
        return self.comm.world_size * m, self._cfg.n, self._cfg.out_dtype
