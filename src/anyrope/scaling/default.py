"""Unscaled RoPE: ``inv_freq_i = base ** (-2i/d)`` and attention factor 1 (RoFormer)."""

from __future__ import annotations

from .._frequencies import default_inv_freq
from ._types import FloatArray, Frequencies
from .config import RopeScaling, register

__all__ = ["ATTENTION_FACTOR", "Default", "inv_freq"]

ATTENTION_FACTOR = 1.0


def inv_freq(rotary_dim: int, base: float) -> FloatArray:
    """Return the unscaled inverse frequencies, float64 of shape ``(rotary_dim // 2,)``.

    Parameters
    ----------
    rotary_dim : int
        The rotated width ``d``: positive and even.
    base : float
        The base of the frequencies ``base ** (-2i/d)`` (``rope_theta``): finite and > 1.

    Returns
    -------
    numpy.ndarray
        The float64 inverse frequencies ``base ** (-2i/d)`` for ``i = 0 .. d/2 - 1``,
        decreasing from 1.

    Examples
    --------
    >>> from anyrope.scaling import default
    >>> default.inv_freq(4, 10000.0).tolist()
    [1.0, 0.01]
    """
    return default_inv_freq(rotary_dim, base)


@register
class Default(RopeScaling):
    """``rope_type="default"``: no scaling."""

    rope_type = "default"

    def _frequencies(self, rotary_dim: int, base: float, seq_len: int | None) -> Frequencies:
        return inv_freq(rotary_dim, base), ATTENTION_FACTOR
