"""The compiled CPU path (numba): exact half-type conversions, no FMA, the reference's bits.

The golden files run on this path too (``tests/test_golden.py``); here: every float16 and
bfloat16 value converted both ways, the machine code read for fused multiply-adds, and
the shapes, layouts, positions and memory layouts a user may hand it.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

import ml_dtypes
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit

import anyrope
from anyrope import _threads
from anyrope._cpu_memory import STORAGE_DTYPES
from anyrope._paths import numba_cpu
from anyrope._paths.numba_cpu import kernels
from goldens import assert_same_bits

BITS = {"float16": np.uint16, "bfloat16": np.uint16, "float32": np.uint32, "float64": np.uint64}
NUMPY_DTYPES = {
    "float16": np.float16,
    "bfloat16": ml_dtypes.bfloat16,
    "float32": np.float32,
    "float64": np.float64,
}


@njit
def _map_float16_in(a, out):
    for i in range(a.size):
        out[i] = kernels.float16_to_float32(a[i])


@njit
def _map_float16_out(a, out):
    for i in range(a.size):
        out[i] = kernels.float32_to_float16(a[i])


@njit
def _map_float16_in_by_cpu(a, out):
    for i in range(a.size):
        out[i] = kernels._float16_to_float32_by_cpu(a[i])


@njit
def _map_float16_out_by_cpu(a, out):
    for i in range(a.size):
        out[i] = kernels._float32_to_float16_by_cpu(a[i])


@njit
def _map_bfloat16_in(a, out):
    for i in range(a.size):
        out[i] = kernels.bfloat16_to_float32(a[i])


@njit
def _map_bfloat16_out(a, out):
    for i in range(a.size):
        out[i] = kernels.float32_to_bfloat16(a[i])


def _float32_probes() -> np.ndarray:
    """float32 values where a rounding to a 16-bit format can go wrong: the midpoint
    between every two consecutive float16 values and every two bfloat16 values (ties),
    one float32 ulp either side of each, the overflow and subnormal boundaries, and a
    million random bit patterns."""
    every16 = np.arange(1 << 16, dtype=np.uint32)
    low = every16.astype(np.uint16).view(np.float16).astype(np.float64)
    high = (every16 + 1).astype(np.uint16).view(np.float16).astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        float16_ties = ((low + high) / 2).astype(np.float32)
    float16_ties = float16_ties[np.isfinite(float16_ties)].view(np.uint32)
    bfloat16_ties = (every16 << 16) + (1 << 15)
    ties = np.concatenate([float16_ties, bfloat16_ties]).astype(np.int64)
    near = [(ties + delta).astype(np.uint32) for delta in (-1, 0, 1)]
    random = np.random.default_rng(0).integers(0, 1 << 32, 1 << 20, dtype=np.uint64)
    specials = np.array(
        [
            *(0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0xFFFFFFFF, 0x7F7FFFFF),
            *(0x477FF000, 0x477FEFFF, 0x33000000, 0x33000001, 0x38800000, 0x387FFFFF),
            *(0x00000001, 0x80000001),
        ],
        dtype=np.uint32,
    )
    return np.concatenate([*near, random.astype(np.uint32), specials]).view(np.float32)


def _assert_same_16(got: np.ndarray, want: np.ndarray, dtype: str) -> None:
    assert_same_bits(got.view(np.uint16), want.view(np.uint16), dtype)


# The integer conversions run everywhere; the CPU's own (F16C) where the kernel uses them.
FLOAT16_WAYS = [
    pytest.param((_map_float16_in, _map_float16_out), id="integer"),
    pytest.param(
        (_map_float16_in_by_cpu, _map_float16_out_by_cpu),
        id="f16c",
        marks=pytest.mark.skipif(
            not kernels.HARDWARE_FLOAT16, reason="the kernel does not use F16C on this CPU"
        ),
    ),
]


@pytest.mark.parametrize("way", FLOAT16_WAYS)
def test_every_float16_converts_exactly(way) -> None:
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    got = np.empty(bits.size, np.float32)
    way[0](bits, got)
    want = bits.view(np.float16).astype(np.float32)
    assert_same_bits(got.view(np.uint32), want.view(np.uint32), "float32")


@pytest.mark.parametrize("way", FLOAT16_WAYS)
def test_float32_rounds_to_nearest_even_float16(way) -> None:
    values = _float32_probes()
    got = np.empty(values.size, np.uint16)
    way[1](values, got)
    with np.errstate(over="ignore", invalid="ignore"):
        want = values.astype(np.float16)
    _assert_same_16(got, want, "float16")


def test_every_bfloat16_converts_exactly() -> None:
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    got = np.empty(bits.size, np.float32)
    _map_bfloat16_in(bits.view(np.int16), got)
    want = bits.view(ml_dtypes.bfloat16).astype(np.float32)
    assert_same_bits(got.view(np.uint32), want.view(np.uint32), "float32")


def test_float32_rounds_to_nearest_even_bfloat16() -> None:
    values = _float32_probes()
    got = np.empty(values.size, np.int16)
    _map_bfloat16_out(values, got)
    with np.errstate(over="ignore", invalid="ignore"):
        want = values.astype(ml_dtypes.bfloat16)
    _assert_same_16(got, want, "bfloat16")


def _instructions(kernel, *args) -> str:
    """The machine code of ``kernel`` compiled fresh (cached code cannot be read back)."""
    fresh = njit(nogil=True)(kernel.py_func)
    fresh(*args)
    return "\n".join(fresh.inspect_asm(signature) for signature in fresh.signatures)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_no_fused_multiply_add(dtype: str) -> None:
    """numerical-contract.rst, "How every path computes" 3: every product rounded separately. On a
    CPU with FMA (this one has, if the instruction set names it) a contracted `a*b - c*d` would show
    as vfm*."""
    storage = STORAGE_DTYPES[dtype]
    table = np.float64 if dtype == "float64" else np.float32
    x = np.ones((1, 2, 3, 16), dtype=storage)
    cos, sin = np.ones((4, 8), table), np.ones((4, 8), table)
    rows = (0, 0, 1, 0)
    code = _instructions(kernels.rotate, x, np.empty_like(x), cos, sin, rows, False, 0, 2)
    code += _instructions(kernels.rotate_in_place, x, cos, sin, rows, True, 0, 2)
    assert "mul" in code
    for fused in ("vfmadd", "vfmsub", "vfnmadd", "vfnmsub", "fmla", "fmls", "fmadd", "fmsub"):
        assert fused not in code, f"{fused} in the compiled kernel"


def _reference(x, rope, **options):
    return rope.rotate(x, impl="array_api", **options)


def _bits(a, dtype: str) -> np.ndarray:
    """The bit patterns of a NumPy array or a torch CPU tensor."""
    if hasattr(a, "detach"):
        import torch

        a = a.view(torch.int16).numpy() if a.element_size() == 2 else a.numpy()
    return np.asarray(a).view(BITS[dtype])


def _same(got, want, dtype: str) -> None:
    assert_same_bits(_bits(got, dtype), _bits(want, dtype), dtype)


@settings(max_examples=60, deadline=None)
@given(
    dtype=st.sampled_from(["float16", "bfloat16", "float32", "float64"]),
    layout=st.sampled_from(["bshd", "bhsd", "sbhd"]),
    batch=st.lists(st.integers(1, 3), min_size=0, max_size=2),
    seq=st.integers(1, 9),
    heads=st.integers(1, 4),
    pairs=st.integers(1, 12),
    partial=st.booleans(),
    interleaved=st.booleans(),
    inverse=st.booleans(),
    inplace=st.booleans(),
    positions=st.sampled_from(["none", "offset", "array"]),
    seed=st.integers(0, 2**16),
)
def test_matches_the_reference(  # noqa: PLR0917 - hypothesis draws each
    dtype, layout, batch, seq, heads, pairs, partial, interleaved, inverse, inplace, positions, seed
) -> None:
    rng = np.random.default_rng(seed)
    head_dim = 2 * pairs + (2 * rng.integers(1, 3) if partial else 0)
    rope = anyrope.RoPE(head_dim, rotary_dim=2 * pairs, interleaved=interleaved)
    shape = {
        "bshd": (*batch, seq, heads, head_dim),
        "bhsd": (*batch, heads, seq, head_dim),
        "sbhd": (seq, *batch, heads, head_dim),
    }[layout]
    x = (rng.standard_normal(shape) * 4).astype(NUMPY_DTYPES[dtype])
    where = {
        "none": None,
        "offset": int(rng.integers(0, 5000)),
        "array": rng.integers(0, 70000, size=(*batch, seq)),
    }[positions]
    want = _reference(x, rope, positions=where, layout=layout, inverse=inverse)
    y = x.copy()
    got = rope.rotate(
        y, positions=where, layout=layout, inverse=inverse, inplace=inplace, impl="numba"
    )
    assert (got is y) == inplace
    _same(got, want, dtype)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_special_values_and_subnormals(dtype: str) -> None:
    rng = np.random.default_rng(1)
    info = ml_dtypes.finfo(NUMPY_DTYPES[dtype])
    values = [
        0.0,
        -0.0,
        np.inf,
        -np.inf,
        np.nan,
        float(info.max),
        float(info.smallest_subnormal),
        -float(info.smallest_subnormal),
        float(info.smallest_normal) * 0.75,
    ]
    x = rng.standard_normal((2, 8, 2, 32)).astype(NUMPY_DTYPES[dtype])
    flat = x.reshape(-1)
    flat[: len(values)] = values
    flat[64 : 64 + len(values)] = values[::-1]
    # Tiny inputs with tiny products: subnormal results must not be flushed.
    x[1] = (rng.standard_normal((8, 2, 32)) * float(info.smallest_normal)).astype(x.dtype)
    rope = anyrope.RoPE(32)
    for interleaved in (False, True):
        rope = anyrope.RoPE(32, interleaved=interleaved)
        _same(rope.rotate(x, 3, impl="numba"), _reference(x, rope, positions=3), dtype)


def test_memory_layouts() -> None:
    """Strided views (q of a fused qkv, a transposed array, steps of -1 and 2), 3-D and 6-D."""
    rng = np.random.default_rng(2)
    rope = anyrope.RoPE(16)
    fused = rng.standard_normal((2, 7, 3, 48), dtype=np.float32)
    cases = [
        fused[..., 16:32],
        np.swapaxes(rng.standard_normal((2, 3, 7, 16), dtype=np.float32), 1, 2),
        rng.standard_normal((2, 7, 3, 16), dtype=np.float32)[:, ::-1],
        rng.standard_normal((2, 7, 3, 32), dtype=np.float32)[..., ::2],
        rng.standard_normal((7, 3, 16), dtype=np.float32),
        rng.standard_normal((2, 2, 3, 7, 3, 16), dtype=np.float32),
    ]
    for x in cases:
        for positions in (None, 11, rng.integers(0, 100, size=x.shape[:-2])):
            want = _reference(x, rope, positions=positions)
            _same(rope.rotate(x, positions, impl="numba"), want, "float32")
            y = x.copy() if x.base is None else x
            before = fused.copy()
            rope.rotate(y, positions, impl="numba", inplace=True)
            _same(y, want, "float32")
            if x.base is fused:
                # In place on q of a fused array: k and v untouched.
                np.testing.assert_array_equal(fused[..., 32:], before[..., 32:])
                fused[...] = before


def test_m_rope_sections() -> None:
    rng = np.random.default_rng(3)
    rope = anyrope.RoPE(32, scaling={"rope_type": "default", "mrope_section": [4, 6, 6]})
    x = rng.standard_normal((2, 9, 4, 32), dtype=np.float32)
    positions = rng.integers(0, 50, size=(3, 2, 9))
    _same(
        rope.rotate(x, positions, impl="numba"), _reference(x, rope, positions=positions), "float32"
    )


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_torch_tensors(dtype: str) -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    rope = anyrope.RoPE(64, rotary_dim=48)
    x = torch.from_numpy(rng.standard_normal((2, 9, 4, 64)).astype(np.float32)).to(
        getattr(torch, dtype)
    )
    q = x.transpose(1, 2)  # a non-contiguous view
    for t, layout in ((x, "bshd"), (q, "bhsd")):
        for positions in (None, 5, torch.arange(2 * 9).reshape(2, 9) * 7):
            want = rope.rotate(t, positions, layout=layout, impl="array_api")
            _same(rope.rotate(t, positions, layout=layout, impl="numba"), want, dtype)
            y = t.clone()
            rope.rotate(y, positions, layout=layout, impl="numba", inplace=True)
            _same(y, want, dtype)


@pytest.mark.parametrize("impl", ["numba", "blocked"])
def test_in_place_on_torch_bumps_the_version(impl: str) -> None:
    """Written through NumPy views, but autograd must see the change: a tensor saved for
    backward and then rotated in place makes backward raise instead of using new values."""
    torch = pytest.importorskip("torch")
    w = torch.ones(2, 3, 4, 8, requires_grad=True)
    x = torch.ones(2, 3, 4, 8)
    y = (w * x).sum()  # saves x for the backward
    before = x._version
    anyrope.rotate(x, 5, impl=impl, inplace=True)
    assert x._version > before
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_large_inputs_split_between_threads(monkeypatch) -> None:
    """With OMP_NUM_THREADS=3, a large input is cut in three shares: one on the calling
    thread, two handed to the pool; the bits do not change."""
    x = np.random.default_rng(5).standard_normal((4, 300, 8, 64), dtype=np.float32)
    rope = anyrope.RoPE(64)
    want = _reference(x, rope)
    pool = _threads.executor()
    submitted = []

    class CountingPool:
        def submit(self, fn, *args):
            submitted.append(args)
            return pool.submit(fn, *args)

    monkeypatch.setattr(_threads, "executor", CountingPool)
    monkeypatch.setattr(numba_cpu, "PARALLEL_ELEMENTS", 1024)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    _same(rope.rotate(x, impl="numba"), want, "float32")
    # 4 x 300 (batch, seq) units: shares of 400, the first on the calling thread.
    assert submitted == [(400, 800), (800, 1200)]
    y = x.copy()
    rope.rotate(y, impl="numba", inplace=True)
    _same(y, want, "float32")
    submitted.clear()
    with _threads.one_thread():
        _same(rope.rotate(x, impl="numba"), want, "float32")
    assert submitted == []


def test_thread_count_follows_the_caller(monkeypatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert _threads.workers("numpy") == 3
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert _threads.workers("numpy") == _threads.cores()
    with _threads.one_thread():
        assert _threads.workers("numpy") == 1
    torch = pytest.importorskip("torch")
    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert _threads.workers("torch") == 1
    finally:
        torch.set_num_threads(previous)


def test_auto_falls_back_without_numba(monkeypatch) -> None:
    x = np.ones((1, 3, 2, 8), dtype=np.float32)
    rope = anyrope.RoPE(8)
    assert rope.path(x) == "numba"
    monkeypatch.setattr(numba_cpu, "installed", lambda: False)
    assert rope.path(x) == "blocked"
    with pytest.raises(ValueError, match=r"impl.*numba.*needs numba, which is not installed"):
        rope.rotate(x, impl="numba")


def test_other_libraries_are_refused_by_name() -> None:
    strict = pytest.importorskip("array_api_strict")
    x = strict.ones((1, 3, 2, 8))
    with pytest.raises(ValueError, match=r"impl.*numba.*NumPy arrays or PyTorch CPU tensors"):
        anyrope.rotate(x, impl="numba")
