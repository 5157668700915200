"""JAX: eager results, and results under ``jax.jit``, ``vmap`` and ``grad`` on the CPU, equal
NumPy's (and the golden files') bits.

Under a trace XLA would contract ``a*b - c*d`` into fused multiply-adds and flush subnormals; the
JAX path has XLA call the numba kernel instead (``anyrope._paths.jax_cpu``), so these tests need
numba.
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import anyrope
from anyrope.tools._backends import numpy_dtype
from goldens import CASES, DATA, assert_same_bits, case_id, rope_options
from subprocess_run import run_python

jax = pytest.importorskip("jax", reason="JAX is not installed")
jnp = pytest.importorskip("jax.numpy")

BITS = {"float16": np.uint16, "bfloat16": np.uint16, "float32": np.uint32, "float64": np.uint64}
# Eager JAX compiles each operation for each new shape, about a second per case here: a
# quick subset (each dtype with both pair layouts, all three axis layouts, offsets and
# position arrays) runs by default, the rest are marked slow.
QUICK = {1, 2, 11}


def _golden_cases(kinds=("random", "special", "large", "scaled")):
    return [
        pytest.param(
            case,
            id=case_id(case),
            marks=() if index % 12 in QUICK else pytest.mark.slow,
        )
        for index, case in enumerate(CASES)
        if case["kind"] in kinds
    ]


def _inputs(case):
    x = jnp.asarray(DATA[f"{case['name']}_x"].view(numpy_dtype(case["dtype"])))
    positions = case["positions"]
    if positions == "array":
        positions = jnp.asarray(DATA[f"{case['name']}_positions"].view(np.int64))
    return x, positions, rope_options(case)


def _bits(y) -> np.ndarray:
    host = np.asarray(y)
    return host.view(BITS[host.dtype.name])


def _same_bits(got, expected) -> bool:
    """Bit for bit (any NaN matches any NaN), as NumPy arrays."""
    got, expected = np.asarray(got), np.asarray(expected)
    assert got.dtype == expected.dtype
    assert got.shape == expected.shape
    nan = np.isnan(got.astype(np.float64)) & np.isnan(expected.astype(np.float64))
    return bool(np.array_equal(np.where(nan, 0, _bits(got)), np.where(nan, 0, _bits(expected))))


@pytest.fixture
def x64():
    with jax.enable_x64(True):
        yield


@pytest.mark.parametrize("case", _golden_cases())
def test_eager_equals_golden_bits(case, x64):
    x, positions, options = _inputs(case)
    y = anyrope.rotate(x, positions, **options)
    assert isinstance(y, jax.Array)
    assert y.dtype == x.dtype
    assert_same_bits(_bits(y), DATA[f"{case['name']}_y"], case["dtype"])


def test_eager_cpu_keeps_the_subnormals_xla_flushes(x64):
    """XLA on the CPU flushes subnormals even in eager mode; anyrope's result does not."""
    tiny = np.array([[[[1e-40, -3e-39, 2e-45, 1.0]]]], dtype=np.float32)
    x = jax.device_put(tiny, jax.devices("cpu")[0])  # the CPU even where a GPU is the default
    assert float(np.asarray(x * 1.0)[0, 0, 0, 0]) == 0.0  # why the NumPy route exists
    y = anyrope.rotate(x, 0)
    assert isinstance(y, jax.Array)
    assert y.devices() == x.devices()
    np.testing.assert_array_equal(_bits(y), _bits(anyrope.rotate(tiny, 0)))
    assert np.asarray(y)[0, 0, 0, 0] == np.float32(1e-40)


@pytest.mark.parametrize("case", _golden_cases())
def test_jit_equals_golden_bits(case, x64):
    x, positions, options = _inputs(case)
    settings = {key: value for key, value in options.items() if key != "layout"}
    depends_on_length = anyrope.RoPE(case["head_dim"], **settings).scaling.depends_on_length
    if isinstance(positions, jax.Array) and not depends_on_length:
        # The positions are traced: their tables are built by a host callback at run time.
        step = jax.jit(lambda x, p: anyrope.rotate(x, p, **options))
        y = step(x, positions)
    else:
        # Static, or concrete (closed over): length-dependent scaling needs their values.
        y = jax.jit(lambda x: anyrope.rotate(x, positions, **options))(x)
    assert y.dtype == x.dtype
    assert_same_bits(_bits(y), DATA[f"{case['name']}_y"], case["dtype"])


