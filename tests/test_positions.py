"""Positions of every integer dtype, near every limit: no sum wraps, every boundary is exact.

Offsets, 0-d offsets and position arrays of int8 .. uint64 give the bits of the same call
with int64 (or a Python int); ``offset + seq == 2**53`` is the last call accepted. A 0-d
integer array is an offset on every backend and path (dask and ``jax.jit`` included).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import anyrope
from anyrope.tools._backends import extra_backends

INTEGER_DTYPES = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")
SEQ = 3
LIMIT = 2**53


def _x(backend, shape=(2, SEQ, 2, 8)):
    host = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    return backend.from_numpy(host)


def _integers(backend, values, dtype):
    """``values`` (each representable in int64) as an array of ``dtype`` on ``backend``."""
    xp = backend.xp
    return xp.astype(backend.from_numpy(np.asarray(values, dtype=np.int64)), getattr(xp, dtype))


def _highest_offset(dtype):
    """The largest offset of ``dtype`` whose ``SEQ`` positions are all valid."""
    return min(int(np.iinfo(dtype).max), LIMIT - SEQ)


def _assert_same_bits(backend, got, expected):
    np.testing.assert_array_equal(backend.to_bits(got), backend.to_bits(expected))


@pytest.mark.parametrize("dtype", INTEGER_DTYPES)
def test_offsets_of_every_dtype_give_the_bits_of_int64_positions(backend, dtype):
    """The highest offset of each dtype (2**31-1 for int32, where offset + step wrapped)."""
    values = [_highest_offset(dtype), 0]
    positions = backend.from_numpy(np.array(values)[:, None] + np.arange(SEQ))
    offsets = anyrope.Offsets(_integers(backend, values, dtype))
    x, k = _x(backend), _x(backend, (2, SEQ, 1, 8))
    _assert_same_bits(backend, anyrope.rotate(x, offsets), anyrope.rotate(x, positions))
    xpos = anyrope.XPos(8)
    for got, expected in zip(xpos(x, k, offsets), xpos(x, k, positions), strict=True):
        _assert_same_bits(backend, got, expected)
    qkv = _x(backend, (2, SEQ, 3, 2, 8))
    _assert_same_bits(backend, anyrope.rotate_qkv(qkv, offsets), anyrope.rotate_qkv(qkv, positions))


@pytest.mark.parametrize(
    ("dtype", "value"),
    [("int32", 2**31 - 2), ("uint32", 2**32 - 2), ("uint64", 2**32 + 7), ("int64", 2**32 + 7)],
)
def test_offsets_past_int32_give_the_bits_of_int64_offsets(backend, dtype, value):
    x = _x(backend)
    got = anyrope.rotate(x, anyrope.Offsets(_integers(backend, [value, 0], dtype)))
    expected = anyrope.rotate(x, anyrope.Offsets(_integers(backend, [value, 0], "int64")))
    _assert_same_bits(backend, got, expected)


@pytest.mark.parametrize("dtype", INTEGER_DTYPES)
def test_position_arrays_of_every_dtype_give_the_bits_of_int64(backend, dtype):
    high = min(int(np.iinfo(dtype).max), LIMIT - 1)
    values = np.array([[high - 2, high - 1, high], [0, 1, 2]])
    x = _x(backend)
    got = anyrope.rotate(x, _integers(backend, values, dtype))
    _assert_same_bits(backend, got, anyrope.rotate(x, backend.from_numpy(values)))


@pytest.mark.parametrize("dtype", INTEGER_DTYPES)
def test_a_0d_array_is_an_offset_like_an_int(backend, dtype):
    """Every batch row at ``offset .. offset + seq - 1``, not one position for every token."""
    offset = _highest_offset(dtype)
    x = _x(backend)
    expected = anyrope.rotate(x, offset)
    _assert_same_bits(backend, anyrope.rotate(x, _integers(backend, offset, dtype)), expected)
    _assert_same_bits(backend, anyrope.rotate(x, np.dtype(dtype).type(offset)), expected)


def test_offset_plus_seq_reaching_2_53_is_the_last_accepted(backend):
    x = _x(backend)
    last = LIMIT - SEQ  # positions up to 2**53 - 1
    rows = np.array([last, 0])[:, None] + np.arange(SEQ)
    expected = anyrope.rotate(x, backend.from_numpy(rows))
    accepted = [
        anyrope.Offsets(_integers(backend, [last, 0], "int64")),
        anyrope.Offsets(_integers(backend, [last, 0], "uint64")),
    ]
    for positions in accepted:
        _assert_same_bits(backend, anyrope.rotate(x, positions), expected)
    every_row = anyrope.rotate(x, backend.from_numpy(rows[0]))
    for offset in (last, np.int64(last), np.uint64(last), _integers(backend, last, "uint64")):
        _assert_same_bits(backend, anyrope.rotate(x, offset), every_row)
    refused = [
        last + 1,
        np.uint64(last + 1),
        _integers(backend, last + 1, "int64"),
        anyrope.Offsets(_integers(backend, [last + 1, 0], "uint64")),
        backend.from_numpy(rows + 1),
    ]
    for positions in refused:
        with pytest.raises(ValueError, match=r"`positions`.*2\*\*53"):
            anyrope.rotate(x, positions)


@st.composite
def offsets_near_limits(draw):
    """A dtype, a length, and an offset of the dtype whose last position is within two
    steps of a limit: the dtype's largest value, int32's, uint32's, or 2**53 - 1."""
    dtype = draw(st.sampled_from(INTEGER_DTYPES))
    seq = draw(st.integers(1, 5))
    top = int(np.iinfo(dtype).max)
    limits = [stop for stop in (2**31, 2**32, LIMIT) if stop <= top]
    stop = draw(st.sampled_from([top + 1, *limits]))
    offset = max(0, min(top, stop - seq + draw(st.integers(-2, 2))))
    return dtype, offset, seq


