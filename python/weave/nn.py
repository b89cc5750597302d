"""Tensor-parallel linear layers on weave's operators, as torch.nn.Modules whose forward is
torch.ops.weave.* custom ops (weave.ops), so torch.compile(fullgraph=True) traces them whole and
CUDA graphs capture them (an eager call on CUDA tensors runs the same kernels without torch's
dispatcher: _direct says when). quant="bf16" (weights and activations bf16), "ptpc" (e4m3 weights with
one fp32 scale per output feature, activations quantised per token in forward: amax / 448),
"blockscale" (DeepSeek's: e4m3 weights with one fp32 scale per 128 x 128 block, activations
quantised per token and 128-wide group of input features in forward; the input features of the
layer's GEMM, K, a multiple of 128) or "mxfp8" (OCP MX: e4m3 with power-of-two ue8m0 scales, kept
as uint8 bytes, one per 32 x 32 block of the weight and per token and 32-wide group of the
activations, include/weave/quant.hpp's rule; K a multiple of 32, and of 128 where AllGatherGemm
gathers the activations' scales). Forward only (inference): weave's custom ops have no
backward, so the layers' weights and biases are Parameters with requires_grad=False, and a block of
them compiles and runs under grad mode too; an input that requires grad gets no gradient through
them (torch's autograd fallback for ops without a formula: by default it warns at backward).

    comm = weave.Communicator.from_process_group()
    up = weave.nn.ColumnParallelLinear.from_linear(mlp.up_proj, comm=comm)          # [tokens, 4h / W]
    down = weave.nn.RowParallelLinear.from_linear(mlp.down_proj, comm=comm, max_tokens=8192)
    y = down(torch.nn.functional.gelu(up(x)))       # [tokens, h]: GEMM + all-reduce in one op

Sharding (Megatron's): a column-parallel layer holds out_features / W rows of the weight and
gives each rank its slice of the features (no communication); a row-parallel layer holds
in_features / W columns, takes the matching slice of its input, and sums the ranks' partial
outputs with weave.GemmAllReduce (every rank gets every token), or with sequence_parallel=True
weave.GemmReduceScatter (each rank keeps tokens / W of them: its rows [r T/W, (r+1) T/W)). With
sequence_parallel=True the column-parallel layer takes those tokens / W rows and gathers every
rank's with weave.AllGatherGemm (GEMM and all-gather in one op; the fp8 quants gather the e4m3 rows
with their scales), so a block of the two passes tokens / W rows between layers:

    up = weave.nn.ColumnParallelLinear.from_linear(mlp.up_proj, comm=comm, sequence_parallel=True,
                                                   max_tokens=8192)                 # [T, 4h / W]
    down = weave.nn.RowParallelLinear.from_linear(mlp.down_proj, comm=comm, sequence_parallel=True,
                                                  max_tokens=8192)                  # [T / W, h]
    y = down(torch.nn.functional.gelu(up(x_rows)))  # x_rows: this rank's [T / W, h]

share_op=True: layers of one shape and quant on one communicator share one op (one window, one
registration) instead of one each, as a model's decoder layers can: every call writes a fresh
output tensor, so layers that run one after another on a stream (a model's forward) may share; layers
that run at the same time on different streams must not (their calls would interleave in one
window). weave.hf.swap_to_weave shares by default.
"""
from __future__ import annotations

import torch

from . import ops as _ops
from ._comm import Communicator
from ._errors import arg_error
from ._fused import AllGatherGemm, GemmAllReduce, GemmReduceScatter

__all__ = ["ColumnParallelLinear", "RowParallelLinear"]

# The ops layers share (share_op=True), per communicator: {(op class, its config): op}. Kept on the
# communicator itself, so they go with it (the ops hold it too: a cycle the collector frees).
_SHARED_OPS_ATTR = "_weave_nn_shared_ops"


def _share_op(share_op) -> bool:
    if not isinstance(share_op, bool):
        raise arg_error(f"argument 'share_op': must be a bool (got {share_op!r})")
    return share_op


