"""Host math that no CPU, OS or NumPy version can change (numerics.md, section 1).

``np.cos``, ``np.sin``, ``np.power``, ``np.exp``, ``np.log`` and the ``math`` module are
not the same function everywhere: NumPy dispatches them to different SIMD code by CPU
and every OS ships its own libm. Every host value that feeds anyrope's bits (frequencies,
scaling factors, cos/sin tables) comes from this module instead, which uses only
operations that IEEE-754 rounds identically on every machine: ``+``, ``-``, ``*``, ``/``
and ``sqrt`` on float64, plus exact ones (``rint``, ``frexp``, ``ldexp``, comparisons,
integer and :class:`fractions.Fraction` arithmetic). No FMA is involved: each NumPy
ufunc call is one rounded operation.

The functions work in double-double arithmetic (an unevaluated sum ``hi + lo`` of two
float64 values, about 106 bits) and round once at the end, so results are within one
ulp of the exact value and almost always the correctly rounded float64
(``tests/test_hostmath.py`` measures it against mpmath):

- :func:`sincos`: argument reduction by ``pi/2`` held to 212 bits (exact for ``|x| <
  2**33``; beyond that, exact rational arithmetic), then Taylor series on ``|r| <= pi/4``.
- :func:`log` and :func:`power` (``x ** (num/den)`` with an exact rational exponent):
  ``log(m * 2**e) = e log 2 + 2 atanh((m - 1)/(m + 1))`` and ``exp`` by ``log 2``
  reduction, both as Taylor series.

The constants (``pi``, ``log 2``, Taylor coefficients) are computed here from integers,
so nothing depends on a library's rounding of a transcendental function.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import Any, TypeAlias

import numpy as np

__all__ = ["log", "power", "sincos"]

Float64: TypeAlias = np.ndarray[Any, np.dtype[np.float64]]
DD: TypeAlias = tuple[Float64, Float64]

_SPLITTER = float(2**27 + 1)
# Below this magnitude the three-term reduction is exact enough for every float64 (see
# _reduce); above it, each element is reduced with Fractions.
_FAST_REDUCTION_LIMIT = float(2**33)


# -- Constants from integers ------------------------------------------------------------


def _arctan_inverse(n: int, bits: int) -> int:
    """``floor(atan(1/n) * 2**bits)`` within a few units, by its Taylor series."""
    scale = 1 << (bits + 16)
    total, power, k, sign = 0, scale // n, 1, 1
    while power:
        total += sign * (power // k)
        power //= n * n
        k += 2
        sign = -sign
    return total >> 16


@functools.cache
def _pi(bits: int) -> Fraction:
    """pi to ``bits`` bits by Machin's formula ``pi/4 = 4 atan(1/5) - atan(1/239)``."""
    guard = bits + 32
    scaled = 4 * (4 * _arctan_inverse(5, guard) - _arctan_inverse(239, guard))
    return Fraction(scaled, 1 << guard)


def _ln2(bits: int) -> Fraction:
    """log 2 to ``bits`` bits: ``2 atanh(1/3) = sum 2 / ((2k+1) 3**(2k+1))``."""
    scale = 1 << (bits + 16)
    total, power, k = 0, scale // 3, 1
    while power:
        total += power // k
        power //= 9
        k += 2
    return Fraction(2 * total >> 16, 1 << bits)


def _expansion(value: Fraction, terms: int) -> tuple[float, ...]:
    """Non-overlapping float64 values whose sum is ``value`` to ``53 * terms`` bits."""
    parts = []
    for _ in range(terms):
        part = float(value)
        parts.append(part)
        value -= Fraction(part)
    return tuple(parts)


def _truncated(value: Fraction, bits: int) -> float:
    """``value`` in [0.5, 1) cut to ``bits`` significant bits, so small multiples are exact."""
    scale = 1 << bits
    return float(Fraction(math.floor(value * scale), scale))


