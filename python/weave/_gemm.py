"""weave.Gemm, weave.gemm, weave.plan_gemm, weave.validate_gemm (see include/weave/gemm.hpp).

C[M, N] = A[M, K] @ B[N, K]^T with fp32 accumulation. Operands exactly as the C++ API documents
them (K-contiguous, 16-byte aligned base and leading dimension, on one GPU):
  bf16        A, B bf16; no scales
  ptpc        A, B e4m3; scale_a fp32 [M], scale_b fp32 [N]
  blockscale  A, B e4m3; scale_a fp32 [M, K/128] (1x128), scale_b fp32 [ceil(N/128), K/128]
              (128x128), both row-major with the K blocks contiguous (scale_layout "raw"), or
              scale_a M-contiguous (scale_layout "mn-major": strides (1, ld), ld >= M and a
              multiple of 4, e.g. DeepGEMM's TMA-aligned layout or sa.t().contiguous().t() for M
              a multiple of 4; faster, bitwise identical results)
  mxfp8       A, B e4m3; ue8m0 scales, scale_layout "raw": [M, K/32] and [ceil(N/32), K/32];
              "packed": the words of weave.pack_mxfp8_scales, int32 [ceil(K/128), rows] (or
              their bytes, uint8 [ceil(K/128), 4 * rows])
C (out) is bf16 or fp32 [M, N], row-major. e4m3 operands may be torch.float8_e4m3fn or uint8
bytes, ue8m0 scales torch.float8_e8m0fnu or uint8 bytes.
"""
from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from dataclasses import dataclass

from . import _weave
from ._errors import INT32, INT64, ArgumentError, arg_error, int_arg
from ._tensors import DType, HOST, describe, resolve_stream

ScaleMode = _weave.ScaleMode
ScaleLayout = _weave.ScaleLayout
_EMPTY = _weave.TensorView(0, DType.F32, [], [], HOST)


def _enum(value, parse, kind: str, arg: str, enum_type):
    """`value` as the C++ enum: the enum itself, or its C++ spelling ("ptpc", "all-reduce", ...).
    `kind` is "what (choices)"."""
    if isinstance(value, enum_type):
        return value
    if isinstance(value, str):
        parsed = parse(value)
        if parsed is not None:
            return parsed
    what, _, choices = kind.partition(" (")
    raise arg_error(f"argument '{arg}': unknown {what} {value!r}" + (f" (one of: {choices}" if choices else ""))


def _mode_of(mode) -> ScaleMode:
    return _enum(mode, _weave.parse_scale_mode, "scale mode (bf16, ptpc, blockscale, mxfp8)", "mode", ScaleMode)


def _layout_of(layout) -> ScaleLayout:
    return _enum(layout, _weave.parse_scale_layout, "scale layout (raw, packed, mn-major)", "scale_layout", ScaleLayout)


def _out_dtype_of(dtype) -> DType:
    if dtype is not None and not isinstance(dtype, (str, DType)):
        dtype = {"torch.bfloat16": "bf16", "torch.float32": "fp32"}.get(str(dtype), str(dtype))
    d = _enum(dtype, _weave.parse_dtype, "output dtype (bf16, fp32)", "out_dtype", DType)
    if d not in (DType.BF16, DType.F32):
        raise arg_error(f"argument 'out_dtype': must be bf16 or fp32 (got {_weave.name(d)})")
    return d


@dataclass(frozen=True)
class GemmPlan:
    """What the planner chose: tile, grid, split-K, GEMV, the kernel instance and why."""
    block_m: int
    block_n: int
    block_k: int
    stages: int
    cluster: int
    grid: int
    tiles: int
    split_k: int
    group_rows: int
    gemv: bool
    kernel: str
    reason: str
    mx_dequant: bool = False   # mxfp8 on the bf16 route (A and B converted to bf16 in the workspace)
    fallback_kernel: str = ""  # mx_dequant: the native kernel a call reruns on (scales outside [10, 246])
    scale_a_mn_copy: bool = False  # blockscale raw: A's scales copied to MN-major in the workspace first

    @staticmethod
    def _of(p) -> "GemmPlan":
        return GemmPlan(p.block_m, p.block_n, p.block_k, p.stages, p.cluster, p.grid, p.tiles, p.split_k,
                        p.group_rows, p.gemv, p.kernel, p.reason, p.mx_dequant, p.fallback_kernel,
                        p.scale_a_mn_copy)