@settings(max_examples=60, deadline=None)
@given(offsets_near_limits())
@example(("int64", LIMIT - 3, 3))
@example(("uint64", LIMIT - 2, 3))
@example(("int32", 2**31 - 2, 3))
@example(("uint8", 254, 3))
def test_offsets_near_every_limit_do_not_wrap(drawn):
    dtype, offset, seq = drawn
    x = np.random.default_rng(seq).standard_normal((2, seq, 1, 4))
    forms = [
        np.dtype(dtype).type(offset),
        np.array(offset, dtype=dtype),
        anyrope.Offsets(np.array([offset, offset], dtype=dtype)),
    ]
    if offset + seq > LIMIT:
        for positions in forms:
            with pytest.raises(ValueError, match=r"`positions`.*2\*\*53"):
                anyrope.rotate(x, positions)
        return
    expected = anyrope.rotate(x, np.arange(offset, offset + seq, dtype=np.int64))
    for positions in forms:
        np.testing.assert_array_equal(anyrope.rotate(x, positions), expected)
    if offset + seq - 1 <= np.iinfo(dtype).max:
        array = np.arange(offset, offset + seq, dtype=np.uint64).astype(dtype)
        np.testing.assert_array_equal(anyrope.rotate(x, array), expected)


def test_mrope_and_packed_take_a_0d_offset():
    config = {
        "hidden_size": 64,
        "num_attention_heads": 4,
        "rope_scaling": {"rope_type": "default", "mrope_section": [2, 3, 3]},
    }
    mrope = anyrope.RoPE.from_hf_config(config)
    x = np.random.default_rng(0).standard_normal((2, 3, 2, 16)).astype(np.float32)
    text = np.broadcast_to(np.arange(7, 10), (3, 2, 3))
    for offset in (np.array(7), np.uint8(7)):
        np.testing.assert_array_equal(mrope.rotate(x, offset), mrope.rotate(x, text))
    packed = x.reshape(6, 2, 16)
    cu = np.array([0, 2, 6])
    starts = np.array([0, 1, 0, 1, 2, 3]) + 250
    expected = anyrope.rotate(packed[None], starts)[0]
    for offset in (250, np.array(250, np.uint8), np.uint8(250)):
        got = anyrope.rotate(packed, offset, layout="thd", cu_seqlens=cu)
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize(
    "positions",
    [
        np.array(2**64 - 1, np.uint64),
        np.array([2**64 - 1, 0], np.uint64),
        anyrope.Offsets(np.array([2**63, 0], np.uint64)),
    ],
    ids=["0d", "per-sequence", "offsets"],
)
def test_packed_offsets_past_int64_are_refused_as_themselves(positions):
    packed = np.ones((3, 1, 8), np.float32)
    with pytest.raises(
        ValueError,
        match=r"`positions`.*2\*\*53.*\b(18446744073709551615|2\*\*63|9223372036854775808)",
    ):
        anyrope.rotate(packed, positions, layout="thd", cu_seqlens=np.array([0, 1, 3]))


