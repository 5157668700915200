"""Linear attention with RoPE (RoFormer, section 3.3), against the array API standard only.

With a positive feature map ``phi``, attention becomes::

    out[m] = sum_n (R_m phi(q_m)) . (R_n phi(k_n)) v_n  /  sum_n phi(q_m) . phi(k_n)

The rotation goes into the numerator only: the denominator keeps the unrotated
features, so it stays positive (a rotated dot product can be zero or negative).
Both sums factor through per-head ``(head_dim, v_dim)`` matrices, so the cost is
``O(seq * head_dim * v_dim)`` instead of ``O(seq**2)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._call import shared_docs
from ._namespace import Array, Namespace, compute_dtype
from .attention import _checked, _grouped, _output, _rotate_for_attention

if TYPE_CHECKING:
    from ._rope import RoPE

__all__ = ["linear_attention"]

FEATURE_MAPS = ("elu+1",)


@shared_docs
def linear_attention(
    q: Array,
    k: Array,
    v: Array,
    *,
    rope: RoPE | None = None,
    positions: Any = None,
    feature_map: str | Callable[[Array], Array] = "elu+1",
    causal: bool = False,
    layout: str = "bshd",
    xp: Namespace | None = None,
) -> Array:
    """Linear attention with RoPE in the numerator (RoFormer, equation 19).

    Parameters
    ----------
    q : array
        Queries, shape ``(*batch, q_seq, q_heads, head_dim)`` for ``layout="bshd"``.
    k : array
        Keys, same layout with ``kv_heads`` heads (``q_heads`` a multiple of it:
        grouped-query heads as in :func:`anyrope.attention`).
    v : array
        Values, same layout and heads as ``k``, last axis ``v_dim``.
    rope : RoPE, optional
        Rotation applied to ``phi(q)`` and ``phi(k)`` in the numerator. ``None``: plain
        linear attention.
    positions : None, int or array of int, optional
        Positions for ``rope``, with the same rules as :func:`anyrope.attention`.
    feature_map : "elu+1" or callable, default "elu+1"
        ``phi``: ``"elu+1"`` is ``elu(x) + 1`` (Katharopoulos et al., 2020), positive
        everywhere. A callable receives an array in the compute dtype and must return
        a positive array of the same shape.
    causal : bool, default False
        Query ``m`` sums over keys ``n <= m + (k_seq - q_seq)`` (cumulative sums over
        the sequence, ``O(seq * head_dim * v_dim)`` memory).
    layout : {"bshd", "bhsd", "sbhd"}, default "bshd"
        Axis order of ``q``, ``k``, ``v`` and of the result.
    {shared}

    Returns
    -------
    array
        Shape of ``q`` with last axis ``v_dim``; dtype and device of ``q``. Half inputs
        are computed in float32 and rounded once.

    Examples
    --------
    >>> import numpy as np
    >>> import anyrope
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = (rng.standard_normal((1, 6, 2, 8)) for _ in range(3))
    >>> out = anyrope.linear_attention(q, k, v, rope=anyrope.RoPE(8), causal=True)
    >>> out.shape
    (1, 6, 2, 8)
    """
    xp, qa, ka = _checked(q, k, v, rope=rope, causal=causal, layout=layout, xp=xp)
    phi = _feature_map(feature_map, xp)

    work = compute_dtype(xp, q.dtype)
    fq, fk = (phi(xp.astype(a, work)) for a in (q, k))
    if tuple(fq.shape) != tuple(q.shape) or tuple(fk.shape) != tuple(k.shape):
        raise ValueError("`feature_map` must return an array of the shape it was given")
    rq, rk = _rotate_for_attention(
        rope, fq, fk, qa=qa, ka=ka, positions=positions, layout=layout, xp=xp
    )

    fq, rq = (_grouped(a, layout, qa.heads // ka.heads, xp) for a in (fq, rq))
    fk, rk, vh = (_grouped(a, layout, 1, xp) for a in (fk, rk, xp.astype(v, work)))

    if causal:
        skip = ka.seq - qa.seq
        # kv[n] = sum_{j <= n} rk_j v_j^T, one (head_dim, v_dim) matrix per position.
        kv = xp.cumulative_sum(rk[..., :, :, None] * vh[..., :, None, :], axis=-3)
        kv = kv[..., skip:, :, :]
        num = xp.matmul(rq[..., :, None, :], kv)[..., 0, :]
        ksum = xp.cumulative_sum(fk, axis=-2)[..., skip:, :]
    else:
        num = xp.matmul(rq, xp.matmul(xp.matrix_transpose(rk), vh))
        ksum = xp.sum(fk, axis=-2, keepdims=True)
    den = xp.sum(fq * ksum, axis=-1, keepdims=True)
    return _output(num / den, q, layout, xp)


def _feature_map(
    feature_map: str | Callable[[Array], Array], xp: Namespace
) -> Callable[[Array], Array]:
    if callable(feature_map):
        return feature_map
    if feature_map == "elu+1":

        def elu_plus_one(x: Array) -> Array:
            # exp only of the non-positive part, so large inputs cannot overflow.
            return xp.where(x > 0, x + 1, xp.exp(xp.minimum(x, xp.zeros_like(x))))

        return elu_plus_one
    raise ValueError(
        f"`feature_map` must be one of {', '.join(map(repr, FEATURE_MAPS))} or a callable; "
        f"got {feature_map!r}"
    )
