"""The host math of :mod:`anyrope._hostmath`, compiled with numba: the same bits, faster.

Each function here runs the double-double algorithm of its NumPy counterpart element by
element, with the same IEEE-754 operations on the same operands in the same order. numba
leaves floating-point contraction off unless ``fastmath`` is asked for, so no FMA is
formed, and it sets no flush-to-zero mode: every element gets the bits the NumPy code
gives it (``tests/test_hostmath.py`` compares the two over millions of values). One
loop over registers instead of a hundred array passes makes it about six times as fast,
which is what decoding with dynamic NTK past the trained context (frequencies and a
table row for every new length) and large tables spend their time on.

The constants come from :mod:`anyrope._hostmath_constants`, as module globals that numba
compiles in; the callers check the arguments (finite angles below ``2**33``, positive
finite bases).
Compiled code is cached on disk (``cache=True``). This module imports numba:
:mod:`anyrope._hostmath` imports it only when numba is installed and an array is large.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import njit

from ._hostmath_constants import (
    COS_TAIL,
    EXP_TAIL,
    INV_LN2,
    LN2_HI,
    LN2_LO,
    LOG_TAIL,
    MINUS_SIXTH,
    PIO2,
    SIN_TAIL,
    SIXTH,
    SPLITTER,
    SQRT_HALF,
    TWENTY_FOURTH,
    TWO_OVER_PI,
    TWO_THIRDS,
)

_P0, _P1, _P2, _P3 = PIO2


@njit(inline="always")
def _split(a: float) -> tuple[float, float]:
    t = SPLITTER * a
    hi = t - (t - a)
    return hi, a - hi


@njit(inline="always")
def _product_error(a: float, b: float, p: float) -> Any:
    """``a b - p`` exactly for ``p = fl(a b)`` (Dekker, without an FMA)."""
    ah, al = _split(a)
    bh, bl = _split(b)
    return ((ah * bh - p) + ah * bl + al * bh) + al * bl


@njit(inline="always")
def _two_sum(a: float, b: float) -> tuple[float, float]:
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


@njit(inline="always")
def _fast_two_sum(a: float, b: float) -> tuple[float, float]:
    s = a + b
    return s, b - (s - a)


@njit(inline="always")
def _times(hi: float, lo: float, c0: float, c1: float) -> tuple[float, float]:
    """``(hi + lo) (c0 + c1)`` in double-double."""
    p = hi * c0
    return p, _product_error(hi, c0, p) + hi * c1 + lo * c0


@njit(inline="always")
def _horner(z: float, coefficients: Any) -> Any:
    result = coefficients[len(coefficients) - 1] * z + coefficients[len(coefficients) - 2]
    for j in range(len(coefficients) - 3, -1, -1):
        result = result * z + coefficients[j]
    return result


@njit(cache=True)
def sincos(x: Any, sin: Any, cos: Any) -> None:
    """``sin`` and ``cos`` of the 1-d ``x`` (every ``|x| < 2**33``), into ``sin``, ``cos``."""
    for i in range(x.size):
        # x = k pi/2 + (rh + rl), exactly as _hostmath's fast reduction.
        xi = x[i]
        k = np.rint(xi * TWO_OVER_PI)
        h0 = k * _P0
        h1 = k * _P1
        h2 = k * _P2
        a, ea = _two_sum(xi - h0, -_product_error(k, _P0, h0))
        b, eb = _two_sum(a, -h1)
        tail = (ea + eb) - _product_error(k, _P1, h1) - h2 - _product_error(k, _P2, h2) - k * _P3
        rh, rl = _fast_two_sum(b, tail)
        quadrant = np.int64(k) & 3
        z = rh * rh
        ze = _product_error(rh, rh, z)
        cube = rh * z
        cube_lo = _product_error(rh, z, cube)
        t, te = _times(cube, cube_lo + rh * ze, MINUS_SIXTH[0], MINUS_SIXTH[1])
        s, se = _fast_two_sum(rh, t)
        sn = s + (se + te + cube * z * _horner(z, SIN_TAIL) + (rl - rl * z * 0.5))
        w, we = _fast_two_sum(1.0, z * -0.5)
        fourth = z * z
        fourth_lo = _product_error(z, z, fourth)
        q, qe = _times(fourth, fourth_lo + 2.0 * z * ze, TWENTY_FOURTH[0], TWENTY_FOURTH[1])
        w, we2 = _two_sum(w, q)
        cs = w + ((we + we2 - ze * 0.5 + qe) + z * fourth * _horner(z, COS_TAIL) - rl * sn)
        if quadrant & 1:
            sn, cs = cs, sn
        if quadrant >= 2:
            sn = -sn
        if 1 <= quadrant <= 2:
            cs = -cs
        sin[i] = sn
        cos[i] = cs


@njit(cache=True)
def log(x: Any, hi: Any, lo: Any) -> None:
    """``log(x)`` of the 1-d ``x`` (positive, finite) in double-double, into ``hi``, ``lo``."""
    for i in range(x.size):
        m, e = math.frexp(x[i])
        low = m < SQRT_HALF
        if low:
            m = m * 2.0
        exponent = float(e - 1 if low else e)
        numer = m - 1.0
        dh, dl = _two_sum(m, 1.0)
        sh = numer / dh
        p = sh * dh
        sl = (((numer - p) - _product_error(sh, dh, p)) - sh * dl) / dh
        w = sh * sh
        we = _product_error(sh, sh, w)
        cube = w * sh
        cube_lo = _product_error(w, sh, cube)
        t, te = _times(cube, cube_lo + we * sh + 3.0 * w * sl, TWO_THIRDS[0], TWO_THIRDS[1])
        rest = cube * w * _horner(w, LOG_TAIL)
        s, lo1 = _two_sum(exponent * LN2_HI, 2.0 * sh)
        s, lo2 = _two_sum(s, t)
        tail = lo1 + lo2 + 2.0 * sl + te + rest + exponent * LN2_LO
        hi[i], lo[i] = _fast_two_sum(s, tail)


@njit(cache=True)
def power(log_hi: Any, log_lo: Any, numerator: Any, denominator: Any, out: Any) -> None:
    """``exp(log(x) numerator / denominator)`` of 1-d arrays of one size, into ``out``,
    from ``log(x)`` in double-double (:func:`log`); ``numerator`` and ``denominator`` are
    exact integers as float64."""
    for i in range(out.size):
        lh, ll = log_hi[i], log_lo[i]
        # y = log(x) num / den in double-double.
        num, den = numerator[i], denominator[i]
        ph = lh * num
        pl = _product_error(lh, num, ph) + ll * num
        qh = ph / den
        p = qh * den
        ql = (((ph - p) - _product_error(qh, den, p)) + pl) / den
        # exp(qh + ql), rounded once.
        k = np.rint(qh * INV_LN2)
        rh, rl = _two_sum(qh - k * LN2_HI, ql - k * LN2_LO)
        z = rh * rh
        ze = _product_error(rh, rh, z)
        half, half_lo = z * 0.5, (ze + 2.0 * rh * rl) * 0.5
        cube = rh * z
        cube_lo = _product_error(rh, z, cube)
        sixth_hi, sixth_lo = _times(cube, cube_lo + rh * ze, SIXTH[0], SIXTH[1])
        s, e1 = _fast_two_sum(1.0, rh)
        s, e2 = _two_sum(s, half)
        s, e3 = _two_sum(s, sixth_hi)
        tail = cube * rh * _horner(rh, EXP_TAIL)
        lo = e1 + e2 + e3 + half_lo + sixth_lo + rl + tail
        # Beyond +-2200 the result is inf or 0 either way; ldexp takes a C int.
        out[i] = math.ldexp(s + lo, int(min(max(k, -2200.0), 2200.0)))