@pytest.mark.parametrize(
    "positions",
    [np.array([2**64 - 1], np.uint64), np.array([-(2**63)]), np.array([2**53, 0], np.uint64)],
    ids=["uint64-max", "int64-min", "2**53"],
)
def test_sinusoidal_refuses_positions_beyond_2_53_whatever_the_dtype(positions):
    with pytest.raises(ValueError, match=r"`positions` must be below 2\*\*53") as error:
        anyrope.sinusoidal(positions, 8, dtype=np.float64)
    assert str(int(positions[0])) in str(error.value)
    with pytest.raises(
        ValueError, match=rf"`positions` must lie in \[0, 2\*\*53\).*{positions[0]}"
    ):
        anyrope.RoPE(8).tables(positions, dtype=np.float64)


@pytest.mark.parametrize("count", [np.uint64(2**64 - 1), 2**63, LIMIT + 1])
def test_sinusoidal_refuses_a_count_past_2_53(count):
    with pytest.raises(
        ValueError, match=rf"`positions` must be a count from 0 to 2\*\*53; got {count}"
    ):
        anyrope.sinusoidal(count, 8, dtype=np.float64)


def test_sinusoidal_takes_every_position_below_2_53_of_any_dtype():
    values = [LIMIT - 1, 5, 0]
    expected = anyrope.sinusoidal(np.array(values), 8, dtype=np.float64)
    got = anyrope.sinusoidal(np.array(values, np.uint64), 8, dtype=np.float64)
    np.testing.assert_array_equal(got, expected)
    negative = anyrope.sinusoidal(np.array([1 - LIMIT]), 8, dtype=np.float64)
    np.testing.assert_array_equal(negative[:, 1::2], expected[:1, 1::2])  # cos is even


# JAX: eager Offsets, and under jax.jit traced offsets (0-d and per row) of any dtype.


def test_jax_int32_offsets_past_2_31_give_the_bits_of_int64():
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    x = np.random.default_rng(0).standard_normal((2, SEQ, 2, 8)).astype(np.float32)
    values = np.array([2**31 - 2, 0])
    step = jax.jit(lambda a, o: anyrope.rotate(a, anyrope.Offsets(o)))
    with jax.enable_x64(True):
        wide = jnp.asarray(values.astype(np.int64))
        narrow = jnp.asarray(values.astype(np.int32))
        np.testing.assert_array_equal(
            np.asarray(anyrope.rotate(jnp.asarray(x), anyrope.Offsets(narrow))),
            anyrope.rotate(x, anyrope.Offsets(values)),
        )
        np.testing.assert_array_equal(
            np.asarray(step(jnp.asarray(x), narrow)), np.asarray(step(jnp.asarray(x), wide))
        )
    # Without 64-bit types JAX has no int64: a wrapped position is refused when it runs.
    with (
        jax.enable_x64(False),
        pytest.raises(jax.errors.JaxRuntimeError, match="`positions`"),
    ):
        np.asarray(step(jnp.asarray(x), jnp.asarray(values.astype(np.int32))))


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16", "uint16"])
def test_jax_traced_0d_offset_of_a_small_dtype_does_not_wrap(dtype):
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    x = jnp.asarray(np.random.default_rng(0).standard_normal((2, 4, 2, 8)).astype(np.float32))
    step = jax.jit(anyrope.rotate)
    offset = int(np.iinfo(dtype).max) - 1
    got = step(x, jnp.asarray(np.array(offset, dtype)))
    expected = step(x, jnp.asarray(np.array(offset, np.int32)))
    np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))


