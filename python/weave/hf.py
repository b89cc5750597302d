"""Hugging Face transformers decoder models (Llama's architecture: Llama, Mistral, Qwen2, ...) on
weave's tensor-parallel layers. swap_to_weave replaces, in place, each decoder layer's projections
with weave.nn layers, Megatron's split: self_attn.q_proj, k_proj, v_proj and mlp.gate_proj,
up_proj column-parallel (this rank's attention heads, KV heads and MLP features; no
communication), self_attn.o_proj and mlp.down_proj row-parallel (weave.GemmAllReduce: the GEMM
and the all-reduce in one op). Embeddings, norms and lm_head stay whole on every rank, so every
rank computes the same logits (bitwise: the all-reduce gives every rank the same sum).

    model = transformers.LlamaForCausalLM(config).to("cuda", torch.bfloat16)   # the same on every rank
    plan = weave.hf.swap_to_weave(model, quant="ptpc", max_tokens=4096)       # collective: every rank
    logits = model(input_ids).logits                                           # HF's KV cache as before

At world W each rank holds num_attention_heads / W heads and num_key_value_heads / W KV heads (both
must divide by W: weave does not replicate KV heads), and the model's config says so afterwards
(what a KV cache sized from the config must hold); transformers' attention reshapes by -1 and the
module's head_dim, so it runs on the sharded projections unchanged. max_tokens is the largest
batch x sequence of one forward call (the row-parallel ops' m_max; their windows are sized by it:
plan.window_bytes); a longer call is refused by name. Forward only, like weave.nn.

logits_agreement and TOLERANCE are how a swapped model is checked against the unmodified one
(examples/python/llama_on_weave.py, tests/python/test_gpu_models.py).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from . import nn as _nn
from ._comm import Communicator
from ._errors import arg_error
from ._fused import GemmAllReduce
from ._gemm import validate_gemm

__all__ = ["DEFAULT_MAX_TOKENS", "TOLERANCE", "ShardedLinear", "TensorParallelPlan", "logits_agreement",
           "plan_tensor_parallel", "swap_to_weave", "within_tolerance"]

# 2048 tokens per call (a prefill of one 2048-token prompt, or 4 of 512): at hidden 4096 and world 2
# each row-parallel layer's window is ~72 MiB, two per decoder layer. Pass more for longer prompts.
DEFAULT_MAX_TOKENS = 2048

# The projections of a decoder layer, by their path under it, and how each is split, in the order
# their layers are built (row-parallel ones construct a collective op: the same order on every rank).
_PROJECTIONS = (("self_attn.q_proj", "column"), ("self_attn.k_proj", "column"), ("self_attn.v_proj", "column"),
                ("self_attn.o_proj", "row"), ("mlp.gate_proj", "column"), ("mlp.up_proj", "column"),
                ("mlp.down_proj", "row"))

# Logits of a swapped model against the unmodified one (bf16, the same GPU), as (relative L2,
# max |difference| / the reference's rms). bf16: only rounding differs (weave's K split and the
# row-parallel layers' bf16 partial sums against cuBLAS's order). ptpc / blockscale / mxfp8: every
# weight and activation is rounded to e4m3 (3 mantissa bits: ~3.7% relative L2 per GEMM), 7 GEMMs a
# layer, and random weights make each layer a fresh random projection that carries its input's error
# on, so the error grows with depth and width. Emulated on the CPU (tests/python/test_cpu_models.py's
# layers), random Llamas of hidden 4096 gave, 2 layers / 4 layers: bf16 1.1e-2 / 1.3e-2 and 0.055 /
# 0.061 x rms; fp8 0.17-0.20 / 0.24-0.27 and 1.05 / 1.35 x rms (hidden 1024, 2 layers: 0.11). The
# bounds hold 2-4 such layers with >= 1.8x margin; a wrong shard or a missing all-reduce gives > 1.
_FP8_BOUND = (0.5, 3.0)
TOLERANCE = {"bf16": (3e-2, 0.25), "ptpc": _FP8_BOUND, "blockscale": _FP8_BOUND, "mxfp8": _FP8_BOUND}


@dataclass(frozen=True)
class ShardedLinear:
    """One projection of the plan: its path in the model, "column" or "row", the whole layer's
    features, this rank's weight shape [out, in], and (row) its GemmAllReduce's window per rank."""
    name: str
    parallel: str
    in_features: int
    out_features: int
    shard_shape: tuple
    window_bytes: int


@dataclass(frozen=True)
class TensorParallelPlan:
    """What swap_to_weave does to a model at a world: the projections (in the order their ops are
    built, the same on every rank), the heads per rank, and the windows' bytes per rank."""
    world: int
    quant: str
    max_tokens: int
    share_ops: bool
    decoder_layers: tuple
    heads: int
    kv_heads: int
    head_dim: int
    linears: tuple

    heads_per_rank = property(lambda self: self.heads // self.world)
    kv_heads_per_rank = property(lambda self: self.kv_heads // self.world)

    @property
    def window_bytes(self) -> int:
        """The row-parallel ops' windows per rank: one per projection, or with share_ops one per
        distinct shape (a model's decoder layers share their o_proj's and down_proj's ops)."""
        if not self.share_ops:
            return sum(s.window_bytes for s in self.linears)
        return sum({(s.parallel, s.shard_shape): s.window_bytes for s in self.linears}.values())

    def describe(self) -> str:
        return (f"{len(self.decoder_layers)} decoder layers at world {self.world}, {self.quant}: "
                f"{sum(s.parallel == 'column' for s in self.linears)} column-parallel, "
                f"{sum(s.parallel == 'row' for s in self.linears)} row-parallel (GemmAllReduce, max_tokens "
                f"{self.max_tokens}, windows {self.window_bytes / 2**20:.1f} MiB per rank"
                f"{', one op per shape' if self.share_ops else ''}); heads "
                f"{self.heads_per_rank} of {self.heads}, KV heads {self.kv_heads_per_rank} of {self.kv_heads} per rank")


def _config_of(model):
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "get_text_config"):
        config = config.get_text_config()
    if config is None or not isinstance(getattr(config, "num_attention_heads", None), int):
        raise arg_error(f"argument 'model': must be a transformers model whose config has num_attention_heads "
                        f"(got {type(model).__name__})")
    return config


def _decoder_layers(model) -> list:
    """(path, module) of every module with a self_attn: each must have the seven projections."""
    layers = [(name, m) for name, m in model.named_modules() if hasattr(m, "self_attn")]
    if not layers:
        raise arg_error(f"argument 'model': no decoder layer (a module with self_attn.{{q,k,v,o}}_proj and "
                        f"mlp.{{gate,up,down}}_proj) in {type(model).__name__}")
    for name, layer in layers:
        for path, _ in _PROJECTIONS:
            parent, _, leaf = path.partition(".")
            linear = getattr(getattr(layer, parent, None), leaf, None)
            if isinstance(linear, (_nn.ColumnParallelLinear, _nn.RowParallelLinear)):
                raise arg_error(f"argument 'model': {name}.{path} is already a weave layer (swap a model once)")
            if not isinstance(linear, torch.nn.Linear):
                got = "missing" if linear is None else f"a {type(linear).__name__}"
                raise arg_error(f"argument 'model': {name}.{path} must be a torch.nn.Linear ({got}; weave swaps "
                                f"Llama-style layers: self_attn.{{q,k,v,o}}_proj, mlp.{{gate,up,down}}_proj)")
    return layers


def _positive(name: str, value) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise arg_error(f"argument '{name}': must be a positive int (got {value!r})")
    return value


def _check_heads(config, layers, world: int):
    """(heads, kv_heads, head_dim) of the config, checked against every layer's projections and
    the world."""
    heads = config.num_attention_heads
    kv = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    for name, layer in layers:
        attn = layer.self_attn
        want = {"q_proj": heads * head_dim, "k_proj": kv * head_dim, "v_proj": kv * head_dim}
        for proj, n in want.items():
            got = getattr(attn, proj).out_features
            if got != n:
                raise arg_error(f"argument 'model': {name}.self_attn.{proj} has {got} output features; the config's "
                                f"heads ({heads}, KV {kv}) x head_dim ({head_dim}) say {n}")
        if attn.o_proj.in_features != heads * head_dim:
            raise arg_error(f"argument 'model': {name}.self_attn.o_proj has {attn.o_proj.in_features} input "
                            f"features; the config's {heads} heads x head_dim {head_dim} say {heads * head_dim}")
    if heads % world:
        raise arg_error(f"argument 'world': the model's num_attention_heads ({heads}) must be divisible by the world "
                        f"({world}): each rank holds whole attention heads")
    if kv % world:
        raise arg_error(f"argument 'world': the model's num_key_value_heads ({kv}) must be divisible by the world "
                        f"({world}): each rank holds whole KV heads (weave does not replicate them)")
    return heads, kv, head_dim


def _plan_linear(name: str, linear, parallel: str, world: int, quant: str, max_tokens: int) -> ShardedLinear:
    """The shard of one projection, checked against weave's rules for its op (CPU only)."""
    k, n = linear.in_features, linear.out_features
    split = n if parallel == "column" else k
    if split % world:
        what = "output" if parallel == "column" else "input"
        raise arg_error(f"argument 'world': {name} ({parallel}-parallel) has {split} {what} features, which must be "
                        f"divisible by the world ({world}): each rank holds {what} features / world of it")
    if parallel == "column":
        shard, window = (n // world, k), 0
        bad = validate_gemm(1, shard[0], k, quant) or validate_gemm(max_tokens, shard[0], k, quant)
    else:
        shard = (n, k // world)
        bad = GemmAllReduce.validate(n=n, k=shard[1], m_max=max_tokens, world=world, quant=quant)
        window = 0 if bad else GemmAllReduce.window_bytes(n=n, k=shard[1], m_max=max_tokens, world=world, quant=quant)
    if bad:
        op = "weave.gemm" if parallel == "column" else "weave.GemmAllReduce"
        raise arg_error(f"argument 'model': {name} as a {parallel}-parallel layer at world {world}, quant {quant} "
                        f"({op} of this rank's weight {list(shard)}): {bad}")
    return ShardedLinear(name, parallel, k, n, shard, window)


def plan_tensor_parallel(model, world: int, *, quant: str = "bf16", max_tokens: int = DEFAULT_MAX_TOKENS,
                         share_ops: bool = True) -> TensorParallelPlan:
    """What swap_to_weave would do to `model` at `world` ranks, checked against every rule
    (structure, heads, divisibility, weave's per-op rules) before any GPU work. CPU only."""
    quant = _nn._quant(quant)
    if not isinstance(share_ops, bool):
        raise arg_error(f"argument 'share_ops': must be a bool (got {share_ops!r})")
    _positive("world", world)
    _positive("max_tokens", max_tokens)
    if not isinstance(model, torch.nn.Module):
        raise arg_error(f"argument 'model': must be a torch.nn.Module (got {type(model).__name__})")
    config = _config_of(model)
    layers = _decoder_layers(model)
    heads, kv, head_dim = _check_heads(config, layers, world)
    linears = []
    for name, layer in layers:
        for path, parallel in _PROJECTIONS:
            linears.append(_plan_linear(f"{name}.{path}", layer.get_submodule(path), parallel, world, quant,
                                        max_tokens))
    return TensorParallelPlan(world, quant, max_tokens, share_ops, tuple(n for n, _ in layers), heads, kv, head_dim,
                              tuple(linears))


def _swap(model, plan: TensorParallelPlan, build) -> None:
    """Replaces each planned projection with build(entry, linear) and gives the config and every
    attention module this rank's head counts. Every layer is built before any is swapped in, so a
    failure leaves the model as it was."""
    built = [(entry, build(entry, model.get_submodule(entry.name))) for entry in plan.linears]
    for entry, layer in built:
        parent, _, leaf = entry.name.rpartition(".")
        setattr(model.get_submodule(parent), leaf, layer)
    config = _config_of(model)
    if getattr(config, "head_dim", None) is None:
        config.head_dim = plan.head_dim  # what hidden_size / heads gave before the heads were divided
    config.num_attention_heads, config.num_key_value_heads = plan.heads_per_rank, plan.kv_heads_per_rank
    for name in plan.decoder_layers:  # older attention modules keep their own counts (and reshape by them)
        attn = model.get_submodule(name).self_attn
        for attr, whole in (("num_heads", plan.heads), ("num_attention_heads", plan.heads),
                            ("num_key_value_heads", plan.kv_heads)):
            if getattr(attn, attr, None) == whole:
                setattr(attn, attr, whole // plan.world)


def _world_of(comm, process_group) -> int:
    if comm is not None and process_group is not None:
        raise arg_error("arguments 'comm' and 'process_group': pass one of them, not both")
    if comm is not None:
        if not isinstance(comm, Communicator):
            raise arg_error(f"argument 'comm': must be a weave.Communicator (got {type(comm).__name__})")
        return comm.world_size
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise arg_error("argument 'process_group': torch.distributed is not initialised (call init_process_group "
                        "first, or pass comm=, e.g. weave.Communicator.create_local([0]) for one GPU)")
    return dist.get_world_size(process_group)


def _check_on_device(model, plan: TensorParallelPlan, device: int) -> None:
    want = torch.device("cuda", device)
    for entry in plan.linears:
        w = model.get_submodule(entry.name).weight
        if w.device != want or w.dtype != torch.bfloat16:
            raise arg_error(f"argument 'model': {entry.name}'s weight is {w.dtype} on {w.device}; weave's layers take "
                            f"bf16 activations on this rank's GPU: model.to('{want}', torch.bfloat16) first")


def swap_to_weave(model, *, comm: Communicator | None = None, process_group=None, quant: str = "bf16",
                  max_tokens: int = DEFAULT_MAX_TOKENS, share_ops: bool = True) -> TensorParallelPlan:
    """Swaps `model`'s projections for weave.nn layers in place (the plan says which) and returns
    the plan. Collective: every rank of `comm` (default: a communicator made once from
    `process_group`, torch.distributed's world by default) passes the same whole model, bf16 on
    its GPU. quant: "bf16", "ptpc", "blockscale" or "mxfp8" (weave.nn's). max_tokens: the largest batch x
    sequence of one forward call. share_ops: the projections of one shape share one op and window
    (weave.nn's share_op: the decoder layers run one after another, so their o_proj's share one
    GemmAllReduce, their down_proj's another); False gives every projection its own. Every rule is
    checked before any GPU work (plan_tensor_parallel)."""
    plan = plan_tensor_parallel(model, _world_of(comm, process_group), quant=quant, max_tokens=max_tokens,
                                share_ops=share_ops)
    if comm is None:
        comm = Communicator.from_process_group(process_group)
    _check_on_device(model, plan, comm.device)

    def build(entry: ShardedLinear, linear):
        if entry.parallel == "column":
            return _nn.ColumnParallelLinear.from_linear(linear, comm=comm, quant=quant)
        return _nn.RowParallelLinear.from_linear(linear, comm=comm, quant=quant, max_tokens=max_tokens,
                                                 share_op=plan.share_ops)

    _swap(model, plan, build)
    return plan


def logits_agreement(got: torch.Tensor, want: torch.Tensor) -> dict:
    """How close logits `got` are to `want` (same shape, [..., vocab]): relative L2, the largest
    |difference| over want's rms, and the share of positions whose argmax agrees."""
    if got.shape != want.shape:
        raise arg_error(f"argument 'got': shape {list(got.shape)} must be want's {list(want.shape)}")
    g, w = got.float(), want.float()
    diff = g - w
    rms = w.pow(2).mean().sqrt().clamp_min(1e-30)
    return {"rel_l2": (diff.norm() / w.norm().clamp_min(1e-30)).item(),
            "max_abs_over_rms": (diff.abs().max() / rms).item(),
            "argmax_agree": (g.argmax(-1) == w.argmax(-1)).float().mean().item()}


def within_tolerance(agreement: dict, quant: str) -> bool:
    """Whether logits_agreement's numbers are within TOLERANCE[quant]."""
    rel_l2, max_abs = TOLERANCE[_nn._quant(quant)]
    return agreement["rel_l2"] <= rel_l2 and agreement["max_abs_over_rms"] <= max_abs