def _op_for(cls, comm, share: bool, **config):
    """`cls(comm, **config)`, or with `share` the one op of that class and config on `comm`."""
    if not share:
        return cls(comm, **config)
    shared = comm.__dict__.setdefault(_SHARED_OPS_ATTR, {})
    key = (cls, tuple(sorted(config.items())))
    if key not in shared:
        shared[key] = cls(comm, **config)
    return shared[key]

_E4M3_MAX = 448.0
_QUANTS = ("bf16", "ptpc", "blockscale", "mxfp8")
_BLOCK = 128  # blockscale: the K group of every scale, and the rows of a weight block
_MX_GROUP = 32  # mxfp8: the K group of every ue8m0 scale, and the rows of a weight block
# AllGatherGemm with mxfp8: every rank's scale rows (K/32 bytes) start 4-byte aligned in the gathered scales.
_MX_GATHER_K = 128


def _quant(quant) -> str:
    if quant not in _QUANTS:
        raise arg_error(f"argument 'quant': must be one of {', '.join(_QUANTS)} (got {quant!r})")
    return quant


def _check_k(quant: str, k: int, name: str, gathered: bool = False) -> None:
    """Refuses a GEMM K (the layer's argument `name`) the quant's scales cannot tile; gathered: the
    activations' scales travel through weave.AllGatherGemm."""
    if quant == "blockscale" and k % _BLOCK:
        raise arg_error(f"argument '{name}': quant blockscale needs the layer's GEMM K, {k}, to be a "
                        f"multiple of {_BLOCK} (one scale per 128-wide group of input features)")
    if quant == "mxfp8" and gathered and k % _MX_GATHER_K:
        raise arg_error(f"argument '{name}': quant mxfp8 with sequence_parallel needs the layer's GEMM K, {k}, to be "
                        f"a multiple of {_MX_GATHER_K} (weave.AllGatherGemm gathers every token's K/32 scale "
                        f"bytes, and each token's must start 4-byte aligned)")
    if quant == "mxfp8" and k % _MX_GROUP:
        raise arg_error(f"argument '{name}': quant mxfp8 needs the layer's GEMM K, {k}, to be a multiple of "
                        f"{_MX_GROUP} (one ue8m0 scale per 32-wide group of input features)")


def _amax_scale(amax: torch.Tensor) -> torch.Tensor:
    """amax / 448 in fp32, IEEE-rounded (1 where amax is 0): weave::ref::quantize's scale. The divisor
    is a tensor on purpose: torch's CUDA division by a Python number multiplies by its reciprocal,
    which differs from the quotient in the last bit for some amax (and then so do the e4m3 codes)."""
    return torch.where(amax > 0, amax / torch.full_like(amax, _E4M3_MAX), torch.ones_like(amax))


def _per_row_e4m3(x: torch.Tensor):
    """(e4m3 x / s, s) with s = the row's amax / 448 in fp32 (1 for an all-zero row): weave's ptpc
    operands (one scale per row of A, per output feature of B)."""
    amax = x.abs().amax(dim=1).float()
    scale = _amax_scale(amax)
    return (x.float() / scale[:, None]).clamp(-_E4M3_MAX, _E4M3_MAX).to(torch.float8_e4m3fn), scale


