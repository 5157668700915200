"""Llama 3.1 frequency scaling: piecewise by wavelength (Meta, 2024).

With ``wavelen_i = 2 pi / inv_freq_i`` and the original context ``L0``:
pairs with ``wavelen > L0 / low_freq_factor`` (fewer than ``low`` turns over ``L0``)
are interpolated (``inv_freq / factor``); pairs with ``wavelen < L0 / high_freq_factor``
keep their frequency; in between,
``s = (L0 / wavelen - low) / (high - low)`` and
``inv_freq' = (1 - s) * inv_freq / factor + s * inv_freq``. Attention factor 1.
"""

from __future__ import annotations

import math

import numpy as np

from . import default
from ._types import FloatArray

__all__ = ["inv_freq"]


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
