"""Arrays whose memory does not hold their values as the paths read them: NumPy arrays
of the other byte order, and torch tensors with the negative bit set. Every path gives
them the bits of the same values in ordinary memory."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import anyrope

IMPLS = ["auto", "numba", "blocked", "array_api"]
SWAPPED = ">" if sys.byteorder == "little" else "<"
"""The byte order this machine does not use."""


def _impl(impl: str) -> str:
    if impl == "numba":
        pytest.importorskip("numba")
    return impl


def _values(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def _same_bits(got: np.ndarray, want: np.ndarray) -> None:
    """The same values, bit for bit, whatever the byte order of either."""
    native = np.dtype(want.dtype).newbyteorder("=")
    a = np.ascontiguousarray(got, dtype=np.dtype(got.dtype).newbyteorder("="))
    b = np.ascontiguousarray(want, dtype=native)
    assert a.dtype == b.dtype
    np.testing.assert_array_equal(a.view(f"u{a.itemsize}"), b.view(f"u{b.itemsize}"))


CALLS = {
    "rotate": lambda x, **kw: (anyrope.rotate(x, 3, rotary_dim=6, **kw),),
    "rotate-interleaved-inverse": lambda x, **kw: (
        anyrope.rotate(x, np.arange(2, 7), interleaved=True, inverse=True, **kw),
    ),
    "rotate_qk": lambda x, **kw: anyrope.rotate_qk(x[:, :, :2], x[:, :, 2:], 5, **kw),
    "RoPE-yarn": lambda x, **kw: (
        anyrope.RoPE(
            8, scaling={"rope_type": "yarn", "factor": 4.0}, max_position_embeddings=4
        ).rotate(x, anyrope.Offsets(np.array([0, 9])), **kw),
    ),
    "XPos": lambda x, **kw: anyrope.XPos(8)(x[:, :, :2], x[:, :, 2:], 1, **kw),
}


@pytest.mark.parametrize("dtype", ["f2", "f4", "f8"])
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("call", list(CALLS), ids=list(CALLS))
def test_other_byte_order_gives_the_native_bits_in_its_own_dtype(call, impl, dtype):
    native = _values((2, 5, 4, 8)).astype(dtype)
    swapped = native.astype(SWAPPED + dtype)
    want = CALLS[call](native, impl=_impl(impl))
    got = CALLS[call](swapped, impl=impl)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == swapped.dtype
        _same_bits(g, w)


@pytest.mark.parametrize("dtype", ["f2", "f4", "f8"])
@pytest.mark.parametrize("impl", IMPLS)
def test_other_byte_order_in_place_writes_the_native_bits(impl, dtype):
    native = _values((2, 5, 4, 8)).astype(dtype)
    q, k = native[:, :, :3], native[:, :, 3:]
    want = anyrope.rotate_qk(q, k, 2, impl=_impl(impl))
    swapped = native.astype(SWAPPED + dtype)
    sq, sk = swapped[:, :, :3], swapped[:, :, 3:]
    got = anyrope.rotate_qk(sq, sk, 2, inplace=True, impl=impl)
    assert got[0] is sq
    assert got[1] is sk
    _same_bits(sq, want[0])
    _same_bits(sk, want[1])


@pytest.mark.parametrize("num_heads_q", [None, 2])
@pytest.mark.parametrize("inplace", [False, True], ids=["copy", "inplace"])
def test_other_byte_order_fused_qkv(inplace, num_heads_q):
    shape = (2, 5, 3, 2, 8) if num_heads_q is None else (2, 5, 4, 8)
    native = _values(shape).astype(np.float32)
    want = anyrope.rotate_qkv(native.copy(), 4, num_heads_q=num_heads_q)
    swapped = native.astype(SWAPPED + "f4")
    got = anyrope.rotate_qkv(swapped, 4, num_heads_q=num_heads_q, inplace=inplace)
    assert got.dtype == swapped.dtype
    assert (got is swapped) == inplace
    _same_bits(got, want)


def test_other_byte_order_on_dask():
    da = pytest.importorskip("dask.array")
    native = _values((2, 6, 3, 8)).astype(np.float64)
    swapped = da.from_array(native.astype(SWAPPED + "f8"), chunks=(1, 3, 3, 8))
    got = anyrope.rotate(swapped, 7).compute()
    assert got.dtype == swapped.dtype
    _same_bits(got, anyrope.rotate(native, 7))


def test_other_byte_order_positions():
    x = _values((2, 5, 3, 8)).astype(np.float32)
    positions = np.array([[4, 0, 9, 2, 7]])
    want = anyrope.rotate(x, positions)
    _same_bits(anyrope.rotate(x, positions.astype(SWAPPED + "i8")), want)
    _same_bits(anyrope.rotate(x, positions.astype(SWAPPED + "i4")), want)


def test_other_byte_order_read_only_in_place_is_refused():
    swapped = _values((2, 5, 3, 8)).astype(SWAPPED + "f4")
    swapped.flags.writeable = False
    with pytest.raises(ValueError, match=r"inplace.*read-only"):
        anyrope.rotate(swapped, inplace=True)


@pytest.mark.parametrize("impl", ["numba", "blocked", "array_api"])
def test_a_planned_geometry_in_place_still_refuses_what_it_does_not_fix(impl: str) -> None:
    """A second in-place call of a planned geometry checks again a read-only array, and
    q and k that share memory (the shapes and strides are those that passed)."""
    if impl == "numba":
        pytest.importorskip("numba")
    rope = anyrope.RoPE(8)
    x = _values((2, 5, 3, 8)).astype(np.float32)
    rope.rotate(x, 3, inplace=True, impl=impl)
    x.flags.writeable = False
    with pytest.raises(ValueError, match=r"inplace.*read-only"):
        rope.rotate(x, 3, inplace=True, impl=impl)
    fused = _values((2, 5, 6, 8)).astype(np.float32)
    rope(fused[:, :, :3], fused[:, :, 3:], 3, inplace=True, impl=impl)
    with pytest.raises(ValueError, match=r"in separate memory"):
        rope(fused[:, :, :3], fused[:, :, 2:5], 3, inplace=True, impl=impl)


TORCH_DTYPES = {"float16": "complex32", "float32": "complex64", "float64": "complex128"}


def _negative_view(shape: tuple[int, ...], dtype: str, seed: int = 0):
    """A tensor with the negative bit set (its memory holds minus its values), and a
    plain tensor of the same values."""
    torch = pytest.importorskip("torch")
    parts = torch.from_numpy(_values((*shape, 2), seed))
    c = torch.view_as_complex(parts).to(getattr(torch, TORCH_DTYPES[dtype]))
    view = c.conj().imag
    assert view.is_neg()
    return view, view.resolve_neg().clone()


def _torch_bits(t):
    import torch

    signed = {2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.contiguous().view(signed)


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
@pytest.mark.parametrize("dtype", list(TORCH_DTYPES))
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("shape", [(2, 5, 3, 8), (4, 300, 8, 64)], ids=["decode", "blocked"])
def test_torch_negative_bit_gives_the_bits_of_its_values(shape, impl, dtype):
    torch = pytest.importorskip("torch")
    view, plain = _negative_view(shape, dtype)
    options = {"rotary_dim": 6, "interleaved": True, "impl": _impl(impl)}
    want = anyrope.rotate(plain, 3, **options)
    got = anyrope.rotate(view, 3, **options)
    assert torch.equal(_torch_bits(got), _torch_bits(want))
    q, k = anyrope.rotate_qk(view, plain, 2, inverse=True, impl=impl)
    assert torch.equal(_torch_bits(q), _torch_bits(k))


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
@pytest.mark.parametrize("dtype", list(TORCH_DTYPES))
@pytest.mark.parametrize("impl", IMPLS)
def test_torch_negative_bit_in_place_writes_its_values(impl, dtype):
    torch = pytest.importorskip("torch")
    view, plain = _negative_view((2, 5, 3, 8), dtype)
    want = anyrope.rotate(plain, 4, rotary_dim=6, impl=_impl(impl))
    got = anyrope.rotate(view, 4, rotary_dim=6, inplace=True, impl=impl)
    assert got is view
    assert view.is_neg()
    assert torch.equal(_torch_bits(view.resolve_neg()), _torch_bits(want))


def test_torch_negative_bit_after_a_plain_call_of_the_same_geometry():
    """The plan kept for a tensor of the same shape and strides is not reused as is."""
    torch = pytest.importorskip("torch")
    c = torch.view_as_complex(torch.from_numpy(_values((1, 1, 3, 8, 2))).float())
    plain, view = c.imag, c.conj().imag
    assert plain.stride() == view.stride()
    assert view.is_neg()
    rope = anyrope.RoPE(8)
    rotated = rope.rotate(plain, 9)
    assert torch.equal(rope.rotate(view, 9), -rotated)