def _per_block_e4m3(x: torch.Tensor, rows_per_block: int):
    """(e4m3 x / s, s) with s = amax / 448 in fp32 over each block of rows_per_block rows x 128
    columns (1 for an all-zero block): weave's blockscale operands, A's scales [rows, K/128]
    (rows_per_block 1) and B's [ceil(rows/128), K/128] (128, the last block partial)."""
    rows, cols = x.shape
    blocks = -(-rows // rows_per_block)
    padded = torch.nn.functional.pad(x.float(), (0, 0, 0, blocks * rows_per_block - rows))
    grouped = padded.view(blocks, rows_per_block, cols // _BLOCK, _BLOCK)
    amax = grouped.abs().amax(dim=(1, 3))
    scale = _amax_scale(amax)
    q = (grouped / scale[:, None, :, None]).clamp(-_E4M3_MAX, _E4M3_MAX)
    return q.view(blocks * rows_per_block, cols)[:rows].to(torch.float8_e4m3fn), scale


def _per_block_mx(x: torch.Tensor, rows_per_block: int):
    """(e4m3 x / 2^e, ue8m0 bytes e + 127 as uint8) over each block of rows_per_block rows x 32
    columns, OCP MX's rule as include/weave/quant.hpp states it: e = floor(log2(amax)) - 8 clamped
    to [-127, 127] (an all-zero block: byte 0), elements x / 2^e exactly, then rounded to nearest
    even and saturated to e4m3; a block holding NaN or Inf gets byte 255 (NaN), its elements scaled
    by its finite ones' exponent. weave's mxfp8 raw operands: A's scales [rows, K/32]
    (rows_per_block 1) and B's [ceil(rows/32), K/32] (32, the last block partial)."""
    rows, cols = x.shape
    blocks = -(-rows // rows_per_block)
    padded = torch.nn.functional.pad(x.float(), (0, 0, 0, blocks * rows_per_block - rows))
    grouped = padded.view(blocks, rows_per_block, cols // _MX_GROUP, _MX_GROUP)
    mag = grouped.abs()
    amax = mag.amax(dim=(1, 3))  # NaN and Inf propagate: they mark the block
    finite_amax = torch.where(torch.isfinite(mag), mag, 0.0).amax(dim=(1, 3))
    # floor(log2(amax)) + 127 is amax's biased fp32 exponent (0 for zero and subnormals, whose e
    # clamps to -127 anyway), so the byte is max(biased - 8, 0): exact, no log2's rounding.
    byte = ((finite_amax.view(torch.int32) >> 23) - 8).clamp(min=0)
    # 2^-e as fp32 bits: biased exponent 127 - e = 254 - byte, in [8, 254] (a normal number), so
    # the product is exact (but for fp32 subnormal results, far below e4m3's smallest value).
    inv_scale = ((254 - byte) << 23).view(torch.float32)
    q = (grouped * inv_scale[:, None, :, None]).clamp(-_E4M3_MAX, _E4M3_MAX)
    byte = torch.where(torch.isfinite(amax), byte, 255).to(torch.uint8)
    return q.view(blocks * rows_per_block, cols)[:rows].to(torch.float8_e4m3fn), byte


class _Weights(torch.nn.Module):
    """A layer's weight shard [rows, cols]: a bf16 Parameter, or an e4m3 buffer with its scales
    (ptpc: fp32 per row; blockscale: fp32 per 128 x 128 block; mxfp8: ue8m0 bytes per 32 x 32
    block); operands(x2) gives the op's (a, b, scale_a, scale_b) for activations x2."""

    def _init_weights(self, rows: int, cols: int, quant: str, device, cols_name: str = "in_features"):
        self.quant = quant
        _check_k(quant, cols, cols_name)
        if quant == "mxfp8":
            self.register_buffer("weight", torch.zeros(rows, cols, device=device, dtype=torch.float8_e4m3fn))
            self.register_buffer("weight_scale", torch.full((-(-rows // _MX_GROUP), cols // _MX_GROUP), 127,
                                                            device=device, dtype=torch.uint8))  # 2^0
        elif quant == "blockscale":
            self.register_buffer("weight", torch.zeros(rows, cols, device=device, dtype=torch.float8_e4m3fn))
            self.register_buffer("weight_scale", torch.ones(-(-rows // _BLOCK), cols // _BLOCK, device=device,
                                                            dtype=torch.float32))
        elif quant == "bf16":
            self.weight = torch.nn.Parameter(torch.empty(rows, cols, device=device, dtype=torch.bfloat16),
                                             requires_grad=False)
            self.weight_scale = None
        else:
            self.register_buffer("weight", torch.zeros(rows, cols, device=device, dtype=torch.float8_e4m3fn))
            self.register_buffer("weight_scale", torch.ones(rows, device=device, dtype=torch.float32))

    def _init_bias(self, rows: int, bias: bool, device):
        # Forward only, as the weight: no gradient is ever asked of weave's ops.
        self.bias = (torch.nn.Parameter(torch.zeros(rows, device=device, dtype=torch.bfloat16), requires_grad=False)
                     if bias else None)

    def _load_weights(self, w: torch.Tensor):
        with torch.no_grad():
            if self.quant == "bf16":
                self.weight.copy_(w)
            else:
                q, s = _QUANTISE_WEIGHTS[self.quant](w.float())
                self.weight.copy_(q)
                self.weight_scale.copy_(s)

    def _operands(self, x2: torch.Tensor, direct: bool = False):
        if self.quant == "bf16":
            return x2, self.weight, None, None
        if direct:  # _direct: the custom op's own kernel, without the dispatcher
            a, sa = _ops._quantize_op(x2, self.quant)
        elif x2.is_cuda:  # one kernel (torch.ops.weave.quantize_rows), the reference's rule bit for bit
            a, sa = torch.ops.weave.quantize_rows(x2, self.quant)
        else:  # CPU and meta tensors: the same rule in torch ops (emulation, tracing)
            a, sa = _QUANTISE_ACTIVATIONS[self.quant](x2)
        return a, self.weight, sa, self.weight_scale


# Per quant: the weights' quantiser (per output feature or per block of them) and the activations'
# (per token, or per token and K group).
_QUANTISE_WEIGHTS = {"ptpc": _per_row_e4m3, "blockscale": lambda w: _per_block_e4m3(w, _BLOCK),
                     "mxfp8": lambda w: _per_block_mx(w, _MX_GROUP)}
_QUANTISE_ACTIVATIONS = {"ptpc": _per_row_e4m3, "blockscale": lambda x: _per_block_e4m3(x, 1),
                         "mxfp8": lambda x: _per_block_mx(x, 1)}


def _communicator(comm, process_group) -> Communicator:
    if comm is not None and process_group is not None:
        raise arg_error("arguments 'comm' and 'process_group': pass one of them, not both")
    if comm is None:
        return Communicator.from_process_group(process_group)
    if not isinstance(comm, Communicator):
        raise arg_error(f"argument 'comm': must be a weave.Communicator (got {type(comm).__name__})")
    return comm


def _positive(name: str, value) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise arg_error(f"argument '{name}': must be a positive int (got {value!r})")
    return value


def _features(name: str, value, world: int) -> int:
    """value / world (this rank's share); refuses a value the world does not divide."""
    _positive(name, value)
    if value % world:
        raise arg_error(f"argument '{name}': {value} must be divisible by the world ({world}): each rank holds "
                        f"{name} / world of the weight")
    return value // world


def _tokens_per_rank(max_tokens, world: int) -> int:
    """A sequence-parallel column layer's m_max: max_tokens (all ranks' tokens of one call, as
    RowParallelLinear's) / world."""
    if max_tokens is None:
        raise arg_error("argument 'max_tokens': sequence_parallel needs it (the largest tokens per call, all ranks' "
                        "together: it sizes weave.AllGatherGemm's window)")
    _positive("max_tokens", max_tokens)
    if max_tokens % world:
        raise arg_error(f"argument 'max_tokens': {max_tokens} must be divisible by the world ({world}): each rank "
                        f"passes tokens / world of them")
    return max_tokens // world


def _direct(x: torch.Tensor) -> bool:
    """Whether a layer's forward may call its custom ops' CUDA kernels itself, skipping torch's
    dispatcher (about 14 us of host time per op call, more than a decode GEMM takes on the GPU:
    docs/perf/python.md): an eager call on a plain CUDA tensor. Whatever must see torch.ops.weave.*
    goes through it: torch.compile and export, jit tracing, a dispatch mode (fake tensors, make_fx,
    functionalisation, FlopCounterMode), meta and CPU tensors, and an input that requires grad under
    grad mode (torch's autograd fallback then warns at backward, as documented above)."""
    return (type(x) is torch.Tensor and x.is_cuda and not torch.compiler.is_compiling()
            and not (x.requires_grad and torch.is_grad_enabled()) and torch._C._get_tracing_state() is None
            and not torch._C._len_torch_dispatch_stack())


def _input_2d(x: torch.Tensor, k: int, layer: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise arg_error(f"argument 'x': must be a torch.Tensor (got {type(x).__name__})")
    if x.dtype != torch.bfloat16:
        raise arg_error(f"argument 'x': {layer} takes bf16 activations (got {x.dtype})")
    if x.ndim < 1 or x.shape[-1] != k:
        raise arg_error(f"argument 'x': its last dimension must be this rank's {k} input features (got shape "
                        f"{list(x.shape)})")
    return x.reshape(-1, k)


def _shard_of(linear: torch.nn.Linear, dim: int, world: int, rank: int, device) -> tuple:
    if not isinstance(linear, torch.nn.Linear):
        raise arg_error(f"argument 'linear': must be a torch.nn.Linear (got {type(linear).__name__})")
    size = linear.weight.shape[dim]
    if size % world:
        what = "in_features" if dim == 1 else "out_features"
        raise arg_error(f"argument 'linear': its {what} {size} must be divisible by the world ({world})")
    per = size // world
    w = linear.weight.detach().narrow(dim, rank * per, per)
    return w.to(device=device).contiguous(), per  # its own precision: ptpc quantises from it


class ColumnParallelLinear(_Weights):
    """y[..., out_features / W] = x[..., in_features] @ W_r^T (+ b_r): this rank's rows of the weight
    (and of the bias); no communication. With sequence_parallel, weave.AllGatherGemm: the input is
    this rank's tokens [tokens / W, in_features] (the same count on every rank) and each rank gets
    [tokens, out_features / W], every rank's tokens (rank s's at rows [s T/W, (s+1) T/W)) times its
    rows of the weight. max_tokens sizes the op's window: the largest tokens per call, all ranks'
    together (as RowParallelLinear's), a multiple of W; required with sequence_parallel, unused
    without."""

    def __init__(self, in_features: int, out_features: int, *, comm: Communicator | None = None, process_group=None,
                 bias: bool = True, sequence_parallel: bool = False, quant: str = "bf16",
                 max_tokens: int | None = None, share_op: bool = False):
        super().__init__()
        share_op = _share_op(share_op)
        quant = _quant(quant)
        comm = _communicator(comm, process_group)
        n_r = _features("out_features", out_features, comm.world_size)
        _positive("in_features", in_features)
        if sequence_parallel:
            m_max = _tokens_per_rank(max_tokens, comm.world_size)
        elif max_tokens is not None:
            _positive("max_tokens", max_tokens)
        _check_k(quant, in_features, "in_features", gathered=bool(sequence_parallel))
        device = torch.device("cuda", comm.device)
        self.comm, self.sequence_parallel = comm, bool(sequence_parallel)
        self._init_weights(n_r, in_features, quant, device)
        self._init_bias(n_r, bias, device)
        if sequence_parallel:
            self.op = _op_for(AllGatherGemm, comm, share_op, n=n_r, k=in_features, m_max=m_max, quant=quant)
            self._handle = _ops.handle(self.op)

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, *, comm: Communicator | None = None, process_group=None,
                    sequence_parallel: bool = False, quant: str = "bf16", max_tokens: int | None = None,
                    share_op: bool = False):
        """This rank's layer of `linear` (the whole layer, the same on every rank); ptpc quantises
        its weight shard per output feature, blockscale per 128 x 128 block, mxfp8 per 32 x 32."""
        layer = cls(linear.in_features, linear.out_features, comm=comm, process_group=process_group,
                    bias=linear.bias is not None, sequence_parallel=sequence_parallel, quant=quant,
                    max_tokens=max_tokens, share_op=share_op)
        w, per = _shard_of(linear, 0, layer.comm.world_size, layer.comm.rank, layer.weight.device)
        layer._load_weights(w)
        with torch.no_grad():
            if layer.bias is not None:
                layer.bias.copy_(linear.bias.detach().narrow(0, layer.comm.rank * per, per))
        return layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = _input_2d(x, self.weight.shape[1], "ColumnParallelLinear")
        direct = _direct(x2)
        a, b, sa, sb = self._operands(x2, direct)
        if self.sequence_parallel:  # [W x rows of x2, out_features / W]
            y = (_ops.run_fused(self.op, a, b, sa, sb) if direct
                 else torch.ops.weave.all_gather_gemm(self._handle, a, b, sa, sb))
        else:
            gemm = _ops._gemm_op if direct else torch.ops.weave.gemm
            y = gemm(a, b, sa, sb, mode=self.quant)
        if self.bias is not None:
            y = y + self.bias
        return y if self.sequence_parallel else y.reshape(*x.shape[:-1], self.weight.shape[0])


class RowParallelLinear(_Weights):
    """y[..., out_features] = sum over ranks of x_r[..., in_features / W] @ W_r^T (+ b): this rank's
    columns of the weight, weave.GemmAllReduce in forward (GEMM and all-reduce in one op). With
    sequence_parallel, weave.GemmReduceScatter: the input is [tokens, in_features / W] and each rank
    gets [tokens / W, out_features], its rows of the sum (tokens a multiple of W). max_tokens sizes
    the op's window (the largest tokens per call)."""

    def __init__(self, in_features: int, out_features: int, *, max_tokens: int, comm: Communicator | None = None,
                 process_group=None, bias: bool = True, sequence_parallel: bool = False, quant: str = "bf16",
                 share_op: bool = False):
        super().__init__()
        share_op = _share_op(share_op)
        quant = _quant(quant)
        comm = _communicator(comm, process_group)
        k_r = _features("in_features", in_features, comm.world_size)
        _positive("out_features", out_features)
        device = torch.device("cuda", comm.device)
        self.comm, self.sequence_parallel = comm, bool(sequence_parallel)
        self._init_weights(out_features, k_r, quant, device, cols_name="in_features / world")
        # The bias is added once, after the sum (every rank holds all of it).
        self._init_bias(out_features, bias, device)
        op = GemmReduceScatter if sequence_parallel else GemmAllReduce
        self.op = _op_for(op, comm, share_op, n=out_features, k=k_r, m_max=max_tokens, quant=quant)
        self._handle = _ops.handle(self.op)

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, *, max_tokens: int, comm: Communicator | None = None,
                    process_group=None, sequence_parallel: bool = False, quant: str = "bf16",
                    share_op: bool = False):
        """This rank's layer of `linear` (the whole layer, the same on every rank); ptpc quantises
        its weight shard per output feature, blockscale per 128 x 128 block, mxfp8 per 32 x 32."""
        layer = cls(linear.in_features, linear.out_features, max_tokens=max_tokens, comm=comm,
                    process_group=process_group, bias=linear.bias is not None, sequence_parallel=sequence_parallel,
                    quant=quant, share_op=share_op)
        w, _ = _shard_of(linear, 1, layer.comm.world_size, layer.comm.rank, layer.weight.device)
        layer._load_weights(w)
        with torch.no_grad():
            if layer.bias is not None:
                layer.bias.copy_(linear.bias.detach())
        return layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = _input_2d(x, self.weight.shape[1], "RowParallelLinear")
        direct = _direct(x2)
        a, b, sa, sb = self._operands(x2, direct)
        if direct:
            y = _ops.run_fused(self.op, a, b, sa, sb)
        elif self.sequence_parallel:
            y = torch.ops.weave.gemm_reduce_scatter(self._handle, a, b, sa, sb)
        else:
            y = torch.ops.weave.gemm_all_reduce(self._handle, a, b, sa, sb)
        if self.bias is not None:
            y = y + self.bias
        return y if self.sequence_parallel else y.reshape(*x.shape[:-1], self.weight.shape[0])
