"""The host math of :mod:`anyrope._hostmath`, compiled with numba: the same bits, faster.

numba compiles the algorithms of :mod:`anyrope._hostmath_algorithms` themselves (each
function of that module registered here as one it may call and inline), so each element
goes through the same IEEE-754 operations on the same operands in the same order as in
the NumPy code. numba leaves floating-point contraction off unless ``fastmath`` is asked
for, so no FMA is formed, and it sets no flush-to-zero mode: every element gets the bits
the NumPy code gives it (``tests/test_hostmath.py`` compares the two over millions of
values). One loop over registers instead of a hundred array passes makes it about six
times as fast, which is what decoding with dynamic NTK past the trained context
(frequencies and a table row for every new length) and large tables spend their time on.

The callers check the arguments (finite angles below ``2**33``, positive finite bases).
Compiled code is cached on disk (``cache=True``); numba checks only this file for
changes, so a change to :mod:`anyrope._hostmath_algorithms` needs its cache
cleared (``__pycache__``). This module imports numba: :mod:`anyrope._hostmath` imports it
only when numba is installed and an array is large.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
from numba import njit
from numba.extending import register_jitable

from . import _hostmath_algorithms as algorithms

# Inlined by numba: the kernels keep their values in registers only when the algorithms
# are part of them. (numba's inliner cannot take a loop inlined twice into one function.)
for _function in vars(algorithms).values():
    if inspect.isfunction(_function) and _function.__module__ == algorithms.__name__:
        register_jitable(inline="always")(_function)


@njit(cache=True)
def sincos(x: Any, sin: Any, cos: Any) -> None:
    """``sin`` and ``cos`` of the 1-d ``x`` (every ``|x| < 2**33``), into ``sin``, ``cos``."""
    for i in range(x.size):
        k, rh, rl = algorithms.reduce(x[i])
        # The quadrant taken before the series: k then needs no register through it
        # (7% faster: the speed of the hand-written kernel before the shared algorithms).
        quadrant = np.int64(k) & 3
        s, c = algorithms.sincos_reduced(rh, rl)
        if quadrant & 1:
            s, c = c, s
        if quadrant >= 2:
            s = -s
        if 1 <= quadrant <= 2:
            c = -c
        sin[i], cos[i] = s, c


@njit(cache=True)
def log(m: Any, e: Any, hi: Any, lo: Any) -> None:
    """``log(m 2**e)`` of the 1-d ``m`` and ``e`` (``frexp``'s of positive finite values) in
    double-double, into ``hi``, ``lo``."""
    for i in range(m.size):
        hi[i], lo[i] = algorithms.log_reduced(m[i], e[i])


@njit(cache=True)
def power(  # noqa: PLR0917 - the kernel's operands
    log_hi: Any, log_lo: Any, numerator: Any, denominator: Any, s: Any, k: Any
) -> None:
    """``exp(log(x) numerator / denominator) = s 2**k`` of 1-d arrays of one size, into
    ``s`` and ``k``, from ``log(x)`` in double-double (:func:`log`); ``numerator`` and
    ``denominator`` are exact integers as float64."""
    for i in range(s.size):
        s[i], k[i] = algorithms.power_scaled(log_hi[i], log_lo[i], numerator[i], denominator[i])
