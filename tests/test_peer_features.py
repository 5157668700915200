"""The peers' forms of a call: per-row offsets (flash-attn ``seqlen_offsets``), a rotated
slice that starts past feature 0 (rotary-embedding-torch ``start_index``) and one fused
qkv array (flash-attn ``apply_rotary_emb_qkv_``).

Each is checked bit for bit against the plain call it stands for, and against the
peer's semantics: the float64 oracle of ``tests/oracles.py`` with the peer's positions
and feature ranges, and rotary-embedding-torch itself where it is installed.
"""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import anyrope
from anyrope.tools._backends import numpy_dtype
from oracles import dense_rotation

TOLERANCE = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 2e-6, "float64": 1e-12}
"""Relative error of one rotation in each dtype against the float64 oracle (a few ulp)."""


def _x(shape: tuple[int, ...], dtype: str, seed: int = 0) -> np.ndarray:
    values = np.random.default_rng(seed).standard_normal(shape)
    return values.astype(numpy_dtype(dtype) or np.float32)


def _close_to_oracle(got: np.ndarray, expected: np.ndarray, dtype: str) -> None:
    scale = np.max(np.abs(expected))
    np.testing.assert_allclose(got, expected, rtol=0, atol=TOLERANCE[dtype] * 4 * scale)


# --- per-row offsets -------------------------------------------------------------------


def test_offsets_are_each_rows_own_positions(backend_dtype) -> None:
    """Row b sits at offsets[b] + 0 .. seq-1: flash-attn's seqlen_offsets of shape (batch,)."""
    backend, dtype = backend_dtype
    x = _x((3, 5, 2, 16), dtype)
    offsets = np.array([7, 0, 4000])
    rows = offsets[:, None] + np.arange(5)
    got = anyrope.rotate(
        backend.from_numpy(x), positions=anyrope.Offsets(backend.from_numpy(offsets))
    )
    same = anyrope.rotate(backend.from_numpy(x), positions=backend.from_numpy(rows))
    np.testing.assert_array_equal(backend.to_numpy(got), backend.to_numpy(same))
    oracle = dense_rotation(backend.to_numpy(backend.from_numpy(x)), rows, rotary_dim=16)
    _close_to_oracle(backend.to_numpy(got), oracle, dtype)


@pytest.mark.parametrize("layout", ["bhsd", "sbhd"])
def test_offsets_follow_the_layouts_batch_axes(backend, layout: str) -> None:
    q = _x((2, 3, 6, 8) if layout == "bhsd" else (6, 2, 3, 8), "float32")
    k = q[:, :1] if layout == "bhsd" else q[:, :, :1]
    offsets = np.array([11, 2], dtype=np.int32)
    got = anyrope.rotate_qk(
        backend.from_numpy(q),
        backend.from_numpy(np.ascontiguousarray(k)),
        positions=anyrope.Offsets(backend.from_numpy(offsets)),
        layout=layout,
    )
    rows = backend.from_numpy((offsets[:, None] + np.arange(6)).astype(np.int64))
    same = anyrope.rotate_qk(
        backend.from_numpy(q), backend.from_numpy(np.ascontiguousarray(k)), rows, layout=layout
    )
    for a, b in zip(got, same, strict=True):
        np.testing.assert_array_equal(backend.to_numpy(a), backend.to_numpy(b))


def test_offsets_broadcast_over_several_batch_axes() -> None:
    x = _x((2, 3, 4, 1, 8), "float32")  # batch axes (2, 3)
    offsets = np.array([[5], [9]])  # one per outer row, the same for the inner three
    got = anyrope.rotate(x, positions=anyrope.Offsets(offsets))
    rows = np.broadcast_to(offsets[..., None] + np.arange(4), (2, 3, 4))
    np.testing.assert_array_equal(got, anyrope.rotate(x, positions=np.ascontiguousarray(rows)))


def test_offsets_with_packed_sequences_are_per_sequence_offsets() -> None:
    x = _x((9, 2, 8), "float32")
    cu = np.array([0, 4, 9])
    got = anyrope.rotate(x, anyrope.Offsets(np.array([3, 100])), layout="thd", cu_seqlens=cu)
    same = anyrope.rotate(x, np.array([3, 100]), layout="thd", cu_seqlens=cu)
    np.testing.assert_array_equal(got, same)


