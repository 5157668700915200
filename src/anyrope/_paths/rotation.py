"""The rotation arithmetic, written once (numerical-contract.rst, "How every path
computes" 3): every path imports it, or reproduces its bits in a form of its own that says
why it is the same.

:func:`rotate_pair` is the formula, :func:`halves` where a pair's two elements are, and
:func:`rotate_pairs` the whole rotation against the array API standard (the reference path,
and the oracle of the tests).
"""

from __future__ import annotations

from typing import TypeVar

from .._namespace import Array, Namespace, compute_dtype, reshape_lead

T = TypeVar("T")


def rotate_pair(x0: T, x1: T, c: T, s: T) -> tuple[T, T]:
    """``(x0 * c - x1 * s, x1 * c + x0 * s)``: each operation one IEEE-754 rounding in the
    operands' dtype, no fused multiply-add. Scalars or arrays; numba compiles it as is."""
    return x0 * c - x1 * s, x1 * c + x0 * s  # type: ignore[operator]


def halves(x: Array, rotary_dim: int, interleaved: bool) -> tuple[Array, Array]:
    """The first and second elements of every pair of the last axis, as two views:
    even and odd features (interleaved), or the two halves of ``rotary_dim``."""
    if interleaved:
        return x[..., 0:rotary_dim:2], x[..., 1:rotary_dim:2]
    half = rotary_dim // 2
    return x[..., :half], x[..., half:rotary_dim]


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
    dtype (float32 for half inputs), and broadcast against ``x[..., :rotary_dim // 2]``.
    Each pair is computed by :func:`rotate_pair` in the compute dtype and rounded once to
    ``x.dtype``; ``inverse`` rotates by the negative angle. Features past ``rotary_dim``
    are returned unchanged. Standard functions only, no in-place write (JAX arrays are
    immutable).
    """
    work = compute_dtype(xp, x.dtype)
    x0, x1 = (xp.astype(h, work, copy=False) for h in halves(x, rotary_dim, interleaved))
    y0, y1 = rotate_pair(x0, x1, cos, -sin if inverse else sin)
    y0, y1 = xp.astype(y0, x.dtype), xp.astype(y1, x.dtype)
    if interleaved:
        pairs = xp.stack((y0, y1), axis=-1)
        rotated = reshape_lead(pairs, pairs, pairs.ndim - 2, (rotary_dim,), xp)
    else:
        rotated = xp.concat((y0, y1), axis=-1)
    if rotary_dim == x.shape[-1]:
        return rotated
    return xp.concat((rotated, x[..., rotary_dim:]), axis=-1)
