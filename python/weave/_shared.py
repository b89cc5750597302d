"""weave.create_sharing_window: several collectives and fused ops in ONE symmetric window
(include/weave/shared_window.hpp; docs/comm.md "window layout").

    comm = weave.Communicator.from_process_group()
    ops = weave.create_sharing_window(
        comm,
        all_reduces=[dict(n=7168, k=2048, m_max=8192, quant="blockscale")] * 30,   # 30 layers
        all_gathers=[dict(n=1024, k=5120, m_max=4096)],
        reduce_scatters=[dict(n=8192, k=3584, m_max=8192)],                       # sequence parallelism
        all_gather_gemms=[dict(n=7168, k=8192, m_max=1024, quant="ptpc")],
        collectives=[dict(op="all-reduce", max_count=1 << 20)])
    out = ops.all_reduces[3].run(a, b, scale_a=sa, scale_b=sb)

One allocation, one NCCL registration and one device communicator for all of them. Each spec is a
dict of the keyword arguments its class takes (weave.Collective, weave.GemmAllGather,
weave.GemmAllReduce, weave.GemmReduceScatter, weave.AllGatherGemm; `comm` aside); the ops returned are those classes, used as if built alone.
Collective: every rank must pass the same lists in the same order. The window lives until the
last of the ops is gone.
"""
from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from . import _weave
from ._comm import Collective, Communicator, _collective_config
from ._errors import ArgumentError, arg_error
from ._fused import (AllGatherGemm, GemmAllGather, GemmAllReduce, GemmReduceScatter, _ag_config, _agm_config,
                     _ar_config, _rs_config)


class SharedWindowOps(NamedTuple):
    collectives: list
    all_gathers: list
    all_reduces: list
    reduce_scatters: list
    all_gather_gemms: list


_KINDS = (  # (list name, class, config builder)
    ("collectives", Collective, _collective_config),
    ("all_gathers", GemmAllGather, _ag_config),
    ("all_reduces", GemmAllReduce, _ar_config),
    ("reduce_scatters", GemmReduceScatter, _rs_config),
    ("all_gather_gemms", AllGatherGemm, _agm_config),
)
_FUSED_KINDS = _KINDS[1:]


def _parse(where: str, cls, build, spec):
    """One spec -> its C++ config, with every error prefixed by where it is ("all_reduces[2]")."""
    if not isinstance(spec, Mapping):
        raise arg_error(f"argument '{where}': must be a dict of weave.{cls.__name__}'s keyword arguments "
                        f"(got {type(spec).__name__})")
    try:
        bound = inspect.signature(cls.__init__).bind(None, None, **spec)  # self and comm aside
    except TypeError as e:
        raise arg_error(f"argument '{where}': {e} (weave.{cls.__name__}{_signature_text(cls)})") from None
    bound.apply_defaults()
    args = dict(bound.arguments)
    for name in ("self", "comm"):
        args.pop(name, None)
    try:
        return build(**args)
    except ArgumentError as e:
        raise arg_error(f"argument '{where}': {e.message}") from None


def _signature_text(cls) -> str:
    params = list(inspect.signature(cls.__init__).parameters.values())[2:]
    return "(" + ", ".join(str(p) for p in params) + ")"


def create_sharing_window(comm: Communicator, *, collectives: Sequence = (), all_gathers: Sequence = (),
                          all_reduces: Sequence = (), reduce_scatters: Sequence = (),
                          all_gather_gemms: Sequence = ()) -> SharedWindowOps:
    """Builds every listed op over one symmetric window (collective: every rank the same lists).
    Returns SharedWindowOps(collectives, all_gathers, all_reduces, reduce_scatters,
    all_gather_gemms), each a list of weave ops in the order given. Every spec is checked before any
    GPU work; an error names the list and index."""
    lists = {"collectives": collectives, "all_gathers": all_gathers, "all_reduces": all_reduces,
             "reduce_scatters": reduce_scatters, "all_gather_gemms": all_gather_gemms}
    for name, value in lists.items():
        if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
            raise arg_error(f"argument '{name}': must be a list of dicts (got {type(value).__name__})")
    configs = {name: [_parse(f"{name}[{i}]", cls, build, spec) for i, spec in enumerate(lists[name])]
               for name, cls, build in _KINDS}
    if not isinstance(comm, Communicator):
        raise arg_error(f"argument 'comm': must be a weave.Communicator (got {type(comm).__name__})")
    if not any(configs.values()):
        raise arg_error("create_sharing_window: no ops listed (collectives, all_gathers, all_reduces, reduce_scatters "
                        "and all_gather_gemms are all empty)")
    world = comm.world_size
    for name, cls, _ in _FUSED_KINDS:
        for i, c in enumerate(configs[name]):
            cls._check_config(c, world, f"argument '{name}[{i}]'")
    made = _weave.create_sharing_window(comm._impl, *(configs[name] for name, _, _ in _KINDS))
    for ops in made:
        for op in ops:
            _weave._tie(op, comm._impl)  # the communicator outlives every op (their constructors' keep_alive)
    cols, *fused = made
    return SharedWindowOps([Collective._wrap(comm, o) for o in cols],
                           *([cls._wrap(comm, c, o) for c, o in zip(configs[name], ops)]
                             for (name, cls, _), ops in zip(_FUSED_KINDS, fused)))
