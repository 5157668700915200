"""The double-double algorithms of the host math (:mod:`anyrope._hostmath`), written once
for NumPy and numba.

Only ``+``, ``-``, ``*``, ``/`` and ``rint``, on operands that may be float64 scalars or
arrays: each operation is one IEEE-754 rounding in NumPy (one ufunc call) and in numba
(which forms no FMA without ``fastmath``). :mod:`anyrope._hostmath` runs them on blocks
of NumPy arrays; :mod:`anyrope._hostmath_numba` compiles every function of this module
as it is, so they keep to what numba types: floats, tuples of floats and
the constants of :mod:`anyrope._hostmath_constants`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _hostmath_constants as constants

_P0, _P1, _P2, _P3 = constants.PIO2


def split(a: Any) -> tuple[Any, Any]:
    """``a = hi + lo`` with each half holding at most 26 significant bits (Veltkamp)."""
    t = constants.SPLITTER * a
    hi = t - (t - a)
    return hi, a - hi


def product_error(ah: Any, al: Any, bh: Any, bl: Any, p: Any) -> Any:
    """``a b - p`` exactly for ``p = fl(a b)``, from the halves of ``a`` and ``b``
    (Dekker, without an FMA)."""
    return ((ah * bh - p) + ah * bl + al * bh) + al * bl


def two_sum(a: Any, b: Any) -> tuple[Any, Any]:
    """``a + b = s + e`` exactly (Knuth)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def fast_two_sum(a: Any, b: Any) -> tuple[Any, Any]:
    """``a + b = s + e`` exactly when the exponent of ``a`` is at least that of ``b``
    (Dekker): then ``e`` is the value :func:`two_sum` gives."""
    s = a + b
    return s, b - (s - a)


def times(hi: Any, lo: Any, constant: tuple[float, ...]) -> tuple[Any, Any]:
    """``(hi + lo) (c0 + c1)`` in double-double: ``p = fl(hi c0)``,
    ``e = (hi c0 - p) + hi c1 + lo c0``."""
    c0, c1 = constant
    hi_hi, hi_lo = split(hi)
    c0_hi, c0_lo = split(c0)
    p = hi * c0
    return p, product_error(hi_hi, hi_lo, c0_hi, c0_lo, p) + hi * c1 + lo * c0


def square_and_cube(r: Any) -> tuple[Any, Any, Any, Any, Any, Any]:
    """``r**2 = z + ze`` exactly, the halves of ``z``, and ``r**3`` in double-double:
    ``(z, ze, z_hi, z_lo, cube, cube_lo)``."""
    r_hi, r_lo = split(r)
    z = r * r
    ze = product_error(r_hi, r_lo, r_hi, r_lo, z)
    z_hi, z_lo = split(z)
    cube = r * z
    return z, ze, z_hi, z_lo, cube, product_error(r_hi, r_lo, z_hi, z_lo, cube) + r * ze


def horner(z: Any, coefficients: tuple[float, ...]) -> Any:
    """``c0 + z (c1 + z (c2 + ...))``."""
    result = coefficients[-1]
    for c in coefficients[-2::-1]:
        result = result * z + c
    return result


_P0_HI, _P0_LO = split(_P0)
_P1_HI, _P1_LO = split(_P1)
_P2_HI, _P2_LO = split(_P2)


def reduce(x: Any) -> tuple[Any, Any, Any]:
    """``x = k pi/2 + (rh + rl)`` with ``|rh + rl| <= pi/4`` (a hair more): ``(k, rh, rl)``.

    For ``|x| < 2**33`` the products ``k * P_j`` of ``pi/2 = P0 + P1 + P2 + P3`` are
    split exactly (``k`` has at most 33 bits), ``x - k P0`` is exact (Sterbenz), and the
    remaining terms, all below ``2**-20``, are summed with rounding errors below
    ``2**-120``: far below the smallest ``|r|`` a float64 can reach (about ``2**-61``).
    Larger ``x`` are reduced one by one with integers (:func:`_reduce_exact`).
    """
    k = np.rint(x * constants.TWO_OVER_PI)
    k_hi, k_lo = split(k)
    h0, h1, h2 = k * _P0, k * _P1, k * _P2
    a, ea = two_sum(x - h0, -product_error(k_hi, k_lo, _P0_HI, _P0_LO, h0))
    b, eb = two_sum(a, -h1)
    l1 = product_error(k_hi, k_lo, _P1_HI, _P1_LO, h1)
    l2 = product_error(k_hi, k_lo, _P2_HI, _P2_LO, h2)
    rh, rl = fast_two_sum(b, (ea + eb) - l1 - h2 - l2 - k * _P3)
    return k, rh, rl


