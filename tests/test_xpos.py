"""xPos (anyrope.XPos): amplitudes against a float64 formula and rotary-embedding-torch, the
relative property, the inverse, every path and backend with the same bits, clear errors."""

from __future__ import annotations

import copy
import importlib.util
import pickle
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import anyrope
from anyrope._amplitude import Amplitude
from anyrope._hostmath import power, sincos
from anyrope.tools._backends import extra_backends, numpy_dtype
from oracles import complex_rotation, pair_index

SETTINGS = settings(max_examples=30, deadline=None)
TOLERANCE = {"float16": 4e-3, "bfloat16": 2e-2, "float32": 2e-6, "float64": 1e-13}


def amplitude_oracle(positions, *, rotary_dim, scale_base, center, sign=1):
    """``zeta_i ** (sign (m - center) / scale_base)`` at 60 bits, for ``zeta_i`` the
    float64 nearest the exact fraction (an exponent ``e`` turns its half-ulp rounding into
    ``e / 2`` ulp of the amplitude, inherent in any float ``zeta``)."""
    positions = np.asarray(positions)
    out = np.empty((*positions.shape, rotary_dim // 2))
    with mpmath.workprec(60):
        for index, m in np.ndenumerate(positions):
            for i in range(rotary_dim // 2):
                zeta = mpmath.mpf(float(Fraction(10 * i + 2 * rotary_dim, 7 * rotary_dim)))
                exponent = mpmath.mpf(sign * (int(m) - center)) / scale_base
                out[(*index, i)] = float(zeta**exponent)
    return out


def xpos_oracle(x, positions, *, rotary_dim, interleaved, scale_base, center, sign=1, turn=1):
    """Rotate by ``turn`` times the angle (RoFormer's complex form) and multiply each pair
    by its amplitude (``sign`` -1: divide)."""
    positions = np.asarray(positions)
    y = complex_rotation(x, turn * positions, rotary_dim=rotary_dim, interleaved=interleaved)
    scale = amplitude_oracle(
        positions, rotary_dim=rotary_dim, scale_base=scale_base, center=center, sign=sign
    )[..., None, :]
    for index in pair_index(rotary_dim, interleaved):
        y[..., index] *= scale
    return y


def _close(actual, expected, dtype):
    """Within the dtype's rounding of the result, measured against the largest value."""
    bound = TOLERANCE[dtype] * max(1.0, float(np.max(np.abs(expected))))
    np.testing.assert_allclose(np.asarray(actual, dtype=np.float64), expected, rtol=0, atol=bound)


def _host(y):
    """A NumPy result as :meth:`Backend.to_numpy` gives it (bfloat16 widened to float32)."""
    return y.astype(np.float32) if y.dtype.name == "bfloat16" else y


def _inputs(dtype, shape=(2, 9, 3, 16), seed=0):
    x = np.random.default_rng(seed).standard_normal(shape)
    return x.astype(numpy_dtype(dtype)).astype(np.float64), x.astype(numpy_dtype(dtype))


@pytest.mark.parametrize("interleaved", [False, True], ids=["half-split", "interleaved"])
@pytest.mark.parametrize(
    ("rotary_dim", "positions"),
    [(16, None), (16, 1000), (8, "array")],
    ids=["full-range", "full-offset", "partial-array"],
)
def test_matches_the_formula(backend_dtype, interleaved, rotary_dim, positions):
    backend, dtype = backend_dtype
    exact, x = _inputs(dtype)
    xpos = anyrope.XPos(
        16, scale_base=512, center=5, rotary_dim=rotary_dim, interleaved=interleaved
    )
    host_positions = np.broadcast_to(np.arange(9), (2, 9))
    given_positions: object = positions
    if positions == 1000:
        host_positions = host_positions + 1000
    elif positions == "array":
        host_positions = np.array([[3, 0, 77, 77, 200, 1, 9, 30, 31], [0] * 9], dtype=np.int64)
        given_positions = backend.from_numpy(host_positions)
    x_b = backend.from_numpy(x)
    q2, k2 = xpos(x_b, x_b, given_positions)
    settings_ = {"rotary_dim": rotary_dim, "interleaved": interleaved, "scale_base": 512}
    for y, sign in ((q2, 1), (k2, -1)):
        expected = xpos_oracle(exact, host_positions, center=5, sign=sign, **settings_)
        _close(backend.to_numpy(y), expected, dtype)
        # Features beyond the rotary width are copied bit for bit.
        np.testing.assert_array_equal(backend.to_numpy(y)[..., rotary_dim:], x[..., rotary_dim:])


def test_every_backend_and_path_gives_the_bits_of_numpy(backend_dtype):
    backend, dtype = backend_dtype
    _, x = _inputs(dtype, shape=(2, 40, 2, 24), seed=1)
    xpos = anyrope.XPos(24, scale_base=32, center=20, rotary_dim=16)
    positions = np.random.default_rng(2).integers(0, 3000, size=(2, 40))
    reference = [
        np.asarray(y) for y in xpos(x, x[:, :, :1], positions, impl="array_api")
    ]  # NumPy, the standard-only path
    paths = ["auto", "array_api"]
    if backend.name == "numpy":
        paths += ["blocked"] + (["numba"] if importlib.util.find_spec("numba") else [])
    for impl in paths:
        q2, k2 = xpos(
            backend.from_numpy(x),
            backend.from_numpy(np.ascontiguousarray(x[:, :, :1])),
            backend.from_numpy(positions),
            impl=impl,
        )
        np.testing.assert_array_equal(backend.to_numpy(q2), _host(reference[0]), strict=True)
        np.testing.assert_array_equal(backend.to_numpy(k2), _host(reference[1]), strict=True)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_tables_are_the_float64_product_rounded_once(dtype):
    """A unit vector comes out as the table entries: cos * a and sin * a, each the float64
    product of the host math rounded once to the table dtype (as the attention factor)."""
    xpos = anyrope.XPos(2, scale_base=7, center=3)
    x = np.zeros((20, 1, 2), dtype=dtype)
    x[..., 0] = 1.0
    m = np.arange(100, 120, dtype=np.float64)
    sin, cos = sincos(m * xpos.inv_freq[0])
    for y, sign in ((xpos.rotate_queries(x, 100), 1), (xpos.rotate_keys(x, 100), -1)):
        scale = power(2 / 7, sign * (m - 3), 7)
        np.testing.assert_array_equal(y[:, 0, 0], (cos * scale).astype(dtype))
        np.testing.assert_array_equal(y[:, 0, 1], (sin * scale).astype(dtype))
    expected = amplitude_oracle(m, rotary_dim=2, scale_base=7, center=3)[:, 0]
    np.testing.assert_allclose(power(2 / 7, m - 3, 7), expected, rtol=2**-52, atol=0)


def test_zeta_is_the_exact_fraction_rounded_once():
    xpos = anyrope.XPos(96, rotary_dim=40)
    expected = [
        float(Fraction(2 * i + Fraction(2, 5) * 40, Fraction(7, 5) * 40)) for i in range(20)
    ]
    assert xpos.zeta.tolist() == expected
    assert not xpos.zeta.flags.writeable


def test_amplitude_beyond_2_to_40_is_within_one_ulp():
    """|m - center| may pass the 2**40 that the host power states: still within an ulp."""
    amplitude = Amplitude(2**20, 2**30, 3, 1)
    m = np.array([2.0**45, 2.0**52 - 1.0, 2.0**41 + 5.0])
    values = amplitude(m)
    pairs = [0, 1000, 2**19 - 1]
    with mpmath.workprec(120):
        for row, position in enumerate(m):
            for i in pairs:
                zeta = mpmath.mpf(float(Fraction(10 * i + 2 * 2**20, 7 * 2**20)))
                exact = zeta ** (mpmath.mpf(int(position) - 3) / 2**30)
                if exact < 1e-300:
                    assert values[row, i] < 1e-290
                    continue
                error = abs(mpmath.mpf(float(values[row, i])) - exact) / exact
                assert error <= 2**-52, (position, i, float(error))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(
    ("dim", "rotary_dim", "seq", "scale_base"),
    [(32, 32, 64, 512), (64, 64, 257, 16), (48, 16, 100, 8)],
    ids=["d32-seq64", "d64-seq257-scale16", "partial-16-of-48"],
)
def test_matches_rotary_embedding_torch(dtype, dim, rotary_dim, seq, scale_base):
    torch = pytest.importorskip("torch")
    ret = pytest.importorskip(
        "rotary_embedding_torch", reason="rotary-embedding-torch==0.9.1 is the peer oracle"
    )
    torch_dtype = getattr(torch, dtype)
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(2, 3, seq, dim, generator=generator, dtype=torch_dtype)
    k = torch.randn(2, 1, seq, dim, generator=generator, dtype=torch_dtype)
    # A fresh module per call: it caches its scales for the first length it meets.
    peer = ret.RotaryEmbedding(rotary_dim, use_xpos=True, xpos_scale_base=scale_base)
    q_peer, k_peer = peer.rotate_queries_and_keys(q, k)
    xpos = anyrope.XPos(
        dim, scale_base=scale_base, center=seq // 2, rotary_dim=rotary_dim, interleaved=True
    )
    q2, k2 = xpos(q, k, layout="bhsd")
    assert q2.dtype == q.dtype
    assert k2.dtype == k.dtype
    # The peer computes its frequencies and zeta in float32 (also for float64 inputs).
    for ours, theirs in ((q2, q_peer), (k2, k_peer)):
        expected = theirs.double().numpy()
        bound = 2e-5 * max(1.0, float(np.max(np.abs(expected))))
        np.testing.assert_allclose(ours.double().numpy(), expected, rtol=0, atol=bound)
    # And anyrope's own float64 result equals the formula.
    exact = xpos_oracle(
        np.swapaxes(q.double().numpy(), 1, 2),
        np.arange(seq),
        rotary_dim=rotary_dim,
        interleaved=True,
        scale_base=scale_base,
        center=seq // 2,
    )
    _close(np.swapaxes(q2.double().numpy(), 1, 2), exact, dtype)


@SETTINGS
@given(
    m=st.integers(0, 5000),
    n=st.integers(0, 5000),
    shift=st.integers(0, 5000),
    center=st.integers(0, 3000),
    interleaved=st.booleans(),
)
def test_query_key_product_depends_only_on_the_distance(m, n, shift, center, interleaved):
    xpos = anyrope.XPos(16, scale_base=2048, center=center, interleaved=interleaved)
    rng = np.random.default_rng(m + 7 * n)
    q = rng.standard_normal((1, 1, 1, 16))
    k = rng.standard_normal((1, 1, 1, 16))

    def score(a, b):
        return float(np.sum(xpos.rotate_queries(q, a) * xpos.rotate_keys(k, b)))

    # Pair by pair: zeta_i ** ((m - n) / scale_base) times the rotated product.
    first, second = pair_index(16, interleaved)
    angle = (m - n) * anyrope.RoPE(16).inv_freq
    factor = amplitude_oracle(
        np.array(m - n + center), rotary_dim=16, scale_base=2048, center=center
    )
    per_pair = factor * (
        (q[0, 0, 0, first] * k[0, 0, 0, first] + q[0, 0, 0, second] * k[0, 0, 0, second])
        * np.cos(angle)
        - (q[0, 0, 0, second] * k[0, 0, 0, first] - q[0, 0, 0, first] * k[0, 0, 0, second])
        * np.sin(angle)
    )
    expected = float(np.sum(per_pair))
    scale = float(np.sum(np.abs(per_pair))) + 1.0
    assert abs(score(m, n) - expected) <= 1e-9 * scale
    assert abs(score(m + shift, n + shift) - expected) <= 1e-9 * scale


@SETTINGS
@given(
    offset=st.integers(0, 20000),
    center=st.integers(0, 20000),
    interleaved=st.booleans(),
    rotary_dim=st.sampled_from([4, 8, 12]),
)
def test_inverse_undoes_the_forward_call(offset, center, interleaved, rotary_dim):
    xpos = anyrope.XPos(
        12, scale_base=4096, center=center, rotary_dim=rotary_dim, interleaved=interleaved
    )
    q = np.random.default_rng(offset).standard_normal((2, 5, 3, 12))
    k = np.random.default_rng(center).standard_normal((2, 5, 1, 12))
    q2, k2 = xpos(q, k, offset)
    q3, k3 = xpos(q2, k2, offset, inverse=True)
    np.testing.assert_allclose(q3, q, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(k3, k, rtol=1e-12, atol=1e-12)
    for rotate in (xpos.rotate_queries, xpos.rotate_keys):
        back = rotate(rotate(q, offset), offset, inverse=True)
        np.testing.assert_allclose(back, q, rtol=1e-12, atol=1e-12)
    # What the inverse computes: R(-angle) / a for queries, the formula with -m and 1/a.
    positions = np.broadcast_to(np.arange(offset, offset + 5), (2, 5))
    inverse = xpos.rotate_queries(q, offset, inverse=True)
    expected = xpos_oracle(
        q,
        positions,
        rotary_dim=rotary_dim,
        interleaved=interleaved,
        scale_base=4096,
        center=center,
        sign=-1,
        turn=-1,
    )
    _close(inverse, expected, "float64")


def test_far_from_the_center_the_amplitude_leaves_the_float_range_quietly():
    """Keys far from the center become infinite and queries 0, as in the peers' tables;
    no warning is raised (pytest turns warnings into errors)."""
    xpos = anyrope.XPos(4, scale_base=1)
    x = np.ones((1, 200, 1, 4), dtype=np.float32)
    keys, queries = xpos.rotate_keys(x), xpos.rotate_queries(x)
    assert np.all(np.isfinite(keys[0, :10]))
    assert not np.all(np.isfinite(keys[0, -10:]))
    assert np.all(queries[0, -10:, :, 0] == 0.0)


def test_same_tables_whatever_the_cache_holds():
    x = np.random.default_rng(3).standard_normal((1, 4, 2, 8)).astype(np.float32)
    grown = anyrope.XPos(8, scale_base=16, center=600)
    grown(x, x, 1)
    grown(x, x, 10_000)  # grows both tables
    fresh = anyrope.XPos(8, scale_base=16, center=600)
    for offset in (0, 500, 9_000):
        positions = np.arange(offset, offset + 4)
        for a, b in zip(grown(x, x, offset), fresh(x, x, positions), strict=True):
            np.testing.assert_array_equal(a, b)


def test_pickle_deepcopy_repr_and_cache():
    xpos = anyrope.XPos(32, scale_base=100, center=7, rotary_dim=16, base=500.0, interleaved=True)
    x = np.random.default_rng(4).standard_normal((1, 6, 2, 32)).astype(np.float32)
    expected = xpos(x, x, 3)
    assert xpos.cache_nbytes() > 0
    for other in (pickle.loads(pickle.dumps(xpos)), copy.deepcopy(xpos)):
        assert repr(other) == repr(xpos)
        assert other.cache_nbytes() == 0
        for a, b in zip(other(x, x, 3), expected, strict=True):
            np.testing.assert_array_equal(a, b)
    assert repr(xpos) == (
        "XPos(head_dim=32, scale_base=100, center=7, rotary_dim=16, base=500.0, interleaved=True)"
    )
    xpos.clear_cache()
    assert xpos.cache_nbytes() == 0
    # The table sources pickle with their amplitude (dask's worker processes get them).
    keys = pickle.loads(pickle.dumps(xpos._sources[1]))
    assert keys.amplitude == Amplitude(16, 100, 7, -1)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"scale_base": 0}, ValueError, r"`scale_base` must be a positive integer.*got 0"),
        ({"scale_base": 2**40}, ValueError, r"`scale_base`.*below 2\*\*40"),
        ({"scale_base": 512.0}, TypeError, r"`scale_base` must be an integer; got 512.0"),
        ({"scale_base": True}, TypeError, "`scale_base` must be an integer"),
        ({"center": -1}, ValueError, r"`center` must be a non-negative integer.*got -1"),
        ({"center": 2**53}, ValueError, r"`center`.*below 2\*\*53"),
        ({"center": 1.5}, TypeError, "`center` must be an integer"),
        ({"rotary_dim": 7}, ValueError, "`rotary_dim` must be a positive even"),
        ({"base": 1.0}, ValueError, "`base` must be a finite number greater than 1"),
        ({"interleaved": 1}, TypeError, "`interleaved` must be True or False"),
    ],
    ids=lambda v: repr(v) if not isinstance(v, type) else v.__name__,
)
def test_clear_errors_for_settings(kwargs, error, match):
    with pytest.raises(error, match=match):
        anyrope.XPos(16, **kwargs)


