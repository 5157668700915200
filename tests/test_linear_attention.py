"""Linear attention with RoPE (RoFormer 3.3) against the explicit O(n**2) sum."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import anyrope
from anyrope.linear_attention import linear_attention
from anyrope.tools._backends import numpy_dtype
from attention_oracles import EPS, linear_attention_explicit


def make(backend, dtype, rng, shape, scale=1.0):
    host = (rng.standard_normal(shape) * scale).astype(numpy_dtype(dtype))
    x = backend.from_numpy(host)
    return x, backend.to_numpy(x).astype(np.float64)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(("q_heads", "kv_heads"), [(2, 2), (4, 2)], ids=["mha", "gqa"])
def test_matches_explicit_sum(backend_dtype, causal, q_heads, kv_heads):
    backend, dtype = backend_dtype
    rng = np.random.default_rng(11)
    q, q64 = make(backend, dtype, rng, (2, 7, q_heads, 8))
    k, k64 = make(backend, dtype, rng, (2, 7, kv_heads, 8))
    v, v64 = make(backend, dtype, rng, (2, 7, kv_heads, 6))
    out = linear_attention(q, k, v, rope=anyrope.RoPE(8), positions=3, causal=causal)
    assert out.dtype == q.dtype
    assert tuple(out.shape) == (2, 7, q_heads, 6)
    positions = np.arange(3, 10)
    expected = linear_attention_explicit(
        q64, k64, v64, q_positions=positions, k_positions=positions, causal=causal
    )
    got = backend.to_numpy(out).astype(np.float64)
    np.testing.assert_allclose(got, expected, rtol=0, atol=64 * EPS[dtype] * np.abs(v64).max())


def test_without_rope_is_plain_linear_attention(backend):
    rng = np.random.default_rng(12)
    q64, k64, v64 = (rng.standard_normal((1, 6, 2, 8)) for _ in range(3))
    out = linear_attention(*(backend.from_numpy(a) for a in (q64, k64, v64)), causal=True)
    expected = linear_attention_explicit(
        q64, k64, v64, q_positions=None, k_positions=None, causal=True
    )
    np.testing.assert_allclose(backend.to_numpy(out), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_fewer_queries_than_keys(backend, causal):
    rng = np.random.default_rng(13)
    q64 = rng.standard_normal((1, 2, 2, 8))
    k64, v64 = rng.standard_normal((2, 1, 9, 2, 8))
    out = linear_attention(
        *(backend.from_numpy(a) for a in (q64, k64, v64)), rope=anyrope.RoPE(8), causal=causal
    )
    expected = linear_attention_explicit(
        q64, k64, v64, q_positions=np.arange(7, 9), k_positions=np.arange(9), causal=causal
    )
    np.testing.assert_allclose(backend.to_numpy(out), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("layout", ["bhsd", "sbhd"])
def test_layouts_give_the_same_bits(layout):
    rng = np.random.default_rng(14)
    q, k, v = (rng.standard_normal((2, 5, 2, 8)) for _ in range(3))
    rope = anyrope.RoPE(8)
    reference = linear_attention(q, k, v, rope=rope, causal=True)
    move = (
        (lambda a: np.swapaxes(a, 1, 2)) if layout == "bhsd" else (lambda a: np.moveaxis(a, 1, 0))
    )
    back = (
        (lambda a: np.swapaxes(a, 1, 2)) if layout == "bhsd" else (lambda a: np.moveaxis(a, 0, 1))
    )
    got = linear_attention(move(q), move(k), move(v), rope=rope, causal=True, layout=layout)
    np.testing.assert_array_equal(back(got), reference)


def test_callable_feature_map():
    rng = np.random.default_rng(15)
    q, k, v = (rng.standard_normal((1, 4, 1, 8)) for _ in range(3))
    got = linear_attention(q, k, v, feature_map=lambda x: x * x + 1.0)
    fq, fk = q * q + 1.0, k * k + 1.0
    weights = np.einsum("bmhd,bnhd->bhmn", fq, fk)
    expected = (
        np.einsum("bhmn,bnhd->bmhd", weights, v) / weights.sum(-1).transpose(0, 2, 1)[..., None]
    )
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def test_large_inputs_stay_finite():
    """elu+1 never exponentiates a large positive input, and the denominator stays > 0."""
    rng = np.random.default_rng(16)
    q, k = (rng.standard_normal((1, 8, 2, 8)) * 1e3 for _ in range(2))
    v = rng.standard_normal((1, 8, 2, 8))
    out = linear_attention(
        q.astype(np.float32), k.astype(np.float32), v.astype(np.float32), rope=anyrope.RoPE(8)
    )
    assert np.all(np.isfinite(out))


@settings(max_examples=20, deadline=None)
@given(shift=st.integers(0, 10**6), seed=st.integers(0, 2**32 - 1), causal=st.booleans())
def test_output_invariant_under_a_common_shift(shift, seed, causal):
    """RoFormer 3.3: the rotated numerator depends only on m - n; the denominator has no
    positions at all."""
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((1, 6, 2, 16)) for _ in range(3))
    rope = anyrope.RoPE(16)
    base = linear_attention(q, k, v, rope=rope, causal=causal)
    shifted = linear_attention(q, k, v, rope=rope, positions=shift, causal=causal)
    np.testing.assert_allclose(shifted, base, rtol=0, atol=1e-8)


def test_errors():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 4, 2, 8)) for _ in range(3))
    with pytest.raises(ValueError, match="`feature_map` must be one of"):
        linear_attention(q, k, v, feature_map="relu")
    with pytest.raises(ValueError, match="`feature_map` must return"):
        linear_attention(q, k, v, feature_map=lambda x: x[..., :2])
    with pytest.raises(ValueError, match="without `rope`"):
        linear_attention(q, k, v, positions=2)
    with pytest.raises(TypeError, match="`causal`"):
        linear_attention(q, k, v, causal=1)
    with pytest.raises(TypeError, match="share one dtype"):
        linear_attention(q, k, v.astype(np.float32))
