"""Linear position interpolation (Chen et al. 2023, kaiokendev): ``inv_freq / factor``.

Dividing every frequency by ``factor`` is the same as dividing every position by it:
a model trained on ``L`` positions sees ``factor * L`` positions squeezed into its range.
"""

from __future__ import annotations

from . import default
from ._types import FloatArray

__all__ = ["inv_freq"]


def inv_freq(rotary_dim: int, base: float, *, factor: float) -> FloatArray:
    """Return ``base ** (-2i/d) / factor``.

    Examples
    --------
    >>> from anyrope.scaling import linear
    >>> linear.inv_freq(4, 10000.0, factor=4.0).tolist()
    [0.25, 0.0025]
    """
    return default.inv_freq(rotary_dim, base) / factor