def test_rope_object_jit_with_traced_positions_and_vmap():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((3, 5, 4, 16)).astype(np.float32)
    k = rng.standard_normal((3, 5, 2, 16)).astype(np.float32)
    positions = rng.integers(0, 100_000, size=(3, 5))
    rope = anyrope.RoPE(16, interleaved=True)
    q_ref, k_ref = rope(q, k, positions)

    step = jax.jit(rope)
    q_jit, k_jit = step(jnp.asarray(q), jnp.asarray(k), jnp.asarray(positions))
    assert _same_bits(q_jit, q_ref)
    assert _same_bits(k_jit, k_ref)

    per_row = jax.jit(jax.vmap(rope.rotate))
    q_vmap = per_row(jnp.asarray(q), jnp.asarray(positions))
    assert _same_bits(q_vmap, q_ref)


def test_traced_positions_out_of_range_fail_when_run():
    step = jax.jit(anyrope.rotate)
    x = jnp.ones((4, 1, 8), dtype=jnp.float32)
    with pytest.raises(Exception, match=r"must lie in \[0, 2\*\*53\)"):
        step(x, jnp.asarray([0, 1, -2, 3])).block_until_ready()


def test_inplace_is_a_clear_error():
    x = jnp.ones((1, 4, 2, 8), dtype=jnp.float32)
    with pytest.raises(ValueError, match="JAX arrays, which are immutable"):
        anyrope.rotate(x, inplace=True)
    with pytest.raises(ValueError, match="JAX arrays, which are immutable"):
        anyrope.RoPE(8)(x, x, inplace=True)


def test_attention_and_linear_attention_on_jax():
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((2, 6, 2, 8)).astype(np.float32) for _ in range(3))
    rope = anyrope.RoPE(8)
    positions = np.arange(6) + 40
    for function in (anyrope.attention, anyrope.linear_attention):
        expected = function(q, k, v, rope=rope, positions=positions, causal=True)
        eager = function(
            *map(jnp.asarray, (q, k, v)), rope=rope, positions=jnp.asarray(positions), causal=True
        )
        jitted = jax.jit(
            lambda q, k, v, p, f=function: f(q, k, v, rope=rope, positions=p, causal=True)
        )
        traced = jitted(*map(jnp.asarray, (q, k, v)), jnp.asarray(positions))
        np.testing.assert_allclose(np.asarray(eager), expected, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(np.asarray(traced), expected, rtol=1e-5, atol=1e-5)


def test_sinusoidal_on_jax_equals_numpy_bits():
    positions = np.array([0, 5, 4096, 10**6])
    expected = anyrope.sinusoidal(positions, 16, dtype=np.float32)
    got = anyrope.sinusoidal(jnp.asarray(positions), 16, dtype=jnp.float32)
    assert isinstance(got, jax.Array)
    np.testing.assert_array_equal(_bits(got), _bits(expected))


@pytest.mark.parametrize("transform", ["jit", "grad", "vmap", "jvp", "checkpoint"])
def test_transforms_with_concrete_positions(transform):
    rope = anyrope.RoPE(8)
    x = jnp.asarray(np.random.default_rng(3).standard_normal((2, 4, 3, 8)), dtype=jnp.float32)
    positions = jnp.arange(5, 9)
    want = np.asarray(rope.rotate(x, 5))

    def f(x):
        return rope.rotate(x, positions)

    if transform == "jit":
        got = jax.jit(f)(x)
    elif transform == "grad":
        got = jax.grad(lambda x: jnp.sum(f(x) * want))(x)
        want = np.asarray(rope.rotate(jnp.asarray(want), 5, inverse=True))
    elif transform == "vmap":
        got = jax.vmap(f)(x[:, None])[:, 0]
    elif transform == "jvp":
        got, tangent = jax.jvp(f, (x,), (x,))
        np.testing.assert_allclose(np.asarray(tangent), want, rtol=1e-6, atol=1e-6)
    else:
        got = jax.checkpoint(f)(x)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-6)


