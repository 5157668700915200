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
transcendental function.

The algorithms are written once, in ``+``, ``-``, ``*`` and ``/`` on operands that may be
float64 scalars or arrays: NumPy runs them on blocks of :data:`_BLOCK` elements (each
operation one ufunc call, so an element's result does not depend on its block), and from
:data:`_COMPILED_FROM` elements on, when numba is installed,
:mod:`anyrope._hostmath_numba` compiles the same functions into one loop over the
elements: the same operations on the same operands in the same order, the same bits.
"""

from __future__ import annotations

import functools
import importlib.util
import math
from collections.abc import Callable
from typing import Any, TypeAlias

import numpy as np

from . import _hostmath_constants as constants
from ._hostmath_algorithms import log_reduced, power_scaled, reduce, sincos_reduced

__all__ = ["log", "power", "sincos"]

Float64: TypeAlias = np.ndarray[Any, np.dtype[np.float64]]
DD: TypeAlias = tuple[Float64, Float64]

_BLOCK = 8192
"""Elements per NumPy step: a block's temporaries stay in the caches."""

# Below this magnitude the three-term reduction is exact enough for every float64 (see
# _hostmath_algorithms.reduce); above it, each element is reduced with integers (_reduce_exact).
FAST_REDUCTION_LIMIT = float(2**33)

# -- Angles past 2**33 ------------------------------------------------------------------


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
    """The reduction of :mod:`anyrope._hostmath_algorithms` for one large ``x``, with
    integers and enough bits of pi.

    ``k`` is the integer nearest ``x / (pi/2)`` and ``r = x - k pi/2``, with ``pi`` to
    ``200`` bits more than ``x`` has integer bits, all exact: every value is a dyadic
    rational held as an integer over a power of two. Returns ``(k mod 4, rh, rl)``,
    ``rh`` the float64 nearest ``r`` and ``rl`` the one nearest ``r - rh``: the
    results of the same steps in :class:`fractions.Fraction` arithmetic, computed
    without its normalizations (``tests/test_hostmath.py`` compares the two).
    """
    n, d = x.as_integer_ratio()
    e = d.bit_length() - 1  # x = n / 2**e
    pi = constants.pi(max(0, n.bit_length() - d.bit_length()) + 200)
    # pi = N / 2**t with N odd, so pi/2 = N / 2**s with s = t + 1.
    half_pi, s = pi.numerator, pi.denominator.bit_length()
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


# -- The functions on arrays -------------------------------------------------------------


def _elementwise(
    name: str, step: Callable[..., tuple[Any, ...]], inputs: tuple[Any, ...], outputs: DD
) -> None:
    """``outputs = step(*inputs)`` for 1-d arrays of one size: by the function ``name`` of
    :mod:`anyrope._hostmath_numba` from :data:`_COMPILED_FROM` elements on where
    :func:`_compiled` offers it, else by ``step`` on NumPy blocks. Both give every
    element the same bits."""
    size = outputs[0].size
    compiled = _compiled() if size >= _COMPILED_FROM else None
    if compiled is not None:
        getattr(compiled, name)(*inputs, *outputs)
        return
    for start in range(0, size, _BLOCK):
        block = slice(start, start + _BLOCK)
        for out, value in zip(outputs, step(*[a[block] for a in inputs]), strict=False):
            out[block] = value


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
    fast = flat.min() > -FAST_REDUCTION_LIMIT and flat.max() < FAST_REDUCTION_LIMIT
    angles = flat
    if not fast:
        if not np.all(np.isfinite(flat)):
            raise ValueError("sincos needs finite angles; got inf or nan")
        # The fast reduction runs on 0 there; the exact one then replaces its results.
        large = np.flatnonzero(~(np.abs(flat) < FAST_REDUCTION_LIMIT))
        angles = flat.copy()
        angles[large] = 0.0
    _elementwise("sincos", lambda x: _sincos_of(*reduce(x)), (angles,), (flat_sin, flat_cos))
    if not fast:
        exact = np.array([_reduce_exact(angle) for angle in flat[large].tolist()]).T
        flat_sin[large], flat_cos[large] = _sincos_of(*exact)
    return sin, cos


def _sincos_of(k: Float64, rh: Float64, rl: Float64) -> DD:
    """``(sin, cos)`` of ``k pi/2 + r``, ``r = rh + rl`` (see :func:`reduce`), from those of
    ``r``: quadrant ``k mod 4`` = 1 gives ``(cos, -sin)``, 2 ``(-sin, -cos)``, 3 ``(-cos, sin)``."""
    s, c = sincos_reduced(rh, rl)
    # k mod 4 is in the low bits of k as an integer (two's complement for k < 0).
    quadrant = k.astype(np.int64) & 3
    odd = (quadrant & 1).astype(bool)
    s, c = np.where(odd, c, s), np.where(odd, s, c)
    np.negative(s, out=s, where=quadrant >= 2)
    np.negative(c, out=c, where=(quadrant == 1) | (quadrant == 2))
    return s, c


_COMPILED_FROM = 256
"""Elements from which :mod:`anyrope._hostmath_numba` runs instead, when numba is
installed (its first use in a process loads or compiles it: not worth it for a few)."""


@functools.cache
def _compiled() -> Any:
    """:mod:`anyrope._hostmath_numba`, or ``None`` where numba is not installed."""
    if importlib.util.find_spec("numba") is None:
        return None
    try:
        from . import _hostmath_numba
    except ImportError:  # a numba that cannot load here: the NumPy code gives the same bits
        return None
    return _hostmath_numba


def _log_dd(x: Any, function: str) -> DD:
    """``log(x)`` of positive finite ``x`` as a double-double, to about ``2**-63``;
    ``function`` names the caller in the error for other ``x``."""
    x = np.asarray(x, dtype=np.float64)
    if not np.all((x > 0) & np.isfinite(x)):
        raise ValueError(f"{function} needs positive finite values")
    hi, lo = np.empty(x.shape), np.empty(x.shape)
    m, e = np.frexp(x.reshape(-1))
    _elementwise("log", log_reduced, (m, e), (hi.reshape(-1), lo.reshape(-1)))
    return hi, lo


def log(x: Any) -> Float64:
    """Return the natural logarithm of positive finite float64 values, within one ulp.

    Examples
    --------
    >>> from anyrope._hostmath import log
    >>> log([1.0, 2.0, 10.0]).tolist()
    [0.0, 0.6931471805599453, 2.302585092994046]
    """
    hi: Float64 = _log_dd(x, "log")[0]
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
    log_x = _log_dd(x, "power")  # the log of each base once; the rest element by element
    num = np.asarray(numerator, dtype=np.float64)
    den = np.asarray(denominator, dtype=np.float64)
    shape = np.broadcast_shapes(log_x[0].shape, num.shape, den.shape)
    s, k = np.empty(shape), np.empty(shape)
    parts = tuple(np.broadcast_to(a, shape).reshape(-1) for a in (*log_x, num, den))
    # exp of the product as s 2**k, then one exact scaling (inf or 0 beyond the range).
    _elementwise("power", power_scaled, parts, (s.reshape(-1), k.reshape(-1)))
    with np.errstate(over="ignore"):
        result: Float64 = np.ldexp(s, k.astype(np.int64), out=s)
    return result if result.ndim else result[()]
