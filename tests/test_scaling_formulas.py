"""Each scaling method against its formula (features.md, section 2), bit for bit.

The contract (numerical-contract.rst, "Frequencies") evaluates every formula in float64
on the host, in the order its docstring writes it (transformers' order): each ``+``,
``-``, ``*``, ``/`` and ``sqrt`` one correctly rounded operation, and the powers and
logarithms of :mod:`anyrope._hostmath` within one ulp of the exact value. So the
references here are written per pair with :class:`Rounded`, whose operations are
computed exactly in mpmath and rounded once to float64, and compared bit for bit; the
powers and logarithms are anyrope's own, each checked first against mpmath with its
documented bound of one ulp. A formula evaluated in another order (``x * (1 / f)`` for
``x / f``, ``f * (L / L_max)`` for ``f * L / L_max``) changes the bits of some pairs
and fails. transformers itself is the oracle in test_transformers_parity.py.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from anyrope import _hostmath as hostmath
from anyrope.scaling import (
    RopeScaling,
    default,
    dynamic,
    linear,
    llama3,
    longrope,
    ntk,
    parse_rope_scaling,
    proportional,
    yarn,
)

PRECISION = 300
"""Bits of mpmath's working precision: a sum, product, quotient or square root of
float64 values held to 2**-300 rounds to the float64 that the exact value rounds to."""

BOUND_ULPS = 1.0
"""The documented error of the host math's powers and logarithms (numerical-contract.rst, "Host math
that no machine can change")."""

dims = st.integers(min_value=2, max_value=128).map(lambda n: 2 * n)
bases = st.sampled_from([10000.0, 500000.0, 1e6, 1234.5])
factors = st.floats(min_value=1.0, max_value=64.0)


class Rounded:
    """A float64 whose arithmetic is exact in mpmath, then rounded once to float64."""

    __slots__ = ("value",)

    def __init__(self, value: float) -> None:
        self.value = float(value)

    def _apply(self, other: Rounded | float, op: Callable[..., Any], swap: bool) -> Rounded:
        a, b = mpmath.mpf(self.value), mpmath.mpf(_float(other))
        return Rounded(float(op(b, a) if swap else op(a, b)))

    def __add__(self, other: Rounded | float) -> Rounded:
        return self._apply(other, _add, False)

    def __radd__(self, other: float) -> Rounded:
        return self._apply(other, _add, True)

    def __sub__(self, other: Rounded | float) -> Rounded:
        return self._apply(other, _sub, False)

    def __rsub__(self, other: float) -> Rounded:
        return self._apply(other, _sub, True)

    def __mul__(self, other: Rounded | float) -> Rounded:
        return self._apply(other, _mul, False)

    def __rmul__(self, other: float) -> Rounded:
        return self._apply(other, _mul, True)

    def __truediv__(self, other: Rounded | float) -> Rounded:
        return self._apply(other, _div, False)

    def __rtruediv__(self, other: float) -> Rounded:
        return self._apply(other, _div, True)

    def sqrt(self) -> Rounded:
        with mpmath.workprec(PRECISION):
            return Rounded(float(mpmath.sqrt(mpmath.mpf(self.value))))


def _add(a: mpmath.mpf, b: mpmath.mpf) -> mpmath.mpf:
    return mpmath.fadd(a, b, exact=True)


def _sub(a: mpmath.mpf, b: mpmath.mpf) -> mpmath.mpf:
    return mpmath.fsub(a, b, exact=True)


def _mul(a: mpmath.mpf, b: mpmath.mpf) -> mpmath.mpf:
    return mpmath.fmul(a, b, exact=True)


def _div(a: mpmath.mpf, b: mpmath.mpf) -> mpmath.mpf:
    return mpmath.fdiv(a, b, prec=PRECISION)


def _float(value: Rounded | float) -> float:
    return value.value if isinstance(value, Rounded) else float(value)