def test_clear_errors_for_calls():
    xpos = anyrope.XPos(8)
    q = np.zeros((1, 4, 2, 8))
    with pytest.raises(ValueError, match="`k` must share the batch and sequence axes of `q`"):
        xpos(q, np.zeros((1, 5, 2, 8)))
    with pytest.raises(TypeError, match=r"`k` must have the dtype of `q` \(float64\)"):
        xpos(q, np.zeros((1, 4, 2, 8), dtype=np.float32))
    with pytest.raises(TypeError, match="`inverse` must be True or False"):
        xpos(q, q, inverse=1)
    with pytest.raises(ValueError, match="`x` must have head_dim=8"):
        xpos.rotate_keys(np.zeros((1, 4, 2, 6)))
    # A geometry checked before is checked again where memory matters.
    xpos(q, q.copy(), inplace=True)
    with pytest.raises(ValueError, match="`q` and `k` in separate memory"):
        xpos(q, q, inplace=True)


def test_inplace_writes_both():
    xpos = anyrope.XPos(8, scale_base=4, center=2)
    q = np.random.default_rng(5).standard_normal((1, 4, 2, 8))
    k = np.random.default_rng(6).standard_normal((1, 4, 1, 8))
    expected = xpos(q, k)
    q2, k2 = xpos(q, k, inplace=True)
    assert q2 is q
    assert k2 is k
    np.testing.assert_array_equal(q, expected[0])
    np.testing.assert_array_equal(k, expected[1])