_PI = _pi(300)
_PIO2 = _expansion(_PI / 2, 4)
_TWO_OVER_PI = float(2 / _PI)
_LN2 = _ln2(200)
# log 2 split so that e * _LN2_HI is exact for every float64 exponent |e| < 2**11.
_LN2_HI = _truncated(_LN2, 42)
_LN2_LO = float(_LN2 - Fraction(_LN2_HI))
_INV_LN2 = float(1 / _LN2)
_SIXTH = _expansion(Fraction(1, 6), 2)
_MINUS_SIXTH = _expansion(Fraction(-1, 6), 2)
_TWENTY_FOURTH = _expansion(Fraction(1, 24), 2)
_TWO_THIRDS = _expansion(Fraction(2, 3), 2)


def _taylor(first: int, step: int, count: int, coefficient: Any) -> tuple[float, ...]:
    return tuple(float(coefficient(first + step * j)) for j in range(count))


def _alternating_inverse_factorial(n: int) -> Fraction:
    """The coefficient of ``r**n`` in the Taylor series of sin (odd n) or cos (even n)."""
    return Fraction(-1 if (n // 2) % 2 else 1, math.factorial(n))


# sin(r) = r - r**3/6 + r**5 S(r**2); cos(r) = 1 - r**2/2 + r**4/24 + r**6 C(r**2), |r| <= pi/4:
# the first omitted terms are below 2**-70 of the result.
_SIN_TAIL = _taylor(5, 2, 8, _alternating_inverse_factorial)
_COS_TAIL = _taylor(6, 2, 8, _alternating_inverse_factorial)
# exp(r) = 1 + r + r**2/2 + r**3/6 + r**4 * E(r), |r| <= log(2)/2.
_EXP_TAIL = _taylor(4, 1, 12, lambda n: Fraction(1, math.factorial(n)))
# log(m) = 2s + 2s**3/3 + s**5 * L(s**2), s = (m - 1)/(m + 1), |s| <= 0.172.
_LOG_TAIL = _taylor(5, 2, 11, lambda n: Fraction(2, n))


# -- Error-free transformations ---------------------------------------------------------


def _two_sum(a: Any, b: Any) -> DD:
    """``a + b = s + e`` exactly (Knuth)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _fast_two_sum(a: Any, b: Any) -> DD:
    """``a + b = s + e`` exactly when ``|a| >= |b|`` (Dekker)."""
    s = a + b
    return s, b - (s - a)


def _split(a: Any) -> DD:
    """``a = hi + lo`` with each half holding at most 26 significant bits (Veltkamp)."""
    t = _SPLITTER * a
    hi = t - (t - a)
    return hi, a - hi


def _two_prod(a: Any, b: Any, a_split: DD | None = None, b_split: DD | None = None) -> DD:
    """``a * b = p + e`` exactly, without an FMA (Dekker); the halves of ``a`` and ``b``
    (:func:`_split`) when already known."""
    p = a * b
    ah, al = _split(a) if a_split is None else a_split
    bh, bl = _split(b) if b_split is None else b_split
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _times(hi: Float64, lo: Float64, constant: tuple[float, ...]) -> DD:
    """``(hi + lo) * constant`` in double-double, for a double-double ``constant``."""
    p, e = _two_prod(hi, constant[0])
    return p, e + hi * constant[1] + lo * constant[0]


def _horner(z: Float64, coefficients: tuple[float, ...]) -> Float64:
    result = np.full_like(z, coefficients[-1])
    for c in reversed(coefficients[:-1]):
        result *= z
        result += c
    return result


# -- sin and cos ------------------------------------------------------------------------


def _reduce(x: Float64) -> tuple[Float64, Float64, np.ndarray[Any, np.dtype[np.int64]]]:
    """``x = k pi/2 + (rh + rl)`` with ``|rh + rl| <= pi/4`` (a hair more); ``k mod 4``.

    For ``|x| < 2**33`` the products ``k * P_j`` of ``pi/2 = P0 + P1 + P2 + P3`` are
    split exactly (``k`` has at most 33 bits), ``x - k P0`` is exact (Sterbenz), and the
    remaining terms, all below ``2**-20``, are summed with rounding errors below
    ``2**-120``: far below the smallest ``|r|`` a float64 can reach (about ``2**-61``).
    Larger ``x`` are reduced one by one with rationals.
    """
    large = np.flatnonzero(~(np.abs(x) < _FAST_REDUCTION_LIMIT))
    fast = x
    if large.size:
        fast = x.copy()
        fast.flat[large] = 0.0
    p0, p1, p2, p3 = _PIO2
    k = np.rint(fast * _TWO_OVER_PI)
    halves = _split(k)
    h0, l0 = _two_prod(k, p0, halves)
    h1, l1 = _two_prod(k, p1, halves)
    h2, l2 = _two_prod(k, p2, halves)
    a, ea = _two_sum(fast - h0, -l0)
    b, eb = _two_sum(a, -h1)
    tail = (ea + eb) - l1 - h2 - l2 - k * p3
    rh, rl = _fast_two_sum(b, tail)
    quadrant = k.astype(np.int64) & 3
    for index in large:
        quadrant.flat[index], rh.flat[index], rl.flat[index] = _reduce_exact(float(x.flat[index]))
    return rh, rl, quadrant


def _reduce_exact(x: float) -> tuple[int, float, float]:
    """:func:`_reduce` for one large ``x``, with rationals and enough bits of pi."""
    exact = Fraction(x)
    bits = max(0, exact.numerator.bit_length() - exact.denominator.bit_length()) + 200
    half_pi = _pi(bits) / 2
    k = round(exact / half_pi)
    r = exact - k * half_pi
    rh = float(r)
    return k % 4, rh, float(r - Fraction(rh))


def sincos(x: Any) -> DD:
    """Return ``(sin(x), cos(x))`` of a finite float64 array, within one ulp.

    Parameters
    ----------
    x : array_like
        Finite angles in radians (any shape; converted to float64).

    Returns
    -------
    tuple of numpy.ndarray
        ``sin(x)`` and ``cos(x)``, float64 arrays of the shape of ``x``: the same bits
        on every machine.

    Examples
    --------
    >>> from anyrope._hostmath import sincos
    >>> s, c = sincos([0.0, 1.0, 1e9])
    >>> s.tolist(), c.tolist()
    ([0.0, 0.8414709848078965, 0.5458434494486996], [1.0, 0.5403023058681398, 0.8378871813639024])
    """
    x = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(x)):
        raise ValueError("sincos needs finite angles; got inf or nan")
    rh, rl, quadrant = _reduce(x)
    r_halves = _split(rh)
    z, ze = _two_prod(rh, rh, r_halves, r_halves)
    z_halves = _split(z)
    # sin(r) = rh - rh**3/6 + rh**5 S(rh**2) + rl cos(r): the first two terms in
    # double-double.
    cube, cube_lo = _two_prod(rh, z, r_halves, z_halves)
    t, te = _times(cube, cube_lo + rh * ze, _MINUS_SIXTH)
    s, se = _fast_two_sum(rh, t)
    sin = s + (se + te + cube * z * _horner(z, _SIN_TAIL) + (rl - rl * z * 0.5))
    # cos(r) = 1 - rh**2/2 + rh**4/24 + rh**6 C(rh**2) - rl sin(r): the first three terms
    # in double-double.
    w, we = _fast_two_sum(1.0, z * -0.5)
    fourth, fourth_lo = _two_prod(z, z, z_halves, z_halves)
    q, qe = _times(fourth, fourth_lo + 2.0 * z * ze, _TWENTY_FOURTH)
    w, we2 = _two_sum(w, q)
    cos = w + ((we + we2 - ze * 0.5 + qe) + z * fourth * _horner(z, _COS_TAIL) - rl * sin)
    swap = (quadrant & 1) == 1
    sin, cos = np.where(swap, cos, sin), np.where(swap, sin, cos)
    sin = np.where(quadrant >= 2, -sin, sin)
    cos = np.where((quadrant == 1) | (quadrant == 2), -cos, cos)
    return sin, cos


# -- log, exp and powers ----------------------------------------------------------------


def _log_dd(x: Float64) -> DD:
    """``log(x)`` of positive finite ``x`` as a double-double, to about ``2**-63``."""
    m, e = np.frexp(x)
    low = m < 0.7071067811865476
    m = np.where(low, m * 2.0, m)
    exponent = (e - low).astype(np.float64)
    # s = (m - 1) / (m + 1) in double-double; m - 1 is exact (Sterbenz).
    numerator = m - 1.0
    dh, dl = _two_sum(m, 1.0)
    sh = numerator / dh
    p, pe = _two_prod(sh, dh)
    sl = (((numerator - p) - pe) - sh * dl) / dh
    # 2 s**3 / 3 in double-double, with the sl part of (sh + sl)**3 = sh**3 + 3 sh**2 sl;
    # the rest is below 2**-12 of log(m).
    w, we = _two_prod(sh, sh)
    cube, cube_lo = _two_prod(w, sh)
    t, te = _times(cube, cube_lo + we * sh + 3.0 * w * sl, _TWO_THIRDS)
    rest = cube * w * _horner(w, _LOG_TAIL)
    hi, lo1 = _two_sum(exponent * _LN2_HI, 2.0 * sh)
    hi, lo2 = _two_sum(hi, t)
    lo = lo1 + lo2 + 2.0 * sl + te + rest + exponent * _LN2_LO
    return _fast_two_sum(hi, lo)


def _exp_dd(yh: Float64, yl: Float64) -> Float64:
    """``exp(yh + yl)`` rounded once to float64 (normal results)."""
    k = np.rint(yh * _INV_LN2)
    # k * _LN2_HI is exact and yh - k * _LN2_HI is exact (Sterbenz).
    rh, rl = _two_sum(yh - k * _LN2_HI, yl - k * _LN2_LO)
    r_halves = _split(rh)
    z, ze = _two_prod(rh, rh, r_halves, r_halves)
    half, half_lo = z * 0.5, (ze + 2.0 * rh * rl) * 0.5
    cube, cube_lo = _two_prod(rh, z, r_halves)
    sixth, sixth_lo = _times(cube, cube_lo + rh * ze, _SIXTH)
    s, e1 = _fast_two_sum(1.0, rh)
    s, e2 = _two_sum(s, half)
    s, e3 = _two_sum(s, sixth)
    tail = cube * rh * _horner(rh, _EXP_TAIL)
    lo = e1 + e2 + e3 + half_lo + sixth_lo + rl + tail
    with np.errstate(over="ignore"):
        result: Float64 = np.ldexp(s + lo, k.astype(int))
    return result


def log(x: Any) -> Float64:
    """Return the natural logarithm of positive finite float64 values, within one ulp.

    Examples
    --------
    >>> from anyrope._hostmath import log
    >>> log([1.0, 2.0, 10.0]).tolist()
    [0.0, 0.6931471805599453, 2.302585092994046]
    """
    x = np.asarray(x, dtype=np.float64)
    if not np.all((x > 0) & np.isfinite(x)):
        raise ValueError("log needs positive finite values")
    return _log_dd(x)[0]


def power(x: Any, numerator: Any, denominator: Any) -> Float64:
    """Return ``x ** (numerator / denominator)`` with an exact rational exponent.

    ``x`` is positive and finite; ``numerator`` and ``denominator`` are integers (below
    ``2**40`` in magnitude, ``denominator > 0``), broadcast together. The exponent is
    never rounded to a float: ``power(base, -2 * i, d)`` is ``base ** (-2i/d)`` itself.

    Examples
    --------
    >>> from anyrope._hostmath import power
    >>> power(10000.0, [0, -2], 4).tolist()
    [1.0, 0.01]
    """
    x = np.asarray(x, dtype=np.float64)
    if not np.all((x > 0) & np.isfinite(x)):
        raise ValueError("power needs a positive finite base")
    num = np.asarray(numerator, dtype=np.float64)
    den = np.asarray(denominator, dtype=np.float64)
    lh, ll = _log_dd(x)
    # y = log(x) * num / den in double-double (num and den are exact small integers).
    ph, pl = _two_prod(lh, num)
    pl = pl + ll * num
    qh = ph / den
    p, pe = _two_prod(qh, den)
    ql = (((ph - p) - pe) + pl) / den
    return _exp_dd(qh, ql)