PI = Rounded(float(mpmath.pi))
"""pi rounded once (``math.pi``)."""


def _ulps(got: float, exact: mpmath.mpf) -> float:
    """``|got - exact|`` in ulps of the float64 nearest to ``exact``."""
    return float(abs(mpmath.mpf(got) - exact)) / float(np.spacing(abs(float(exact))))


def _powers(x: Any, numerators: Any, denominator: int) -> list[Rounded]:
    """anyrope's ``x ** (n / denominator)`` for each ``x`` and ``n`` (broadcast together,
    flattened), each checked against mpmath first."""
    pairs = np.broadcast_arrays(np.asarray(x, dtype=np.float64), numerators)
    # Copies: numba warns on the read-only views that broadcasting makes.
    xs, ns = (np.array(a).reshape(-1) for a in pairs)
    got = np.asarray(hostmath.power(xs, ns, denominator)).reshape(-1)
    with mpmath.workprec(PRECISION):
        for value, base, numerator in zip(got, xs, ns, strict=True):
            exact = mpmath.power(mpmath.mpf(float(base)), mpmath.mpf(int(numerator)) / denominator)
            assert _ulps(float(value), exact) <= BOUND_ULPS, (base, numerator, denominator, value)
    return [Rounded(value) for value in got]


def _log(x: Rounded | float) -> Rounded:
    """anyrope's ``ln(x)``, after checking it against mpmath."""
    got = float(hostmath.log(_float(x)))
    if _float(x) != 1.0:
        with mpmath.workprec(PRECISION):
            exact = mpmath.log(mpmath.mpf(_float(x)))
        assert _ulps(got, exact) <= BOUND_ULPS, (_float(x), got)
    return Rounded(got)


def _theta(d: int, b: float) -> list[Rounded]:
    """``b ** (-2i / d)``, each within one ulp of the exact value."""
    return _powers(b, -np.arange(0, d, 2), d)


def _assert_bits(got: Any, expected: Sequence[Rounded | float] | Rounded | float) -> None:
    got = np.asarray(got)
    assert got.dtype == np.float64
    want = np.asarray(
        [_float(e) for e in expected] if isinstance(expected, Sequence) else _float(expected),
        dtype=np.float64,
    )
    np.testing.assert_array_equal(got.view(np.uint64), want.view(np.uint64))


@settings(max_examples=30, deadline=None)
@given(d=dims, b=bases)
def test_default(d: int, b: float) -> None:
    _assert_bits(default.inv_freq(d, b), _theta(d, b))


@settings(max_examples=30, deadline=None)
@given(d=dims, b=bases, s=factors)
def test_linear(d: int, b: float, s: float) -> None:
    _assert_bits(linear.inv_freq(d, b, factor=s), [t / s for t in _theta(d, b)])


@pytest.mark.parametrize("factor", [3.0, 2.5, 6.0, 1.7])
def test_linear_divides_each_frequency(factor: float) -> None:
    """Factors whose reciprocal is inexact: ``x * (1 / f)`` differs from ``x / f`` in
    16 to 21 of 64 pairs."""
    _assert_bits(linear.inv_freq(128, 1e4, factor=factor), [t / factor for t in _theta(128, 1e4)])


def _ntk_base(d: int, b: float, s: float) -> Rounded:
    return b * _powers(s, d, d - 2)[0]


@settings(max_examples=30, deadline=None)
@given(d=dims.filter(lambda d: d > 2), b=bases, s=factors)
def test_ntk(d: int, b: float, s: float) -> None:
    scaled = _ntk_base(d, b, s)
    assert ntk.scaled_base(d, b, factor=s) == scaled.value
    freq = ntk.inv_freq(d, b, factor=s)
    _assert_bits(freq, _theta(d, scaled.value))
    # The fastest pair keeps its frequency; the slowest is divided by `factor`, to within
    # two powers (one ulp each) and the rounding of the raised base: relative errors of
    # 2**-52 + 2**-53 + 2**-52, at most 5 ulps of the result.
    assert freq[0] == 1.0
    with mpmath.workprec(PRECISION):
        exact = mpmath.power(b, mpmath.mpf(-(d - 2)) / d) / mpmath.mpf(s)
    assert _ulps(float(freq[-1]), exact) <= 5.0


