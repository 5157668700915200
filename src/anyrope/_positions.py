"""Positions: ``None``, an integer offset, or an integer array broadcastable to (*batch, seq)."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import array_api_compat

from ._namespace import Array, Namespace, device_of, library_name
from ._validation import MAX_POSITION, describe


@dataclass(frozen=True)
class Positions:
    """Validated positions for one call.

    Either a contiguous range ``offset .. offset + seq - 1`` (``array is None``), or an
    integer ``array`` of rank ``len(batch) + 1`` (padded with leading size-1 axes) whose
    shape broadcasts to ``(*batch, seq)``. ``stop`` is one past the largest position.
    ``traced``: a JAX array traced under ``jit``, whose values (and ``stop``) are not known
    until it runs (see ``_jax.py``).
    """

    offset: int
    seq: int
    array: Array | None
    stop: int
    traced: bool = False


def resolve_positions(
    positions: object, xp: Namespace, x: Array, batch: tuple[int, ...], seq: int
) -> Positions:
    """Check ``positions`` against an input with batch axes ``batch`` and ``seq`` tokens."""
    if positions is None:
        return Positions(0, seq, None, seq)
    if isinstance(positions, bool):
        raise TypeError(
            f"`positions` must be None, an integer offset or an integer array; got {positions!r}"
        )
    if isinstance(positions, numbers.Integral):
        offset = int(positions)
        if offset < 0:
            raise ValueError(f"`positions` offset must be non-negative; got {offset}")
        if offset + seq > MAX_POSITION:
            raise ValueError(
                f"`positions` offset {offset} plus seq={seq} exceeds 2**53, beyond which "
                "float64 cannot represent every position"
            )
        return Positions(offset, seq, None, offset + seq)
    if not array_api_compat.is_array_api_obj(positions) or isinstance(positions, (list, tuple)):
        raise TypeError(
            "`positions` must be None, an integer offset or an integer array; "
            f"got {type(positions).__name__}"
        )
    return _resolve_array(positions, xp, x, batch, seq)


def check_integer_array(values: Array, name: str, xp: Namespace, x: Array) -> None:
    """Check that ``values`` is an integer array of the input's library and device."""
    try:
        values_xp = array_api_compat.array_namespace(values)
    except TypeError:
        values_xp = None
    if values_xp is None or library_name(values_xp) != library_name(xp):
        raise TypeError(
            f"`{name}` must be an array of the same library as the input ({library_name(xp)}); "
            f"got {describe(values)}"
        )
    if str(device_of(values)) != str(device_of(x)):
        raise ValueError(
            f"`{name}` must be on the input's device {device_of(x)}; got device {device_of(values)}"
        )
    if not xp.isdtype(values.dtype, "integral"):
        raise TypeError(f"`{name}` must have an integer dtype; got {values.dtype}")


def _resolve_array(
    p: Array, xp: Namespace, x: Array, batch: tuple[int, ...], seq: int
) -> Positions:
    check_integer_array(p, "positions", xp, x)
    target = (*batch, seq)
    if p.ndim < 1 or p.ndim > len(target):
        raise ValueError(
            f"`positions` must have shape (seq,) or (*batch, seq) with at most {len(target)} axes "
            f"for an input with batch axes {batch} and seq={seq}; got shape {tuple(p.shape)}"
        )
    padded = (1,) * (len(target) - p.ndim) + tuple(p.shape)
    if any(n not in (1, t) for n, t in zip(padded, target, strict=True)):
        raise ValueError(
            f"`positions` of shape {tuple(p.shape)} does not broadcast to (*batch, seq)={target}"
        )
    p = xp.reshape(p, padded)
    if array_api_compat.is_jax_array(p):
        from ._jax import is_traced

        if is_traced(p):
            return Positions(0, seq, p, 0, traced=True)
    stop = 0
    if math.prod(p.shape) != 0:
        low, high = int(xp.min(p)), int(xp.max(p))
        if low < 0:
            raise ValueError(f"`positions` must be non-negative; got a minimum of {low}")
        if high >= MAX_POSITION:
            raise ValueError(
                f"`positions` must be below 2**53, beyond which float64 cannot represent every "
                f"position; got a maximum of {high}"
            )
        stop = high + 1
    return Positions(0, seq, p, stop)
