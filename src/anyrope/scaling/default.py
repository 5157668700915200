"""Unscaled RoPE: ``inv_freq_i = base ** (-2i/d)`` and attention factor 1 (RoFormer)."""

from __future__ import annotations

from .._frequencies import default_inv_freq
from ._types import FloatArray

__all__ = ["ATTENTION_FACTOR", "inv_freq"]

ATTENTION_FACTOR = 1.0


def inv_freq(rotary_dim: int, base: float) -> FloatArray:
    """Return the unscaled inverse frequencies, float64 of shape ``(rotary_dim // 2,)``.

    Examples
    --------
    >>> from anyrope.scaling import default
    >>> default.inv_freq(4, 10000.0).tolist()
    [1.0, 0.01]
    """
    return default_inv_freq(rotary_dim, base)