def _dynamic_bases(d: int, b: float, s: float, lengths: Sequence[int], lmax: int) -> list[float]:
    """The docstring's ``base * (factor * L / L_max - (factor - 1)) ** (d / (d - 2))``."""
    stretches = [Rounded(s) * max(n, lmax) / lmax - (Rounded(s) - 1.0) for n in lengths]
    raised = _powers([stretch.value for stretch in stretches], d, d - 2)
    return [(b * power).value for power in raised]


@settings(max_examples=30, deadline=None)
@given(d=dims.filter(lambda d: d > 2), b=bases, s=factors, extra=st.integers(0, 100_000))
def test_dynamic(d: int, b: float, s: float, extra: int) -> None:
    lmax = 4096 if extra % 2 else 40960
    length = lmax + extra
    [scaled] = _dynamic_bases(d, b, s, [length], lmax)
    got = dynamic.scaled_base(d, b, factor=s, seq_len=length, max_position_embeddings=lmax)
    assert got == scaled
    freq = dynamic.inv_freq(d, b, factor=s, seq_len=length, max_position_embeddings=lmax)
    _assert_bits(freq, _theta(d, scaled))


def test_dynamic_per_length_is_each_length_alone() -> None:
    """Decoding's frequencies of 2000 lengths at once: with ``L_max`` 40960 and factor 3,
    ``f * (L / L_max)`` gives another stretch than ``f * L / L_max`` for 1600 of them."""
    d, b, s, lmax = 128, 1e4, 3.0, 40960
    lengths = np.arange(lmax - 10, lmax + 1990)
    many = dynamic.inv_freq_per_length(
        d, b, factor=s, lengths=lengths, max_position_embeddings=lmax
    )
    scaled = _dynamic_bases(d, b, s, lengths.tolist(), lmax)
    # Every 97th length against mpmath; all of them against anyrope's own powers.
    for row in range(0, len(lengths), 97):
        _assert_bits(many[row], _theta(d, scaled[row]))
    expected = hostmath.power(np.array(scaled)[:, None], -np.arange(0, d, 2), d)
    np.testing.assert_array_equal(many.view(np.uint64), expected.view(np.uint64))


@pytest.mark.parametrize("seq_len", [None, 1, 100, 4096])
def test_dynamic_is_default_up_to_max_positions(seq_len: int | None) -> None:
    got = dynamic.inv_freq(64, 10000.0, factor=4.0, seq_len=seq_len, max_position_embeddings=4096)
    np.testing.assert_array_equal(got, default.inv_freq(64, 10000.0))


def test_dynamic_frequencies_fall_as_the_sequence_grows() -> None:
    lengths = [4096, 4097, 8192, 100_000]
    slowest = [
        dynamic.inv_freq(64, 1e4, factor=2.0, seq_len=n, max_position_embeddings=4096)[-1]
        for n in lengths
    ]
    assert all(a > b for a, b in itertools.pairwise(slowest))


def _correction_dim(r: float, d: int, b: float, l0: int) -> Rounded:
    """``d * ln(L0 / (2 pi r)) / (2 ln b)``."""
    return d * _log(l0 / (Rounded(r) * 2.0 * PI)) / (2.0 * _log(b))


def _yarn(
    *,
    d: int,
    b: float,
    s: float,
    l0: int,
    fast: float = 32.0,
    slow: float = 1.0,
    truncate: bool = True,
) -> list[Rounded]:
    low, high = _correction_dim(fast, d, b, l0).value, _correction_dim(slow, d, b, l0).value
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high = (Rounded(high) + 0.001).value
    out = []
    for i, f in enumerate(_theta(d, b)):
        ramp = min(max(_float((Rounded(i) - low) / (Rounded(high) - low)), 0.0), 1.0)
        extrapolate = 1.0 - Rounded(ramp)
        out.append((f / s) * (1.0 - extrapolate) + f * extrapolate)
    return out