EXTRA = [
    pytest.param(
        b, id=b.id, marks=[pytest.mark.skip(reason=b.unavailable)] if b.unavailable else []
    )
    for b in extra_backends()
]


@pytest.mark.parametrize("lazy_or_jax", EXTRA)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_jax_and_dask_give_the_bits_of_numpy(lazy_or_jax, dtype):
    backend = lazy_or_jax
    _, x = _inputs(dtype, shape=(2, 10, 2, 8), seed=7)
    xpos = anyrope.XPos(8, scale_base=16, center=4)
    positions = np.random.default_rng(8).integers(0, 500, size=(2, 10))
    with backend.scope():
        for given_positions in (None, 40, positions):
            expected = xpos(x, x, given_positions)
            xb = backend.from_numpy(x)
            p = given_positions
            if isinstance(p, np.ndarray) and backend.name == "jax":
                p = backend.from_numpy(p)
            # q and k may be one array: each side has its own tables.
            q2, k2 = xpos(xb, xb, p)
            np.testing.assert_array_equal(backend.to_numpy(q2), expected[0], strict=True)
            np.testing.assert_array_equal(backend.to_numpy(k2), expected[1], strict=True)


def test_jax_jit_within_rounding():
    jax = pytest.importorskip("jax")
    xpos = anyrope.XPos(8, scale_base=16, center=4)
    x = np.random.default_rng(9).standard_normal((2, 10, 2, 8)).astype(np.float32)
    positions = np.arange(20).reshape(2, 10)
    expected = xpos(x, x, positions)
    q2, k2 = jax.jit(xpos)(x, x, positions)
    for ours, theirs in ((q2, expected[0]), (k2, expected[1])):
        np.testing.assert_allclose(np.asarray(ours), theirs, rtol=1e-6, atol=1e-6)


