"""Views of q, k and v in one fused projection, and the fused array put back together.

flash-attn's ``apply_rotary_emb_qkv_`` and most inference engines keep the output of a
fused qkv projection in one array, in one of two forms:

- **stacked**: an axis of length 3 (q, k, v) right before the heads axis, e.g.
  ``(batch, seq, 3, heads, head_dim)`` for ``layout="bshd"``;
- **grouped**: the heads axis holds ``num_heads_q`` query heads, then as many key heads
  as value heads, e.g. ``(batch, seq, num_heads_q + 2 * num_heads_kv, head_dim)``
  (grouped-query attention).

q and k are rotated as views (so in place writes into the fused array) and v is never
touched.
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
    axis: int
    """The stacked axis of length 3, or the heads axis of a grouped array (negative)."""
    stacked: bool


def split_qkv(qkv: Array, layout: str, num_heads_q: int | None) -> FusedQKV:
    """Views of q, k and v in ``qkv``, checked against ``layout`` and ``num_heads_q``."""
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
        q, k, v = (_take(qkv, axis, i, i + 1, squeeze=True) for i in range(3))
        return FusedQKV(q, k, v, axis, True)
    count = check_int(num_heads_q, "num_heads_q")
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
    bounds = (0, count, count + kv, total)
    q, k, v = (_take(qkv, heads, bounds[i], bounds[i + 1], squeeze=False) for i in range(3))
    return FusedQKV(q, k, v, heads, False)


def join_qkv(fused: FusedQKV, q: Array, k: Array, xp: Namespace) -> Array:
    """A new fused array of the rotated ``q`` and ``k`` and the untouched ``v``."""
    if fused.stacked:
        joined = xp.stack((q, k, fused.v), axis=fused.axis)
    else:
        joined = xp.concat((q, k, fused.v), axis=fused.axis)
    if joined.dtype != fused.v.dtype:
        # NumPy joins arrays of the other byte order (">f4") in native order.
        joined = joined.astype(fused.v.dtype)
    return joined


def _take(x: Array, axis: int, start: int, stop: int, *, squeeze: bool) -> Array:
    index = (Ellipsis, start if squeeze else slice(start, stop)) + (slice(None),) * (-axis - 1)
    return x[index]
