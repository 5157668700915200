"""Argument checks shared by the public functions.

Every message names the argument and says what was received, so that a bad call
is understood without reading anyrope's source.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

LAYOUTS = ("bshd", "bhsd", "sbhd")
#: Positions must stay below this bound: float64 represents every integer up to it.
MAX_POSITION = 2**53


def check_bool(value: object, name: str) -> bool:
    """Return ``value`` if it is a bool, else raise a ``TypeError`` naming ``name``."""
    if not isinstance(value, bool):
        raise TypeError(f"`{name}` must be True or False; got {value!r}")
    return value


def check_int(
    value: object, name: str, low: int | None = None, high: int = 0, bounds: str = ""
) -> int:
    """Return ``value`` as int if it is an integer (not a bool), else raise ``TypeError``;
    with ``low``, it must lie in ``[low, high)``, else a ``ValueError`` says it must be
    ``bounds``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"`{name}` must be an integer; got {value!r} of type {type(value).__name__}"
        )
    if low is not None and not low <= int(value) < high:
        raise ValueError(f"`{name}` must be {bounds}; got {value}")
    return int(value)


def check_head_dim(head_dim: object) -> int:
    """``head_dim`` must be a positive even integer."""
    value = check_int(head_dim, "head_dim")
    if value <= 0 or value % 2:
        raise ValueError(f"`head_dim` must be a positive even integer; got {value}")
    return value


def check_rotary_dim(rotary_dim: object, head_dim: int | None) -> int:
    """``rotary_dim`` must be a positive even integer no larger than ``head_dim``."""
    value = check_int(rotary_dim, "rotary_dim")
    bound = "" if head_dim is None else f" and at most head_dim={head_dim}"
    if value <= 0 or value % 2 or (head_dim is not None and value > head_dim):
        raise ValueError(f"`rotary_dim` must be a positive even integer{bound}; got {value}")
    return value


def check_base(base: object) -> float:
    """``base`` must be a finite real number greater than 1."""
    if isinstance(base, bool) or not isinstance(base, numbers.Real):
        raise TypeError(f"`base` must be a real number; got {base!r} of type {type(base).__name__}")
    try:
        value = float(base)
    except OverflowError:  # an int beyond the range of float64
        value = math.inf
    if not math.isfinite(value) or value <= 1.0:
        raise ValueError(f"`base` must be a finite number greater than 1; got {base!r}")
    return value


def check_layout(layout: object) -> str:
    """``layout`` must name one of :data:`LAYOUTS`."""
    if layout not in LAYOUTS:
        raise ValueError(f"`layout` must be one of {', '.join(map(repr, LAYOUTS))}; got {layout!r}")
    return str(layout)


def check_impl(impl: object, allowed: tuple[str, ...]) -> str:
    """``impl`` must be one of ``allowed`` (the registry's path names and ``"auto"``)."""
    if impl not in allowed:
        raise ValueError(f"`impl` must be one of {', '.join(map(repr, allowed))}; got {impl!r}")
    return str(impl)


def describe(x: Any) -> str:
    """Short description of an array for error messages: library, shape, dtype, device."""
    library = type(x).__module__.split(".")[0]
    library = {"jaxlib": "jax"}.get(library, library)  # jax.Array lives in jaxlib
    shape = tuple(getattr(x, "shape", ()))
    return f"{library} array of shape {shape} and dtype {getattr(x, 'dtype', '?')}"