@settings(max_examples=40, deadline=None)
@given(
    d=dims,
    b=bases,
    s=factors,
    l0=st.sampled_from([2048, 3000, 4096, 6000, 32768]),
    fast=st.sampled_from([32.0, 24.0, 16.0, 4.0]),
    slow=st.sampled_from([1.0, 1.5, 2.0]),
    truncate=st.booleans(),
)
def test_yarn(
    *, d: int, b: float, s: float, l0: int, fast: float, slow: float, truncate: bool
) -> None:
    got = yarn.inv_freq(
        d,
        b,
        factor=s,
        original_max_position_embeddings=l0,
        beta_fast=fast,
        beta_slow=slow,
        truncate=truncate,
    )
    _assert_bits(got, _yarn(d=d, b=b, s=s, l0=l0, fast=fast, slow=slow, truncate=truncate))


def test_yarn_ramp_keeps_fast_pairs_and_interpolates_slow_pairs() -> None:
    d, b, s, l0 = 128, 10000.0, 4.0, 4096
    got = yarn.inv_freq(d, b, factor=s, original_max_position_embeddings=l0)
    base = default.inv_freq(d, b)
    low, high = yarn.correction_range(
        d, b, beta_fast=32, beta_slow=1, original_max_position_embeddings=l0, truncate=True
    )
    assert (low, high) == (20, 46)
    np.testing.assert_array_equal(got[: low + 1], base[: low + 1])
    np.testing.assert_array_equal(got[high:], base[high:] / s)
    ratio = base / got
    assert np.all(np.diff(ratio) >= 0)


def test_yarn_ramp_degenerate_range() -> None:
    np.testing.assert_array_equal(yarn.ramp(3, 3, 6), [0, 0, 0, 0, 1, 1])


def _mscale(s: float, k: float = 1.0) -> Rounded:
    """``0.1 * k * ln(s) + 1``, 1 for ``s <= 1``."""
    return Rounded(1.0) if s <= 1.0 else 0.1 * Rounded(k) * _log(s) + 1.0


@pytest.mark.parametrize(
    ("factor", "kwargs", "expected"),
    [
        (4.0, {}, lambda: _mscale(4.0)),
        (3.0, {}, lambda: _mscale(3.0)),
        (1.0, {}, lambda: 1.0),
        (0.5, {}, lambda: 1.0),
        (16.0, {"attention_factor": 1.0}, lambda: 1.0),
        (16.0, {"attention_factor": 0.8, "mscale": 1.0, "mscale_all_dim": 0.0}, lambda: 0.8),
        (40.0, {"mscale": 1.0, "mscale_all_dim": 1.0}, lambda: 1.0),
        (40.0, {"mscale": 1.0, "mscale_all_dim": 0.5}, lambda: _mscale(40.0) / _mscale(40, 0.5)),
        (3.0, {"mscale": 0.9, "mscale_all_dim": 0.6}, lambda: _mscale(3, 0.9) / _mscale(3, 0.6)),
        # one of the two missing or zero: the paper's mscale(factor) (transformers' rule)
        (16.0, {"mscale": 0.707}, lambda: _mscale(16.0)),
        (16.0, {"mscale": 1.0, "mscale_all_dim": 0.0}, lambda: _mscale(16.0)),
    ],
)
def test_yarn_attention_factor(
    factor: float, kwargs: dict[str, float], expected: Callable[[], Rounded | float]
) -> None:
    _assert_bits(yarn.attention_factor(factor, **kwargs), expected())