# A trace must leave nothing behind: the table caches outlive it, so what they keep is
# built outside it (concrete arrays that enter a jitted function as constants). Each
# setting fills another cache: tables, windows far away, dynamic-NTK blocks, xPos, undo.
ROTATIONS = {
    "default": (lambda: anyrope.RoPE(16).rotate, 3),
    "yarn-inverse": (
        lambda: functools.partial(
            anyrope.RoPE(
                16, scaling={"rope_type": "yarn", "factor": 4.0}, max_position_embeddings=64
            ).rotate,
            inverse=True,
        ),
        3,
    ),
    "xpos-keys": (lambda: anyrope.XPos(16).rotate_keys, 3),
    "far-window": (lambda: anyrope.RoPE(16).rotate, 2**40),
    "dynamic-past-context": (
        lambda: (
            anyrope.RoPE(
                16, scaling={"rope_type": "dynamic", "factor": 2.0}, max_position_embeddings=8
            ).rotate
        ),
        20,
    ),
}


def _assert_jit_matches_numpy(rotate, x, offset, got):
    expected = rotate(np.asarray(x), offset)
    assert got.dtype == x.dtype
    assert _same_bits(got, expected)


@pytest.mark.parametrize("name", list(ROTATIONS))
def test_jit_traces_again_after_a_trace(name):
    """New shapes (a decode step among them), dtypes, jitted functions, changing static
    offsets and eager calls after a first trace each get their own call's tables:
    NumPy's bits."""
    make, offset = ROTATIONS[name]
    rotate = make()
    rng = np.random.default_rng(4)

    def inputs(shape, dtype=np.float32):
        return jnp.asarray(rng.standard_normal(shape).astype(dtype))

    step = jax.jit(lambda a: rotate(a, offset))
    for shape in [(2, 6, 3, 16), (1, 9, 3, 16), (3, 2, 16), (2, 1, 3, 16)]:
        x = inputs(shape)
        _assert_jit_matches_numpy(rotate, x, offset, step(x))
    x = inputs((1, 5, 2, 16), ml_dtypes.bfloat16)
    _assert_jit_matches_numpy(rotate, x, offset, step(x))
    other = jax.jit(lambda a: rotate(a, offset) * 1)
    x = inputs((2, 1, 1, 16))
    _assert_jit_matches_numpy(rotate, x, offset, other(x))
    moving = jax.jit(rotate, static_argnums=1)
    for at in (offset, offset + 1, offset + 700):
        _assert_jit_matches_numpy(rotate, x, at, moving(x, at))
    eager = rotate(x, offset + 1)
    np.testing.assert_array_equal(_bits(eager), _bits(rotate(np.asarray(x), offset + 1)))
    # Eager transformations trace too, with the tables of a jitted call.
    _assert_jit_matches_numpy(rotate, x, offset, jax.vmap(lambda a: rotate(a, offset))(x))
    cotangent = inputs(x.shape)
    grad = jax.grad(lambda a: jnp.sum(rotate(a, offset) * cotangent))(x)
    # The gradient is the transpose: <grad, x> = <cotangent, rotate(x)>.
    forward = np.asarray(rotate(np.asarray(x), offset), dtype=np.float64)
    np.testing.assert_allclose(
        np.vdot(np.asarray(grad, dtype=np.float64), np.asarray(x, dtype=np.float64)),
        np.vdot(np.asarray(cotangent, dtype=np.float64), forward),
        rtol=1e-5,
    )