# -- XPos is a RoPE with amplitudes: every route of a RoPE call serves it ------------------


def test_start_index_keeps_the_features_before_it():
    """Features before ``start_index`` are copied bit for bit; the rest are those of an
    XPos of the narrower head, as rotary-embedding-torch's ``start_index``."""
    x = np.random.default_rng(10).standard_normal((2, 6, 3, 12)).astype(np.float32)
    xpos = anyrope.XPos(12, scale_base=16, center=3, rotary_dim=8, start_index=2)
    narrow = anyrope.XPos(10, scale_base=16, center=3, rotary_dim=8)
    for inverse in (False, True):
        q2, k2 = xpos(x, x, 5, inverse=inverse)
        tails = narrow(x[..., 2:], x[..., 2:], 5, inverse=inverse)
        for y, tail in zip((q2, k2), tails, strict=True):
            np.testing.assert_array_equal(y[..., :2], x[..., :2])
            np.testing.assert_array_equal(y[..., 2:], tail)
    assert repr(xpos).endswith("start_index=2)")
    assert repr(pickle.loads(pickle.dumps(xpos))) == repr(xpos)


def test_rotate_qkv_scales_queries_and_keys_each_their_way():
    xpos = anyrope.XPos(8, scale_base=16, center=4)
    qkv = np.random.default_rng(11).standard_normal((2, 5, 3, 2, 8))
    q2, k2 = xpos(qkv[:, :, 0], qkv[:, :, 1], 7)
    for inplace in (False, True):
        out = xpos.rotate_qkv(qkv.copy(), 7, inplace=inplace)
        np.testing.assert_array_equal(out[:, :, 0], q2)
        np.testing.assert_array_equal(out[:, :, 1], k2)
        np.testing.assert_array_equal(out[:, :, 2], qkv[:, :, 2])