@settings(max_examples=60, deadline=None)
@given(s=factors, k=st.floats(0.05, 2.0), k_all=st.floats(0.05, 2.0))
def test_yarn_mscale_ratio_and_softmax_scale(s: float, k: float, k_all: float) -> None:
    """``0.1 * k * ln(s)`` is ``(0.1 * k) * ln(s)``: ``0.1 * (k * ln(s))`` differs in
    about one draw in twelve."""
    ratio = yarn.attention_factor(s, mscale=k, mscale_all_dim=k_all)
    _assert_bits(ratio, _mscale(s, k) / _mscale(s, k_all))
    scale = _mscale(s, k_all)
    _assert_bits(yarn.softmax_scale(s, mscale_all_dim=k_all), scale * scale)


def test_yarn_explicit_attention_factor_and_mscale_are_honoured() -> None:
    """A runtime that dropped them got mscale(16) = 1.2773 instead of 1.0."""
    dropped = yarn.mscale(16.0)
    assert round(dropped, 4) == 1.2773
    for extra in ({"attention_factor": 1.0}, {"mscale": 0.707, "mscale_all_dim": 0.707}):
        scaling = RopeScaling("yarn", factor=16.0, original_max_position_embeddings=4096, **extra)
        assert scaling.frequencies(64, 10000.0)[1] == 1.0


@pytest.mark.parametrize(("factor", "k"), [(40.0, 1.0), (3.0, 0.6), (5.5, 0.707)])
def test_softmax_scale(factor: float, k: float) -> None:
    scale = _mscale(factor, k)
    _assert_bits(yarn.softmax_scale(factor, mscale_all_dim=k), scale * scale)


def test_softmax_scale_without_mscale_all_dim() -> None:
    assert yarn.softmax_scale(40.0, mscale_all_dim=0.0) == 1.0
    assert RopeScaling("linear", factor=40.0).softmax_scale == 1.0


def _llama3(*, d: int, b: float, s: float, low: float, high: float, l0: int) -> list[Rounded]:
    out = []
    for f in _theta(d, b):
        wavelen = 2.0 * PI / f
        if wavelen.value > _float(l0 / Rounded(low)):
            out.append(f / s)
        elif wavelen.value < _float(l0 / Rounded(high)):
            out.append(f)
        else:
            smooth = (l0 / wavelen - low) / (Rounded(high) - low)
            out.append((1.0 - smooth) * f / s + smooth * f)
    return out


@settings(max_examples=30, deadline=None)
@given(
    d=dims,
    b=bases,
    s=factors,
    low=st.sampled_from([1.0, 0.5, 1.5, 2.0]),
    high=st.sampled_from([4.0, 5.0, 8.0]),
    l0=st.sampled_from([2048, 6000, 8192]),
)
def test_llama3(*, d: int, b: float, s: float, low: float, high: float, l0: int) -> None:
    got = llama3.inv_freq(
        d,
        b,
        factor=s,
        low_freq_factor=low,
        high_freq_factor=high,
        original_max_position_embeddings=l0,
    )
    _assert_bits(got, _llama3(d=d, b=b, s=s, low=low, high=high, l0=l0))


