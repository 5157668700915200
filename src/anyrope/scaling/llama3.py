"""Llama 3.1 frequency scaling: piecewise by wavelength (Meta, 2024).

With ``wavelen_i = 2 pi / inv_freq_i`` and the original context ``L0``:
pairs with ``wavelen > L0 / low_freq_factor`` (fewer than ``low`` turns over ``L0``)
are interpolated (``inv_freq / factor``); pairs with ``wavelen < L0 / high_freq_factor``
keep their frequency; in between,
``s = (L0 / wavelen - low) / (high - low)`` and
``inv_freq' = (1 - s) * inv_freq / factor + s * inv_freq``. Attention factor 1.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from . import default
from ._checks import Factor
from ._types import FloatArray, Frequencies
from .config import RopeScaling, register

__all__ = ["Llama3", "inv_freq"]


def inv_freq(
    rotary_dim: int,
    base: float,
    *,
    factor: float,
    low_freq_factor: float,
    high_freq_factor: float,
    original_max_position_embeddings: int,
) -> FloatArray:
    """Return Llama 3.1's scaled inverse frequencies (float64).

    Parameters
    ----------
    rotary_dim : int
        The rotated width ``d``: positive and even.
    base : float
        The unscaled RoPE base (``rope_theta``): finite and > 1.
    factor : float
        The interpolation factor (>= 1) that divides the low frequencies.
    low_freq_factor : float
        Pairs with a wavelength above ``L0 / low_freq_factor`` (fewer than
        ``low_freq_factor`` turns over ``L0``) are divided by ``factor``; greater than 0.
    high_freq_factor : float
        Pairs with a wavelength below ``L0 / high_freq_factor`` keep their frequency;
        greater than ``low_freq_factor``.
    original_max_position_embeddings : int
        ``L0``, the context length before the extension.

    Returns
    -------
    numpy.ndarray
        The float64 inverse frequencies, shape ``(rotary_dim // 2,)``.

    Examples
    --------
    >>> from anyrope.scaling import llama3
    >>> freq = llama3.inv_freq(
    ...     128, 500000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
    ...     original_max_position_embeddings=8192)
    >>> base = llama3.default.inv_freq(128, 500000.0)
    >>> bool(freq[0] == base[0]), bool(freq[-1] == base[-1] / 8.0)
    (True, True)
    """
    unscaled = default.inv_freq(rotary_dim, base)
    original = original_max_position_embeddings
    wavelen = 2.0 * math.pi / unscaled
    smooth = (original / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1.0 - smooth) * unscaled / factor + smooth * unscaled
    low_frequency = wavelen > original / low_freq_factor
    high_frequency = wavelen < original / high_freq_factor
    result: FloatArray = np.where(
        low_frequency, unscaled / factor, np.where(high_frequency, unscaled, smoothed)
    )
    return result


@register
@dataclasses.dataclass(frozen=True, kw_only=True, repr=False)
class Llama3(RopeScaling):
    """``rope_type="llama3"``: Llama 3.1's frequencies, piecewise by wavelength."""

    rope_type = "llama3"
    factor: Factor
    low_freq_factor: float
    high_freq_factor: float
    original_max_position_embeddings: int | None = None

    def _validate(self) -> None:
        if self.low_freq_factor <= 0.0 or self.high_freq_factor <= self.low_freq_factor:
            raise ValueError(
                "`high_freq_factor` must be greater than `low_freq_factor` > 0; got "
                f"low_freq_factor={self.low_freq_factor!r}, "
                f"high_freq_factor={self.high_freq_factor!r}"
            )

    def _frequencies(self, rotary_dim: int, base: float, seq_len: int | None) -> Frequencies:
        keys = self._keys(
            "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"
        )
        return inv_freq(rotary_dim, base, **keys), 1.0
