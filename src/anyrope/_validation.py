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


def check_even(value: object, name: str, most: int | None = None) -> int:
    """``value`` must be a positive even integer, at most ``most`` (the head_dim) if given."""
    value = check_int(value, name)
    bound = "" if most is None else f" and at most head_dim={most}"
    if value <= 0 or value % 2 or (most is not None and value > most):
        raise ValueError(f"`{name}` must be a positive even integer{bound}; got {value}")
    return value


def check_real(value: object, name: str, above: float, or_none: str = "") -> float:
    """``value`` must be a finite real number greater than ``above`` (not a bool);
    ``or_none`` ends the messages of an argument that may also be None."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"`{name}` must be a real number{or_none}; got {value!r} of type {type(value).__name__}"
        )
    try:
        real = float(value)
    except OverflowError:  # an int beyond the range of float64
        real = math.inf
    if not math.isfinite(real) or real <= above:
        raise ValueError(
            f"`{name}` must be a finite number greater than {above:g}{or_none}; got {value!r}"
        )
    return real


def check_base(base: object) -> float:
    """``base`` must be a finite real number greater than 1."""
    return check_real(base, "base", 1.0)


def check_choice(value: object, name: str, allowed: tuple[str, ...]) -> str:
    """``value`` must be one of ``allowed`` (:data:`LAYOUTS` for ``layout``; the registry's
    path names and ``"auto"`` for ``impl``)."""
    if value not in allowed:
        raise ValueError(f"`{name}` must be one of {', '.join(map(repr, allowed))}; got {value!r}")
    return str(value)


def describe(x: Any) -> str:
    """Short description of an array for error messages: library, shape, dtype, device."""
    library = type(x).__module__.split(".")[0]
    library = {"jaxlib": "jax"}.get(library, library)  # jax.Array lives in jaxlib
    shape = tuple(getattr(x, "shape", ()))
    return f"{library} array of shape {shape} and dtype {getattr(x, 'dtype', '?')}"
