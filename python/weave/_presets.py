"""Model presets: the tensor-parallel layers users run (DeepSeek, Llama, Qwen), read from
libweave's own table (include/weave/presets.hpp), so Python, `weave plan --presets` and
`weave bench --preset` always agree.

    for p in weave.presets():
        print(p.name, p.op, p.n, p.k)
    s = weave.preset("llama3-70b.o_proj", world=8)          # one rank's shard: K_r = K / 8
    ar = weave.GemmAllReduce(comm, m_max=4096, **s.op_kwargs())
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
