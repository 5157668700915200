"""Views of q, k and v in one fused projection, and the fused array put back together.

flash-attn's ``apply_rotary_emb_qkv_`` and most inference engines keep the output of a
fused qkv projection in one array, in one of two forms:

- **stacked**: an axis of length 3 (q, k, v) right before the heads axis, e.g.
  ``(batch, seq, 3, heads, head_dim)`` for ``layout="bshd"``;
- **grouped**: the heads axis holds ``num_heads_q`` query heads, then as many key heads
  as value heads, e.g. ``(batch, seq, num_heads_q + 2 * num_heads_kv, head_dim)``
  (grouped-query attention).

q and k are rotated as views (so in place writes into the fused array) and v is never
touched. In place, q and k are rotated as one view where the fused array allows it
(:func:`joint_qk`): one call's overhead instead of two arrays' and three views'.
"""

from __future__ import annotations

from typing import NamedTuple

from ._layout import heads_axis
from ._namespace import Array, Namespace
from ._validation import check_int, describe


class FusedQKV(NamedTuple):
    """q, k and v as views of a fused array, and where they sit in it."""

    q: Array
    k: Array
    v: Array
    #: The stacked axis of length 3, or the heads axis of a grouped array (negative).
    axis: int
    stacked: bool


def split_qkv(qkv: Array, layout: str, num_heads_q: int | None) -> FusedQKV:
    """Views of q, k and v in ``qkv``, checked against ``layout`` and ``num_heads_q``."""
    axis, bounds, stacked = _locate(qkv, layout, num_heads_q)
    q, k, v = (_take(qkv, axis, bounds[i], bounds[i + 1], squeeze=stacked) for i in range(3))
    return FusedQKV(q, k, v, axis, stacked)


def joint_qk(qkv: Array, layout: str, num_heads_q: int | None) -> Array | None:
    """One view holding the query heads then the key heads of ``qkv``, or ``None``.

    Rotating it rotates q and k with the bits of rotating each (every head is rotated
    alone), in one call instead of two arrays. A grouped array always has it; a stacked
    one when its (q, k) axis steps over exactly the heads axis, so that the two merge
    into one heads axis without a copy (any contiguous array), and in a library that
    shows its strides (NumPy, PyTorch, CuPy).
    """
    axis, bounds, stacked = _locate(qkv, layout, num_heads_q)
    # The q and k heads as one slice, indexed here: a frame less at each decode step.
    qk = qkv[(Ellipsis, slice(0, bounds[2])) + (slice(None),) * (-axis - 1)]
    if not stacked:
        return qk
    stride = getattr(qk, "stride", None)  # torch's, in elements
    strides = stride() if callable(stride) else getattr(qk, "strides", None)  # NumPy's, CuPy's
    heads = axis + 1
    if strides is None or strides[axis] != qk.shape[heads] * strides[heads]:
        return None
    shape = tuple(qk.shape)
    merged = (*shape[:axis], 2 * shape[heads], *shape[heads + 1 :])
    # The strides check makes this reshape a view in every library that has strides.
    return qk.reshape(merged)


def _locate(
    qkv: Array, layout: str, num_heads_q: int | None
) -> tuple[int, tuple[int, int, int, int], bool]:
    """The axis that separates q, k and v, their bounds on it, and whether it is stacked."""
    heads = heads_axis(layout)
    ndim = len(getattr(qkv, "shape", ()))
    if num_heads_q is None:
        axis = heads - 1
        if ndim < 1 - axis or qkv.shape[axis] != 3:
            raise ValueError(
                f"`qkv` without `num_heads_q` must have an axis of length 3 (q, k, v) right "
                f"before the heads axis, e.g. (batch, seq, 3, heads, head_dim) for layout="
                f"'bshd'; got {describe(qkv)} with layout={layout!r}"
            )
        return axis, (0, 1, 2, 3), True
    # A plain int skips the numbers.Integral check, an ABC's, at every decode step.
    count = num_heads_q if type(num_heads_q) is int else check_int(num_heads_q, "num_heads_q")
    if ndim < -heads:
        raise ValueError(
            f"`qkv` must have a heads axis at {heads} for layout={layout!r}; got {describe(qkv)}"
        )
    total = int(qkv.shape[heads])
    kv = (total - count) // 2
    if count <= 0 or kv <= 0 or count + 2 * kv != total:
        raise ValueError(
            f"`num_heads_q`={count} must leave an even, positive number of key and value heads "
            f"in the {total} heads of `qkv` (axis {heads}); got {describe(qkv)}"
        )
    return heads, (0, count, count + kv, total), False


def join_qkv(fused: FusedQKV, q: Array, k: Array, xp: Namespace) -> Array:
    """A new fused array of the rotated ``q`` and ``k`` and the untouched ``v``."""
    join = xp.stack if fused.stacked else xp.concat
    joined = join((q, k, fused.v), axis=fused.axis)
    if joined.dtype != fused.v.dtype:
        # NumPy joins arrays of the other byte order (">f4") in native order.
        joined = joined.astype(fused.v.dtype)
    return joined


def _take(x: Array, axis: int, start: int, stop: int, *, squeeze: bool) -> Array:
    index = (Ellipsis, start if squeeze else slice(start, stop)) + (slice(None),) * (-axis - 1)
    return x[index]