def test_functional_api_traces_again_after_a_trace():
    anyrope.clear_cache()
    rng = np.random.default_rng(5)
    step = jax.jit(lambda a: anyrope.rotate(a, 3))
    for shape in [(2, 6, 3, 16), (1, 9, 3, 16)]:
        x = jnp.asarray(rng.standard_normal(shape).astype(np.float32))
        expected = anyrope.rotate(np.asarray(x), 3)
        assert _same_bits(step(x), expected)
    qk = jax.jit(lambda q, k: anyrope.rotate_qk(q, k, 3))
    q, k = (jnp.asarray(rng.standard_normal((1, 7, h, 16)).astype(np.float32)) for h in (4, 2))
    expected = anyrope.rotate_qk(np.asarray(q), np.asarray(k), 3)
    for got, want in zip(qk(q, k), expected, strict=True):
        assert _same_bits(got, want)


@pytest.mark.parametrize("decode_positions", ["static", "traced"])
def test_jit_prefill_then_jit_decode(decode_positions):
    """The usual generation loop: a jitted prefill, then a jitted decode step per token."""
    rope = anyrope.RoPE(16)
    rng = np.random.default_rng(6)
    prompt = jnp.asarray(rng.standard_normal((2, 6, 4, 16)).astype(np.float32))
    prefill = jax.jit(lambda q: rope.rotate(q, 0))
    expected = rope.rotate(np.asarray(prompt), 0)
    assert _same_bits(prefill(prompt), expected)
    if decode_positions == "static":
        decode = jax.jit(rope.rotate, static_argnums=1)
    else:
        decode = jax.jit(lambda q, at: rope.rotate(q, anyrope.Offsets(at)))
    for at in range(6, 10):
        token = jnp.asarray(rng.standard_normal((2, 1, 4, 16)).astype(np.float32))
        got = decode(token, at if decode_positions == "static" else jnp.asarray([at, at]))
        expected = rope.rotate(np.asarray(token), at)
        assert _same_bits(got, expected)


def _host(value):
    """A JAX argument as the NumPy call takes it."""
    if isinstance(value, anyrope.Offsets):
        return anyrope.Offsets(np.asarray(value.values))
    return np.asarray(value) if isinstance(value, jax.Array) else value


