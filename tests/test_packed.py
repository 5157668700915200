"""Packed variable-length batches: ``layout="thd"`` with ``cu_seqlens`` (flash-attn varlen)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import anyrope
from anyrope.tools._backends import numpy_dtype

LENGTHS = [5, 0, 1, 9, 3]
CU = np.concatenate([[0], np.cumsum(LENGTHS)]).astype(np.int32)
TOTAL = int(CU[-1])


def _x(shape: tuple[int, ...], dtype: str = "float32", seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(numpy_dtype(dtype))


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize(
    "offsets",
    [None, 7, np.array([0, 4, 100, 3, 2**20], dtype=np.int64)],
    ids=["none", "int", "array"],
)
def test_packed_equals_each_sequence_alone(
    backend_dtype, offsets: object, interleaved: bool
) -> None:
    backend, dtype = backend_dtype
    rope = anyrope.RoPE(32, rotary_dim=24, interleaved=interleaved)
    host = _x((TOTAL, 4, 32), dtype)
    packed_offsets = backend.from_numpy(offsets) if isinstance(offsets, np.ndarray) else offsets
    got = backend.to_numpy(
        rope.rotate(
            backend.from_numpy(host),
            packed_offsets,
            layout="thd",
            cu_seqlens=backend.from_numpy(CU),
        )
    )
    for index, (start, stop) in enumerate(itertools.pairwise(CU)):
        if start == stop:
            continue
        if offsets is None:
            offset = 0
        elif isinstance(offsets, int):
            offset = offsets
        else:
            offset = int(offsets[index])
        alone = backend.from_numpy(np.ascontiguousarray(host[start:stop])[None])
        expected = backend.to_numpy(rope.rotate(alone, offset))[0]
        np.testing.assert_array_equal(got[start:stop], expected)


def test_rotate_qk_inverse_and_inplace() -> None:
    q, k = _x((TOTAL, 8, 16)), _x((TOTAL, 2, 16), seed=1)
    q2, k2 = anyrope.rotate_qk(q, k, layout="thd", cu_seqlens=CU)
    for start, stop in itertools.pairwise(CU):
        if start < stop:
            np.testing.assert_array_equal(q2[start:stop], anyrope.rotate(q[start:stop]))
            np.testing.assert_array_equal(k2[start:stop], anyrope.rotate(k[start:stop]))
    q3, _ = anyrope.rotate_qk(q2, k2, layout="thd", cu_seqlens=CU, inverse=True)
    np.testing.assert_allclose(q3, q, atol=1e-6)
    buffer = q.copy()
    out = anyrope.rotate(buffer, layout="thd", cu_seqlens=CU, inplace=True)
    assert out is buffer
    np.testing.assert_array_equal(buffer, q2)


def test_int64_cu_seqlens_and_one_sequence() -> None:
    x = _x((6, 1, 8))
    np.testing.assert_array_equal(
        anyrope.rotate(x, 3, layout="thd", cu_seqlens=np.array([0, 6])),
        anyrope.rotate(x, 3, layout="sbhd"),
    )


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"cu_seqlens": None}, ValueError, r"layout='thd' needs `cu_seqlens`"),
        ({"cu_seqlens": np.array([1, 3, TOTAL])}, ValueError, r"must start at 0"),
        ({"cu_seqlens": np.array([0, 9, 3, TOTAL])}, ValueError, r"never decrease"),
        ({"cu_seqlens": np.array([0, 3, TOTAL + 1])}, ValueError, r"end at the number of tokens"),
        (
            {"cu_seqlens": np.array([0.0, 18.0])},
            TypeError,
            r"`cu_seqlens` must have an integer dtype",
        ),
        ({"cu_seqlens": np.array([[0, 18]])}, ValueError, r"`cu_seqlens` must be one-dimensional"),
        ({"cu_seqlens": [0, 18]}, TypeError, r"`cu_seqlens` must be an array"),
        (
            {"cu_seqlens": CU, "positions": np.array([1, 2])},
            ValueError,
            r"one offset per sequence: shape \(5,\)",
        ),
        ({"cu_seqlens": CU, "positions": -1}, ValueError, r"offset must be non-negative"),
        (
            {"cu_seqlens": CU, "positions": np.array([0, 0, -1, 0, 0])},
            ValueError,
            r"offsets must be non-negative",
        ),
        ({"cu_seqlens": CU, "positions": 1.5}, TypeError, r"per-sequence offsets; got float"),
        ({"cu_seqlens": CU, "layout": "bshd"}, ValueError, r"`cu_seqlens` needs layout='thd'"),
    ],
)
def test_errors(kwargs: dict[str, object], error: type[Exception], message: str) -> None:
    options = {"layout": "thd", **kwargs}
    positions = options.pop("positions", None)
    x = _x((TOTAL, 2, 8)) if options["layout"] == "thd" else _x((1, TOTAL, 2, 8))
    with pytest.raises(error, match=message):
        anyrope.rotate(x, positions, **options)


def test_thd_needs_three_axes() -> None:
    with pytest.raises(ValueError, match=r"shape \(total_tokens, heads, head_dim\)"):
        anyrope.rotate(_x((1, TOTAL, 2, 8)), layout="thd", cu_seqlens=CU)


def test_cu_seqlens_library_must_match() -> None:
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match=r"`cu_seqlens` must be an array of the same library"):
        anyrope.rotate(_x((TOTAL, 2, 8)), layout="thd", cu_seqlens=torch.asarray(CU))


def test_cu_seqlens_are_read_at_every_call() -> None:
    # A torch tensor hashes by identity: a plan kept by it would outlive a change of its
    # values (and, kept without its packed positions, failed at the second call).
    torch = pytest.importorskip("torch")
    x = torch.randn(10, 2, 16, generator=torch.Generator().manual_seed(0))
    cu_seqlens = torch.tensor([0, 4, 10])
    rope = anyrope.RoPE(16)
    first = rope.rotate(x, layout="thd", cu_seqlens=cu_seqlens)
    assert torch.equal(rope.rotate(x, layout="thd", cu_seqlens=cu_seqlens), first)
    cu_seqlens[1] = 6
    again = rope.rotate(x, layout="thd", cu_seqlens=cu_seqlens)
    assert torch.equal(again, anyrope.RoPE(16).rotate(x, layout="thd", cu_seqlens=cu_seqlens))
    assert not torch.equal(again, first)
