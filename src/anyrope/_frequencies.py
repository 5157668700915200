"""Base rotation frequencies, computed on the host in float64 (numerical-contract.rst, "How every
path computes" 1, Frequencies).

``theta_i`` is within one ulp of the exact ``base ** (-2i/r)`` (almost always the correctly
rounded float64) and the same bits on every machine: see :mod:`anyrope._hostmath`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._hostmath import power
from ._validation import check_base, check_even


def default_inv_freq(rotary_dim: int, base: float) -> np.ndarray[Any, np.dtype[np.float64]]:
    """Return ``theta_i = base ** (-(2 * i) / rotary_dim)`` for ``i = 0 .. rotary_dim/2 - 1``.

    Parameters
    ----------
    rotary_dim : int
        The rotated width ``r``: positive and even.
    base : float
        The base of the geometric progression (``rope_theta``): finite and > 1.

    Returns
    -------
    numpy.ndarray
        float64 array of shape ``(rotary_dim // 2,)``, decreasing from 1.

    Examples
    --------
    >>> from anyrope._frequencies import default_inv_freq
    >>> default_inv_freq(4, 10000.0).tolist()
    [1.0, 0.01]
    """
    check_even(rotary_dim, "rotary_dim")
    check_base(base)
    # The exponent -2i/r stays an exact fraction: rounding it to float64 first would move
    # theta by up to 8 ulp at base 1e7.
    return power(float(base), -np.arange(0, rotary_dim, 2), rotary_dim)
