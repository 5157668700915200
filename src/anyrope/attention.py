"""Reference softmax attention with RoPE, written against the array API standard only.

It is a readable, numerically careful reference (max-subtracted softmax, float32
accumulation for half inputs, grouped-query heads), not a fused kernel: it builds the
full ``(q_seq, k_seq)`` score matrix per head.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ._call import shared_docs
from ._frequencies import default_inv_freq
from ._hostmath import sincos
from ._layout import Axes, axes_of
from ._namespace import Array, Namespace, compute_dtype, device_of, is_real_floating, namespace_of
from ._rope import RoPE, XPos
from ._validation import check_bool, check_real, describe

__all__ = ["attention", "relative_decay_bound"]


@shared_docs
def attention(
    q: Array,
    k: Array,
    v: Array,
    *,
    rope: RoPE | None = None,
    positions: Any = None,
    causal: bool = False,
    mask: Array | None = None,
    scale: float | None = None,
    layout: str = "bshd",
    xp: Namespace | None = None,
) -> Array:
    r"""Softmax attention, with RoPE applied to ``q`` and ``k`` first.

    For each query ``m`` and key ``n`` (RoFormer, eq. 2 with rotated ``q`` and ``k``)::

        a[m, n] = softmax_n(scale * (R_m q_m) . (R_n k_n) + mask[m, n])
        out[m] = sum_n a[m, n] v_n

    The softmax subtracts the row maximum before exponentiating, and half-precision
    inputs (float16, bfloat16) are accumulated in float32; the result is rounded once to
    the input dtype.

    Parameters
    ----------
    q : array
        Queries, shape ``(*batch, q_seq, q_heads, head_dim)`` for ``layout="bshd"``.
    k : array
        Keys, same layout, with ``kv_heads`` heads; ``q_heads`` must be a multiple of
        ``kv_heads`` (grouped-query attention: query head ``h`` reads key/value head
        ``h // (q_heads // kv_heads)``).
    v : array
        Values, same layout and heads as ``k``; its last axis ``v_dim`` may differ from
        ``head_dim``.
    rope : RoPE, optional
        Rotation applied to ``q`` and ``k`` before the scores. ``None``: no rotation.
    positions : None, int or array of int, optional
        Positions passed to ``rope`` (see :func:`anyrope.rotate`). With ``None`` and
        ``q_seq < k_seq`` (decoding with a cache of keys), queries take the last
        ``q_seq`` positions ``k_seq - q_seq .. k_seq - 1``. Explicit positions need
        ``q_seq == k_seq``.
    causal : bool, default False
        Query ``m`` attends to keys ``n <= m + (k_seq - q_seq)`` (aligned to the end,
        as in a decoder with a cache).
    mask : array, optional
        Broadcastable to ``(*batch, q_heads, q_seq, k_seq)``. Boolean: ``True`` marks the
        pairs that take part. Floating: added to the scores (``-inf`` excludes).
    scale : float, optional
        Multiplies the scores: a finite real number greater than 0 (``ValueError``
        otherwise: NaN, inf, 0 or a negative scale would make every weight NaN, uniform
        or inverted); default ``None``, ``rope.softmax_scale / sqrt(head_dim)``: the
        scale the model expects (DeepSeek's YaRN multiplies ``1 / sqrt(head_dim)`` by
        ``mscale ** 2``; every other RoPE, and ``rope=None``, by 1).
    layout : {"bshd", "bhsd", "sbhd"}, default "bshd"
        Axis order of ``q``, ``k``, ``v`` and of the result.
    {shared}

    Returns
    -------
    array
        Shape of ``q`` with last axis ``v_dim``, dtype and device of ``q``. A query that
        may attend to no key at all gets zeros.

    Examples
    --------
    >>> import numpy as np
    >>> import anyrope
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = (rng.standard_normal((1, 5, 2, 8)) for _ in range(3))
    >>> out = anyrope.attention(q, k, v, rope=anyrope.RoPE(8), causal=True)
    >>> out.shape
    (1, 5, 2, 8)
    >>> bool(np.allclose(out[0, 0], v[0, 0]))  # the first token only sees itself
    True
    """
    xp, qa, ka = _checked(q, k, v, rope=rope, causal=causal, layout=layout, xp=xp)
    if mask is not None:
        namespace_of(q, mask, argument=("q", "mask"))
    scale = None if scale is None else check_real(scale, "scale", 0.0, " or None")
    if scale is None:
        # DeepSeek's YaRN moves mscale ** 2 into the softmax scale (1.0 for the others).
        scale = (1.0 if rope is None else rope.softmax_scale) / math.sqrt(qa.head_dim)
    if ka.seq == 0:  # no keys, so no queries either: nothing to attend
        return xp.zeros((*q.shape[:-1], v.shape[-1]), dtype=q.dtype, device=device_of(q))

    work = compute_dtype(xp, q.dtype)
    # Rotated in the working dtype too: a half-precision result is rounded once, at the end.
    rq, rk = _rotate_for_attention(
        rope,
        xp.astype(q, work),
        xp.astype(k, work),
        qa=qa,
        ka=ka,
        positions=positions,
        layout=layout,
        xp=xp,
    )
    qg = _grouped(rq, layout, qa.heads // ka.heads, xp)
    kh = _grouped(rk, layout, 1, xp)
    vh = _grouped(xp.astype(v, work), layout, 1, xp)

    scores = xp.matmul(qg, xp.matrix_transpose(kh)) * float(scale)
    scores = xp.reshape(scores, (*scores.shape[:-4], qa.heads, qa.seq, ka.seq))
    allowed = causal_mask(qa.seq, ka.seq, xp, device_of(q)) if causal else None
    if mask is not None:
        scores, allowed = _apply_mask(scores, allowed, mask, xp)
    if allowed is not None:
        scores = xp.where(allowed, scores, xp.asarray(-math.inf, dtype=work, device=device_of(q)))

    row_max = xp.max(scores, axis=-1, keepdims=True)
    # A fully masked row has max -inf; subtracting 0 there keeps exp() at 0 instead of NaN.
    row_max = xp.where(xp.isinf(row_max) & (row_max < 0), xp.zeros_like(row_max), row_max)
    weights = xp.exp(scores - row_max)
    total = xp.sum(weights, axis=-1, keepdims=True)
    total = xp.where(total == 0, xp.ones_like(total), total)
    weights = xp.reshape(weights, (*qg.shape[:-1], ka.seq))
    total = xp.reshape(total, (*qg.shape[:-1], 1))
    return _output(xp.matmul(weights, vh) / total, q, layout, xp)


def _checked(
    q: Array,
    k: Array,
    v: Array,
    *,
    rope: object,
    causal: object,
    layout: str,
    xp: Namespace | None,
) -> tuple[Namespace, Axes, Axes]:
    """Check what the attention functions share; the namespace and the axes of q and k."""
    xp = namespace_of(q, k, v, xp=xp, argument=("q", "k", "v"))
    if rope is not None and not isinstance(rope, RoPE):
        raise TypeError(
            f"`rope` must be an anyrope.RoPE or None; got {rope!r} of type {type(rope).__name__}"
        )
    check_bool(causal, "causal")
    for name, arr in (("q", q), ("k", k), ("v", v)):
        if not is_real_floating(xp, arr.dtype):
            raise TypeError(f"`{name}` must have a real floating dtype; got {describe(arr)}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(
            f"`q`, `k` and `v` must share one dtype; got {q.dtype}, {k.dtype} and {v.dtype}"
        )
    qa, ka, va = axes_of(q, layout, "q"), axes_of(k, layout, "k"), axes_of(v, layout, "v")
    if qa.batch != ka.batch or ka.batch != va.batch:
        raise ValueError(
            f"`q`, `k` and `v` must share their batch axes; got {qa.batch}, {ka.batch} and "
            f"{va.batch} for layout={layout!r}"
        )
    if qa.head_dim != ka.head_dim:
        raise ValueError(
            f"`q` and `k` must have the same head_dim; got {qa.head_dim} and {ka.head_dim}"
        )
    if (ka.seq, ka.heads) != (va.seq, va.heads):
        raise ValueError(
            f"`k` and `v` must have the same seq and heads; got {describe(k)} and {describe(v)}"
        )
    if 0 in (qa.heads, ka.heads) or qa.heads % ka.heads:
        raise ValueError(
            f"the heads of `q` ({qa.heads}) must be a positive multiple of the heads of `k` "
            f"({ka.heads})"
        )
    if qa.seq > ka.seq:
        raise ValueError(
            f"`q` must not have more tokens than `k`; got q_seq={qa.seq} and k_seq={ka.seq}"
        )
    return xp, qa, ka


def _rotate_for_attention(
    rope: RoPE | None,
    q: Array,
    k: Array,
    *,
    qa: Axes,
    ka: Axes,
    positions: Any,
    layout: str,
    xp: Namespace,
) -> tuple[Array, Array]:
    """Rotate ``q`` and ``k``; with fewer queries than keys, queries take the last positions."""
    if rope is None:
        if positions is not None:
            raise ValueError(
                "`positions` was given without `rope`; pass rope=anyrope.RoPE(head_dim)"
            )
        return q, k
    if qa.seq == ka.seq:
        return rope(q, k, positions, layout=layout, xp=xp)
    if positions is not None:
        raise ValueError(
            f"explicit `positions` need q_seq == k_seq; got q_seq={qa.seq} and k_seq={ka.seq} "
            "(rotate q and k yourself with their own positions, then call with rope=None)"
        )
    if isinstance(rope, XPos):
        # Queries and keys are scaled apart (queries by the amplitude, keys divided by it).
        return rope.rotate_queries(q, ka.seq - qa.seq, layout=layout, xp=xp), rope.rotate_keys(
            k, layout=layout, xp=xp
        )
    return rope.rotate(q, ka.seq - qa.seq, layout=layout, xp=xp), rope.rotate(
        k, layout=layout, xp=xp
    )


def _bhsd_axes(layout: str, n: int) -> tuple[int, ...]:
    """The axes of an ``n``-d array of ``layout`` in the order ``(*batch, heads, seq, dim)``."""
    if layout == "bhsd":
        return tuple(range(n))
    if layout == "bshd":
        return (*range(n - 3), n - 2, n - 3, n - 1)
    return (*range(1, n - 2), n - 2, 0, n - 1)


def _grouped(x: Array, layout: str, groups: int, xp: Namespace) -> Array:
    """View ``x`` of ``layout`` as ``(*batch, heads // groups, groups, seq, dim)``."""
    x = xp.permute_dims(x, _bhsd_axes(layout, x.ndim))
    *batch, heads, seq, dim = x.shape
    return xp.reshape(x, (*batch, heads // groups, groups, seq, dim))


def _output(out: Array, q: Array, layout: str, xp: Namespace) -> Array:
    """``out`` (``*batch, kv_heads, groups, q_seq, v_dim``) in the layout and dtype of q."""
    *batch, kv_heads, groups, seq, v_dim = out.shape
    out = xp.reshape(out, (*batch, kv_heads * groups, seq, v_dim))
    axes = _bhsd_axes(layout, out.ndim)
    return xp.permute_dims(xp.astype(out, q.dtype), tuple(map(axes.index, range(out.ndim))))


def causal_mask(q_seq: int, k_seq: int, xp: Namespace, device: Any) -> Array:
    """``(q_seq, k_seq)`` booleans: query ``m`` sees keys ``n <= m + k_seq - q_seq``.

    Parameters
    ----------
    q_seq : int
        Number of queries.
    k_seq : int
        Number of keys, at least ``q_seq``.
    xp : namespace
        Array namespace of the result.
    device : device
        Device of the result.

    Returns
    -------
    array
        Boolean, shape ``(q_seq, k_seq)``: ``True`` where query ``m`` may attend key ``n``.
    """
    rows = xp.arange(k_seq - q_seq, k_seq, device=device)
    cols = xp.arange(k_seq, device=device)
    return cols[None, :] <= rows[:, None]


def _apply_mask(
    scores: Array, allowed: Array | None, mask: Array, xp: Namespace
) -> tuple[Array, Array | None]:
    """Combine a user ``mask`` (boolean or additive) with the scores and the causal mask."""
    target = tuple(scores.shape)
    shape = tuple(mask.shape)
    if len(shape) > len(target) or any(
        n not in (1, t) for n, t in zip(shape[::-1], target[::-1], strict=False)
    ):
        raise ValueError(
            f"`mask` must broadcast to (*batch, q_heads, q_seq, k_seq)={target}; "
            f"got {describe(mask)}"
        )
    if mask.dtype == xp.bool:
        return scores, mask if allowed is None else (allowed & mask)
    if not is_real_floating(xp, mask.dtype):
        raise TypeError(f"`mask` must be boolean or real floating; got {describe(mask)}")
    return scores + xp.astype(mask, scores.dtype), allowed


def relative_decay_bound(
    distances: np.ndarray[Any, Any], dim: int, *, base: float = 10000.0
) -> np.ndarray[Any, np.dtype[np.float64]]:
    r"""Return RoFormer's long-range decay bound (section 3.4.3) at relative ``distances``.

    With pairs ``h_i`` of ``q`` and ``k`` written as complex numbers and
    ``S_j = sum_{i<j} exp(1j * (m - n) * theta_i)``, Abel summation gives::

        |(R_m q) . (R_n k)| <= max_i |h_{i+1} - h_i| * sum_{j=1}^{d/2} |S_j|

    This returns the relative bound ``mean_j |S_j|`` (float64, on the host), which
    RoFormer plots to show that it decays, on average, as ``|m - n|`` grows.

    Parameters
    ----------
    distances : array_like of int or float
        Relative distances ``m - n``, any shape.
    dim : int
        Rotated width ``d``: positive and even.
    base : float, default 10000.0
        Base of the frequencies ``theta_i = base ** (-2i / d)``.

    Returns
    -------
    numpy.ndarray
        The bound ``mean_j |S_j|`` in float64, shape of ``distances``; ``(d/2 + 1) / 2``
        at distance 0.

    Examples
    --------
    >>> import numpy as np
    >>> from anyrope.attention import relative_decay_bound
    >>> relative_decay_bound(np.array([0, 100, 1000]), 128).round(2).tolist()
    [32.5, 10.23, 4.47]
    """
    theta = default_inv_freq(dim, base)
    phases = np.asarray(distances, dtype=np.float64)[..., None] * theta
    sin, cos = sincos(phases)
    partial_sums = np.cumsum(cos + 1j * sin, axis=-1)
    bound: np.ndarray[Any, np.dtype[np.float64]] = np.mean(np.abs(partial_sums), axis=-1)
    return bound