def sincos_reduced(rh: Any, rl: Any) -> tuple[Any, Any]:
    """``sin`` and ``cos`` of ``rh + rl``, ``|rh + rl| <= pi/4``."""
    z, ze, z_hi, z_lo, cube, cube_lo = square_and_cube(rh)
    # sin(r) = rh - rh**3/6 + rh**5 S(rh**2) + rl cos(r): the first two terms in
    # double-double.
    t, te = times(cube, cube_lo, constants.MINUS_SIXTH)
    s, se = fast_two_sum(rh, t)
    # The tails S and C in one Horner loop (numba inlines one loop per function here).
    sin_tail, cos_tail = constants.SIN_TAIL[-1], constants.COS_TAIL[-1]
    for j in range(len(constants.SIN_TAIL) - 2, -1, -1):
        sin_tail = sin_tail * z + constants.SIN_TAIL[j]
        cos_tail = cos_tail * z + constants.COS_TAIL[j]
    sin = s + (se + te + cube * z * sin_tail + (rl - rl * z * 0.5))
    # cos(r) = 1 - rh**2/2 + rh**4/24 + rh**6 C(rh**2) - rl sin(r): the first three terms
    # in double-double; |w| > 0.69 > 0.02 > |q|, so w + q is a fast two-sum.
    w, we = fast_two_sum(1.0, z * -0.5)
    fourth = z * z
    fourth_lo = product_error(z_hi, z_lo, z_hi, z_lo, fourth) + z * 2.0 * ze
    q, qe = times(fourth, fourth_lo, constants.TWENTY_FOURTH)
    w, we2 = fast_two_sum(w, q)
    cos = w + ((we + we2 - ze * 0.5 + qe) + z * fourth * cos_tail - rl * sin)
    return sin, cos


def log_reduced(m: Any, e: Any) -> tuple[Any, Any]:
    """``log(m 2**e) = hi + lo`` to about ``2**-63``, for ``m`` in ``[0.5, 1)`` (frexp's)."""
    low = m < constants.SQRT_HALF
    m = m * (1.0 + low)  # doubled below sqrt(1/2): |s| <= 0.172
    exponent = e - low
    # s = (m - 1) / (m + 1) in double-double; m - 1 is exact (Sterbenz), and the sum is a
    # fast two-sum: the exponent of 1 is at least that of m < 1.5.
    numerator = m - 1.0
    dh, dl = fast_two_sum(1.0, m)
    sh = numerator / dh
    sh_hi, sh_lo = split(sh)
    dh_hi, dh_lo = split(dh)
    p = sh * dh
    sl = (((numerator - p) - product_error(sh_hi, sh_lo, dh_hi, dh_lo, p)) - sh * dl) / dh
    # 2 s**3 / 3 in double-double, with the sl part of (sh + sl)**3 = sh**3 + 3 sh**2 sl;
    # the rest is below 2**-12 of log(m).
    w = sh * sh
    we = product_error(sh_hi, sh_lo, sh_hi, sh_lo, w)
    w_hi, w_lo = split(w)
    cube = w * sh
    cube_lo = product_error(w_hi, w_lo, sh_hi, sh_lo, cube) + we * sh + w * 3.0 * sl
    t, te = times(cube, cube_lo, constants.TWO_THIRDS)
    rest = cube * w * horner(w, constants.LOG_TAIL)
    hi, lo1 = two_sum(exponent * constants.LN2_HI, sh * 2.0)
    hi, lo2 = two_sum(hi, t)
    return fast_two_sum(hi, lo1 + lo2 + sl * 2.0 + te + rest + exponent * constants.LN2_LO)


def power_scaled(lh: Any, ll: Any, num: Any, den: Any) -> tuple[Any, Any]:
    """``exp((lh + ll) num / den) = s 2**k``: ``(s, k)``, from a log in double-double and
    exact integers ``num`` and ``den`` (as floats)."""
    # y = log(x) num / den in double-double.
    lh_hi, lh_lo = split(lh)
    num_hi, num_lo = split(num)
    ph = lh * num
    pl = product_error(lh_hi, lh_lo, num_hi, num_lo, ph) + ll * num
    qh = ph / den
    qh_hi, qh_lo = split(qh)
    den_hi, den_lo = split(den)
    p = qh * den
    ql = (((ph - p) - product_error(qh_hi, qh_lo, den_hi, den_lo, p)) + pl) / den
    # exp(qh + ql) = 2**k exp(r): k log2_hi and qh - k log2_hi are exact (Sterbenz).
    k = np.rint(qh * constants.INV_LN2)
    rh, rl = two_sum(qh - k * constants.LN2_HI, ql - k * constants.LN2_LO)
    z, ze, _, _, cube, cube_lo = square_and_cube(rh)
    half, half_lo = z * 0.5, (ze + rh * 2.0 * rl) * 0.5
    sixth, sixth_lo = times(cube, cube_lo, constants.SIXTH)
    # s = 1 + rh + half + sixth, each sum with its error.
    s, e1 = fast_two_sum(1.0, rh)
    s, e2 = two_sum(s, half)
    s, e3 = two_sum(s, sixth)
    tail = cube * rh * horner(rh, constants.EXP_TAIL)
    return s + (e1 + e2 + e3 + half_lo + sixth_lo + rl + tail), k