# dask: 0-d offsets (also lazy), Offsets past 2**31, unknown chunk sizes.


def _dask_input(shape=(2, 6, 2, 8)):
    da = pytest.importorskip("dask.array")
    host = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    return host, da.from_array(host, chunks=(1, 3, 2, 8))


@pytest.mark.parametrize("dtype", INTEGER_DTYPES)
def test_dask_0d_positions_are_an_offset(dtype):
    da = pytest.importorskip("dask.array")
    host, x = _dask_input()
    offset = min(int(np.iinfo(dtype).max), LIMIT - 6)
    expected = anyrope.rotate(host, offset)
    for positions in (np.array(offset, dtype), da.from_array(np.array(offset, dtype))):
        np.testing.assert_array_equal(anyrope.rotate(x, positions).compute(), expected)


@pytest.mark.parametrize(
    ("value", "message"),
    [(-1, "non-negative; got -1"), (2**64 - 1, "exceeds 2\\*\\*53"), (LIMIT - 5, "exceeds")],
)
def test_dask_lazy_0d_offsets_are_checked_when_computed(value, message):
    da = pytest.importorskip("dask.array")
    _, x = _dask_input()
    dtype = np.uint64 if value > 0 else np.int64
    y = anyrope.rotate(x, da.from_array(np.array(value, dtype)))
    with pytest.raises(ValueError, match=f"`positions` offset.*{message}"):
        y.compute()


def test_dask_int32_offsets_past_2_31_give_the_bits_of_numpy():
    host, x = _dask_input()
    values = np.array([2**31 - 2, 0])
    got = anyrope.rotate(x, anyrope.Offsets(values.astype(np.int32))).compute()
    np.testing.assert_array_equal(got, anyrope.rotate(host, anyrope.Offsets(values)))


@pytest.mark.parametrize("layout", ["bshd", "bhsd", "sbhd"])
@pytest.mark.parametrize("dtype", ["int8", "uint16", "int64"])
def test_dask_offsets_give_the_bits_of_numpy(layout, dtype):
    """Offsets of the input's library, lazy too: checked when computed."""
    da = pytest.importorskip("dask.array")
    rng = np.random.default_rng(5)
    shape = {"bshd": (4, 6, 2, 8), "bhsd": (4, 2, 6, 8), "sbhd": (6, 4, 2, 8)}[layout]
    host = rng.standard_normal(shape).astype(np.float32)
    values = np.array([5, 9, 0, 100], dtype=dtype)
    offsets = anyrope.Offsets(da.from_array(values, chunks=3))
    got = anyrope.rotate(da.from_array(host, chunks=2), offsets, layout=layout).compute()
    expected = anyrope.rotate(host, anyrope.Offsets(values), layout=layout)
    np.testing.assert_array_equal(got, expected)
    lazy = anyrope.rotate(
        da.from_array(host, chunks=2),
        anyrope.Offsets(da.full(4, -1, dtype=np.int64)),
        layout=layout,
    )
    with pytest.raises(ValueError, match=r"`positions` must be non-negative"):
        lazy.compute()