def test_offsets_under_jax_transforms() -> None:
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    x = jnp.asarray(_x((3, 4, 2, 8), "float32"))
    offsets = jnp.asarray([1, 50, 7])
    rows = offsets[:, None] + jnp.arange(4)
    step = jax.jit(lambda x, o: anyrope.rotate(x, positions=anyrope.Offsets(o)))
    explicit = jax.jit(lambda x, p: anyrope.rotate(x, positions=p))
    np.testing.assert_array_equal(np.asarray(step(x, offsets)), np.asarray(explicit(x, rows)))
    eager = anyrope.rotate(x, positions=anyrope.Offsets(offsets))
    np.testing.assert_array_equal(
        np.asarray(eager), anyrope.rotate(np.asarray(x), positions=np.asarray(rows))
    )


def test_offsets_with_dask() -> None:
    da = pytest.importorskip("dask.array")
    x = _x((4, 6, 2, 8), "float32")
    offsets = np.array([0, 3, 9, 27])
    lazy = anyrope.rotate(da.from_array(x, chunks=(2, 3, 2, 8)), anyrope.Offsets(offsets))
    np.testing.assert_array_equal(lazy.compute(), anyrope.rotate(x, anyrope.Offsets(offsets)))
    chunked = anyrope.Offsets(da.from_array(offsets, chunks=3))
    lazy = anyrope.rotate(da.from_array(x, chunks=(2, 3, 2, 8)), chunked)
    np.testing.assert_array_equal(lazy.compute(), anyrope.rotate(x, anyrope.Offsets(offsets)))
    strict = pytest.importorskip("array_api_strict")
    with pytest.raises(TypeError, match="NumPy or dask integer array of offsets"):
        anyrope.rotate(da.from_array(x), anyrope.Offsets(strict.asarray(offsets)))


@pytest.mark.parametrize(
    ("values", "error", "match"),
    [
        (np.array([-1, 2, 3]), ValueError, "offset must be non-negative; got -1"),
        (np.array([2**53, 0, 0], dtype=np.uint64), ValueError, "exceeds 2\\*\\*53"),
        (np.array([[1], [2], [3]]), ValueError, "broadcast to the batch axes \\(3,\\)"),
        (np.array([1, 2]), ValueError, "broadcast to the batch axes \\(3,\\)"),
        (np.array([1.0, 2.0, 3.0]), TypeError, "integer dtype; got float64"),
    ],
    ids=["negative", "too-large", "extra-axis", "wrong-batch", "float"],
)
def test_offsets_errors(values: np.ndarray, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        anyrope.rotate(_x((3, 2, 1, 8), "float32"), positions=anyrope.Offsets(values))


def test_offsets_need_an_array_and_pickle() -> None:
    with pytest.raises(TypeError, match=r"`Offsets` takes an integer array.*got list"):
        anyrope.Offsets([1, 2])  # type: ignore[arg-type]
    offsets = anyrope.Offsets(np.array([4, 5]))
    for twin in (pickle.loads(pickle.dumps(offsets)), copy.deepcopy(offsets)):
        np.testing.assert_array_equal(twin.values, offsets.values)
    assert repr(offsets) == "Offsets(array([4, 5]))"


@settings(max_examples=40, deadline=None)
@given(
    batch=st.integers(1, 4),
    seq=st.integers(1, 6),
    data=st.data(),
)
def test_offsets_property(batch: int, seq: int, data: st.DataObject) -> None:
    offsets = np.array(data.draw(st.lists(st.integers(0, 10**6), min_size=batch, max_size=batch)))
    x = _x((batch, seq, 2, 8), "float32", seed=batch * 7 + seq)
    got = anyrope.rotate(x, positions=anyrope.Offsets(offsets))
    for b in range(batch):
        row = anyrope.rotate(x[b : b + 1], positions=int(offsets[b]))
        np.testing.assert_array_equal(got[b : b + 1], row)


# --- start_index -----------------------------------------------------------------------


@pytest.mark.parametrize("interleaved", [False, True], ids=["half", "interleaved"])
def test_start_index_rotates_its_slice_only(backend_dtype, interleaved: bool) -> None:
    backend, dtype = backend_dtype
    x = backend.from_numpy(_x((2, 5, 3, 24), dtype))
    rope = anyrope.RoPE(24, rotary_dim=8, start_index=6, interleaved=interleaved)
    got = backend.to_numpy(rope.rotate(x, positions=9))
    host = backend.to_numpy(x)
    np.testing.assert_array_equal(got[..., :6], host[..., :6])
    np.testing.assert_array_equal(got[..., 14:], host[..., 14:])
    middle = anyrope.RoPE(8, interleaved=interleaved).rotate(
        backend.from_numpy(
            np.ascontiguousarray(backend.to_numpy(x)[..., 6:14]).astype(
                numpy_dtype(dtype) or np.float32
            )
        ),
        positions=9,
    )
    np.testing.assert_array_equal(got[..., 6:14], backend.to_numpy(middle))
    oracle = dense_rotation(
        host[..., 6:14], np.arange(9, 14), rotary_dim=8, interleaved=interleaved
    )
    _close_to_oracle(got[..., 6:14], oracle, dtype)


@pytest.mark.parametrize("impl", ["numba", "blocked", "array_api"])
def test_start_index_in_place_on_every_host_path(impl: str) -> None:
    if impl == "numba":
        pytest.importorskip("numba")
    x = _x((2, 4, 3, 16), "float32")
    rope = anyrope.RoPE(16, rotary_dim=6, start_index=3 * 2)
    expected = rope.rotate(x, positions=np.arange(4), impl="array_api")
    y = x.copy()
    assert rope.rotate(y, positions=np.arange(4), impl=impl, inplace=True) is y
    np.testing.assert_array_equal(y, expected)
    assert rope.path(x, impl=impl) == impl


def test_start_index_matches_rotary_embedding_torch() -> None:
    """rotary-embedding-torch's ``apply_rotary_emb(freqs, t, start_index)`` (interleaved)."""
    torch = pytest.importorskip("torch")
    peer = pytest.importorskip("rotary_embedding_torch")
    t = torch.from_numpy(_x((2, 3, 10, 32), "float64"))  # (batch, heads, seq, d)
    freqs = peer.RotaryEmbedding(dim=12)(torch.arange(10, dtype=torch.float64))
    expected = peer.apply_rotary_emb(freqs, t, start_index=8)
    rope = anyrope.RoPE(32, rotary_dim=12, start_index=8, interleaved=True)
    got = rope.rotate(t, layout="bhsd")
    # The peer builds its frequencies in float32: agreement is to float32 accuracy.
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=0, atol=2e-5)
    np.testing.assert_array_equal(got[..., :8].numpy(), t[..., :8].numpy())