def test_one_array_is_rotated_as_queries_or_as_keys():
    xpos = anyrope.XPos(8)
    with pytest.raises(TypeError, match="rotate_queries or rotate_keys"):
        xpos.rotate(np.zeros((1, 4, 2, 8)))


@pytest.mark.parametrize("start_index", [0, 2])
def test_torch_compile_fullgraph_gives_the_eager_bits(start_index):
    torch = pytest.importorskip("torch")
    extra = {"start_index": start_index} if start_index else {}  # the default as XPos had it
    xpos = anyrope.XPos(12, scale_base=16, center=3, rotary_dim=8, **extra)
    q = torch.randn(2, 5, 4, 12, generator=torch.Generator().manual_seed(0))
    k = torch.randn(2, 5, 2, 12, generator=torch.Generator().manual_seed(1))
    calls = {
        "pair": lambda q, k: xpos(q, k, 9),
        "inverse": lambda q, k: xpos(q, k, torch.arange(5), inverse=True),
        "one-by-one": lambda q, k: (xpos.rotate_queries(q, 9), xpos.rotate_keys(k, 9)),
    }
    for name, call in calls.items():
        torch._dynamo.reset()
        compiled = torch.compile(call, fullgraph=True, backend="eager")
        for ours, eager in zip(compiled(q, k), call(q, k), strict=True):
            assert torch.equal(ours, eager), name


