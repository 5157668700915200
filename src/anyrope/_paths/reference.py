"""The reference path: the rotation written once against the array API standard
(numerical-contract.rst, "How every path computes" 3, The rotation).

:func:`rotate_pairs` uses only standard functions, an explicit ``xp`` and no in-place
writes (JAX arrays are immutable), so it runs on any array-API library and defines the
bits the fast paths must reproduce; an in-place call writes its result back with one
standard ``x[...] = y``.
"""

from __future__ import annotations

import numpy as np

from .._namespace import Array, Namespace, compute_dtype, reshape_lead
from .._plan import Plan


def rotate_pairs(
    x: Array,
    cos: Array,
    sin: Array,
    *,
    rotary_dim: int,
    interleaved: bool,
    inverse: bool,
    xp: Namespace,
) -> Array:
    """Rotate the pairs in the first ``rotary_dim`` features of the last axis of ``x``.

    ``cos`` and ``sin`` hold ``rotary_dim // 2`` entries in their last axis, in the compute
    dtype, and broadcast against ``x[..., :rotary_dim // 2]``. For each pair ``(x0, x1)``::

        y0 = (x0 * c) - (x1 * s)
        y1 = (x1 * c) + (x0 * s)

    with each operation rounded in the compute dtype (float32 for half inputs), and the
    result rounded once to ``x.dtype``. ``inverse`` rotates by the negative angle.
    Features past ``rotary_dim`` are returned unchanged.
    """
    half = rotary_dim // 2
    if interleaved:
        x0 = x[..., 0:rotary_dim:2]
        x1 = x[..., 1:rotary_dim:2]
    else:
        x0 = x[..., :half]
        x1 = x[..., half:rotary_dim]
    work = compute_dtype(xp, x.dtype)
    x0 = xp.astype(x0, work, copy=False)
    x1 = xp.astype(x1, work, copy=False)
    if inverse:
        sin = -sin
    y0 = xp.astype(x0 * cos - x1 * sin, x.dtype)
    y1 = xp.astype(x1 * cos + x0 * sin, x.dtype)
    if interleaved:
        pairs = xp.stack((y0, y1), axis=-1)
        rotated = reshape_lead(pairs, pairs, pairs.ndim - 2, (rotary_dim,), xp)
    else:
        rotated = xp.concat((y0, y1), axis=-1)
    if rotary_dim == x.shape[-1]:
        return rotated
    return xp.concat((rotated, x[..., rotary_dim:]), axis=-1)


NAME = "array_api"

CHECKS_POSITIONS = True
"""Positions left unread are gathered with array-API operations, NaN rows out of range
(:meth:`~anyrope._tables.TableCache.in_graph`): no host read, so traced, lazy and
captured calls take this path."""


def rejects(plan: Plan) -> str | None:
    """The reference takes every plan."""
    return None


def run(plan: Plan) -> tuple[Array, ...]:
    """Rotate with standard functions only; in place, the result is then written back."""
    xp = plan.xp
    cos, sin = plan.gathered_tables()
    results = []
    # inf * 0 is NaN and a huge pair may overflow: IEEE results the contract keeps
    # (numerical-contract.rst, "What is identical, and what is not"), not something to warn about on
    # NumPy and not elsewhere.
    with np.errstate(invalid="ignore", over="ignore"):
        for x in plan.arrays:
            y = rotate_pairs(
                x,
                cos,
                sin,
                rotary_dim=plan.rotary_dim,
                interleaved=plan.interleaved,
                inverse=plan.inverse,
                xp=xp,
            )
            if plan.inplace:
                x[...] = y
                y = x
            results.append(y)
    return tuple(results)
