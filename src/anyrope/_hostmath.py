"""Host math that no CPU, OS or NumPy version can change (numerical-contract.rst, "Host math that no
machine can change").

``np.cos``, ``np.sin``, ``np.power``, ``np.exp``, ``np.log`` and the ``math`` module are
not the same function everywhere: NumPy dispatches them to different SIMD code by CPU
and every OS ships its own libm. Every host value that feeds anyrope's bits (frequencies,
scaling factors, cos/sin tables) comes from this module instead, which uses only
operations that IEEE-754 rounds identically on every machine: ``+``, ``-``, ``*``, ``/``
and ``sqrt`` on float64, plus exact ones (``rint``, ``frexp``, ``ldexp``, comparisons,
integer and bit operations, exact integer arithmetic). No FMA is involved:
each NumPy ufunc call is one rounded operation.

The functions work in double-double arithmetic (an unevaluated sum ``hi + lo`` of two
float64 values, about 106 bits) and round once at the end, so results are within one
ulp of the exact value and almost always the correctly rounded float64
(``tests/test_hostmath.py`` measures it against mpmath):

- :func:`sincos`: argument reduction by ``pi/2`` held to 212 bits (exact for ``|x| <
  2**33``; beyond that, exact integer arithmetic, a few microseconds an angle), then
  Taylor series on ``|r| <= pi/4``.
- :func:`log` and :func:`power` (``x ** (num/den)`` with an exact rational exponent):
  ``log(m * 2**e) = e log 2 + 2 atanh((m - 1)/(m + 1))`` and ``exp`` by ``log 2``
  reduction, both as Taylor series.

The constants (``pi``, ``log 2``, Taylor coefficients) are computed from integers in
:mod:`anyrope._hostmath_constants`, so nothing depends on a library's rounding of a
transcendental function. From :data:`_COMPILED_FROM` elements on, when numba is
installed, :mod:`anyrope._hostmath_numba` runs the same operations compiled.

Each operation is one NumPy ufunc call over a block of elements, written into a buffer
allocated once per call: an element's result does not depend on the block it is in.
"""

from __future__ import annotations

import functools
import importlib.util
import math
from typing import Any, TypeAlias

import numpy as np

from . import _hostmath_constants as constants

__all__ = ["log", "power", "sincos"]

Float64: TypeAlias = np.ndarray[Any, np.dtype[np.float64]]
DD: TypeAlias = tuple[Float64, Float64]

_BLOCK = 8192
"""Elements per step of the loops over an array; see "Operations into buffers"."""

# Below this magnitude the three-term reduction is exact enough for every float64 (see
# _reduce_into); above it, each element is reduced with integers (_reduce_exact).
FAST_REDUCTION_LIMIT = float(2**33)
# Below this magnitude k = rint(x 2/pi) is an integer below 2**26, whose halves (_split)
# are k and +0.
_SHORT_REDUCTION_LIMIT = float(2**26)


# -- Constants from integers (anyrope._hostmath_constants) ------------------------------

_pi = constants.pi
_PIO2 = constants.PIO2
_TWO_OVER_PI = constants.TWO_OVER_PI
_LN2_HI = constants.LN2_HI
_LN2_LO = constants.LN2_LO
_INV_LN2 = constants.INV_LN2


# -- Operations into buffers -----------------------------------------------------------
#
# Each step of the algorithms below is one ufunc call that writes into a buffer passed as
# its third argument (``out``, positional: the keyword costs time on every call). A long
# array goes through in blocks of _BLOCK elements with buffers allocated once per call:
# no array is allocated per operation, and a ufunc call's fixed cost (about 0.2 us) is
# small next to its work on a block.
#
# The rounded operations are those of the double-double algorithms, with the same
# operands in the same order, so every result is the float64 it always was, whatever the
# block size. Only exact steps are shared (the halves of a value split once for all its
# products, the two equal cross terms of a square), replaced by an exact step that gives
# the same value (a fast two-sum where its condition holds; 2**k times a value for
# ldexp), or left out: the products with a zero half, as the halves of an integer below
# 2**26 are the integer and +0 (_split_into). Such a product is +0 or -0: adding it
# leaves every nonzero value as it is, so at most the sign of a zero changes, and none
# reaches a result: nothing is divided by a value that can be zero, powers are positive,
# and the only zero results, sincos(+-0), come out the same on every path
# (tests/test_hostmath.py compares the paths bit for bit).

_add, _sub, _mul, _div = np.add, np.subtract, np.multiply, np.divide


def _constant(value: float) -> Float64:
    """``value`` as a 0-d array: a ufunc takes one as an operand faster than a float."""
    constant = np.array(value, dtype=np.float64)
    constant.flags.writeable = False
    return constant


