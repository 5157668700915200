"""The constants of the host math, computed from integers (see :mod:`anyrope._hostmath`).

pi and log 2 come from their series in integer arithmetic, the Taylor coefficients from
exact fractions; each is rounded to float64 (or split into non-overlapping float64 parts)
once, here, so nothing depends on a library's rounding of a transcendental function.
:mod:`anyrope._hostmath` and its compiled twin :mod:`anyrope._hostmath_numba` both read
them from this module.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction


def _inverse_series(n: int, bits: int, sign: int) -> Fraction:
    """``atan(1/n)`` (``sign`` -1) or ``atanh(1/n)`` (``sign`` 1) to ``bits`` bits, by its
    Taylor series ``sum sign**k / ((2k+1) n**(2k+1))`` in integers."""
    scale = 1 << (bits + 16)
    total, power, k, term_sign = 0, scale // n, 1, 1
    while power:
        total += term_sign * (power // k)
        power //= n * n
        k += 2
        term_sign *= sign
    return Fraction(total, scale)


@functools.cache
def pi(bits: int) -> Fraction:
    """pi to ``bits`` bits by Machin's formula ``pi/4 = 4 atan(1/5) - atan(1/239)``."""
    return 4 * (4 * _inverse_series(5, bits + 32, -1) - _inverse_series(239, bits + 32, -1))


def expansion(value: Fraction, terms: int) -> tuple[float, ...]:
    """Non-overlapping float64 values whose sum is ``value`` to ``53 * terms`` bits."""
    parts = []
    for _ in range(terms):
        part = float(value)
        parts.append(part)
        value -= Fraction(part)
    return tuple(parts)


def _alternating_inverse_factorial(n: int) -> Fraction:
    """The coefficient of ``r**n`` in the Taylor series of sin (odd n) or cos (even n)."""
    return Fraction(-1 if (n // 2) % 2 else 1, math.factorial(n))


SPLITTER = float(2**27 + 1)
"""Dekker's splitter: ``t = SPLITTER a`` gives the halves ``t - (t - a)`` and the rest."""
SQRT_HALF = 0.7071067811865476
"""The float64 nearest sqrt(1/2): log's mantissas below it are doubled (|s| <= 0.172)."""
PI = pi(300)
PIO2 = expansion(PI / 2, 4)
TWO_OVER_PI = float(2 / PI)
LN2 = 2 * _inverse_series(3, 200, 1)  # 2 atanh(1/3)
# log 2 cut to 42 significant bits (it is in [0.5, 1)), so that e * LN2_HI is exact for
# every float64 exponent |e| < 2**11, and the rest.
LN2_HI = float(Fraction(math.floor(LN2 * 2**42), 2**42))
LN2_LO = float(LN2 - Fraction(LN2_HI))
INV_LN2 = float(1 / LN2)

# sin(r) = r - r**3/6 + r**5 S(r**2); cos(r) = 1 - r**2/2 + r**4/24 + r**6 C(r**2), |r| <= pi/4:
# the first omitted terms are below 2**-70 of the result.
SIN_TAIL = tuple(float(_alternating_inverse_factorial(n)) for n in range(5, 21, 2))
COS_TAIL = tuple(float(_alternating_inverse_factorial(n)) for n in range(6, 22, 2))
# exp(r) = 1 + r + r**2/2 + r**3/6 + r**4 * E(r), |r| <= log(2)/2.
EXP_TAIL = tuple(float(Fraction(1, math.factorial(n))) for n in range(4, 16))
# log(m) = 2s + 2s**3/3 + s**5 * L(s**2), s = (m - 1)/(m + 1), |s| <= 0.172.
LOG_TAIL = tuple(float(Fraction(2, n)) for n in range(5, 27, 2))
# Double-doubles.
SIXTH = expansion(Fraction(1, 6), 2)
MINUS_SIXTH = expansion(Fraction(-1, 6), 2)
TWENTY_FOURTH = expansion(Fraction(1, 24), 2)
TWO_THIRDS = expansion(Fraction(2, 3), 2)
