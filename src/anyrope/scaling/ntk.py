"""Static NTK-aware scaling (bloc97): raise the base instead of squeezing positions.

``base' = base * factor ** (d / (d - 2))``, then the default frequencies with ``base'``.
The highest frequency (``i = 0``) is unchanged and the lowest is divided by exactly
``factor``, so short-range detail survives while the longest wavelength stretches.
"""

from __future__ import annotations

from .._hostmath import power
from . import default
from ._types import FloatArray

__all__ = ["inv_freq", "scaled_base"]


def scaled_base(rotary_dim: int, base: float, *, factor: float) -> float:
    """Return ``base * factor ** (d / (d - 2))``, the exponent an exact fraction.

    Examples
    --------
    >>> from anyrope.scaling import ntk
    >>> ntk.scaled_base(4, 100.0, factor=4.0)
    1600.0
    """
    return float(base * power(factor, rotary_dim, rotary_dim - 2))


def inv_freq(rotary_dim: int, base: float, *, factor: float) -> FloatArray:
    """Return the default frequencies for :func:`scaled_base`.

    Examples
    --------
    >>> from anyrope.scaling import ntk
    >>> ntk.inv_freq(4, 100.0, factor=4.0).tolist()
    [1.0, 0.025]
    """
    return default.inv_freq(rotary_dim, scaled_base(rotary_dim, base, factor=factor))