def _problem(m, n, k, mode, layout, odt):
    p = _weave.GemmProblem()
    p.m, p.n, p.k = (int_arg(name, v, *INT64) for name, v in (("m", m), ("n", n), ("k", k)))
    p.mode, p.scale_layout, p.out_dtype = _mode_of(mode), _layout_of(layout), _out_dtype_of(odt)
    return p


_MX_ROUTES = {"auto": 0, "native": 1, "bf16": 2}
_SCALE_A_ROUTES = {"auto": 0, "as-given": 1, "mn-major-copy": 2}
_DECODE_ROUTES = {"auto": 0, "gemv": 1, "tiles": 2}


def _overrides(block_m=0, block_n=0, grid=0, split_k=0, group_rows=0, mx_route="auto", scale_a_route="auto",
               decode_route="auto", cluster=0):
    o = _weave.GemmPlanOverrides()
    o.cluster = int_arg("cluster", cluster, *INT32)  # the range: the planner's rule (check_plan_limits)
    o.block_m, o.block_n, o.grid, o.split_k, o.group_rows = (
        int_arg(name, v, *INT32) for name, v in (("block_m", block_m), ("block_n", block_n), ("grid", grid),
                                                 ("split_k", split_k), ("group_rows", group_rows)))
    if mx_route not in _MX_ROUTES:
        raise arg_error(f"argument 'mx_route': must be one of auto, native, bf16 (got {mx_route!r})")
    o.mx_route = _MX_ROUTES[mx_route]
    if scale_a_route not in _SCALE_A_ROUTES:
        raise arg_error(f"argument 'scale_a_route': must be one of auto, as-given, mn-major-copy (got {scale_a_route!r})")
    o.scale_a_route = _SCALE_A_ROUTES[scale_a_route]
    if decode_route not in _DECODE_ROUTES:
        raise arg_error(f"argument 'decode_route': must be one of auto, gemv, tiles (got {decode_route!r})")
    o.decode_route = _DECODE_ROUTES[decode_route]
    return o


def validate_gemm(m: int, n: int, k: int, mode="bf16", out_dtype="bf16", scale_layout="raw") -> str:
    """'' if the problem can run, else the rule it breaks. CPU only."""
    return _weave.gemm_validate_problem(_problem(m, n, k, mode, scale_layout, out_dtype))


def plan_gemm(m: int, n: int, k: int, mode="bf16", out_dtype="bf16", scale_layout="raw", *, num_sms: int = 132,
              block_m: int = 0, block_n: int = 0, grid: int = 0, split_k: int = 0, group_rows: int = 0,
              mx_route: str = "auto", scale_a_route: str = "auto", decode_route: str = "auto",
              cluster: int = 0) -> GemmPlan:
    """The planner's choice for this problem on a GPU with `num_sms` SMs (H100/H200: 132). CPU
    only. Raises weave.ArgumentError naming the rule for an invalid problem or override.
    mx_route (mxfp8): "auto" (the planner's model), "native" (the fp8 kernel) or "bf16" (A and B
    converted to bf16 with their scales, then the bf16 kernel). scale_a_route (blockscale with
    scale_layout "raw"): "auto" (the planner's model), "as-given" (the kernel reads the row-major A
    scales) or "mn-major-copy" (A's scales copied to MN-major in the workspace first, then the
    faster MN-major kernel; bitwise the same result). decode_route (m <= 32): "auto" (the decode
    GEMV where it was measured faster than the tiled kernels: m <= 8, mxfp8 at
    m <= 32), "gemv" or "tiles". cluster: 0 (the planner's choice, 1 today), 1, or 2 (pairs of CTAs
    along M load each shared B tile once, multicast to both: the fp8 ptpc and blockscale mn-major
    instances; the grid must then be even)."""
    p = _problem(m, n, k, mode, scale_layout, out_dtype)
    return GemmPlan._of(_weave.gemm_plan(p, int_arg("num_sms", num_sms, *INT32), _overrides(block_m, block_n, grid, split_k, group_rows,
                                                                 mx_route, scale_a_route, decode_route, cluster)))


