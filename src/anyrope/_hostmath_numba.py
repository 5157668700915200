"""The host math of :mod:`anyrope._hostmath`, compiled with numba: the same bits, faster.

numba compiles the algorithms of :mod:`anyrope._hostmath_algorithms` themselves (registered here as
functions it may call and inline), so each element goes through the same IEEE-754
operations on the same operands in the same order as in the NumPy code. numba leaves
floating-point contraction off unless ``fastmath`` is asked for, so no FMA is formed,
and it sets no flush-to-zero mode: every element gets the bits the NumPy code gives it
(``tests/test_hostmath.py`` compares the two over millions of values). One loop over
registers instead of a hundred array passes makes it about six times as fast, which is
what decoding with dynamic NTK past the trained context (frequencies and a table row for
every new length) and large tables spend their time on.

The callers check the arguments (finite angles below ``2**33``, positive finite bases).
Compiled code is cached on disk (``cache=True``); numba checks only this file for
changes, so a change to :mod:`anyrope._hostmath_algorithms` needs its cache
cleared (``__pycache__``). This module imports numba: :mod:`anyrope._hostmath` imports it
only when numba is installed and an array is large.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import njit
from numba.extending import register_jitable

from . import _hostmath_algorithms as algorithms

# Inlined by numba: the kernels keep their values in registers only when the algorithms
# are part of them. (numba's inliner cannot take a loop inlined twice into one function.)
for _name in algorithms.__all__:
    register_jitable(inline="always")(getattr(algorithms, _name))


@njit(cache=True)
def sincos(x: Any, sin: Any, cos: Any) -> None:
    """``sin`` and ``cos`` of the 1-d ``x`` (every ``|x| < 2**33``), into ``sin``, ``cos``."""
    for i in range(x.size):
        k, rh, rl = algorithms.reduce(x[i])
        s, c = algorithms.sincos_reduced(rh, rl)
        quadrant = np.int64(k) & 3
        if quadrant & 1:
            s, c = c, s
        if quadrant >= 2:
            s = -s
        if 1 <= quadrant <= 2:
            c = -c
        sin[i], cos[i] = s, c


@njit(cache=True)
def log(x: Any, hi: Any, lo: Any) -> None:
    """``log(x)`` of the 1-d ``x`` (positive, finite) in double-double, into ``hi``, ``lo``."""
    for i in range(x.size):
        m, e = math.frexp(x[i])
        hi[i], lo[i] = algorithms.log_reduced(m, e)


@njit(cache=True)
def power(log_hi: Any, log_lo: Any, numerator: Any, denominator: Any, out: Any) -> None:
    """``exp(log(x) numerator / denominator)`` of 1-d arrays of one size, into ``out``,
    from ``log(x)`` in double-double (:func:`log`); ``numerator`` and ``denominator`` are
    exact integers as float64."""
    for i in range(out.size):
        s, k = algorithms.power_scaled(log_hi[i], log_lo[i], numerator[i], denominator[i])
        # Beyond +-2200 the result is inf or 0 either way; ldexp takes a C int.
        out[i] = math.ldexp(s, int(min(max(k, -2200.0), 2200.0)))
