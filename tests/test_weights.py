"""permute_qk_weights: the Meta <-> Hugging Face q/k row permutation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import anyrope


def hf_conversion_permute(w, n_heads):
    """Hugging Face's ``convert_llama_weights_to_hf.permute``, written in NumPy."""
    dim1, dim2 = w.shape
    return (
        w.reshape(n_heads, dim1 // n_heads // 2, 2, dim2).transpose(0, 2, 1, 3).reshape(dim1, dim2)
    )


def head_permutation(n_heads, head_dim):
    """Row ``r`` of the half-split weight is row ``perm[r]`` of the interleaved one."""
    rows = np.arange(n_heads * head_dim)
    return anyrope.permute_qk_weights(rows, n_heads, to="half")


def on_backend(backend, dtype, host):
    """``host`` (float64) rounded to ``dtype`` on ``backend``."""
    if dtype == "bfloat16":
        return backend.xp.astype(backend.from_numpy(host.astype(np.float32)), backend.dtype(dtype))
    return backend.from_numpy(host.astype(dtype))


def test_matches_hugging_face_conversion_script():
    w = np.random.default_rng(0).standard_normal((4 * 16, 24))
    expected = hf_conversion_permute(w, 4)
    np.testing.assert_array_equal(anyrope.permute_qk_weights(w, 4, to="half"), expected)


def test_one_head_order():
    rows = anyrope.permute_qk_weights(np.arange(8), 1, to="half")
    np.testing.assert_array_equal(rows, [0, 2, 4, 6, 1, 3, 5, 7])
    back = anyrope.permute_qk_weights(np.arange(8), 1, to="interleaved")
    np.testing.assert_array_equal(back, [0, 4, 1, 5, 2, 6, 3, 7])


def test_round_trip_on_every_backend(backend_dtype):
    backend, dtype = backend_dtype
    w = on_backend(backend, dtype, np.random.default_rng(1).standard_normal((6 * 8, 10)))
    half = anyrope.permute_qk_weights(w, 6, to="half")
    assert type(half) is type(w)
    assert half.dtype == w.dtype
    assert tuple(half.shape) == tuple(w.shape)
    back = anyrope.permute_qk_weights(half, 6, to="interleaved")
    np.testing.assert_array_equal(backend.to_bits(back), backend.to_bits(w))
    perm = head_permutation(6, 8)
    np.testing.assert_array_equal(backend.to_bits(half), backend.to_bits(w)[perm])
    # A partial rotation: the first 4 features of each head of 8 reordered, 4 kept.
    partial = anyrope.permute_qk_weights(w, 6, rotary_dim=4)
    kept = np.arange(48).reshape(6, 8)
    kept[:, :4] = kept[:, [0, 2, 1, 3]]
    np.testing.assert_array_equal(backend.to_bits(partial), backend.to_bits(w)[kept.ravel()])


@pytest.mark.parametrize("interleaved_source", [True, False], ids=["meta-to-hf", "hf-to-meta"])
def test_rotated_features_are_the_same_bits(backend_dtype, interleaved_source):
    """Rotating the converted projection gives the original's rotated features, permuted."""
    backend, dtype = backend_dtype
    n_heads, head_dim, seq = 3, 16, 7
    host = np.random.default_rng(2).standard_normal((seq, n_heads, head_dim))
    q = on_backend(backend, dtype, host)
    perm = head_permutation(n_heads, head_dim)
    if not interleaved_source:
        perm = anyrope.permute_qk_weights(np.arange(n_heads * head_dim), n_heads, to="interleaved")
    flat = backend.xp.reshape(q, (seq, n_heads * head_dim))
    converted = backend.xp.reshape(
        backend.xp.take(flat, backend.from_numpy(perm), axis=1), (seq, n_heads, head_dim)
    )
    original = anyrope.rotate(q, 11, interleaved=interleaved_source)
    moved = anyrope.rotate(converted, 11, interleaved=not interleaved_source)
    original_bits = backend.to_bits(original).reshape(seq, n_heads * head_dim)
    moved_bits = backend.to_bits(moved).reshape(seq, n_heads * head_dim)
    np.testing.assert_array_equal(moved_bits, original_bits[:, perm])


@settings(max_examples=25, deadline=None)
@given(
    n_kv=st.integers(1, 3),
    group=st.integers(1, 3),
    half_dim=st.integers(1, 8),
    seq=st.integers(1, 6),
    offset=st.integers(0, 5000),
)
def test_attention_scores_unchanged(n_kv, group, half_dim, seq, offset):
    """Meta weights + interleaved RoPE == converted weights + half-split RoPE (GQA too)."""
    n_heads = n_kv * group
    head_dim, hidden = 2 * half_dim, 12
    rng = np.random.default_rng([n_kv, group, half_dim, seq])
    wq = rng.standard_normal((n_heads * head_dim, hidden))
    wk = rng.standard_normal((n_kv * head_dim, hidden))
    x = rng.standard_normal((seq, hidden))

    def scores(wq, wk, interleaved):
        q = (x @ wq.T).reshape(seq, n_heads, head_dim)
        k = (x @ wk.T).reshape(seq, n_kv, head_dim)
        q, k = anyrope.rotate_qk(q, k, offset, interleaved=interleaved)
        k = np.repeat(k, group, axis=1)
        return np.einsum("shd,thd->hst", q, k)

    meta = scores(wq, wk, interleaved=True)
    hf = scores(
        anyrope.permute_qk_weights(wq, n_heads, to="half"),
        anyrope.permute_qk_weights(wk, n_kv, to="half"),
        interleaved=False,
    )
    np.testing.assert_allclose(hf, meta, rtol=1e-12, atol=1e-10)


@pytest.mark.parametrize("to", ["half", "interleaved"])
@pytest.mark.parametrize(("head_dim", "rotary_dim"), [(8, 4), (12, 2), (16, 8), (8, 8)])
def test_a_partial_rotation_keeps_the_scores(to, head_dim, rotary_dim):
    """Only the rotated features of each head are reordered: converted weights with the
    other pairing give the same scores (the whole head reordered gave others)."""
    n_heads, n_kv, hidden, seq = 4, 2, 12, 6
    rng = np.random.default_rng([head_dim, rotary_dim])
    wq = rng.standard_normal((n_heads * head_dim, hidden))
    wk = rng.standard_normal((n_kv * head_dim, hidden))
    bq = rng.standard_normal(n_heads * head_dim)
    x = rng.standard_normal((seq, hidden))

    def scores(wq, wk, bq, interleaved):
        q = (x @ wq.T + bq).reshape(seq, n_heads, head_dim)
        k = (x @ wk.T).reshape(seq, n_kv, head_dim)
        q, k = anyrope.rotate_qk(q, k, 100, rotary_dim=rotary_dim, interleaved=interleaved)
        return np.einsum("shd,thd->hst", q, np.repeat(k, n_heads // n_kv, axis=1))

    source = scores(wq, wk, bq, interleaved=to == "half")
    converted = scores(
        anyrope.permute_qk_weights(wq, n_heads, to=to, rotary_dim=rotary_dim),
        anyrope.permute_qk_weights(wk, n_kv, to=to, rotary_dim=rotary_dim),
        anyrope.permute_qk_weights(bq, n_heads, to=to, rotary_dim=rotary_dim),
        interleaved=to != "half",
    )
    np.testing.assert_allclose(converted, source, rtol=1e-12, atol=1e-10)
    back = anyrope.permute_qk_weights(
        anyrope.permute_qk_weights(wq, n_heads, to=to, rotary_dim=rotary_dim),
        n_heads,
        to="interleaved" if to == "half" else "half",
        rotary_dim=rotary_dim,
    )
    np.testing.assert_array_equal(back, wq)


def test_bias_is_permuted_like_the_rows():
    bias = np.arange(2 * 6, dtype=np.float32)
    w = np.repeat(bias[:, None], 3, axis=1)
    np.testing.assert_array_equal(
        anyrope.permute_qk_weights(bias, 2), anyrope.permute_qk_weights(w, 2)[:, 0]
    )


@pytest.mark.parametrize(
    ("w", "n_heads", "kwargs", "error", "match"),
    [
        (np.zeros((8, 2)), 1, {"to": "halfsplit"}, ValueError, "`to`"),
        (np.zeros((8, 2)), 2.0, {}, TypeError, "`n_heads`"),
        (np.zeros((8, 2)), True, {}, TypeError, "`n_heads`"),
        (np.zeros((8, 2)), 0, {}, ValueError, "`n_heads` must be positive; got 0"),
        (np.zeros((8, 2)), 3, {}, ValueError, "8 rows.*n_heads=3"),
        (np.zeros((6, 2)), 2, {}, ValueError, "6 rows.*even width"),
        (np.zeros((2, 4, 2)), 1, {}, ValueError, r"shape \(2, 4, 2\)"),
        (np.zeros(()), 1, {}, ValueError, r"shape \(\)"),
        ([[0.0, 1.0]], 1, {}, TypeError, "`w` must be an array.*list"),
        (np.zeros((8, 2)), 1, {"rotary_dim": 10}, ValueError, "`rotary_dim` must be .*; got 10"),
        (np.zeros((8, 2)), 1, {"rotary_dim": 3}, ValueError, "`rotary_dim` must be .*; got 3"),
    ],
    ids=[
        "bad-to",
        "float-heads",
        "bool-heads",
        "zero-heads",
        "heads-do-not-divide",
        "odd-head-width",
        "3d",
        "0d",
        "list",
        "rotary-dim-too-wide",
        "rotary-dim-odd",
    ],
)
def test_bad_input(w, n_heads, kwargs, error, match):
    with pytest.raises(error, match=match):
        anyrope.permute_qk_weights(w, n_heads, **kwargs)