def _infer_mode(a, scale_a) -> ScaleMode:
    if a.dtype == DType.BF16:
        return ScaleMode.BF16
    if a.dtype not in (DType.E4M3, "bytes"):
        raise arg_error(f"argument 'A': dtype {a.dtype_text} is not one weave reads (bf16 for mode bf16; e4m3, "
                        "i.e. torch.float8_e4m3fn or uint8 bytes, for ptpc, blockscale and mxfp8)")
    if scale_a is None:
        raise arg_error(f"argument 'mode': A is {a.dtype_text}: fp8 operands need scales; pass mode= "
                        "('ptpc', 'blockscale' or 'mxfp8') with scale_a and scale_b")
    s = describe(scale_a, "scale_a")
    if s.dtype == DType.F32:
        return ScaleMode.PTPC if s.ndim == 1 else ScaleMode.BLOCKSCALE
    if s.dtype in (DType.UE8M0, "bytes") or s.dtype_text in ("torch.int32", "torch.uint32", "<i4", "<u4"):
        return ScaleMode.MXFP8
    raise arg_error(f"argument 'mode': cannot tell the mode from scale_a {s.dtype_text}; pass mode=")


def _scale_view(t, name: str, mode, layout, rows: int, m_or_n: str):
    if t is None:
        if mode == ScaleMode.BF16:
            return _EMPTY
        raise arg_error(f"argument '{name}': mode {_weave.name(mode)} needs it (got None)")
    s = describe(t, name)
    if mode == ScaleMode.BF16:
        raise arg_error(f"argument 'scales': mode bf16 takes no scales (got {name} {list(s.shape)})")
    if mode == ScaleMode.PTPC:
        if s.ndim == 2 and 1 in s.shape:
            raise arg_error(f"argument '{name}': ptpc takes fp32 [{m_or_n}] = [{rows}], a 1-D vector (got "
                            f"{list(s.shape)}; pass {name}.reshape(-1))")
        return s.view(DType.F32)
    if mode == ScaleMode.BLOCKSCALE:
        return s.view(DType.F32)
    # mxfp8: packed words given as int32/uint32 [ceil(K/128), rows] are read as their bytes.
    if layout == ScaleLayout.PACKED and s.itemsize == 4 and s.dtype_text in ("torch.int32", "torch.uint32", "<i4", "<u4"):
        if s.ndim != 2:
            raise arg_error(f"argument '{name}': packed mxfp8 scales are a 2-D [ceil(K/128), rows] tensor (got rank {s.ndim})")
        if s.shape[1] > 1 and s.strides[1] != 1:
            raise arg_error(f"argument '{name}': last dimension must be contiguous (stride 1; got {s.strides[1]})")
        row = s.strides[0] if s.shape[0] > 1 else s.shape[1]  # torch leaves size-1 strides arbitrary
        return _weave.TensorView(s.ptr, DType.UE8M0, [s.shape[0], 4 * s.shape[1]], [4 * row, 1], s.device)
    return s.view(DType.UE8M0)


