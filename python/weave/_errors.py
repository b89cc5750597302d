"""weave.Error: every failure of the library, with the C++ status, message, call and location."""
from __future__ import annotations

import numbers

from . import _weave

Status = _weave.Status


class Error(RuntimeError):
    """A weave failure. ``status`` is a :class:`weave.Status`; ``message`` names the argument and
    the rule it broke (or what failed); ``call`` and ``location`` say where, when the C++ library
    raised it."""

    def __init__(self, status: Status, message: str, call: str = "", location: str = "", text: str | None = None):
        self.status = status
        self.message = message
        self.call = call
        self.location = location
        super().__init__(text if text is not None else f"weave: {_weave.status_text(status)}: {message}")


class ArgumentError(Error, ValueError):
    """Status INVALID_ARGUMENT: a wrong dtype, device, shape, stride, layout or value. Also a
    ValueError, so generic argument handling catches it."""


def make(status: Status, message: str, call: str = "", location: str = "", text: str | None = None) -> Error:
    cls = ArgumentError if status == Status.INVALID_ARGUMENT else Error
    return cls(status, message, call, location, text)


def arg_error(message: str) -> ArgumentError:
    return ArgumentError(Status.INVALID_ARGUMENT, message)


INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)


def int_arg(name: str, value, low: int, high: int) -> int:
    """`value` as a Python int for a C++ integer field: a bool, a float (2.5, and 4.0 too) or an int
    outside [low, high] is an ArgumentError naming the argument, where the binding would raise a
    TypeError that names neither. The C++ side then checks its own rules (and names them)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise arg_error(f"argument '{name}': must be an int (got {type(value).__name__} {value!r})")
    value = int(value)
    if value < low:
        raise arg_error(f"argument '{name}': must be an int >= {low} (got {value})")
    if value > high:
        raise arg_error(f"argument '{name}': must be an int <= {high} (got {value})")
    return value


def _from_cpp(status: int, message: str, call: str, location: str, what: str) -> Error:
    return make(Status(status), message, call, location, what)


_weave._set_error_factory(_from_cpp)