def test_start_index_functional_pickle_and_errors() -> None:
    x = _x((1, 3, 2, 12), "float32")
    y = anyrope.rotate(x, positions=5, rotary_dim=4, start_index=2)
    np.testing.assert_array_equal(
        y, anyrope.RoPE(12, rotary_dim=4, start_index=2).rotate(x, positions=5)
    )
    rope = anyrope.RoPE(12, start_index=4)
    assert rope.rotary_dim == 8
    assert repr(rope) == (
        "RoPE(head_dim=12, rotary_dim=8, base=10000.0, interleaved=False, start_index=4)"
    )
    for twin in (pickle.loads(pickle.dumps(rope)), copy.deepcopy(rope)):
        assert twin.start_index == 4
        np.testing.assert_array_equal(twin.rotate(x), rope.rotate(x))
    with pytest.raises(ValueError, match="`start_index` must be at least 0 and below head_dim=12"):
        anyrope.RoPE(12, start_index=12)
    with pytest.raises(TypeError, match=r"`start_index` must be an integer; got 1\.5"):
        anyrope.RoPE(12, start_index=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="from `start_index`=6 end past head_dim=12"):
        anyrope.RoPE(12, rotary_dim=8, start_index=6)
    with pytest.raises(ValueError, match="`x` must have head_dim=12 in its last axis"):
        rope.rotate(x[..., :8])


# --- fused qkv -------------------------------------------------------------------------

STACKED = {
    "bshd": ((2, 5, 3, 4, 16), -3),
    "bhsd": ((2, 3, 4, 5, 16), -4),
    "sbhd": ((5, 2, 3, 4, 16), -3),
}


@pytest.mark.parametrize("layout", sorted(STACKED))
def test_qkv_stacked_rotates_q_and_k_and_keeps_v(backend_dtype, layout: str) -> None:
    backend, dtype = backend_dtype
    shape, axis = STACKED[layout]
    host = _x(shape, dtype)
    qkv = backend.from_numpy(host)
    rope = anyrope.RoPE(16, rotary_dim=8)
    got = backend.to_numpy(
        rope.rotate_qkv(
            qkv, positions=anyrope.Offsets(backend.from_numpy(np.array([3, 30]))), layout=layout
        )
    )
    back = backend.to_numpy(qkv)
    q, k = (backend.from_numpy(np.ascontiguousarray(np.take(host, i, axis=axis))) for i in range(2))
    rows = backend.from_numpy(np.array([[3], [30]]) + np.arange(5))
    q2, k2 = rope(q, k, rows, layout=layout)
    np.testing.assert_array_equal(np.take(got, 0, axis=axis), backend.to_numpy(q2))
    np.testing.assert_array_equal(np.take(got, 1, axis=axis), backend.to_numpy(k2))
    np.testing.assert_array_equal(np.take(got, 2, axis=axis), np.take(back, 2, axis=axis))


