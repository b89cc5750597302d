"""Model presets: the tensor-parallel layers users run (DeepSeek, Llama, Qwen), read from
libweave's own table (include/weave/presets.hpp), so Python, `weave plan --presets` and
`weave bench --preset` always agree.

    for p in weave.presets():
        print(p.name, p.op, p.n, p.k)
    s = weave.preset("llama3-70b.o_proj", world=8)          # one rank's shard: K_r = K / 8
    ar = weave.GemmAllReduce(comm, m_max=4096, **s.op_kwargs())

Decoder layers (include/weave/layer_presets.hpp): every GEMM of one layer's decode step with its
tensor-parallel split, as `weave plan|bench decode` runs them.

    layer = weave.layer_preset("llama3-70b", world=8)       # qkv_proj 1280x8192, o_proj 8192x1024, ...
    for g in layer.gemms:
        print(g.name, g.split, g.n, g.k)
"""
from __future__ import annotations

from dataclasses import dataclass

from . import _weave
from ._errors import arg_error


@dataclass(frozen=True)
class Preset:
    """A layer's whole GEMM (B [n, k]) and what it maps to: op "gemm-ar" (row-parallel: K is split
    over the ranks) or "gemm-ag" (context-parallel: every rank computes its own rows and all are
    gathered). quants: what the model ships in, the first the default; ms: a default M list."""
    name: str
    op: str
    n: int
    k: int
    quants: tuple
    out: str
    ms: tuple
    summary: str
    source: str


@dataclass(frozen=True)
class PresetShard:
    """One rank's GEMM of `preset` in a world of `world` ranks: gemm-ar k = K / world, gemm-ag n
    and k whole (each rank's M rows are its own tokens)."""
    preset: Preset
    world: int
    quant: str
    n: int
    k: int

    def op_kwargs(self) -> dict:
        """The shape arguments of weave.GemmAllReduce / weave.GemmAllGather for this shard."""
        kw = {"n": self.n, "k": self.k, "quant": self.quant}
        if self.preset.op == "gemm-ag":
            kw["out_dtype"] = self.preset.out
        return kw


def presets() -> list:
    """Every preset, in the library's order."""
    return [Preset(**d) for d in _weave.model_presets()]


def preset(name: str, world: int = 1, quant: str | None = None) -> PresetShard:
    """The preset `name` sharded for `world` ranks in `quant` (default: the model's first). Raises
    weave.ArgumentError naming the preset, the world and the rule when it does not shard (K not
    divisible by world, a per-rank K that splits a scale block, a quant the model does not ship,
    world outside 1..8) or when no preset has that name."""
    if not isinstance(world, int) or isinstance(world, bool):
        raise arg_error(f"world {world!r}: expected an int in 1..8")
    p = Preset(**_weave.model_preset(name))
    s = _weave.shard_model_preset(name, world, quant or "")
    return PresetShard(preset=p, world=s["world"], quant=s["quant"], n=s["n"], k=s["k"])


@dataclass(frozen=True)
class LayerGemm:
    """One GEMM of a decoder layer: its whole weight B [n, k] and how tensor parallelism splits it:
    "column" (N over the ranks), "row" (K over the ranks; the outputs are summed) or "replicated".
    units: the split dimension's indivisible units (heads, KV groups, rows); parts: how many equal
    matrices the split dimension stacks (gate_up_proj: 2)."""
    name: str
    n: int
    k: int
    split: str
    units: int
    parts: int
    source: str


@dataclass(frozen=True)
class LayerPreset:
    """Every GEMM of one decoder layer's decode step, in the order it runs (`weave plan|bench
    decode --preset NAME`). left_out: GEMM-like work of the layer not in `gemms`, and why."""
    name: str
    gemms: tuple
    quants: tuple
    ms: tuple
    summary: str
    left_out: str


@dataclass(frozen=True)
class LayerGemmShard:
    """One rank's GEMM of a layer: column n = N / world, row k = K / world, replicated whole."""
    name: str
    n: int
    k: int
    split: str


@dataclass(frozen=True)
class LayerShard:
    """A layer at `world` ranks in `quant`: each GEMM's shard, in the layer's order."""
    preset: LayerPreset
    world: int
    quant: str
    gemms: tuple


def _layer(d: dict) -> LayerPreset:
    return LayerPreset(**{**d, "gemms": tuple(LayerGemm(**g) for g in d["gemms"])})


def layer_presets() -> list:
    """Every decoder layer preset (Llama-3-70B, Qwen3-32B, DeepSeek-V3), in the library's order."""
    return [_layer(d) for d in _weave.layer_presets()]


def layer_preset(name: str, world: int = 1, quant: str | None = None) -> LayerShard:
    """The decoder layer `name` sharded for `world` ranks in `quant` (default: the model's first).
    Raises weave.ArgumentError naming the layer, the GEMM, the world and the rule when it does not
    shard (units not divisible by world, a share that splits a 128-row weight block, a quant the
    model does not ship, world outside 1..8) or when no layer has that name."""
    if not isinstance(world, int) or isinstance(world, bool):
        raise arg_error(f"world {world!r}: expected an int in 1..8")
    p = _layer(_weave.layer_preset(name))
    s = _weave.shard_layer_preset(name, world, quant or "")
    return LayerShard(preset=p, world=world, quant=s["quant"], gemms=tuple(LayerGemmShard(**g) for g in s["gemms"]))
