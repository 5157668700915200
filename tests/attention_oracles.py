"""float64 NumPy oracles for the attention tests, written from the formulas, not from anyrope.

Layout ``bshd`` throughout: ``(*batch, seq, heads, dim)``.
"""

from __future__ import annotations

import numpy as np

from oracles import complex_rotation

EPS = {"float16": 2.0**-10, "bfloat16": 2.0**-7, "float32": 2.0**-23, "float64": 2.0**-52}


def rotate_complex(x: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Half-split RoPE of every feature, base 10000, as complex multiplication."""
    return complex_rotation(x, positions, rotary_dim=x.shape[-1])


def expand_heads(k: np.ndarray, q_heads: int) -> np.ndarray:
    """Repeat each key/value head for its group of query heads."""
    return np.repeat(k, q_heads // k.shape[-2], axis=-2)


def causal_allowed(q_seq: int, k_seq: int) -> np.ndarray:
    return np.arange(k_seq)[None, :] <= np.arange(k_seq - q_seq, k_seq)[:, None]


def softmax_attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    causal: bool = False,
    allowed: np.ndarray | None = None,
    scale: float | None = None,
) -> np.ndarray:
    """``softmax(q k^T * scale) v`` per head; ``allowed`` broadcasts to (*b, h, q_seq, k_seq)."""
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    k, v = expand_heads(k, q.shape[-2]), expand_heads(v, q.shape[-2])
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    scores = np.einsum("...mhd,...nhd->...hmn", q, k) * scale
    keep = np.ones(scores.shape, dtype=bool)
    if causal:
        keep &= causal_allowed(q.shape[-3], k.shape[-3])
    if allowed is not None:
        keep &= allowed
    scores = np.where(keep, scores, -np.inf)
    top = np.max(scores, axis=-1, keepdims=True)
    weights = np.where(keep, np.exp(scores - np.where(np.isfinite(top), top, 0.0)), 0.0)
    total = weights.sum(axis=-1, keepdims=True)
    weights = weights / np.where(total > 0, total, 1.0)
    return np.einsum("...hmn,...nhd->...mhd", weights, v)


def elu_plus_one(x: np.ndarray) -> np.ndarray:
    return np.where(x > 0, x + 1.0, np.exp(np.minimum(x, 0.0)))


def linear_attention_explicit(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    q_positions: np.ndarray | None,
    k_positions: np.ndarray | None,
    causal: bool = False,
) -> np.ndarray:
    """RoFormer eq. 19 summed explicitly over all pairs (m, n): O(seq**2)."""
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    fq, fk = elu_plus_one(q), elu_plus_one(k)
    rq = fq if q_positions is None else rotate_complex(fq, q_positions)
    rk = fk if k_positions is None else rotate_complex(fk, k_positions)
    rk, fk, v = (expand_heads(a, q.shape[-2]) for a in (rk, fk, v))
    numerator_weights = np.einsum("...mhd,...nhd->...hmn", rq, rk)
    denominator_weights = np.einsum("...mhd,...nhd->...hmn", fq, fk)
    if causal:
        keep = causal_allowed(q.shape[-3], k.shape[-3])
        numerator_weights = np.where(keep, numerator_weights, 0.0)
        denominator_weights = np.where(keep, denominator_weights, 0.0)
    numerator = np.einsum("...hmn,...nhd->...mhd", numerator_weights, v)
    denominator = np.einsum("...hmn->...mh", denominator_weights)[..., None]
    return numerator / denominator
