"""Linear position interpolation (Chen et al. 2023, kaiokendev): ``inv_freq / factor``.

Dividing every frequency by ``factor`` is the same as dividing every position by it:
a model trained on ``L`` positions sees ``factor * L`` positions squeezed into its range.
"""

from __future__ import annotations

from . import default
from ._registry import Method, ScalingFields, register
from ._types import FloatArray

__all__ = ["inv_freq"]


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


def _frequencies(
    scaling: ScalingFields, rotary_dim: int, base: float, seq_len: int | None
) -> tuple[FloatArray, float]:
    assert scaling.factor is not None
    return inv_freq(rotary_dim, base, factor=scaling.factor), 1.0


register(Method("linear", _frequencies, keys=frozenset({"factor"}), required=("factor",)))