class Gemm:
    """One GEMM bound to its operands: validated and planned once, then run(stream) only enqueues
    (no allocation, no host sync), so it can be captured in a CUDA graph and replayed. The
    operands stay referenced by this object. A plan that needs a workspace (split-K's fp32
    partials; the mxfp8 bf16 route's bf16 copies of A and B; blockscale's MN-major copy of
    row-major A scales) gets it here: the `workspace` given (any device buffer of at least
    workspace_bytes), or one allocated with torch. Without torch and without a workspace, mxfp8
    with mx_route="auto" stays on the native kernel, blockscale with scale_a_route="auto" reads
    its row-major A scales as given, and a decode-size call (m <= 32) whose tiled plan would split K
    takes the decode GEMV (needs no workspace). decode_route (m <= 32): "auto", "gemv" or "tiles",
    cluster: 0, 1 or 2 (see plan_gemm).
    allow_pdl (off by default; weave::Gemm::set_allow_pdl): run() launches the GEMM kernel (the
    decode GEMV or the tiled kernel; not the mxfp8 bf16 route) with programmatic dependent launch,
    so it starts loading B while the kernel before it on the stream finishes. The promise it needs:
    no kernel right before it writes B or its scales (weights never change between layers' calls);
    a kernel launched after it with programmatic serialization must wait for it before reading out."""

    def __init__(self, a, b, out, *, scale_a=None, scale_b=None, mode=None, scale_layout="raw", workspace=None,
                 block_m: int = 0, block_n: int = 0, grid: int = 0, split_k: int = 0, group_rows: int = 0,
                 mx_route: str = "auto", scale_a_route: str = "auto", decode_route: str = "auto",
                 allow_pdl: bool = False, cluster: int = 0):
        if not isinstance(allow_pdl, bool):
            raise arg_error(f"argument 'allow_pdl': must be a bool (got {allow_pdl!r})")
        ta, tb, tc = describe(a, "A"), describe(b, "B"), describe(out, "out")
        for t in (ta, tb, tc):
            if t.ndim != 2:
                raise arg_error(f"argument '{t.name}': must be a 2-D matrix (got rank {t.ndim}: {list(t.shape)})")
        self.mode = _mode_of(mode) if mode is not None else _infer_mode(ta, scale_a)
        self.scale_layout = layout = _layout_of(scale_layout)
        if tc.dtype not in (DType.BF16, DType.F32):
            raise arg_error(f"argument 'out': dtype must be bf16 or fp32 (got {tc.dtype_text})")
        self.m, self.k = ta.shape
        self.n = tb.shape[0]
        self.device = ta.device
        self._problem = _problem(self.m, self.n, self.k, self.mode, layout, tc.dtype)
        want = DType.BF16 if self.mode == ScaleMode.BF16 else DType.E4M3
        sa = _scale_view(scale_a, "scale_a", self.mode, layout, self.m, "M")
        sb = _scale_view(scale_b, "scale_b", self.mode, layout, self.n, "N")
        build = lambda route, sa_route, dec=decode_route: _weave.Gemm(
            self._problem, ta.view(want), tb.view(want), sa, sb, tc.view(tc.dtype),
            _overrides(block_m, block_n, grid, split_k, group_rows, route, sa_route, dec, cluster))
        self._impl = build(mx_route, scale_a_route)
        self._torch = ta.is_torch
        if (not self._impl.plan.gemv and self._impl.workspace_bytes > 0 and self.m <= 32 and decode_route == "auto"
                and workspace is None and not self._torch
                and (block_m, block_n, grid, split_k, group_rows) == (0, 0, 0, 0, 0)
                and (mx_route, scale_a_route) == ("auto", "auto")):
            # Nothing to allocate the tiled decode plan's split-K partials with: the GEMV needs none.
            try:
                self._impl = build(mx_route, scale_a_route, "gemv")
            except ArgumentError:
                pass  # the GEMV cannot run it either: the workspace error below names what is needed
        if self._impl.plan.mx_dequant and mx_route == "auto" and workspace is None and not self._torch:
            # Nothing to allocate the route's bf16 copies with: the native kernel needs none.
            self._impl = build("native", scale_a_route)
        if self._impl.plan.scale_a_mn_copy and scale_a_route == "auto" and workspace is None and not self._torch:
            # Nothing to allocate the scales' copy with: the kernel reading them as given needs none.
            self._impl = build(mx_route, "as-given")
        self._impl.set_allow_pdl(allow_pdl)
        self.plan = GemmPlan._of(self._impl.plan)
        self.out = out
        self._keep = (a, b, scale_a, scale_b, out)
        self.workspace = None
        self._set_workspace(workspace)

    @property
    def allow_pdl(self) -> bool:
        return self._impl.allow_pdl

    @property
    def workspace_bytes(self) -> int:
        return self._impl.workspace_bytes

    def _set_workspace(self, workspace):
        need = self._impl.workspace_bytes
        if need == 0:
            return
        if workspace is None:
            torch = sys.modules.get("torch")
            if torch is None or not self._torch:
                raise arg_error(f"argument 'workspace': the plan ({self._impl.workspace_purpose}) needs a device "
                                f"workspace of {need} bytes; pass workspace= (any device buffer), or torch tensors "
                                "to have one allocated")
            workspace = torch.empty(need, dtype=torch.uint8, device=f"cuda:{self.device}")
        w = describe(workspace, "workspace")
        self._impl.set_workspace(w.ptr, w.nbytes if w.contiguous() else 0)
        self.workspace = workspace

    def set_operands(self, a, b, out, *, scale_a=None, scale_b=None) -> None:
        """Re-points the operands (same shapes, dtypes and device; checked) without re-planning.
        Host work only; a graph captured earlier keeps the operands it captured."""
        self._set_described(describe(a, "A"), describe(b, "B"), describe(out, "out"), scale_a, scale_b)

    def _set_described(self, ta, tb, tc, scale_a, scale_b) -> None:
        want = DType.BF16 if self.mode == ScaleMode.BF16 else DType.E4M3
        self._impl.set_operands(ta.view(want), tb.view(want),
                                _scale_view(scale_a, "scale_a", self.mode, self.scale_layout, self.m, "M"),
                                _scale_view(scale_b, "scale_b", self.mode, self.scale_layout, self.n, "N"),
                                tc.view(tc.dtype))
        self.out = tc.obj
        self._keep = (ta.obj, tb.obj, scale_a, scale_b, tc.obj)

    def run(self, stream=None):
        """Enqueues C = A @ B^T on `stream` (default: torch.cuda.current_stream() of the operands'
        device when torch is loaded, else the default stream). Returns out."""
        torch = sys.modules.get("torch") if self._torch else None
        if stream is None and torch is not None:
            s = int(torch.cuda.current_stream(self.device).cuda_stream)
        else:
            s = resolve_stream(stream, self.device, ())
        if torch is not None and torch.cuda.current_device() != self.device:
            with torch.cuda.device(self.device):
                self._impl.run(s)
        else:
            self._impl.run(s)
        return self.out

    __call__ = run

    def check(self) -> None:
        """Raises weave.Error (status timeout) if a GEMM kernel's pipeline wait timed out since the
        last report (a protocol bug; the kernel aborted cleanly and that call's output is
        incomplete). Process-wide and reported once; run() checks first too. Synchronise the
        stream before calling it to see that stream's calls."""
        self._impl.check()

    def __repr__(self) -> str:
        return (f"weave.Gemm(m={self.m}, n={self.n}, k={self.k}, mode={_weave.name(self.mode)}, "
                f"kernel={self.plan.kernel!r}, split_k={self.plan.split_k})")


