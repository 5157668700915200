"""Softmax attention with RoPE against a float64 oracle, and RoFormer's claims as properties."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import anyrope
from anyrope.attention import attention, relative_decay_bound
from anyrope.tools._backends import numpy_dtype
from attention_oracles import EPS, causal_allowed, rotate_complex, softmax_attention

LAYOUT_TO_BSHD = {
    "bshd": lambda a: a,
    "bhsd": lambda a: np.swapaxes(a, -2, -3),
    "sbhd": lambda a: np.moveaxis(a, 0, -3),
}
BSHD_TO_LAYOUT = {
    "bshd": lambda a: a,
    "bhsd": lambda a: np.swapaxes(a, -2, -3),
    "sbhd": lambda a: np.moveaxis(a, -3, 0),
}


def make(backend, dtype, rng, shape, scale=1.0):
    """An input on ``backend`` in ``dtype`` and its exact float64 value on the host."""
    host = (rng.standard_normal(shape) * scale).astype(numpy_dtype(dtype))
    x = backend.from_numpy(host)
    return x, backend.to_numpy(x).astype(np.float64)


def tolerance(dtype, magnitude=1.0):
    return 16 * EPS[dtype] * magnitude


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(
    ("q_heads", "kv_heads"), [(4, 4), (4, 2), (4, 1)], ids=["mha", "gqa", "mqa"]
)
def test_matches_float64_oracle(backend_dtype, causal, q_heads, kv_heads):
    backend, dtype = backend_dtype
    rng = np.random.default_rng(7)
    q, q64 = make(backend, dtype, rng, (2, 9, q_heads, 16))
    k, k64 = make(backend, dtype, rng, (2, 9, kv_heads, 16))
    v, v64 = make(backend, dtype, rng, (2, 9, kv_heads, 8))
    rope = anyrope.RoPE(16)
    out = attention(q, k, v, rope=rope, positions=5, causal=causal)
    assert out.dtype == q.dtype
    assert tuple(out.shape) == (2, 9, q_heads, 8)
    positions = np.arange(5, 14)
    expected = softmax_attention(
        rotate_complex(q64, positions), rotate_complex(k64, positions), v64, causal=causal
    )
    got = backend.to_numpy(out).astype(np.float64)
    np.testing.assert_allclose(got, expected, rtol=0, atol=tolerance(dtype, np.abs(v64).max()))


@pytest.mark.parametrize("layout", ["bshd", "bhsd", "sbhd"])
def test_layouts_give_the_same_bits(backend, layout):
    rng = np.random.default_rng(1)
    q64, k64, v64 = (rng.standard_normal((2, 6, 3, 8)) for _ in range(3))
    rope = anyrope.RoPE(8)
    reference = backend.to_numpy(
        attention(*(backend.from_numpy(a) for a in (q64, k64, v64)), rope=rope, causal=True)
    )
    inputs = (
        backend.from_numpy(np.ascontiguousarray(BSHD_TO_LAYOUT[layout](a))) for a in (q64, k64, v64)
    )
    got = backend.to_numpy(attention(*inputs, rope=rope, causal=True, layout=layout))
    np.testing.assert_array_equal(LAYOUT_TO_BSHD[layout](got), reference)


def test_positions_array_per_batch_row(backend):
    rng = np.random.default_rng(2)
    q64, k64, v64 = (rng.standard_normal((2, 5, 2, 8)) for _ in range(3))
    positions = np.array([[0, 1, 2, 3, 4], [7, 9, 11, 13, 20]], dtype=np.int64)
    xp = backend.xp
    out = attention(
        *(backend.from_numpy(a) for a in (q64, k64, v64)),
        rope=anyrope.RoPE(8),
        positions=xp.asarray(positions, device=backend.from_numpy(q64).device),
    )
    expected = softmax_attention(
        rotate_complex(q64, positions), rotate_complex(k64, positions), v64
    )
    np.testing.assert_allclose(backend.to_numpy(out), expected, rtol=0, atol=1e-12)


def test_decode_with_fewer_queries_than_keys(backend):
    """q_seq < k_seq: queries take the last positions and the causal mask ends aligned."""
    rng = np.random.default_rng(3)
    q64 = rng.standard_normal((1, 3, 2, 8))
    k64, v64 = rng.standard_normal((2, 1, 10, 2, 8))
    rope = anyrope.RoPE(8)
    out = attention(*(backend.from_numpy(a) for a in (q64, k64, v64)), rope=rope, causal=True)
    expected = softmax_attention(
        rotate_complex(q64, np.arange(7, 10)), rotate_complex(k64, np.arange(10)), v64, causal=True
    )
    np.testing.assert_allclose(backend.to_numpy(out), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_inputs_are_rounded_once_at_the_end(backend, dtype):
    """float16 and bfloat16: the rotation and the attention run in float32 on the exact
    values of the inputs, and only the output is rounded to the inputs' dtype."""
    if dtype not in backend.dtype_names:
        pytest.skip(f"{backend.name} has no {dtype}")
    xp = backend.xp
    rng = np.random.default_rng(11)
    q, k, v = (make(backend, dtype, rng, (1, 16, 2, 32), scale=4.0)[0] for _ in range(3))
    rope = anyrope.RoPE(32)
    got = attention(q, k, v, rope=rope, causal=True)
    wide = attention(*(xp.astype(a, xp.float32) for a in (q, k, v)), rope=rope, causal=True)
    np.testing.assert_array_equal(backend.to_bits(got), backend.to_bits(xp.astype(wide, q.dtype)))


