"""Makes weave and torch share one NCCL and one cuBLASLt in a process.

libweave.so needs libnccl.so.2 and libcublasLt.so.13. The dynamic linker reuses a library already
loaded under the same soname, so when torch was imported first weave binds to torch's copies. When
weave comes first, this preloads the copies torch would load (the nvidia-nccl / nvidia-cublas
wheels of this environment), so a later ``import torch`` finds them loaded instead of pulling in a
second, possibly different NCCL. Without those wheels, libweave.so's RUNPATH (the toolkit and NCCL
it was built against) applies. Loaded RTLD_LOCAL: nothing here enters the global symbol scope.
"""
from __future__ import annotations

import ctypes
import importlib.util
import os

_PRELOADED: dict[str, str] = {}


def _wheel_lib(package: str, soname: str) -> str | None:
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        path = os.path.join(root, "lib", soname)
        if os.path.exists(path):
            return path
    return None


def preload() -> dict[str, str]:
    if os.environ.get("WEAVE_NO_PRELOAD"):
        return _PRELOADED
    for package, soname in (("nvidia.nccl", "libnccl.so.2"), ("nvidia.cublas", "libcublasLt.so.13")):
        if soname in _PRELOADED:
            continue
        path = _wheel_lib(package, soname)
        if path is None:
            continue
        try:
            ctypes.CDLL(path)
            _PRELOADED[soname] = path
        except OSError:
            pass  # libweave.so's RUNPATH still applies
    return _PRELOADED