def _constants(values: tuple[float, ...]) -> tuple[Float64, ...]:
    return tuple(_constant(v) for v in values)


def _buffers(length: int, count: int) -> list[Float64]:
    """``count`` float64 buffers of ``length`` elements, each starting on a 64-byte
    boundary: SIMD loads that straddle cache lines make the whole computation about 30%
    slower, and the allocator only promises 16 bytes."""
    stride = -(-length // 8) * 8
    raw = np.empty(count * stride + 8)
    first = (-raw.ctypes.data % 64) // 8
    block = raw[first : first + count * stride].reshape(count, stride)
    return [row[:length] for row in block]


_SPLITTER_0D = _constant(constants.SPLITTER)


def _split_into(a: Any, *, out: DD) -> None:
    """``a = hi + lo`` with each half holding at most 26 significant bits (Veltkamp).

    The halves of an integer ``|n| < 2**26`` are ``n`` and ``+0``: ``t = 2**27 n + n``
    is exact, so ``t - (t - n) = n``.
    """
    hi, lo = out
    _mul(a, _SPLITTER_0D, hi)  # t
    _sub(hi, a, lo)  # t - a
    _sub(hi, lo, hi)  # t - (t - a)
    _sub(a, hi, lo)


def _split(a: Any) -> DD:
    """:func:`_split_into` into new arrays (of the shape of ``a``)."""
    a = np.asarray(a, dtype=np.float64)
    halves = np.empty(a.shape), np.empty(a.shape)
    _split_into(a, out=halves)
    return halves


def _product_error_into(
    ah: Any, al: Any, bh: Any, bl: Any, p: Any, *, out: Float64, tmp: Float64
) -> None:
    """``a b - p`` exactly for ``p = fl(a b)``, from the halves of ``a`` and ``b``
    (Dekker): ``((ah bh - p) + ah bl + al bh) + al bl``."""
    _mul(ah, bh, out)
    _sub(out, p, out)
    _mul(ah, bl, tmp)
    _add(out, tmp, out)
    _mul(al, bh, tmp)
    _add(out, tmp, out)
    _mul(al, bl, tmp)
    _add(out, tmp, out)


def _square_error_into(ah: Any, al: Any, p: Any, *, out: Float64, tmp: Float64) -> None:
    """:func:`_product_error_into` for ``a * a``, whose two cross terms are one product."""
    _mul(ah, ah, out)
    _sub(out, p, out)
    _mul(ah, al, tmp)
    _add(out, tmp, out)
    _add(out, tmp, out)
    _mul(al, al, tmp)
    _add(out, tmp, out)


def _integer_product_error_into(
    n: Any, ah: Any, al: Any, p: Any, *, out: Float64, tmp: Float64
) -> None:
    """:func:`_product_error_into` for ``n * a`` where the halves of ``n`` are ``n`` and
    ``+0`` (an integer below ``2**26``): ``(n ah - p) + n al``, the zero terms left out."""
    _mul(n, ah, out)
    _sub(out, p, out)
    _mul(n, al, tmp)
    _add(out, tmp, out)


def _two_sum_into(a: Any, b: Any, *, out: DD, tmp: Float64) -> None:
    """``a + b = s + e`` exactly (Knuth), into ``out = (s, e)``; all other buffers."""
    s, e = out
    _add(a, b, s)
    _sub(s, a, tmp)  # bb
    _sub(s, tmp, e)
    _sub(a, e, e)  # a - (s - bb)
    _sub(b, tmp, tmp)  # b - bb
    _add(e, tmp, e)


def _fast_two_sum_into(a: Any, b: Any, *, out: DD) -> None:
    """``a + b = s + e`` exactly when the exponent of ``a`` is at least that of ``b``
    (Dekker), into ``out = (s, e)``: then ``e`` is the value :func:`_two_sum_into`
    gives."""
    s, e = out
    _add(a, b, s)
    _sub(s, a, e)
    _sub(b, e, e)


def _times_into(
    hi: Float64, lo: Float64, constant: tuple[Float64, ...], *, out: DD, scratch: list[Float64]
) -> None:
    """``(hi + lo) c = p + e`` in double-double for a :func:`_dd_constant` ``c``, into
    ``out = (p, e)``: ``p = fl(hi c0)``, ``e = (hi c0 - p) + hi c1 + lo c0``. Three
    scratch buffers."""
    c0, c1, c0_hi, c0_lo = constant
    p, e = out
    hi_hi, hi_lo, tmp = scratch
    _split_into(hi, out=(hi_hi, hi_lo))
    _mul(hi, c0, p)
    _product_error_into(hi_hi, hi_lo, c0_hi, c0_lo, p, out=e, tmp=tmp)
    _mul(hi, c1, tmp)
    _add(e, tmp, e)
    _mul(lo, c0, tmp)
    _add(e, tmp, e)


def _horner_into(z: Float64, coefficients: tuple[Float64, ...], *, out: Float64) -> None:
    """``c0 + z (c1 + z (c2 + ...))``, from ``z c_last`` (the first step's ``c_last z``)."""
    _mul(z, coefficients[-1], out)
    _add(out, coefficients[-2], out)
    for c in reversed(coefficients[:-2]):
        _mul(out, z, out)
        _add(out, c, out)


# -- The constants as operands ---------------------------------------------------------


def _dd_constant(parts: tuple[float, ...]) -> tuple[Float64, ...]:
    """``(c0, c1, c0_hi, c0_lo)``: a double-double constant and the halves of ``c0``."""
    c0, c1 = parts
    return (_constant(c0), _constant(c1), *_split(c0))


_SIN_TAIL = _constants(constants.SIN_TAIL)
_COS_TAIL = _constants(constants.COS_TAIL)
_EXP_TAIL = _constants(constants.EXP_TAIL)
_LOG_TAIL = _constants(constants.LOG_TAIL)
_SIXTH = _dd_constant(constants.SIXTH)
_MINUS_SIXTH = _dd_constant(constants.MINUS_SIXTH)
_TWENTY_FOURTH = _dd_constant(constants.TWENTY_FOURTH)
_TWO_THIRDS = _dd_constant(constants.TWO_THIRDS)
_ONE, _HALF, _TWO, _THREE, _MINUS_HALF = _constants((1.0, 0.5, 2.0, 3.0, -0.5))
_SQRT_HALF = _constant(constants.SQRT_HALF)
# The float constants above (the tests read them) as operands; the halves of the first
# three parts of pi/2.
_TWO_OVER_PI_0D = _constant(_TWO_OVER_PI)
_PIO2_0D = _constants(_PIO2)
_PIO2_HALVES = tuple(_split(p) for p in _PIO2[:3])
_INV_LN2_0D = _constant(_INV_LN2)
_LN2_HI_0D = _constant(_LN2_HI)
_LN2_LO_0D = _constant(_LN2_LO)


# -- sin and cos ------------------------------------------------------------------------

_SINCOS_BUFFERS = 32


def _reduce_into(x: Float64, short: bool, buffers: list[Float64]) -> tuple[Float64, Float64]:
    """``x = k pi/2 + (rh + rl)`` with ``|rh + rl| <= pi/4`` (a hair more): ``(rh, rl)``,
    and ``k`` left in ``buffers[0]``.

    For ``|x| < 2**33`` the products ``k * P_j`` of ``pi/2 = P0 + P1 + P2 + P3`` are
    split exactly (``k`` has at most 33 bits), ``x - k P0`` is exact (Sterbenz), and the
    remaining terms, all below ``2**-20``, are summed with rounding errors below
    ``2**-120``: far below the smallest ``|r|`` a float64 can reach (about ``2**-61``).
    ``short``: every ``|x| < 2**26``, so ``k`` needs no split. Larger ``x`` are reduced
    one by one with integers (:func:`_reduce_exact`).
    """
    k, k_hi, k_lo, h0, l0, h1, l1, h2, l2, tmp, b, eb = buffers[:12]
    _mul(x, _TWO_OVER_PI_0D, k)
    np.rint(k, k)
    if not short:
        _split_into(k, out=(k_hi, k_lo))
    for h, low, p, (p_hi, p_lo) in zip(
        (h0, h1, h2), (l0, l1, l2), _PIO2_0D[:3], _PIO2_HALVES, strict=True
    ):
        _mul(k, p, h)
        if short:
            _integer_product_error_into(k, p_hi, p_lo, h, out=low, tmp=tmp)
        else:
            _product_error_into(k_hi, k_lo, p_hi, p_lo, h, out=low, tmp=tmp)
    # a, ea = two_sum(x - h0, -l0); b, eb = two_sum(a, -h1).
    x_minus_h0, a, ea = k_hi, k_lo, h0
    _sub(x, h0, x_minus_h0)
    np.negative(l0, l0)
    _two_sum_into(x_minus_h0, l0, out=(a, ea), tmp=tmp)
    np.negative(h1, h1)
    _two_sum_into(a, h1, out=(b, eb), tmp=tmp)
    # tail = (ea + eb) - l1 - h2 - l2 - k P3.
    tail = ea
    _add(ea, eb, tail)
    _sub(tail, l1, tail)
    _sub(tail, h2, tail)
    _sub(tail, l2, tail)
    _mul(k, _PIO2_0D[3], tmp)
    _sub(tail, tmp, tail)
    rh, rl = l1, eb
    _fast_two_sum_into(b, tail, out=(rh, rl))
    return rh, rl


@functools.cache
def _half_pi(bits: int) -> tuple[int, int]:
    """``pi/2`` to ``bits`` bits as ``(n, s)``: ``pi/2 = n / 2**s``."""
    half_pi = constants.pi(bits) / 2
    return half_pi.numerator, half_pi.denominator.bit_length() - 1


def _dyadic_to_float(numerator: int, shift: int) -> float:
    """``numerator / 2**shift`` rounded once to the nearest float64 (ties to even), for
    a result in the normal range: what ``float(Fraction(numerator, 2**shift))`` gives.

    The bits past the 64 leading ones only decide a rounding through their sticky OR,
    kept in the lowest bit: ``float`` of the 64-bit integer then rounds as the whole.
    """
    magnitude = abs(numerator)
    drop = magnitude.bit_length() - 64
    if drop > 0:
        magnitude = (magnitude >> drop) | (magnitude & ((1 << drop) - 1) != 0)
        shift -= drop
    return math.ldexp(float(magnitude) if numerator >= 0 else -float(magnitude), -shift)


def _reduce_exact(x: float) -> tuple[int, float, float]:
    """:func:`_reduce_into` for one large ``x``, with integers and enough bits of pi.

    ``k`` is the integer nearest ``x / (pi/2)`` and ``r = x - k pi/2``, with ``pi`` to
    ``200`` bits more than ``x`` has integer bits, all exact: every value is a dyadic
    rational held as an integer over a power of two. Returns ``(k mod 4, rh, rl)``,
    ``rh`` the float64 nearest ``r`` and ``rl`` the one nearest ``r - rh``: the
    results of the same steps in :class:`fractions.Fraction` arithmetic, computed
    without its normalizations (``tests/test_hostmath.py`` compares the two).
    """
    n, d = x.as_integer_ratio()
    e = d.bit_length() - 1  # x = n / 2**e
    half_pi, s = _half_pi(max(0, n.bit_length() - d.bit_length()) + 200)
    # x / (pi/2) = (n 2**s) / (half_pi 2**e), rounded half to even as round() does.
    numerator, denominator = n << s, half_pi << e
    k, remainder = divmod(numerator, denominator)
    if 2 * remainder > denominator or (2 * remainder == denominator and k & 1):
        k += 1
    # r = (n 2**s - k half_pi 2**e) / 2**(e + s).
    r, shift = numerator - ((k * half_pi) << e), e + s
    rh = _dyadic_to_float(r, shift)
    a, b = rh.as_integer_ratio()
    t = b.bit_length() - 1  # rh = a / 2**t
    return k % 4, rh, _dyadic_to_float((r << t) - (a << shift), shift + t)


def _sincos_into(
    rh: Float64, rl: Float64, sin: Float64, cos: Float64, buffers: list[Float64]
) -> None:
    """``sin`` and ``cos`` of ``rh + rl``, ``|rh + rl| <= pi/4``; ``buffers[12:28]``."""
    r_hi, r_lo, z, ze, z_hi, z_lo, cube, cube_lo, t, te, s, se, tmp = buffers[12:25]
    scratch = buffers[25:28]
    _split_into(rh, out=(r_hi, r_lo))
    _mul(rh, rh, z)
    _square_error_into(r_hi, r_lo, z, out=ze, tmp=tmp)
    _split_into(z, out=(z_hi, z_lo))
    # sin(r) = rh - rh**3/6 + rh**5 S(rh**2) + rl cos(r): the first two terms in
    # double-double.
    _mul(rh, z, cube)
    _product_error_into(r_hi, r_lo, z_hi, z_lo, cube, out=cube_lo, tmp=tmp)
    _mul(rh, ze, tmp)
    _add(cube_lo, tmp, cube_lo)
    _times_into(cube, cube_lo, _MINUS_SIXTH, out=(t, te), scratch=scratch)
    _fast_two_sum_into(rh, t, out=(s, se))
    tail = r_hi
    _horner_into(z, _SIN_TAIL, out=tail)
    _mul(cube, z, tmp)
    _mul(tmp, tail, tmp)
    # sin = s + (se + te + cube z S + (rl - rl z / 2)).
    _add(se, te, se)
    _add(se, tmp, se)
    _mul(rl, z, tmp)
    _mul(tmp, _HALF, tmp)
    _sub(rl, tmp, tmp)
    _add(se, tmp, se)
    _add(s, se, sin)
    # cos(r) = 1 - rh**2/2 + rh**4/24 + rh**6 C(rh**2) - rl sin(r): the first three terms
    # in double-double.
    minus_half_z, w, we, fourth, fourth_lo, q, qe = cube, cube_lo, t, te, s, se, r_lo
    _mul(z, _MINUS_HALF, minus_half_z)
    _fast_two_sum_into(_ONE, minus_half_z, out=(w, we))
    _mul(z, z, fourth)
    _square_error_into(z_hi, z_lo, fourth, out=fourth_lo, tmp=tmp)
    _mul(z, _TWO, tmp)
    _mul(tmp, ze, tmp)
    _add(fourth_lo, tmp, fourth_lo)
    _times_into(fourth, fourth_lo, _TWENTY_FOURTH, out=(q, qe), scratch=scratch)
    # w + q: |w| > 0.69 > 0.02 > |q|, so a fast two-sum.
    w2, we2 = z_hi, z_lo
    _fast_two_sum_into(w, q, out=(w2, we2))
    tail = minus_half_z
    _horner_into(z, _COS_TAIL, out=tail)
    _mul(z, fourth, fourth)
    _mul(fourth, tail, fourth)
    # cos = w2 + ((we + we2 - ze / 2 + qe) + z fourth C - rl sin).
    _add(we, we2, we)
    _mul(ze, _HALF, tmp)
    _sub(we, tmp, we)
    _add(we, qe, we)
    _add(we, fourth, we)
    _mul(rl, sin, tmp)
    _sub(we, tmp, we)
    _add(w2, we, cos)


_LOW_BIT = np.array(1, dtype=np.uint64)
_SIGN_BIT = np.array(1 << 63, dtype=np.uint64)
_SIXTY_TWO = np.array(62, dtype=np.uint64)
_SIXTY_THREE = np.array(63, dtype=np.uint64)


def _to_quadrant(quadrant: Any, sin: Any, cos: Any, buffers: list[Float64]) -> None:
    """``(sin, cos)`` of ``r`` to those of ``q pi/2 + r``, in place: quadrant 1 gives
    ``(cos, -sin)``, 2 ``(-sin, -cos)``, 3 ``(-cos, sin)``.

    On the uint64 bits of ``q`` and of the results: swapping two values and flipping a
    sign bit are exact, and cheaper than ``np.where``. ``quadrant`` is overwritten.
    """
    odd, sign, swap = (b.view(np.uint64) for b in buffers)
    np.bitwise_and(quadrant, _LOW_BIT, odd)
    np.left_shift(quadrant, _SIXTY_TWO, sign)
    np.bitwise_and(sign, _SIGN_BIT, sign)  # bit 1 of q, as a sign bit
    np.bitwise_xor(sin, cos, swap)
    np.multiply(swap, odd, swap)  # sin ^ cos where q is odd, else 0
    np.left_shift(odd, _SIXTY_THREE, odd)  # bit 0 of q, as a sign bit
    np.bitwise_xor(sin, swap, sin)
    np.bitwise_xor(cos, swap, cos)
    np.bitwise_xor(sin, sign, sin)  # q = 2, 3
    np.bitwise_xor(cos, sign, cos)
    np.bitwise_xor(cos, odd, cos)  # q = 1, 2


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
    sin, cos = np.empty(x.shape), np.empty(x.shape)
    flat, flat_sin, flat_cos = x.reshape(-1), sin.reshape(-1), cos.reshape(-1)
    if not flat.size:
        return sin, cos
    # NaN fails both comparisons.
    lowest, highest = flat.min(), flat.max()
    fast = lowest > -FAST_REDUCTION_LIMIT and highest < FAST_REDUCTION_LIMIT
    compiled = _compiled(flat.size)
    if compiled is not None and fast:
        compiled.sincos(flat, flat_sin, flat_cos)
        return sin, cos
    large = np.empty(0, dtype=np.intp)
    if not fast:
        if not np.all(np.isfinite(flat)):
            raise ValueError("sincos needs finite angles; got inf or nan")
        large = np.flatnonzero(~(np.abs(flat) < FAST_REDUCTION_LIMIT))
    exact = [_reduce_exact(float(flat[i])) for i in large]
    short = lowest > -_SHORT_REDUCTION_LIMIT and highest < _SHORT_REDUCTION_LIMIT
    whole = _buffers(min(_BLOCK, flat.size), _SINCOS_BUFFERS)
    quadrant_whole = whole[31].view(np.uint64)  # the others: _reduce_into, _sincos_into
    for start in range(0, flat.size, _BLOCK):
        stop = min(start + _BLOCK, flat.size)
        buffers = whole if stop - start == whole[0].size else [b[: stop - start] for b in whole]
        quadrant = quadrant_whole[: stop - start]
        angles = flat[start:stop]
        first, last = np.searchsorted(large, (start, stop)) if large.size else (0, 0)
        if first < last:
            # The fast reduction runs on 0 there; the exact one replaces its results.
            angles = angles.copy()
            angles[large[first:last] - start] = 0.0
        rh, rl = _reduce_into(angles, short, buffers)
        # k mod 4 is in the low bits of k as an integer (two's complement for k < 0).
        np.copyto(quadrant.view(np.int64), buffers[0], casting="unsafe")
        for j in range(first, last):
            i = large[j] - start
            quadrant[i], rh[i], rl[i] = exact[j]
        s, c = flat_sin[start:stop], flat_cos[start:stop]
        _sincos_into(rh, rl, s, c, buffers)
        _to_quadrant(quadrant, s.view(np.uint64), c.view(np.uint64), buffers[28:31])
    return sin, cos


# -- Compiled ---------------------------------------------------------------------------

_COMPILED_FROM = 256
"""Elements from which :mod:`anyrope._hostmath_numba` runs instead, when numba is
installed (its first use in a process loads or compiles it: not worth it for a few)."""


def _compiled(size: int) -> Any:
    """:mod:`anyrope._hostmath_numba` for an array of ``size`` elements, or ``None``."""
    if size < _COMPILED_FROM:
        return None
    return _compiled_module()


@functools.cache
def _compiled_module() -> Any:
    if importlib.util.find_spec("numba") is None:
        return None
    try:
        from . import _hostmath_numba
    except ImportError:  # a numba that cannot load here: the NumPy code gives the same bits
        return None
    return _hostmath_numba


# -- log, exp and powers ----------------------------------------------------------------

_LOG_BUFFERS = 19
_MIN_EXPONENT, _MAX_EXPONENT = -1022.0, 1023.0
_EXPONENT_BIAS = np.array(1023, dtype=np.int64)
_MANTISSA_BITS = np.array(52, dtype=np.int64)
_EXP_BUFFERS = 23


def _log_into(x: Float64, hi: Float64, lo: Float64, buffers: list[Float64]) -> None:
    """``log(x) = hi + lo`` of positive finite ``x``, to about ``2**-63``."""
    m, exponent, numerator, dh, dl, sh, sh_hi, sh_lo, dh_hi, dh_lo, p, pe, sl = buffers[:13]
    w, we, tmp = buffers[13:16]
    scratch = buffers[16:19]
    e = np.empty(x.shape, dtype=np.intc)
    low = np.empty(x.shape, dtype=np.bool_)
    np.frexp(x, m, e)
    np.less(m, _SQRT_HALF, low)
    np.ldexp(m, low, m)  # m * 2 where low
    np.subtract(e, low, exponent)
    # s = (m - 1) / (m + 1) in double-double; m - 1 is exact (Sterbenz), and the sum is a
    # fast two-sum: the exponent of 1 is at least that of m < 1.5.
    _sub(m, _ONE, numerator)
    _fast_two_sum_into(_ONE, m, out=(dh, dl))
    _div(numerator, dh, sh)
    _split_into(sh, out=(sh_hi, sh_lo))
    _split_into(dh, out=(dh_hi, dh_lo))
    _mul(sh, dh, p)
    _product_error_into(sh_hi, sh_lo, dh_hi, dh_lo, p, out=pe, tmp=tmp)
    # sl = (((numerator - p) - pe) - sh dl) / dh.
    _sub(numerator, p, sl)
    _sub(sl, pe, sl)
    _mul(sh, dl, tmp)
    _sub(sl, tmp, sl)
    _div(sl, dh, sl)
    # 2 s**3 / 3 in double-double, with the sl part of (sh + sl)**3 = sh**3 + 3 sh**2 sl;
    # the rest is below 2**-12 of log(m).
    _mul(sh, sh, w)
    _square_error_into(sh_hi, sh_lo, w, out=we, tmp=tmp)
    w_hi, w_lo, cube, cube_lo = dh_hi, dh_lo, numerator, dl
    _split_into(w, out=(w_hi, w_lo))
    _mul(w, sh, cube)
    _product_error_into(w_hi, w_lo, sh_hi, sh_lo, cube, out=cube_lo, tmp=tmp)
    # cube_lo + we sh + 3 w sl.
    _mul(we, sh, tmp)
    _add(cube_lo, tmp, cube_lo)
    _mul(w, _THREE, tmp)
    _mul(tmp, sl, tmp)
    _add(cube_lo, tmp, cube_lo)
    t, te = p, pe
    _times_into(cube, cube_lo, _TWO_THIRDS, out=(t, te), scratch=scratch)
    rest = w_hi
    _horner_into(w, _LOG_TAIL, out=rest)
    _mul(cube, w, cube)
    _mul(cube, rest, rest)
    # hi, lo1 = two_sum(exponent log2_hi, 2 sh); hi, lo2 = two_sum(hi, t);
    # lo = lo1 + lo2 + 2 sl + te + rest + exponent log2_lo.
    a, b, hi1, lo1, hi2, lo2 = w_lo, w, we, dh, m, cube_lo
    _mul(exponent, _LN2_HI_0D, a)
    _mul(sh, _TWO, b)
    _two_sum_into(a, b, out=(hi1, lo1), tmp=tmp)
    _two_sum_into(hi1, t, out=(hi2, lo2), tmp=tmp)
    _add(lo1, lo2, lo1)
    _mul(sl, _TWO, tmp)
    _add(lo1, tmp, lo1)
    _add(lo1, te, lo1)
    _add(lo1, rest, lo1)
    _mul(exponent, _LN2_LO_0D, tmp)
    _add(lo1, tmp, lo1)
    _fast_two_sum_into(hi2, lo1, out=(hi, lo))


def _log_dd(x: Float64) -> DD:
    """``log(x)`` of positive finite ``x`` as a double-double, to about ``2**-63``."""
    hi, lo = np.empty(x.shape), np.empty(x.shape)
    flat, flat_hi, flat_lo = x.reshape(-1), hi.reshape(-1), lo.reshape(-1)
    whole = _buffers(min(_BLOCK, flat.size), _LOG_BUFFERS)
    for start in range(0, flat.size, _BLOCK):
        stop = min(start + _BLOCK, flat.size)
        buffers = whole if stop - start == whole[0].size else [b[: stop - start] for b in whole]
        _log_into(flat[start:stop], flat_hi[start:stop], flat_lo[start:stop], buffers)
    return hi, lo


def _exp_into(yh: Float64, yl: Float64, result: Float64, buffers: list[Float64]) -> None:
    """``exp(yh + yl)`` rounded once to float64 (normal results)."""
    k, a, b, rh, rl, r_hi, r_lo, z, ze, z_hi, z_lo, cube, cube_lo, tmp = buffers[:14]
    half, half_lo, sixth, sixth_lo, s, e1, e2, e3 = buffers[14:22]
    scratch = [z_hi, z_lo, buffers[22]]
    _mul(yh, _INV_LN2_0D, k)
    np.rint(k, k)
    # The usual case, results in the float64 range: |k| <= 1023, so that |rh| < 0.35 (see
    # below) and 2**k is a float64.
    moderate = k.min() >= _MIN_EXPONENT and k.max() <= _MAX_EXPONENT
    # k log2_hi is exact and yh - k log2_hi is exact (Sterbenz).
    _mul(k, _LN2_HI_0D, a)
    _sub(yh, a, a)
    _mul(k, _LN2_LO_0D, b)
    _sub(yl, b, b)
    _two_sum_into(a, b, out=(rh, rl), tmp=tmp)
    _split_into(rh, out=(r_hi, r_lo))
    _mul(rh, rh, z)
    _square_error_into(r_hi, r_lo, z, out=ze, tmp=tmp)
    # half = z / 2, half_lo = (ze + 2 rh rl) / 2.
    _mul(z, _HALF, half)
    _mul(rh, _TWO, tmp)
    _mul(tmp, rl, tmp)
    _add(ze, tmp, half_lo)
    _mul(half_lo, _HALF, half_lo)
    _split_into(z, out=(z_hi, z_lo))
    _mul(rh, z, cube)
    _product_error_into(r_hi, r_lo, z_hi, z_lo, cube, out=cube_lo, tmp=tmp)
    _mul(rh, ze, tmp)
    _add(cube_lo, tmp, cube_lo)
    _times_into(cube, cube_lo, _SIXTH, out=(sixth, sixth_lo), scratch=scratch)
    # s = 1 + rh + half + sixth, each sum with its error.
    s1, s2 = a, b
    _fast_two_sum_into(_ONE, rh, out=(s1, e1))
    if moderate:
        # s1 > 0.65 > 0.07 > half and s2 > 0.65 > 0.01 > |sixth|: fast two-sums.
        _fast_two_sum_into(s1, half, out=(s2, e2))
        _fast_two_sum_into(s2, sixth, out=(s, e3))
    else:
        _two_sum_into(s1, half, out=(s2, e2), tmp=tmp)
        _two_sum_into(s2, sixth, out=(s, e3), tmp=tmp)
    tail = r_hi
    _horner_into(rh, _EXP_TAIL, out=tail)
    _mul(cube, rh, tmp)
    _mul(tmp, tail, tail)
    # lo = e1 + e2 + e3 + half_lo + sixth_lo + rl + tail.
    _add(e1, e2, e1)
    _add(e1, e3, e1)
    _add(e1, half_lo, e1)
    _add(e1, sixth_lo, e1)
    _add(e1, rl, e1)
    _add(e1, tail, e1)
    _add(s, e1, s)
    if moderate:
        # s 2**k rounded once, which is what ldexp computes (and faster): 2**k from its
        # bits.
        scale = tmp
        bits = scale.view(np.int64)
        np.copyto(bits, k, casting="unsafe")
        np.add(bits, _EXPONENT_BIAS, bits)
        np.left_shift(bits, _MANTISSA_BITS, bits)
        _mul(s, scale, result)
        return
    with np.errstate(over="ignore"):
        np.ldexp(s, k.astype(np.int64), result)


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
    hi: Float64 = _log_dd(x)[0]
    return hi if hi.ndim else hi[()]


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
    shape = np.broadcast_shapes(x.shape, num.shape, den.shape)
    result = np.empty(shape)
    if not result.size:
        return result
    compiled = _compiled(result.size)
    if compiled is not None:
        # The log of each base once, as below; the rest element by element.
        flat_x = x.reshape(-1)
        log_hi, log_lo = np.empty(flat_x.shape), np.empty(flat_x.shape)
        compiled.log(flat_x, log_hi, log_lo)
        parts = (log_hi.reshape(x.shape), log_lo.reshape(x.shape), num, den)
        compiled.power(*[np.broadcast_to(a, shape).ravel() for a in parts], result.reshape(-1))
        return result if result.ndim else result[()]
    lh, ll = _log_dd(x)
    # The log, the numerators and the denominators have the shapes of the arguments (a
    # row, a column): split them once. Where all the lower halves of num or den are zero
    # (integers below 2**26, the usual exponents), the products with them are left out.
    operands = [lh, *_split(lh), ll, num, *_split(num), den, *_split(den)]
    num_short, den_short = not np.any(operands[6]), not np.any(operands[9])
    # Blocks of rows of the broadcast shape (of elements of a 1-d one). An operand with all
    # the rows is cut with them; the others broadcast over each block as they are.
    rows = result if result.ndim else result.reshape(1)
    per_block = max(1, _BLOCK // rows[0].size)
    whole = _buffers(min(per_block, len(rows)) * rows[0].size, _EXP_BUFFERS + 6)
    for start in range(0, len(rows), per_block):
        block = rows[start : start + per_block]
        buffers = whole if block.size == whole[0].size else [b[: block.size] for b in whole]
        lh, lh_hi, lh_lo, ll, num, num_hi, num_lo, den, den_hi, den_lo = (
            o[start : start + per_block] if o.ndim == rows.ndim and len(o) > 1 else o
            for o in operands
        )
        qh, ql, ph, pl, p, pe = (b.reshape(block.shape) for b in buffers[_EXP_BUFFERS:])
        tmp, qh_hi, qh_lo = (b.reshape(block.shape) for b in buffers[:3])
        # y = log(x) * num / den in double-double (num and den are exact integers).
        _mul(lh, num, ph)
        if num_short:
            _integer_product_error_into(num, lh_hi, lh_lo, ph, out=pl, tmp=tmp)
        else:
            _product_error_into(lh_hi, lh_lo, num_hi, num_lo, ph, out=pl, tmp=tmp)
        _mul(ll, num, tmp)
        _add(pl, tmp, pl)
        _div(ph, den, qh)
        _mul(qh, den, p)
        _split_into(qh, out=(qh_hi, qh_lo))
        if den_short:
            _integer_product_error_into(den, qh_hi, qh_lo, p, out=pe, tmp=tmp)
        else:
            _product_error_into(qh_hi, qh_lo, den_hi, den_lo, p, out=pe, tmp=tmp)
        # ql = (((ph - p) - pe) + pl) / den.
        _sub(ph, p, ql)
        _sub(ql, pe, ql)
        _add(ql, pl, ql)
        _div(ql, den, ql)
        _exp_into(qh.reshape(-1), ql.reshape(-1), block.reshape(-1), buffers)
    return result if result.ndim else result[()]