def test_xpos_decode_step_is_the_last_row_of_the_prefill(backend):
    """Fewer queries than keys with XPos: queries scaled by the amplitude, keys divided."""
    rng = np.random.default_rng(12)
    q, k, v = (backend.from_numpy(rng.standard_normal((1, 6, 2, 16))) for _ in range(3))
    xpos = anyrope.XPos(16)
    full = attention(q, k, v, rope=xpos, causal=True)
    step = attention(q[:, -1:, ...], k, v, rope=xpos, causal=True)
    np.testing.assert_allclose(
        backend.to_numpy(step), backend.to_numpy(full)[:, -1:], rtol=0, atol=1e-12
    )


@pytest.mark.parametrize("kind", ["bool", "additive"])
def test_mask(backend, kind):
    rng = np.random.default_rng(4)
    q64, k64, v64 = (rng.standard_normal((2, 6, 2, 8)) for _ in range(3))
    allowed = rng.random((2, 1, 6, 6)) < 0.6
    allowed[0, 0, 2, :] = False  # a query with no key at all gives zeros
    host_mask = allowed if kind == "bool" else np.where(allowed, 0.0, -np.inf)
    q, k, v = (backend.from_numpy(a) for a in (q64, k64, v64))
    mask = backend.xp.asarray(host_mask, device=q.device)
    out = backend.to_numpy(attention(q, k, v, mask=mask, causal=True))
    expected = softmax_attention(q64, k64, v64, allowed=allowed, causal=True)
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-12)
    assert np.all(out[0, 2, :, :] == 0)


def test_scale(backend):
    rng = np.random.default_rng(5)
    q64, k64, v64 = (rng.standard_normal((1, 4, 1, 8)) for _ in range(3))
    out = attention(*(backend.from_numpy(a) for a in (q64, k64, v64)), scale=0.25)
    expected = softmax_attention(q64, k64, v64, scale=0.25)
    np.testing.assert_allclose(backend.to_numpy(out), expected, rtol=0, atol=1e-12)


def test_default_scale_is_the_one_the_model_expects(backend):
    """DeepSeek's YaRN multiplies the softmax scale by ``mscale ** 2`` (transformers'
    ``yarn_apply_mscale``): the default scale takes ``rope.softmax_scale`` (it was
    ``1 / sqrt(head_dim)`` whatever the rope)."""
    deepseek = anyrope.RoPE(
        8,
        interleaved=True,
        scaling={
            "rope_type": "yarn",
            "factor": 40.0,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
            "original_max_position_embeddings": 64,
        },
    )
    assert deepseek.softmax_scale > 1.5
    rng = np.random.default_rng(6)
    q64, k64, v64 = (rng.standard_normal((1, 5, 2, 8)) for _ in range(3))
    q, k, v = (backend.from_numpy(a) for a in (q64, k64, v64))
    rq, rk = (backend.to_numpy(a) for a in deepseek(q, k))
    expected = softmax_attention(rq, rk, v64, causal=True, scale=deepseek.softmax_scale / 8**0.5)
    got = attention(q, k, v, rope=deepseek, causal=True)
    np.testing.assert_allclose(backend.to_numpy(got), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("causal", [False, True])
def test_empty_sequences_give_an_empty_result(backend, causal):
    q = backend.from_numpy(np.zeros((2, 0, 4, 8)))
    k = backend.from_numpy(np.zeros((2, 0, 2, 8)))
    v = backend.from_numpy(np.zeros((2, 0, 2, 6)))
    out = attention(q, k, v, rope=anyrope.RoPE(8), causal=causal)
    assert tuple(out.shape) == (2, 0, 4, 6)
    assert out.dtype == q.dtype


def test_large_scores_do_not_overflow(backend):
    """Max subtraction: scores near float32's exp overflow still give finite weights."""
    rng = np.random.default_rng(6)
    q, q64 = make(backend, "float32", rng, (1, 5, 2, 8), scale=40.0)
    k, k64 = make(backend, "float32", rng, (1, 5, 2, 8), scale=40.0)
    v, v64 = make(backend, "float32", rng, (1, 5, 2, 8))
    got = backend.to_numpy(attention(q, k, v, rope=anyrope.RoPE(8)))
    positions = np.arange(5)
    expected = softmax_attention(
        rotate_complex(q64, positions), rotate_complex(k64, positions), v64
    )
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-3)


