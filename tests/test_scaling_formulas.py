"""Each scaling method against its formula (features.md, section 2), written out per pair.

The expected values here are scalar float64 loops over the pair index with ``math``,
deliberately unlike the vectorised NumPy code in ``anyrope.scaling``; they agree to a
few float64 ulps. transformers itself is the oracle in test_transformers_parity.py.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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

RTOL = 1e-14

dims = st.integers(min_value=2, max_value=128).map(lambda n: 2 * n)
bases = st.sampled_from([10000.0, 500000.0, 1e6, 1234.5])
factors = st.floats(min_value=1.0, max_value=64.0)


def _default(d: int, b: float) -> list[float]:
    return [b ** (-2 * i / d) for i in range(d // 2)]


def _close(actual: np.ndarray, expected: list[float], rtol: float = RTOL) -> None:
    assert actual.dtype == np.float64
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=0)


@settings(max_examples=30, deadline=None)
@given(d=dims, b=bases)
def test_default(d: int, b: float) -> None:
    _close(default.inv_freq(d, b), _default(d, b))


@settings(max_examples=30, deadline=None)
@given(d=dims, b=bases, s=factors)
def test_linear(d: int, b: float, s: float) -> None:
    _close(linear.inv_freq(d, b, factor=s), [f / s for f in _default(d, b)])


@settings(max_examples=30, deadline=None)
@given(d=dims, b=bases, s=factors)
def test_ntk(d: int, b: float, s: float) -> None:
    scaled = b * s ** (d / (d - 2))
    _close(ntk.inv_freq(d, b, factor=s), _default(d, scaled))
    freq = ntk.inv_freq(d, b, factor=s)
    # the fastest pair keeps its frequency, the slowest is divided by exactly `factor`
    assert freq[0] == 1.0
    assert math.isclose(freq[-1], _default(d, b)[-1] / s, rel_tol=1e-12)


@settings(max_examples=30, deadline=None)
@given(d=dims, b=bases, s=factors, extra=st.integers(0, 100_000))
def test_dynamic(d: int, b: float, s: float, extra: int) -> None:
    lmax = 4096
    length = lmax + extra
    scaled = b * ((s * length / lmax) - (s - 1)) ** (d / (d - 2))
    got = dynamic.inv_freq(d, b, factor=s, seq_len=length, max_position_embeddings=lmax)
    _close(got, _default(d, scaled))


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


def _yarn(
    *,
    d: int,
    b: float,
    s: float,
    l0: int,
    fast: float = 32.0,
    slow: float = 1.0,
    truncate: bool = True,
) -> list[float]:
    def corr(r: float) -> float:
        return d * math.log(l0 / (2 * math.pi * r)) / (2 * math.log(b))

    low, high = corr(fast), corr(slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001
    out = []
    for i, f in enumerate(_default(d, b)):
        ramp = min(max((i - low) / (high - low), 0.0), 1.0)
        extrapolate = 1 - ramp
        out.append((f / s) * (1 - extrapolate) + f * extrapolate)
    return out


@settings(max_examples=40, deadline=None)
@given(
    d=dims,
    b=bases,
    s=factors,
    l0=st.sampled_from([2048, 4096, 32768]),
    fast=st.sampled_from([32.0, 16.0, 4.0]),
    slow=st.sampled_from([1.0, 2.0]),
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
    _close(got, _yarn(d=d, b=b, s=s, l0=l0, fast=fast, slow=slow, truncate=truncate))


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
    np.testing.assert_allclose(yarn.ramp(3, 3, 6), [0, 0, 0, 0, 1, 1])


@pytest.mark.parametrize(
    ("factor", "kwargs", "expected"),
    [
        (4.0, {}, 0.1 * math.log(4.0) + 1),
        (1.0, {}, 1.0),
        (0.5, {}, 1.0),
        (16.0, {"attention_factor": 1.0}, 1.0),
        (16.0, {"attention_factor": 0.8, "mscale": 1.0, "mscale_all_dim": 0.0}, 0.8),
        (40.0, {"mscale": 1.0, "mscale_all_dim": 1.0}, 1.0),
        (
            40.0,
            {"mscale": 1.0, "mscale_all_dim": 0.5},
            (0.1 * math.log(40) + 1) / (0.05 * math.log(40) + 1),
        ),
        # one of the two missing or zero: the paper's mscale(factor) (transformers' rule)
        (16.0, {"mscale": 0.707}, 0.1 * math.log(16.0) + 1),
        (16.0, {"mscale": 1.0, "mscale_all_dim": 0.0}, 0.1 * math.log(16.0) + 1),
    ],
)
def test_yarn_attention_factor(factor: float, kwargs: dict[str, float], expected: float) -> None:
    assert math.isclose(yarn.attention_factor(factor, **kwargs), expected, rel_tol=1e-15)


def test_yarn_explicit_attention_factor_and_mscale_are_honoured() -> None:
    """A runtime that dropped them got mscale(16) = 1.2773 instead of 1.0."""
    dropped = yarn.mscale(16.0)
    assert round(dropped, 4) == 1.2773
    for extra in ({"attention_factor": 1.0}, {"mscale": 0.707, "mscale_all_dim": 0.707}):
        scaling = RopeScaling("yarn", factor=16.0, original_max_position_embeddings=4096, **extra)
        assert scaling.frequencies(64, 10000.0)[1] == 1.0


def test_softmax_scale() -> None:
    expected = (0.1 * 1.0 * math.log(40.0) + 1.0) ** 2
    assert math.isclose(yarn.softmax_scale(40.0, mscale_all_dim=1.0), expected, rel_tol=1e-15)
    assert yarn.softmax_scale(40.0, mscale_all_dim=0.0) == 1.0
    assert RopeScaling("linear", factor=40.0).softmax_scale == 1.0


def _llama3(*, d: int, b: float, s: float, low: float, high: float, l0: int) -> list[float]:
    out = []
    for f in _default(d, b):
        wavelen = 2 * math.pi / f
        if wavelen > l0 / low:
            out.append(f / s)
        elif wavelen < l0 / high:
            out.append(f)
        else:
            smooth = (l0 / wavelen - low) / (high - low)
            out.append((1 - smooth) * f / s + smooth * f)
    return out


@settings(max_examples=30, deadline=None)
@given(
    d=dims,
    b=bases,
    s=factors,
    low=st.sampled_from([1.0, 0.5, 2.0]),
    high=st.sampled_from([4.0, 8.0]),
    l0=st.sampled_from([2048, 8192]),
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
    # Between the two wavelength limits the result blends f / s and f by
    # smooth = (l0 / wavelen - low) / (high - low): the few ulp by which the reference's
    # wavelength differs (math.pi against anyrope's own pi) move smooth by up to
    # high / (high - low) ulp, and the result, at least f / s, by s times that relative to
    # itself.
    blend = 4 * np.finfo(np.float64).eps * s * high / (high - low)
    _close(got, _llama3(d=d, b=b, s=s, low=low, high=high, l0=l0), rtol=RTOL + blend)


@settings(max_examples=30, deadline=None)
@given(d=dims, b=bases, data=st.data())
def test_longrope(d: int, b: float, data: st.DataObject) -> None:
    r = data.draw(st.lists(st.floats(0.5, 100.0), min_size=d // 2, max_size=d // 2))
    _close(
        longrope.inv_freq(d, b, factors=r), [1 / (ri * b ** (2 * i / d)) for i, ri in enumerate(r)]
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


@pytest.mark.parametrize(
    ("factor", "lmax", "attention", "expected"),
    [
        (None, 131072, None, math.sqrt(1 + math.log(32) / math.log(4096))),
        (8.0, 131072, None, math.sqrt(1 + math.log(8) / math.log(4096))),
        (None, 4096, None, 1.0),
        (None, 131072, 1.5, 1.5),
    ],
)
def test_longrope_attention_factor(
    factor: float | None, lmax: int, attention: float | None, expected: float
) -> None:
    scaling = RopeScaling(
        "longrope",
        factor=factor,
        attention_factor=attention,
        short_factor=(1.0, 1.0),
        long_factor=(2.0, 2.0),
        original_max_position_embeddings=4096,
        max_position_embeddings=lmax,
    )
    for seq_len in (None, 10, 10**6):
        assert math.isclose(
            scaling.frequencies(4, 1e4, seq_len=seq_len)[1], expected, rel_tol=1e-15
        )


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
    [(512, 0.25, 1.0), (256, 0.5, 8.0), (64, 1.0, 2.0), (96, 0.3, 1.0)],
)
def test_proportional(head_dim: int, fraction: float, factor: float) -> None:
    """Gemma 4: the first int(fraction * head_dim // 2) pairs keep b ** (-2i / head_dim)."""
    base = 1e6
    scaling = RopeScaling("proportional", factor=factor, partial_rotary_factor=fraction)
    got, attention_factor = scaling.frequencies(head_dim, base)
    turning = int(fraction * head_dim // 2)
    expected = [
        (base ** (-2 * i / head_dim) if i < turning else 0.0) / factor for i in range(head_dim // 2)
    ]
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=0)
    assert int(np.count_nonzero(got)) == turning
    assert attention_factor == 1.0
    np.testing.assert_array_equal(
        got, proportional.inv_freq(head_dim, base, fraction=fraction, factor=factor)
    )