def test_qkv_grouped_heads_and_in_place(backend) -> None:
    """flash-attn's ``num_heads_q`` form: q heads, then key heads, then value heads."""
    host = _x((2, 6, 8 + 2 * 2, 16), "float32")
    rope = anyrope.RoPE(16)
    got = backend.to_numpy(rope.rotate_qkv(backend.from_numpy(host), 4, num_heads_q=8))
    q2, k2 = rope(backend.from_numpy(host[:, :, :8]), backend.from_numpy(host[:, :, 8:10]), 4)
    np.testing.assert_array_equal(got[:, :, :8], backend.to_numpy(q2))
    np.testing.assert_array_equal(got[:, :, 8:10], backend.to_numpy(k2))
    np.testing.assert_array_equal(got[:, :, 10:], host[:, :, 10:])
    oracle = dense_rotation(host[:, :, :10], np.arange(4, 10), rotary_dim=16)
    _close_to_oracle(got[:, :, :10], oracle, "float32")
    if backend.name in ("numpy", "torch"):
        fused = backend.from_numpy(host)
        assert rope.rotate_qkv(fused, 4, num_heads_q=8, inplace=True) is fused
        np.testing.assert_array_equal(backend.to_numpy(fused), got)


@pytest.mark.parametrize("library", ["numpy", "torch"])
@pytest.mark.parametrize("layout", sorted(STACKED))
@pytest.mark.parametrize("memory", ["contiguous", "heads-outer"])
def test_qkv_stacked_in_place_writes_the_bits_of_the_copy(
    library: str, layout: str, memory: str
) -> None:
    """In place, q and k are rotated as one view where the fused array allows it
    (contiguous); where its (q, k) axis does not step over the heads axis alone
    (heads-outer: the heads axis stored outside it), as two views."""
    shape, axis = STACKED[layout]
    host = _x(shape, "float32")
    if memory == "heads-outer":
        order = list(range(len(shape)))
        order[axis], order[axis + 1] = order[axis + 1], order[axis]
        host = np.ascontiguousarray(host.transpose(order)).transpose(order)
    qkv = host.copy() if library == "numpy" else None
    if library == "torch":
        torch = pytest.importorskip("torch")
        qkv = torch.from_numpy(host.copy())
    rope = anyrope.RoPE(16, rotary_dim=8)
    want = np.asarray(rope.rotate_qkv(host, 5, layout=layout))
    assert rope.rotate_qkv(qkv, 5, layout=layout, inplace=True) is qkv
    np.testing.assert_array_equal(np.asarray(qkv), want)
    np.testing.assert_array_equal(np.take(np.asarray(qkv), 2, axis=axis), np.take(host, 2, axis))


def test_qkv_packed_functional() -> None:
    qkv = _x((7, 3, 2, 8), "float32")  # (total_tokens, 3, heads, d)
    cu = np.array([0, 3, 7])
    got = anyrope.rotate_qkv(qkv, layout="thd", cu_seqlens=cu, interleaved=True)
    q2, k2 = anyrope.rotate_qk(
        np.ascontiguousarray(qkv[:, 0]),
        np.ascontiguousarray(qkv[:, 1]),
        layout="thd",
        cu_seqlens=cu,
        interleaved=True,
    )
    np.testing.assert_array_equal(got[:, 0], q2)
    np.testing.assert_array_equal(got[:, 1], k2)
    np.testing.assert_array_equal(got[:, 2], qkv[:, 2])


@pytest.mark.parametrize(
    ("shape", "options", "match"),
    [
        ((2, 5, 4, 2, 8), {}, "an axis of length 3 \\(q, k, v\\) right before the heads axis"),
        ((2, 5, 7, 8), {"num_heads_q": 4}, "must leave an even, positive number"),
        ((2, 5, 6, 8), {"num_heads_q": 6}, "must leave an even, positive number"),
        ((2, 5, 6, 8), {"num_heads_q": 2.0}, "`num_heads_q` must be an integer"),
        ((2, 5, 3, 2, 8), {"layout": "bsdh"}, "`layout` must be one of"),
    ],
    ids=["no-axis-of-3", "odd-kv", "no-kv", "float-count", "layout"],
)
def test_qkv_errors(shape: tuple[int, ...], options: dict[str, object], match: str) -> None:
    with pytest.raises((ValueError, TypeError), match=match):
        anyrope.RoPE(8).rotate_qkv(_x(shape, "float32"), **options)  # type: ignore[arg-type]
