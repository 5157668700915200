"""Float64 oracles written independently of anyrope's implementation (seeds, RoFormer).

- :func:`dense_rotation`: the block-diagonal rotation matrix ``R_m`` applied as a matmul.
- :func:`complex_rotation`: Meta Llama's form, pairs viewed as complex numbers times
  ``exp(i m theta)``.
Both take ``x`` of shape ``(..., seq, heads, d)`` (bshd) and positions of shape
``(..., seq)``.
"""

from __future__ import annotations

import mpmath
import numpy as np


def frequencies(rotary_dim: int, base: float) -> np.ndarray:
    """``base ** (-2i / rotary_dim)`` correctly rounded (mpmath at 200 bits)."""
    with mpmath.workprec(200):
        pairs = range(rotary_dim // 2)
        return np.array([float(mpmath.power(base, mpmath.mpf(-2 * i) / rotary_dim)) for i in pairs])


def pair_index(rotary_dim: int, interleaved: bool) -> tuple[np.ndarray, np.ndarray]:
    """Feature indices of the first and second element of each pair."""
    i = np.arange(rotary_dim // 2)
    if interleaved:
        return 2 * i, 2 * i + 1
    return i, i + rotary_dim // 2


def dense_rotation(x, positions, *, rotary_dim, base=10000.0, interleaved=False):
    x = np.asarray(x, dtype=np.float64)
    d = x.shape[-1]
    theta = frequencies(rotary_dim, base)
    first, second = pair_index(rotary_dim, interleaved)
    angles = np.asarray(positions, dtype=np.float64)[..., None] * theta  # (..., seq, r/2)
    matrices = np.zeros((*angles.shape[:-1], d, d))
    matrices[..., np.arange(d), np.arange(d)] = 1.0
    c, s = np.cos(angles), np.sin(angles)
    matrices[..., first, first] = c
    matrices[..., first, second] = -s
    matrices[..., second, first] = s
    matrices[..., second, second] = c
    # (..., seq, d, d) applied to every head: y[..., s, h, :] = R[..., s] @ x[..., s, h, :]
    return np.einsum("...ij,...hj->...hi", matrices, x)


def complex_rotation(x, positions, *, rotary_dim, base=10000.0, interleaved=False):
    x = np.asarray(x, dtype=np.float64)
    theta = frequencies(rotary_dim, base)
    first, second = pair_index(rotary_dim, interleaved)
    z = x[..., first] + 1j * x[..., second]
    angles = np.asarray(positions, dtype=np.float64)[..., None] * theta
    rotated = z * np.exp(1j * angles)[..., None, :]
    y = x.copy()
    y[..., first] = rotated.real
    y[..., second] = rotated.imag
    return y