def test_torch_scaled_dot_product_attention_agrees():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(8)
    q, k, v = (torch.from_numpy(rng.standard_normal((2, 7, h, 16))) for h in (4, 2, 2))
    rope = anyrope.RoPE(16)
    out = attention(q, k, v, rope=rope, causal=True)
    q2, k2 = rope(q, k)
    reference = torch.nn.functional.scaled_dot_product_attention(
        *(a.transpose(1, 2) for a in (q2, k2, v)), is_causal=True, enable_gqa=True
    ).transpose(1, 2)
    torch.testing.assert_close(out, reference, rtol=0, atol=1e-12)


@settings(max_examples=30, deadline=None)
@given(
    m=st.integers(0, 4096),
    n=st.integers(0, 4096),
    shift=st.integers(0, 10**6),
    seed=st.integers(0, 2**32 - 1),
)
def test_score_depends_only_on_relative_position(m, n, shift, seed):
    """RoFormer eq. 16: (R_m q) . (R_n k) is unchanged when m and n shift together."""
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal((2, 1, 1, 64))
    rope = anyrope.RoPE(64)

    def score(a, b):
        return float(np.sum(rope.rotate(q, a) * rope.rotate(k, b)))

    # float64 angles of positions up to 10**6 carry ~1e-10 absolute error.
    assert math.isclose(score(m, n), score(m + shift, n + shift), rel_tol=1e-9, abs_tol=1e-9)


@settings(max_examples=20, deadline=None)
@given(shift=st.integers(0, 10**6), seed=st.integers(0, 2**32 - 1))
def test_attention_output_invariant_under_a_common_shift(shift, seed):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((1, 6, 2, 16)) for _ in range(3))
    rope = anyrope.RoPE(16)
    base = attention(q, k, v, rope=rope, causal=True)
    shifted = attention(q, k, v, rope=rope, positions=shift, causal=True)
    np.testing.assert_allclose(shifted, base, rtol=0, atol=1e-8)


def test_decay_bound_at_zero_distance():
    for dim in (16, 64, 128):
        assert relative_decay_bound(np.array([0]), dim)[0] == pytest.approx((dim / 2 + 1) / 2)


@pytest.mark.parametrize("base", [1e4, 1e5, 1e6])
@pytest.mark.parametrize("dim", [32, 64, 128, 256])
def test_decay_bound_decreases_on_average(dim, base):
    """RoFormer 3.4.3: the bound oscillates, but its mean over each octave of distances
    [2**j, 2**(j+1)) decreases (checked up to 2048)."""
    bound = relative_decay_bound(np.arange(2048), dim, base=base)
    edges = [0, *(2**j for j in range(12))]
    means = [bound[lo:hi].mean() for lo, hi in itertools.pairwise(edges)]
    assert all(later < earlier for earlier, later in itertools.pairwise(means))
    assert np.all(bound <= bound[0])