def gemm(a, b, *, scale_a=None, scale_b=None, mode=None, out=None, out_dtype="bf16", scale_layout="raw",
         stream=None):
    """One-shot C = A @ B^T (see Gemm). Without `out`, torch operands get a new [M, N] tensor of
    out_dtype. The plan is made once per problem (shapes, strides, dtypes, device, mode, layout) and
    kept (a bounded cache): a later call of the same problem only re-points it at its operands, and
    holds none of them after it returns. Hold a Gemm to capture a call in a graph without any of
    this host work."""
    ta, tb = describe(a, "A"), describe(b, "B")
    if out is None:
        torch = sys.modules.get("torch")
        if torch is None or not ta.is_torch:
            raise arg_error("argument 'out': required unless the operands are torch tensors")
        if ta.ndim != 2 or tb.ndim != 2:
            raise arg_error(f"arguments 'A'/'B': must be 2-D matrices (got {list(ta.shape)} and {list(tb.shape)})")
        dt = torch.bfloat16 if _out_dtype_of(out_dtype) == DType.BF16 else torch.float32
        out = torch.empty((ta.shape[0], tb.shape[0]), dtype=dt, device=a.device)
    tc = describe(out, "out")
    key = (mode, scale_layout, ta.is_torch, _signature(ta), _signature(tb), _signature(tc),
           _scale_signature(scale_a, "scale_a"), _scale_signature(scale_b, "scale_b"))
    g = _plans.take(key)
    if g is None:
        g = Gemm(a, b, out, scale_a=scale_a, scale_b=scale_b, mode=mode, scale_layout=scale_layout)
    else:
        g._set_described(ta, tb, tc, scale_a, scale_b)
        g._set_workspace(None)  # a fresh one each call (none when the plan needs none)
    try:
        g.run(stream)
        if stream is not None and g.workspace is not None:
            # Torch frees it into the current stream's pool when dropped below: the run stream's
            # kernel must be done with it first.
            torch = sys.modules["torch"]
            g.workspace.record_stream(torch.cuda.ExternalStream(resolve_stream(stream, g.device), device=g.device))
    finally:
        g.out, g._keep, g.workspace = None, (), None  # the cache holds no caller tensor
    _plans.put(key, g)
    return out


def _signature(t) -> tuple:
    """What a plan depends on of one operand (not its address: set_operands checks alignment)."""
    return (t.dtype_text, t.shape, t.strides, t.device)


def _scale_signature(s, name: str):
    return None if s is None else _signature(describe(s, name))


class _PlanCache:
    """weave.gemm's plans by problem, the most recently used last; at most `limit` (the oldest is
    dropped). A call takes its plan out while it runs it, so threads never share one."""

    def __init__(self, limit: int):
        self._lock = threading.Lock()
        self._plans: OrderedDict = OrderedDict()
        self._limit = limit

    def take(self, key):
        with self._lock:
            return self._plans.pop(key, None)

    def put(self, key, plan) -> None:
        with self._lock:
            self._plans[key] = plan
            while len(self._plans) > self._limit:
                self._plans.popitem(last=False)


_plans = _PlanCache(64)