# Concrete positions (closed over, not arguments of the jitted function) are read while
# tracing: checked, their tables built on the host, then constants of the graph.
CONCRETE = {
    "batch-seq": lambda: (anyrope.RoPE(16), jnp.arange(6)[None] + 3, {}),
    "seq": lambda: (anyrope.RoPE(16), jnp.arange(6) + 3, {}),
    "offsets": lambda: (anyrope.RoPE(16), anyrope.Offsets(jnp.asarray([3, 9])), {}),
    "far": lambda: (anyrope.RoPE(16), jnp.arange(6, dtype=jnp.int64) + 2**40, {}),
    "mrope": lambda: (
        anyrope.RoPE(16, scaling={"rope_type": "default", "mrope_section": [2, 3, 3]}),
        jnp.stack([jnp.arange(6), jnp.arange(6) // 2, jnp.arange(6) % 2])[:, None],
        {},
    ),
    "axial": lambda: (
        anyrope.RoPE(16, scaling={"rope_type": "axial"}),
        jnp.stack([jnp.arange(6) // 3, jnp.arange(6) % 3], axis=-1),
        {},
    ),
    "dynamic": lambda: (
        anyrope.RoPE(
            16, scaling={"rope_type": "dynamic", "factor": 2.0}, max_position_embeddings=4
        ),
        jnp.arange(6)[None] + 3,
        {},
    ),
    "thd": lambda: (
        anyrope.RoPE(16),
        None,
        {"layout": "thd", "cu_seqlens": jnp.asarray([0, 2, 6])},
    ),
    "thd-offsets": lambda: (
        anyrope.RoPE(16),
        jnp.asarray([5, 70]),
        {"layout": "thd", "cu_seqlens": jnp.asarray([0, 2, 6])},
    ),
}


@pytest.mark.parametrize("name", list(CONCRETE))
def test_concrete_positions_under_jit_need_no_callback(name):
    with jax.enable_x64(name == "far"):
        rope, positions, options = CONCRETE[name]()
        shape = (6, 2, 16) if options else (2, 6, 2, 16)
        x = jnp.asarray(np.random.default_rng(7).standard_normal(shape).astype(np.float32))

        def step(a):
            return rope.rotate(a, positions, **options)

        assert "callback" not in str(jax.make_jaxpr(step)(x))
        got = jax.jit(step)(x)
        expected = rope.rotate(
            np.asarray(x), _host(positions), **{k: _host(v) for k, v in options.items()}
        )
    assert _same_bits(got, expected)


@pytest.mark.parametrize("argument", ["cu_seqlens", "positions"])
def test_traced_packed_lengths_are_a_clear_error(argument):
    x = jnp.ones((6, 2, 16), dtype=jnp.float32)
    values = {"cu_seqlens": jnp.asarray([0, 2, 6]), "positions": jnp.asarray([5, 7])}
    traced = values.pop(argument)

    def step(a, value):
        arguments = {**values, argument: value}
        return anyrope.rotate(
            a, arguments.get("positions"), layout="thd", cu_seqlens=arguments["cu_seqlens"]
        )

    with pytest.raises(TypeError, match=f"`{argument}` must be concrete"):
        jax.jit(step)(x, traced)


@pytest.mark.parametrize("capacity", [None, 300], ids=["callback", "capacity"])
def test_a_traced_offset_of_packed_sequences_gives_the_eager_bits(capacity):
    """A decode step of packed sequences under jax.jit: concrete lengths, a traced 0-d
    offset for every sequence (as for every other layout)."""
    rope = anyrope.RoPE(16, max_positions=capacity)
    x = np.random.default_rng(3).standard_normal((6, 2, 16)).astype(np.float32)
    lengths = jnp.asarray([0, 2, 6])
    step = jax.jit(lambda a, offset: rope.rotate(a, offset, layout="thd", cu_seqlens=lengths))
    for offset in (0, 5, 280):
        got = step(jnp.asarray(x), jnp.asarray(offset))
        expected = rope.rotate(x, offset, layout="thd", cu_seqlens=np.asarray([0, 2, 6]))
        assert _same_bits(got, expected)
    assert step._cache_size() == 1


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_sinusoidal_with_traced_positions_equals_numpy_bits(dtype):
    positions = np.array([[0, 5, 4096], [10**6, 3, 2**20 + 1]])
    expected = anyrope.sinusoidal(positions, 16, dtype=numpy_dtype(dtype))
    encode = jax.jit(lambda p: anyrope.sinusoidal(p, 16, dtype=getattr(jnp, dtype)))
    got = encode(jnp.asarray(positions))
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(_bits(got), _bits(expected))
    rows = jax.jit(jax.vmap(lambda p: anyrope.sinusoidal(p, 16, dtype=getattr(jnp, dtype))))
    np.testing.assert_array_equal(_bits(rows(jnp.asarray(positions))), _bits(expected))


def test_sinusoidal_traced_positions_out_of_range_fail_when_run(x64):
    encode = jax.jit(lambda p: anyrope.sinusoidal(p, 8, dtype=jnp.float32))
    with pytest.raises(Exception, match=r"`positions`.*2\*\*53"):
        encode(jnp.asarray([0, 2**60])).block_until_ready()


def test_rope_tables_of_concrete_positions_under_jit_and_traced_ones_a_clear_error():
    rope = anyrope.RoPE(16)
    positions = jnp.asarray([[0, 7, 4096]])
    cos, sin = jax.jit(lambda: rope.tables(positions, dtype=jnp.float32))()
    expected = rope.tables(np.asarray(positions), dtype=np.float32)
    np.testing.assert_array_equal(_bits(cos), _bits(expected[0]))
    np.testing.assert_array_equal(_bits(sin), _bits(expected[1]))
    with pytest.raises(TypeError, match=r"`positions` of RoPE\.tables must be concrete"):
        jax.jit(lambda p: rope.tables(p, dtype=jnp.float32))(positions)


_SHARED = anyrope.RoPE(16, interleaved=True)
"""One RoPE for every example below: each call meets the caches earlier traces filled."""


@settings(max_examples=6, deadline=None)
@given(
    calls=st.lists(
        st.tuples(
            st.integers(1, 3),
            st.integers(1, 9),
            st.sampled_from(["offset", "concrete", "traced"]),
            st.integers(0, 2**31 - 16),
        ),
        min_size=1,
        max_size=3,
    )
)
def test_jit_calls_in_any_order_match_numpy(calls):
    """Any sequence of jitted calls on one RoPE (shapes, offsets, concrete and traced
    positions) gives each call its own tables: NumPy's bits."""
    rng = np.random.default_rng(len(calls))
    for batch, seq, kind, start in calls:
        x = jnp.asarray(rng.standard_normal((batch, seq, 2, 16)).astype(np.float32))
        positions = rng.integers(start, start + 16, size=(batch, seq)).astype(np.int32)
        if kind == "offset":
            got = jax.jit(lambda a, at=start: _SHARED.rotate(a, at))(x)
            positions = np.arange(start, start + seq)
        elif kind == "concrete":
            concrete = jnp.asarray(positions)
            got = jax.jit(lambda a, p=concrete: _SHARED.rotate(a, p))(x)
        else:
            got = jax.jit(_SHARED.rotate)(x, jnp.asarray(positions))
        expected = _SHARED.rotate(np.asarray(x), positions)
        assert _same_bits(got, expected)


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_traced_positions_with_a_capacity_gather_in_the_graph(layout, dtype):
    """A RoPE with max_positions gathers its rows inside the graph: no host callback, the
    rows of the eager call, and one compilation for every batch of positions."""
    rope = anyrope.RoPE(16, max_positions=300)
    rng = np.random.default_rng(8)
    shape = (2, 5, 3, 16) if layout == "bshd" else (2, 3, 5, 16)
    q = rng.standard_normal(shape).astype(numpy_dtype(dtype))
    positions = rng.integers(0, 300, size=(2, 5))
    step = jax.jit(lambda q, p: rope.rotate(q, p, layout=layout))
    assert "callback" not in str(jax.make_jaxpr(step)(q, positions))
    for p in (positions, positions[:, ::-1] % 7):
        got = step(jnp.asarray(q), jnp.asarray(p))
        expected = rope.rotate(q, p, layout=layout)
        assert _same_bits(got, expected)
    assert step._cache_size() == 1


def test_traced_offsets_with_a_capacity_gather_in_the_graph():
    rope = anyrope.RoPE(16, max_positions=300)
    q = np.random.default_rng(4).standard_normal((3, 5, 2, 16)).astype(np.float32)
    step = jax.jit(lambda q, o: rope.rotate(q, anyrope.Offsets(o)))
    offsets = np.array([0, 7, 290])
    assert "callback" not in str(jax.make_jaxpr(step)(q, offsets))
    got = step(jnp.asarray(q), jnp.asarray(offsets))
    assert _same_bits(got, rope.rotate(q, anyrope.Offsets(offsets)))


def test_traced_positions_beyond_the_capacity_give_nan_rows():
    rope = anyrope.RoPE(16, rotary_dim=8, max_positions=64)
    x = jnp.asarray(np.random.default_rng(9).standard_normal((1, 5, 2, 16)), jnp.float32)
    positions = jnp.asarray([[0, 63, 64, -1, 2**30]])
    got = np.asarray(jax.jit(rope.rotate)(x, positions))
    inside = rope.rotate(np.asarray(x[:, :2]), np.asarray(positions[:, :2]))
    assert _same_bits(got[:, :2], inside)
    assert np.isnan(got[:, 2:, :, :8]).all()
    np.testing.assert_array_equal(got[:, :, :, 8:], np.asarray(x)[:, :, :, 8:])
    with pytest.raises(ValueError, match="`positions` must be non-negative"):
        rope.rotate(x, positions)


SHARDED = """
import os
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
os.environ["JAX_PLATFORMS"] = "cpu"  # the four CPU devices, even where a GPU is the default
import jax, numpy as np, anyrope
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

rope = anyrope.RoPE(16, max_positions=256)
rng = np.random.default_rng(0)
q, k = (rng.standard_normal((4, 8, 4, 16)).astype(np.float32) for _ in range(2))
p = rng.integers(0, 256, (4, 8))
want = rope(q, k, p)
for kind in (AxisType.Auto, AxisType.Explicit):
    mesh = jax.make_mesh((4,), ("d",), axis_types=(kind,))
    # Batch, sequence and heads; the positions are sharded like q on the token axes.
    for spec, p_spec in [(P("d"), P("d")), (P(None, "d"), P(None, "d")), (P(None, None, "d"), P())]:
        on = NamedSharding(mesh, spec)
        p_on = NamedSharding(mesh, p_spec)
        args = (jax.device_put(q, on), jax.device_put(k, on), jax.device_put(p, p_on))
        step = jax.jit(rope)
        compiled = step.lower(*args).compile().as_text()
        collectives = ("all-gather", "all-to-all", "collective-permute", "all-reduce")
        assert not any(c in compiled for c in collectives), (kind, spec)
        for got, expected in zip(rope(*args), want):
            assert got.sharding.is_equivalent_to(on, 4), (kind, spec, got.sharding)
            np.testing.assert_array_equal(np.asarray(got), expected)
        for got, expected in zip(step(*args), want):
            assert got.sharding.is_equivalent_to(on, 4), (kind, spec, got.sharding)
            np.testing.assert_array_equal(np.asarray(got), expected)
print("ok")
"""


def test_sharded_arrays_keep_their_sharding_eagerly_and_under_jit():
    """q and k sharded on batch, sequence or heads over 4 CPU devices: the eager and the
    jitted result have their sharding and NumPy's bits, and the jitted step partitions
    without a collective (nor XLA's warning of a full rematerialization)."""
    result = run_python("-c", SHARDED)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
    assert "rematerialization" not in result.stderr


_CAPACITY = 512
_ROPES = {
    (interleaved, capacity): anyrope.RoPE(
        16, rotary_dim=12, interleaved=interleaved, max_positions=capacity
    )
    for interleaved in (False, True)
    for capacity in (None, _CAPACITY)
}


@settings(max_examples=25, deadline=None)
@given(
    dtype=st.sampled_from(["float16", "bfloat16", "float32", "float64"]),
    layout=st.sampled_from(["bshd", "bhsd", "sbhd"]),
    tokens=st.tuples(st.integers(1, 3), st.integers(1, 6), st.integers(1, 3)),
    interleaved=st.booleans(),
    capacity=st.sampled_from([None, _CAPACITY]),
    transform=st.sampled_from(["jit", "vmap", "grad", "jit-grad"]),
    seed=st.integers(0, 2**16),
)
def test_traced_rotation_has_numpy_bits(  # noqa: PLR0917 - the drawn case
    dtype, layout, tokens, interleaved, capacity, transform, seed
):
    """Under jit, vmap, grad and jit(grad), with traced positions, every dtype: the bits of
    the NumPy call (the gradient: the rotation by the other angle, rotate(inverse=True))."""
    with jax.enable_x64(dtype == "float64"):
        rope = _ROPES[interleaved, capacity]
        batch, seq, heads = tokens
        shape = {"bshd": (batch, seq, heads, 16), "bhsd": (batch, heads, seq, 16)}.get(
            layout, (seq, batch, heads, 16)
        )
        rng = np.random.default_rng(seed)
        x = (rng.standard_normal(shape) * 4).astype(numpy_dtype(dtype))
        x.reshape(-1)[0] = np.finfo(np.float32).smallest_subnormal if dtype == "float32" else 0
        p = rng.integers(0, _CAPACITY, size=(batch, seq))
        cotangent = rng.standard_normal(shape).astype(numpy_dtype(dtype))
        if transform in ("grad", "jit-grad"):
            wide = jnp.float64 if dtype == "float64" else jnp.float32

            def loss(x, p):
                y = rope.rotate(x, p, layout=layout)
                return jnp.sum(y.astype(wide) * jnp.asarray(cotangent).astype(wide))

            grad = jax.grad(loss) if transform == "grad" else jax.jit(jax.grad(loss))
            got = grad(jnp.asarray(x), jnp.asarray(p))
            expected = rope.rotate(cotangent, p, layout=layout, inverse=True)
        else:

            def step(x, p):
                return rope.rotate(x, p, layout=layout)

            if transform == "vmap":
                axis = 1 if layout == "sbhd" else 0
                step = jax.vmap(step, in_axes=(axis, 0), out_axes=axis)
            got = jax.jit(step)(jnp.asarray(x), jnp.asarray(p))
            expected = rope.rotate(x, p, layout=layout)
        assert _same_bits(got, expected)


FLAGGED = """
import numpy as np, jax, jax.numpy as jnp, anyrope
rope = anyrope.RoPE(64, max_positions=512)
rng = np.random.default_rng(0)
for dtype in (np.float32, jnp.bfloat16, np.float16):
    x = rng.standard_normal((2, 7, 4, 64)).astype(dtype)
    x[0, 0, 0, :4] = [1e-40, -3e-39, 2e-45, 1e-38] if dtype == np.float32 else 0
    p = rng.integers(0, 512, (2, 7))
    y = np.asarray(jax.jit(rope.rotate)(jnp.asarray(x), jnp.asarray(p)))
    assert y.tobytes() == rope.rotate(x, p).tobytes(), dtype
print("ok")
"""


@pytest.mark.parametrize(
    "flags", ["--xla_cpu_enable_fast_math=true", "--xla_backend_optimization_level=0"]
)
def test_jit_bits_do_not_depend_on_xla_cpu_flags(flags, monkeypatch):
    """XLA's CPU options (fast math, no optimization) leave the jitted bits NumPy's, the
    subnormals included: the kernel XLA calls is anyrope's."""
    monkeypatch.setenv("XLA_FLAGS", flags)
    result = run_python("-c", FLAGGED)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


@pytest.mark.parametrize("impl", ["numba", "blocked", "array_api"])
def test_an_eager_cpu_array_takes_the_path_its_rope_names(impl: str) -> None:
    """``RoPE.path`` names the NumPy route's path for an eager JAX CPU array; asking for
    it by name gives the bits of ``impl="auto"`` (it was refused as not NumPy)."""
    if impl == "numba":
        pytest.importorskip("numba")
    rope = anyrope.RoPE(16)
    # On the CPU device by name: a GPU, where there is one, is JAX's default device.
    x = jax.device_put(
        np.random.default_rng(0).standard_normal((1, 4, 2, 16)).astype(np.float32),
        jax.devices("cpu")[0],
    )
    assert rope.path(x) in ("numba", "blocked")
    got = rope.rotate(x, 9, impl=impl)
    assert isinstance(got, jax.Array)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(rope.rotate(x, 9)))


def test_a_traced_q_with_a_concrete_k() -> None:
    """A KV cache closed over under ``jax.jit``, or ``jax.grad`` with respect to q alone:
    q is traced and k concrete (the tracer has no device; it was refused as on another)."""
    rope = anyrope.RoPE(8)
    rng = np.random.default_rng(3)
    q, k = (jnp.asarray(rng.standard_normal((1, 4, 2, 8)), jnp.float32) for _ in "qk")
    eager = rope(q, k, 5)
    jitted = jax.jit(lambda a: rope(a, k, 5))(q)
    for got, expected in zip(jitted, eager, strict=True):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))
    weights = jnp.asarray(rng.standard_normal((1, 4, 2, 8)), jnp.float32)

    def loss(a, b):
        return (rope(a, b, 5)[0] * weights).sum()

    both = jax.grad(loss, argnums=(0, 1))(q, k)[0]
    np.testing.assert_array_equal(np.asarray(jax.grad(loss)(q, k)), np.asarray(both))