def test_dask_unknown_chunk_sizes_are_named():
    da = pytest.importorskip("dask.array")
    host, x = _dask_input()
    keep = np.array([True, False])
    masked = x[da.from_array(keep)]
    with pytest.raises(
        ValueError, match=r"`x` must be a dask array with known chunk sizes.*compute_chunk_sizes"
    ):
        anyrope.rotate(masked)
    with pytest.raises(
        ValueError, match=r"`k` must .*known chunk sizes.*`k\.compute_chunk_sizes\(\)`"
    ):
        anyrope.rotate_qk(x[:1], masked)
    positions = da.arange(6)[da.from_array(np.ones(6, bool))]
    with pytest.raises(ValueError, match=r"`positions` must .*known chunk sizes"):
        anyrope.rotate(x, positions)
    masked.compute_chunk_sizes()
    np.testing.assert_array_equal(
        anyrope.rotate(masked, 4).compute(), anyrope.rotate(host[keep], 4)
    )


def test_jax_without_64_bit_types_refuses_positions_past_int32():
    """Concrete JAX arrays off the CPU take the array-API path, whose positions are int32
    without ``jax_enable_x64``: a sum past int32 is refused, not wrapped."""
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    from anyrope._positions import resolve_positions

    with jax.enable_x64(False):
        x = jnp.ones((2, SEQ, 1, 8), dtype=jnp.float32)
        offsets = anyrope.Offsets(jnp.asarray(np.array([2**31 - SEQ, 0], np.int32)))
        fits = resolve_positions(offsets, jnp, x, (2,), SEQ)
        assert fits.stop == 2**31
        assert int(fits.array.max()) == 2**31 - 1
        past = anyrope.Offsets(jnp.asarray(np.array([2**31 - SEQ + 1, 0], np.int32)))
        with pytest.raises(ValueError, match=r"`positions` reach 2147483648.*jax_enable_x64"):
            resolve_positions(past, jnp, x, (2,), SEQ)


ONE_POSITION_PER_ROW = pytest.mark.parametrize(
    "rows",
    [[[0], [1]], [[7], [5], [6]], [[2**40 + 1], [2**40]]],
    ids=["two-rows", "three-rows-unsorted", "past-2-32"],
)
EXTRA = [
    pytest.param(
        b, id=b.id, marks=[pytest.mark.skip(reason=b.unavailable)] if b.unavailable else []
    )
    for b in extra_backends()
]


def _check_one_position_per_row(backend, rows, layout):
    values = np.array(rows)
    seq = len(rows)
    shape = (len(rows), seq, 2, 8) if layout == "bshd" else (len(rows), 2, seq, 8)
    x, k = _x(backend, shape), _x(backend, (*shape[:-2], 1, 8) if layout == "bshd" else shape)
    positions = backend.from_numpy(values)
    spelled_out = backend.from_numpy(np.repeat(values, seq, axis=1))
    expected = anyrope.rotate_qk(x, k, spelled_out, layout=layout)
    rope = anyrope.RoPE(8)
    for _ in range(3):
        got = rope(x, k, positions, layout=layout)
        for g, e in zip(got, expected, strict=True):
            _assert_same_bits(backend, g, e)
        _assert_same_bits(backend, anyrope.rotate(x, positions, layout=layout), expected[0])


@ONE_POSITION_PER_ROW
@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_one_position_per_row_holds_on_every_call_of_the_same_shape(backend, rows, layout):
    """Positions of shape (batch, 1) whose rows span ``seq`` integers are not a range.

    The first call of a shape checks its positions in full; later calls of the shape take
    the pipeline's plan and check the values only. That check took rows (b, 1) spanning
    ``seq`` integers for a range: every row then rotated as ``low .. low + seq - 1``.
    """
    _check_one_position_per_row(backend, rows, layout)


@ONE_POSITION_PER_ROW
@pytest.mark.parametrize("jax_or_dask", EXTRA)
def test_one_position_per_row_holds_on_every_call_in_jax_and_dask(jax_or_dask, rows):
    with jax_or_dask.scope():
        _check_one_position_per_row(jax_or_dask, rows, "bshd")