@pytest.mark.parametrize("positions", [None, 30, "array", "offsets"])
def test_dask_with_start_index_gives_the_bits_of_numpy(positions):
    da = pytest.importorskip("dask.array", reason="dask is not installed")
    xpos = anyrope.XPos(12, scale_base=16, center=4, rotary_dim=6, start_index=4)
    x = np.random.default_rng(12).standard_normal((2, 10, 2, 12)).astype(np.float32)
    given = {
        None: None,
        30: 30,
        "array": np.random.default_rng(13).integers(0, 500, size=(2, 10)),
        "offsets": anyrope.Offsets(np.array([3, 70])),
    }[positions]
    lazy = da.from_array(x, chunks=(1, 4, 2, 12))
    for ours, expected in zip(xpos(lazy, lazy, given), xpos(x, x, given), strict=True):
        np.testing.assert_array_equal(ours.compute(), expected, strict=True)


def test_jax_jit_with_start_index_within_rounding():
    jax = pytest.importorskip("jax")
    xpos = anyrope.XPos(12, scale_base=16, center=4, rotary_dim=8, start_index=2)
    x = np.random.default_rng(14).standard_normal((2, 10, 2, 12)).astype(np.float32)
    positions = np.arange(20).reshape(2, 10)
    expected = xpos(x, x, positions)
    q2, k2 = jax.jit(xpos)(x, x, positions)
    for ours, theirs in ((q2, expected[0]), (k2, expected[1])):
        np.testing.assert_array_equal(np.asarray(ours)[..., :2], x[..., :2])
        np.testing.assert_allclose(np.asarray(ours), theirs, rtol=1e-6, atol=1e-6)
