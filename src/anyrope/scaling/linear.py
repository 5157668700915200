"""Linear position interpolation (Chen et al. 2023, kaiokendev): ``inv_freq / factor``.

Dividing every frequency by ``factor`` is the same as dividing every position by it:
a model trained on ``L`` positions sees ``factor * L`` positions squeezed into its range.
"""

from __future__ import annotations

import dataclasses

from . import default
from ._checks import Factor
from ._types import FloatArray, Frequencies
from .config import RopeScaling, register

__all__ = ["Linear", "inv_freq"]


def inv_freq(rotary_dim: int, base: float, *, factor: float) -> FloatArray:
    """Return ``base ** (-2i/d) / factor``.

    Parameters
    ----------
    rotary_dim : int
        The rotated width ``d``: positive and even.
    base : float
        The unscaled RoPE base (``rope_theta``): finite and > 1.
    factor : float
        The interpolation factor (>= 1) that divides every frequency.

    Returns
    -------
    numpy.ndarray
        The float64 inverse frequencies, shape ``(rotary_dim // 2,)``.

    Examples
    --------
    >>> from anyrope.scaling import linear
    >>> linear.inv_freq(4, 10000.0, factor=4.0).tolist()
    [0.25, 0.0025]
    """
    return default.inv_freq(rotary_dim, base) / factor


@register
@dataclasses.dataclass(frozen=True, kw_only=True, repr=False)
class Linear(RopeScaling):
    """``rope_type="linear"``: every frequency divided by ``factor``."""

    rope_type = "linear"
    factor: Factor

    def _frequencies(self, rotary_dim: int, base: float, seq_len: int | None) -> Frequencies:
        return inv_freq(rotary_dim, base, factor=self.factor), 1.0
