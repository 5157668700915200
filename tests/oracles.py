"""Float64 oracles written independently of anyrope's implementation (seeds, RoFormer).

- :func:`dense_rotation`: the block-diagonal rotation matrix ``R_m`` applied as a matmul.
- :func:`complex_rotation`: Meta Llama's form, pairs viewed as complex numbers times
  ``exp(i m theta)``.
- :func:`axial_rotation`: the complex form on a grid of ``n`` axes, each axis's pairs
  with the frequencies of a RoPE as wide as its section (positions ``(..., seq, n)``).
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
    theta = frequencies(rotary_dim, base)
    angles = np.asarray(positions, dtype=np.float64)[..., None] * theta
    return _turn_pairs(x, angles, rotary_dim=rotary_dim, interleaved=interleaved)


def axial_rotation(x, positions, *, sections, base=10000.0, interleaved=False):
    """Axial RoPE on ``len(sections)`` axes, positions ``(..., seq, n)``: the pairs of
    axis ``a`` (``sections[a]`` of them, in axis order) turn by coordinate ``a`` times the
    frequencies of a RoPE ``2 * sections[a]`` wide."""
    theta = np.concatenate([frequencies(2 * pairs, base) for pairs in sections])
    axis_of_pair = np.repeat(np.arange(len(sections)), sections)
    angles = np.asarray(positions, dtype=np.float64)[..., axis_of_pair] * theta
    return _turn_pairs(x, angles, rotary_dim=2 * sum(sections), interleaved=interleaved)


def _turn_pairs(x, angles, *, rotary_dim, interleaved):
    """Pairs as complex numbers times ``exp(i angle)``; ``angles`` is ``(..., seq, r/2)``."""
    x = np.asarray(x, dtype=np.float64)
    first, second = pair_index(rotary_dim, interleaved)
    z = x[..., first] + 1j * x[..., second]
    rotated = z * np.exp(1j * angles)[..., None, :]
    y = x.copy()
    y[..., first] = rotated.real
    y[..., second] = rotated.imag
    return y