@settings(max_examples=40, deadline=None)
@given(
    m=st.integers(0, 10**5),
    n=st.integers(0, 10**5),
    dim=st.sampled_from([8, 32, 128]),
    seed=st.integers(0, 2**32 - 1),
)
def test_decay_bound_bounds_the_score(m, n, dim, seed):
    """|(R_m q) . (R_n k)| <= max_i |h_{i+1} - h_i| * sum_j |S_j| (Abel summation)."""
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal((2, 1, 1, dim))
    rope = anyrope.RoPE(dim, interleaved=True)
    score = float(np.sum(rope.rotate(q, m) * rope.rotate(k, n)))
    h = (q[0, 0, 0::2] + 1j * q[0, 0, 1::2]) * np.conj(k[0, 0, 0::2] + 1j * k[0, 0, 1::2])
    steps = np.abs(np.diff(np.append(h, 0)))
    bound = steps.max() * (dim // 2) * relative_decay_bound(np.array([m - n]), dim)[0]
    assert abs(score) <= bound * (1 + 1e-9) + 1e-9


def test_errors():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 4, 2, 8)) for _ in range(3))
    with pytest.raises(TypeError, match="share one dtype"):
        attention(q, k.astype(np.float32), v)
    with pytest.raises(ValueError, match="multiple of the heads"):
        attention(q, rng.standard_normal((1, 4, 3, 8)), rng.standard_normal((1, 4, 3, 8)))
    with pytest.raises(ValueError, match=r"the heads of `q` \(0\) must be a positive multiple"):
        attention(q[:, :, :0], k, v)
    with pytest.raises(ValueError, match="without `rope`"):
        attention(q, k, v, positions=3)
    with pytest.raises(ValueError, match="`mask` must broadcast"):
        attention(q, k, v, mask=np.ones((3, 4), dtype=bool))
    with pytest.raises(ValueError, match="more tokens"):
        attention(rng.standard_normal((1, 5, 2, 8)), k, v)
    with pytest.raises(ValueError, match="q_seq == k_seq"):
        attention(q[:, :2], k, v, rope=anyrope.RoPE(8), positions=3)
    with pytest.raises(ValueError, match="`layout`"):
        attention(q, k, v, layout="bsdh")
    with pytest.raises(TypeError, match="`scale`"):
        attention(q, k, v, scale="0.5")
    with pytest.raises(TypeError, match="real floating"):
        attention(q.astype(np.int32), k, v)
    with pytest.raises(ValueError, match="head_dim"):
        attention(q, k, v, rope=anyrope.RoPE(16))
    with pytest.raises(TypeError, match="`mask` must be boolean or real floating"):
        attention(q, k, v, mask=np.ones((4, 4), dtype=np.int64))


@pytest.mark.parametrize(
    "scale",
    [math.nan, math.inf, -math.inf, 0.0, 0, -0.0, -0.5, -1, np.float32("nan"), 10**400],
)
def test_scale_must_be_finite_and_positive(scale):
    """A NaN, infinite, zero or negative scale raises instead of returning NaN or junk."""
    q, k, v = (np.ones((1, 4, 2, 8)) for _ in range(3))
    with pytest.raises(ValueError, match="`scale` must be a finite number greater than 0") as e:
        attention(q, k, v, scale=scale)
    assert str(e.value).endswith(f"; got {scale!r}")


def test_nan_scale_message():
    q, k, v = (np.ones((1, 4, 2, 8)) for _ in range(3))
    with pytest.raises(ValueError, match=r"`scale` .* got nan$"):
        attention(q, k, v, scale=float("nan"), rope=anyrope.RoPE(8))


@pytest.mark.parametrize("scale", [True, False, "0.5", 1 + 0j, [0.5], np.array(0.5)])
def test_scale_must_be_a_real_number(scale):
    q, k, v = (np.ones((1, 4, 2, 8)) for _ in range(3))
    with pytest.raises(TypeError, match="`scale` must be a real number or None; got ") as e:
        attention(q, k, v, scale=scale)
    assert f"got {scale!r} of type {type(scale).__name__}" in str(e.value)


@pytest.mark.parametrize("scale", [None, 2, 0.25, np.float32(0.25), np.float64(0.25), 1e-30])
def test_scale_accepted(scale):
    rng = np.random.default_rng(0)
    q64, k64, v64 = (rng.standard_normal((1, 4, 2, 8)) for _ in range(3))
    out = attention(q64, k64, v64, scale=scale)
    expected = softmax_attention(q64, k64, v64, scale=1 / math.sqrt(8) if scale is None else scale)
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)


def test_causal_mask_helper_matches_oracle():
    from anyrope.attention import causal_mask

    xp = anyrope._namespace.namespace_of(np.empty(1))
    np.testing.assert_array_equal(causal_mask(3, 7, xp, "cpu"), causal_allowed(3, 7))
