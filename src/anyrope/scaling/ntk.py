"""Static NTK-aware scaling (bloc97): raise the base instead of squeezing positions.

``base' = base * factor ** (d / (d - 2))``, then the default frequencies with ``base'``.
The highest frequency (``i = 0``) is unchanged and the lowest is divided by exactly
``factor``, so short-range detail survives while the longest wavelength stretches.
"""

from __future__ import annotations

import dataclasses

from .._hostmath import power
from . import default
from ._checks import Factor
from ._types import FloatArray, Frequencies
from .config import RopeScaling, register

__all__ = ["NTK", "inv_freq", "scaled_base"]


def scaled_base(rotary_dim: int, base: float, *, factor: float) -> float:
    """Return ``base * factor ** (d / (d - 2))``, the exponent an exact fraction.

    Parameters
    ----------
    rotary_dim : int
        The rotated width ``d``: even and greater than 2.
    base : float
        The unscaled RoPE base (``rope_theta``): finite and > 1.
    factor : float
        The scaling dict's ``factor`` (>= 1): the lowest frequency is divided by it.

    Returns
    -------
    float
        The raised base ``base'``.

    Examples
    --------
    >>> from anyrope.scaling import ntk
    >>> ntk.scaled_base(4, 100.0, factor=4.0)
    1600.0
    """
    return float(base * power(factor, rotary_dim, rotary_dim - 2))


def inv_freq(rotary_dim: int, base: float, *, factor: float) -> FloatArray:
    """Return the default frequencies for :func:`scaled_base`.

    Parameters
    ----------
    rotary_dim : int
        The rotated width ``d``: even and greater than 2.
    base : float
        The unscaled RoPE base (``rope_theta``): finite and > 1.
    factor : float
        The scaling dict's ``factor`` (>= 1): the lowest frequency is divided by it.

    Returns
    -------
    numpy.ndarray
        The float64 inverse frequencies, shape ``(rotary_dim // 2,)``.

    Examples
    --------
    >>> from anyrope.scaling import ntk
    >>> ntk.inv_freq(4, 100.0, factor=4.0).tolist()
    [1.0, 0.025]
    """
    return default.inv_freq(rotary_dim, scaled_base(rotary_dim, base, factor=factor))


@register
@dataclasses.dataclass(frozen=True, kw_only=True, repr=False)
class NTK(RopeScaling):
    """``rope_type="ntk"``: the base raised once, by ``factor``."""

    rope_type = "ntk"
    factor: Factor

    def _check_rotary_dim(self, rotary_dim: int) -> None:
        # The exponent d / (d - 2) has no value for a single pair.
        if rotary_dim <= 2:
            raise ValueError(f"rope_type={self.rope_type!r} needs rotary_dim > 2; got {rotary_dim}")

    def _frequencies(self, rotary_dim: int, base: float, seq_len: int | None) -> Frequencies:
        return inv_freq(rotary_dim, base, factor=self.factor), 1.0