@settings(max_examples=30, deadline=None)
@given(d=dims, b=bases, data=st.data())
def test_longrope(d: int, b: float, data: st.DataObject) -> None:
    r = data.draw(st.lists(st.floats(0.5, 100.0), min_size=d // 2, max_size=d // 2))
    _assert_bits(
        longrope.inv_freq(d, b, factors=r), [t / ri for t, ri in zip(_theta(d, b), r, strict=True)]
    )


def test_longrope_picks_factors_by_the_sequence_at_call_time() -> None:
    """Long factors only once the sequence is longer than L0 (one runtime used L_max)."""
    scaling = RopeScaling(
        "longrope",
        short_factor=(1.0, 2.0),
        long_factor=(3.0, 4.0),
        original_max_position_embeddings=4096,
        max_position_embeddings=131072,
    )
    base = default.inv_freq(4, 10000.0)
    for seq_len, expected in [(None, (1, 2)), (1, (1, 2)), (4096, (1, 2)), (4097, (3, 4))]:
        freq, _ = scaling.frequencies(4, 10000.0, seq_len=seq_len)
        np.testing.assert_array_equal(freq, base / np.array(expected, dtype=np.float64))
    assert scaling.length_bucket(4096) != scaling.length_bucket(4097)


def _longrope_attention(s: Rounded | float, l0: int) -> Rounded:
    """``sqrt(1 + ln(s) / ln(L0))``, 1 for ``s <= 1``."""
    if _float(s) <= 1.0:
        return Rounded(1.0)
    return (1.0 + _log(s) / _log(l0)).sqrt()


@pytest.mark.parametrize(
    ("factor", "l0", "lmax", "attention", "expected"),
    [
        (None, 4096, 131072, None, lambda: _longrope_attention(Rounded(131072) / 4096, 4096)),
        (None, 3000, 100000, None, lambda: _longrope_attention(Rounded(100000) / 3000, 3000)),
        (8.0, 4096, 131072, None, lambda: _longrope_attention(8.0, 4096)),
        (3.0, 6000, 131072, None, lambda: _longrope_attention(3.0, 6000)),
        (None, 4096, 4096, None, lambda: 1.0),
        (None, 4096, 131072, 1.5, lambda: 1.5),
    ],
)
def test_longrope_attention_factor(
    factor: float | None,
    l0: int,
    lmax: int,
    attention: float | None,
    expected: Callable[[], Rounded | float],
) -> None:
    scaling = RopeScaling(
        "longrope",
        factor=factor,
        attention_factor=attention,
        short_factor=(1.0, 1.0),
        long_factor=(2.0, 2.0),
        original_max_position_embeddings=l0,
        max_position_embeddings=lmax,
    )
    for seq_len in (None, 10, 10**6):
        _assert_bits(scaling.frequencies(4, 1e4, seq_len=seq_len)[1], expected())


def test_every_method_is_float64_and_positive() -> None:
    dicts = [
        {"rope_type": "default"},
        {"rope_type": "linear", "factor": 2.0},
        {"rope_type": "ntk", "factor": 2.0},
        {"rope_type": "dynamic", "factor": 2.0},
        {"rope_type": "yarn", "factor": 2.0},
        {"rope_type": "llama3", "factor": 2.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0},
        {"rope_type": "longrope", "short_factor": [1.0] * 32, "long_factor": [2.0] * 32},
    ]
    for item in dicts:
        scaling = parse_rope_scaling(item, max_position_embeddings=2048)
        for seq_len in (None, 100, 10**5):
            freq, factor = scaling.frequencies(64, 10000.0, seq_len=seq_len)
            assert freq.dtype == np.float64
            assert freq.shape == (32,)
            assert np.all(freq > 0)
            assert factor > 0


@pytest.mark.parametrize(
    ("head_dim", "fraction", "factor"),
    [(512, 0.25, 1.0), (256, 0.5, 8.0), (64, 1.0, 2.0), (96, 0.3, 1.0), (96, 0.3, 3.0)],
)
def test_proportional(head_dim: int, fraction: float, factor: float) -> None:
    """Gemma 4: the first int(fraction * head_dim // 2) pairs keep b ** (-2i / head_dim)."""
    base = 1e6
    scaling = RopeScaling("proportional", factor=factor, partial_rotary_factor=fraction)
    got, attention_factor = scaling.frequencies(head_dim, base)
    turning = int(fraction * head_dim // 2)
    theta = _theta(head_dim, base)
    _assert_bits(got, [(t if i < turning else 0.0) / factor for i, t in enumerate(theta)])
    assert int(np.count_nonzero(got)) == turning
    assert attention_factor == 1.0
    np.testing.assert_array_equal(
        got, proportional.inv_freq(head_dim, base, fraction=fraction, factor=factor)
    )
