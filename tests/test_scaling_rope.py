"""Scaling inside :class:`anyrope.RoPE` and the functional API: tables, caches, backends."""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path

import array_api_compat.numpy as np_xp
import numpy as np
import pytest

import anyrope
from anyrope._hostmath import log, sincos
from anyrope._paths.rotation import rotate_pair, rotate_pairs
from anyrope._tables import AHEAD, AHEAD_BLOCKS, MAX_LENGTH_BUCKETS
from anyrope.scaling import RopeScaling, dynamic, yarn
from anyrope.tools._backends import numpy_dtype

CONFIGS = Path(__file__).parent / "configs"

SCALINGS = {
    "linear": {"rope_type": "linear", "factor": 4.0},
    "ntk": {"rope_type": "ntk", "factor": 4.0},
    "dynamic": {"rope_type": "dynamic", "factor": 4.0},
    "yarn": {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 64},
    "yarn-deepseek": {
        "rope_type": "yarn",
        "factor": 40.0,
        "mscale": 1.0,
        "mscale_all_dim": 0.707,
        "original_max_position_embeddings": 64,
    },
    "longrope": {
        "rope_type": "longrope",
        "short_factor": [1.0 + 0.1 * i for i in range(16)],
        "long_factor": [1.0 + 2.0 * i for i in range(16)],
    },
    "llama3": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64,
    },
}
MAX_POSITIONS = 256


def _rope(name: str, **kwargs: object) -> anyrope.RoPE:
    return anyrope.RoPE(32, scaling=SCALINGS[name], max_position_embeddings=MAX_POSITIONS, **kwargs)


def _x(shape: tuple[int, ...], dtype: str = "float32", seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(numpy_dtype(dtype))


@pytest.mark.parametrize("name", sorted(SCALINGS))
def test_attention_factor_is_inside_the_float64_tables(name: str) -> None:
    rope = _rope(name)
    positions = np.array([0, 1, 7, 200, 10_000], dtype=np.int64)
    inv_freq, factor = rope.frequencies(10_001)
    cos, sin = rope.tables(positions, dtype=np.float64)
    exact_sin, exact_cos = sincos(positions.astype(np.float64)[:, None] * inv_freq)
    np.testing.assert_array_equal(cos, exact_cos * factor)
    np.testing.assert_array_equal(sin, exact_sin * factor)
    cos32, _ = rope.tables(positions, dtype=np.float32)
    np.testing.assert_array_equal(cos32, (exact_cos * factor).astype(np.float32))


@pytest.mark.parametrize("name", sorted(SCALINGS))
def test_every_backend_gives_the_numpy_bits(backend_dtype, name: str) -> None:
    backend, dtype = backend_dtype
    rope = _rope(name)
    x = _x((2, 40, 3, 32), dtype)
    for positions in (None, 30, 2_000):
        expected = rope.rotate(x, positions)
        got = rope.rotate(backend.from_numpy(x), positions)
        np.testing.assert_array_equal(backend.to_numpy(got), expected.astype(got_dtype(expected)))


def got_dtype(expected: np.ndarray) -> np.dtype:
    """bfloat16 results come back from ``to_numpy`` as float32 (exactly)."""
    return np.dtype(np.float32) if expected.dtype.name == "bfloat16" else expected.dtype


@pytest.mark.parametrize("name", sorted(SCALINGS))
def test_scaled_rotation_is_the_rotation_with_scaled_tables(name: str) -> None:
    """Scaling changes only the tables: the result equals the rotation by cos/sin oracle."""
    rope = _rope(name)
    x = _x((1, 300, 2, 32), "float64")
    y = rope.rotate(x, impl="array_api")
    cos, sin = rope.tables(300, dtype=np.float64)
    x0, x1 = x[..., :16], x[..., 16:]
    c, s = cos[:, None, :], sin[:, None, :]
    np.testing.assert_array_equal(y, np.concatenate(rotate_pair(x0, x1, c, s), axis=-1))


@pytest.mark.parametrize("name", sorted(SCALINGS))
def test_grown_and_regrown_cache_gives_the_bits_of_a_fresh_one(name: str) -> None:
    x = _x((1, 8, 2, 32))
    used = _rope(name)
    for offset in (0, 100, 5_000, 3, 70_000, 250, 9, 300_000, 20):
        used.rotate(x, offset)
    for offset in (0, 20, 250, 260, 5_000, 70_000):
        fresh = _rope(name)
        np.testing.assert_array_equal(used.rotate(x, offset), fresh.rotate(x, offset))
        positions = np.arange(offset, offset + 8)
        np.testing.assert_array_equal(used.rotate(x, positions), fresh.rotate(x, offset))


def test_dynamic_tables_follow_the_sequence_length() -> None:
    rope = _rope("dynamic")
    plain = anyrope.RoPE(32)
    x = _x((1, 16, 2, 32))
    # within max_position_embeddings: the unscaled frequencies
    np.testing.assert_array_equal(rope.rotate(x, MAX_POSITIONS - 16), plain.rotate(x, 240))
    for stop in (MAX_POSITIONS + 1, 1_000, 4_000, 1_000):
        base = dynamic.scaled_base(
            32, 10000.0, factor=4.0, seq_len=stop, max_position_embeddings=MAX_POSITIONS
        )
        expected = anyrope.RoPE(32, base=base).rotate(x, stop - 16)
        np.testing.assert_array_equal(rope.rotate(x, stop - 16), expected)
    # back below max_position_embeddings after growing: unscaled again, never stale
    np.testing.assert_array_equal(rope.rotate(x, 0), plain.rotate(x, 0))


def _rotated(x: np.ndarray, positions: np.ndarray, inv_freq: np.ndarray, factor: float):
    """The float64 half-split rotation with tables cos/sin(m * inv_freq) * factor."""
    sin, cos = sincos(positions.astype(np.float64)[:, None] * inv_freq)
    c, s = (cos * factor)[:, None, :], (sin * factor)[:, None, :]
    half = inv_freq.shape[0]
    x0, x1 = x[..., :half], x[..., half:]
    return np.concatenate(rotate_pair(x0, x1, c, s), axis=-1)


def test_longrope_chooses_factors_by_the_length_of_the_call() -> None:
    """Long factors once the call reaches past L0, short ones otherwise, in any order."""
    scaling = {**SCALINGS["longrope"], "original_max_position_embeddings": 64}
    rope = anyrope.RoPE(32, scaling=scaling, max_position_embeddings=1024)
    unscaled = anyrope.RoPE(32).inv_freq
    short, long = np.array(scaling["short_factor"]), np.array(scaling["long_factor"])
    factor = math.sqrt(1 + float(log(1024 / 64)) / float(log(64)))
    assert rope.attention_factor == factor
    x = _x((1, 8, 2, 32), "float64")
    for offset, factors in [(56, short), (57, long), (0, short), (1000, long), (56, short)]:
        positions = np.arange(offset, offset + 8)
        inv_freq = unscaled / factors
        np.testing.assert_array_equal(rope.frequencies(offset + 8)[0], inv_freq)
        expected = _rotated(x, positions, inv_freq, factor)
        np.testing.assert_array_equal(rope.rotate(x, offset, impl="array_api"), expected)
        np.testing.assert_array_equal(rope.rotate(x, positions), expected)


def test_functional_api_accepts_scaling() -> None:
    x = _x((2, 10, 4, 32))
    for name in sorted(SCALINGS):
        expected = _rope(name).rotate(x, 300)
        got = anyrope.rotate(x, 300, scaling=SCALINGS[name], max_position_embeddings=MAX_POSITIONS)
        np.testing.assert_array_equal(got, expected)
        q2, k2 = anyrope.rotate_qk(
            x, x[:, :, :1], 300, scaling=SCALINGS[name], max_position_embeddings=MAX_POSITIONS
        )
        np.testing.assert_array_equal(q2, expected)
        np.testing.assert_array_equal(k2, expected[:, :, :1])


def test_deepseek_v3_from_hf_config() -> None:
    config = json.loads((CONFIGS / "deepseek-v3.json").read_text())
    rope = anyrope.RoPE.from_hf_config(config)
    assert (rope.head_dim, rope.rotary_dim, rope.interleaved) == (64, 64, True)
    assert rope.attention_factor == 1.0
    assert math.isclose(rope.softmax_scale, (0.1 * math.log(40.0) + 1) ** 2, rel_tol=1e-15)
    assert round(rope.softmax_scale, 4) == 1.8739
    # the scale attention code uses: 1/sqrt(qk_head_dim) times the correction
    assert math.isclose(192**-0.5 * rope.softmax_scale, 0.135234, rel_tol=1e-5)


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"attention_factor": 1.0}, 1.0),
        ({"mscale": 0.707, "mscale_all_dim": 0.707}, 1.0),
        ({"mscale": 1.0, "mscale_all_dim": 0.5}, yarn.mscale(16.0) / yarn.mscale(16.0, 0.5)),
        ({}, yarn.mscale(16.0)),
    ],
)
def test_yarn_honours_attention_factor_and_mscale(extra: dict, expected: float) -> None:
    rope = anyrope.RoPE(
        32,
        scaling={
            "rope_type": "yarn",
            "factor": 16.0,
            "original_max_position_embeddings": 64,
            **extra,
        },
    )
    assert rope.attention_factor == expected
    cos, _ = rope.tables(np.array([0]), dtype=np.float64)
    np.testing.assert_array_equal(cos, np.full((1, 16), expected))


@pytest.mark.parametrize("base", [5e5, 1e6])
@pytest.mark.parametrize("name", ["llama3", "yarn", "default"])
def test_large_bases_stay_accurate_at_long_positions(base: float, name: str) -> None:
    """float32 tables stay within half an ulp plus the float64 rounding of the angle.

    The reference evaluates the angle and cos/sin in 80-bit long double; the float64
    product ``m * theta`` is off by at most ``|angle| * 2**-53``, which stays far below a
    float32 ulp up to the 10M-token contexts of real models.
    """
    scaling = {
        "llama3": SCALINGS["llama3"],
        "yarn": SCALINGS["yarn"],
        "default": None,
    }[name]
    rope = anyrope.RoPE(128, base=base, scaling=scaling, max_position_embeddings=MAX_POSITIONS)
    positions = np.array([10**6, 2**20 + 1, 5 * 10**6 + 7, 10**7 + 3], dtype=np.int64)
    cos, sin = rope.tables(positions, dtype=np.float32)
    angles = positions.astype(np.longdouble)[:, None] * rope.inv_freq.astype(np.longdouble)
    for table, exact in ((cos, np.cos(angles)), (sin, np.sin(angles))):
        ulp = np.spacing(np.abs(table)).astype(np.longdouble)
        error = np.abs(table.astype(np.longdouble) - exact * rope.attention_factor)
        assert np.all(error <= 0.5 * ulp + np.abs(angles) * 2.0**-52 + 2.0**-52)
        assert np.max(error / ulp) < 0.6
    # the float32 angle arithmetic most peers use is far off there
    angles32 = positions.astype(np.float32)[:, None] * rope.inv_freq.astype(np.float32)
    assert np.max(np.abs(np.cos(angles32) - np.cos(angles))) > 1e-3


def test_scaling_dict_must_agree_with_the_arguments() -> None:
    with pytest.raises(ValueError, match=r"rope_theta=1000000.0 but `base`=10000.0"):
        anyrope.RoPE(64, scaling={"rope_type": "default", "rope_theta": 1e6})
    assert anyrope.RoPE(64, base=1e6, scaling={"rope_theta": 1e6}).base == 1e6
    with pytest.raises(ValueError, match=r"partial_rotary_factor=0.5, which gives rotary_dim=32"):
        anyrope.RoPE(64, scaling={"partial_rotary_factor": 0.5})
    assert anyrope.RoPE(64, rotary_dim=32, scaling={"partial_rotary_factor": 0.5}).rotary_dim == 32
    with pytest.raises(
        ValueError, match=r"`short_factor` must have rotary_dim // 2 = 15 entries; got 16"
    ):
        anyrope.RoPE(32, scaling=SCALINGS["longrope"], max_position_embeddings=10, rotary_dim=30)
    with pytest.raises(ValueError, match=r"`max_position_embeddings` is required"):
        anyrope.RoPE(32, scaling=SCALINGS["dynamic"])
    with pytest.raises(TypeError, match=r"`max_position_embeddings` must be an integer"):
        anyrope.RoPE(32, max_position_embeddings=1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"`scaling` must be a dict"):
        anyrope.rotate(_x((1, 2, 1, 4)), scaling="yarn")  # type: ignore[arg-type]


def test_rope_scaling_object_and_repr() -> None:
    scaling = RopeScaling("linear", factor=2.0)
    rope = anyrope.RoPE(8, scaling=scaling)
    assert rope.scaling is scaling
    assert "scaling=RopeScaling(rope_type='linear', factor=2.0)" in repr(rope)
    assert "scaling" not in repr(anyrope.RoPE(8))
    longrope = _rope("longrope")
    assert "short_factor=<16 values>" in repr(longrope)


def test_inv_freq_is_read_only() -> None:
    rope = _rope("yarn")
    with pytest.raises(ValueError, match="read-only"):
        rope.inv_freq[0] = 2.0


def test_length_dependent_scaling_refuses_traced_positions() -> None:
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    rope = _rope("dynamic")
    x = jnp.ones((1, 4, 1, 32), dtype=jnp.float32)

    with pytest.raises(ValueError, match=r"rope_type='dynamic' picks its frequencies"):
        jax.jit(rope.rotate)(x, jnp.arange(4))
    static = _rope("yarn")
    got = jax.jit(static.rotate)(x, jnp.arange(4))
    np.testing.assert_array_equal(np.asarray(got), np.asarray(static.rotate(x, jnp.arange(4))))


@pytest.mark.parametrize("seq", [1, 4])
def test_evicted_blocks_of_lengths_are_rebuilt_with_the_same_bits(seq: int) -> None:
    rope = _rope("dynamic")
    x = _x((1, seq, 1, 32))
    first = rope.rotate(x, MAX_POSITIONS + 10)
    for extra in range(2 * AHEAD_BLOCKS):
        rope.rotate(x, MAX_POSITIONS + 100 + extra * AHEAD)
    assert len(rope._source._ahead) == AHEAD_BLOCKS
    np.testing.assert_array_equal(rope.rotate(x, MAX_POSITIONS + 10), first)
    np.testing.assert_array_equal(_rope("dynamic").rotate(x, MAX_POSITIONS + 10), first)


def test_evicted_length_buckets_are_rebuilt_with_the_same_bits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """LongRoPE's long bucket, evicted as soon as it is made by a source that keeps none."""
    from anyrope import _tables

    rope = _rope("longrope")
    x = _x((1, 4, 1, 32))
    short, long = rope.rotate(x, 0), rope.rotate(x, 10 * MAX_POSITIONS)
    assert len(rope._source._buckets) <= MAX_LENGTH_BUCKETS
    monkeypatch.setattr(_tables, "MAX_LENGTH_BUCKETS", 0)
    fresh = _rope("longrope")
    for _ in range(2):
        np.testing.assert_array_equal(fresh.rotate(x, 10 * MAX_POSITIONS), long)
        np.testing.assert_array_equal(fresh.rotate(x, 0), short)
        assert len(fresh._source._buckets) == 0


def test_threads_sharing_a_length_dependent_rope() -> None:
    rope = _rope("dynamic")
    x = _x((1, 4, 2, 32))
    offsets = [0, 300, 1_000, 250, 4_000, 300, 2_000, 10] * 4
    expected = {offset: _rope("dynamic").rotate(x, offset) for offset in set(offsets)}
    failures: list[int] = []

    def work(offset: int) -> None:
        if not np.array_equal(rope.rotate(x, offset), expected[offset]):
            failures.append(offset)

    threads = [threading.Thread(target=work, args=(offset,)) for offset in offsets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


def test_dynamic_frequencies_of_many_lengths_are_those_of_each_length() -> None:
    from anyrope.scaling import dynamic

    lengths = np.array([0, 1, 255, 256, 257, 300, 4096, 10**6, 2**40 + 3, 2**53 - 1])
    for rotary_dim, base, factor in [(32, 10000.0, 2.0), (128, 500000.0, 8.0), (6, 1e6, 1.5)]:
        many = dynamic.inv_freq_per_length(
            rotary_dim, base, factor=factor, lengths=lengths, max_position_embeddings=256
        )
        for length, row in zip(lengths, many, strict=True):
            one = dynamic.inv_freq(
                rotary_dim, base, factor=factor, seq_len=int(length), max_position_embeddings=256
            )
            assert row.tobytes() == one.tobytes(), (rotary_dim, base, factor, length)


def test_dynamic_decoding_past_the_context_builds_no_large_table() -> None:
    from anyrope._tables import host_tables

    rope = _rope("dynamic")
    x = _x((1, 1, 4, 32))
    for position in range(MAX_POSITIONS - 3, MAX_POSITIONS + 300):
        got = rope.rotate(x, position)
        inv_freq, factor = rope.scaling.frequencies(32, rope.base, seq_len=position + 1)
        cos, sin = host_tables(
            inv_freq, np.array([position]), attention_factor=factor, dtype=np.dtype(np.float32)
        )
        want = rotate_pairs(
            x,
            cos[:, None, :],
            sin[:, None, :],
            rotary_dim=32,
            interleaved=False,
            inverse=False,
            xp=np_xp,
        )
        np.testing.assert_array_equal(got, want)
    # Every token past the context has its own frequencies: the tables of the trained
    # context do not grow; what else is kept is the rows of a few blocks of lengths.
    within = _rope("dynamic")
    within.rotate(x, MAX_POSITIONS - 1)
    assert rope._source.default.nbytes == within._source.default.nbytes
    # Rows of 16 pairs, and of the 32 widened features the blocked path reads; cos and
    # sin; float32.
    block_bytes = AHEAD * (16 + 32) * 2 * 4
    assert rope.cache_nbytes() - within.cache_nbytes() <= AHEAD_BLOCKS * block_bytes


@pytest.mark.parametrize("impl", ["auto", "numba", "blocked", "array_api"])
def test_dynamic_decoding_builds_tables_per_block_of_lengths_not_per_token(
    backend, impl: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the context every token has new frequencies; they, and the rows of the
    tokens, are computed and moved for :data:`AHEAD` tokens at once, never per token."""
    from anyrope import _tables
    from anyrope._paths import numba_cpu

    if impl in ("numba", "blocked") and (
        backend.name not in ("numpy", "torch") or backend.device_label != "cpu"
    ):
        pytest.skip(f"impl={impl!r} takes NumPy and PyTorch CPU arrays")
    if impl == "numba" and not numba_cpu.installed():
        pytest.skip("numba is not installed")
    tokens = 300
    past = range(MAX_POSITIONS, MAX_POSITIONS + tokens)
    x_host = _x((1, 1, 4, 32))
    expected = {p: _rope("dynamic").rotate(x_host, p) for p in past[:: tokens // 6]}
    rope = _rope("dynamic")
    x = backend.from_numpy(x_host)
    rope.rotate(x, MAX_POSITIONS - 1, impl=impl)  # the tables of the trained context

    calls = {"sincos": 0, "host_tables": 0, "build": 0, "frequencies_per_length": 0}

    def counted(name: str, function: object) -> object:
        def wrapper(*args: object, **kwargs: object) -> object:
            calls[name] += 1
            return function(*args, **kwargs)  # type: ignore[operator]

        return wrapper

    monkeypatch.setattr(_tables, "sincos", counted("sincos", _tables.sincos))
    monkeypatch.setattr(_tables, "host_tables", counted("host_tables", _tables.host_tables))
    monkeypatch.setattr(_tables.TableCache, "build", counted("build", _tables.TableCache.build))
    scaling = type(rope.scaling)
    monkeypatch.setattr(
        scaling,
        "frequencies_per_length",
        counted("frequencies_per_length", scaling.frequencies_per_length),
    )
    generation = _tables.generation()
    got = {p: rope.rotate(x, p, impl=impl) for p in past}
    blocks = math.ceil(tokens / AHEAD)
    # The frequencies and rows of many tokens at once; no table built for one token.
    assert calls == {
        "sincos": blocks,
        "host_tables": 0,
        "build": 0,
        "frequencies_per_length": blocks,
    }
    # Rows rounded and moved once per block (and widened once, for the paths that widen).
    assert _tables.generation() - generation <= 2 * blocks
    for p, want in expected.items():
        np.testing.assert_array_equal(backend.to_numpy(got[p]), want)


UNDOING = {name: SCALINGS[name] for name in ("yarn", "yarn-deepseek", "longrope", "linear")}


@pytest.mark.parametrize("name", sorted(UNDOING))
def test_inverse_undoes_the_attention_factor(backend_dtype, name: str) -> None:
    """numerical-contract.rst, "How every path computes" 4: ``inverse=True`` rotates by ``-angle``
    with tables of ``cos/a`` and ``sin/a``, so it undoes the forward call, attention factor
    included."""
    backend, dtype = backend_dtype
    rope = anyrope.RoPE(32, scaling=UNDOING[name], max_position_embeddings=256)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 9, 3, 32)).astype(numpy_dtype(dtype) or np.float32)
    positions = rng.integers(0, 200, size=(2, 9))
    xs, ps = backend.from_numpy(x), backend.from_numpy(positions)
    y = rope.rotate(xs, ps)
    back = backend.to_numpy(rope.rotate(y, ps, inverse=True)).astype(np.float64)
    host = backend.to_numpy(xs).astype(np.float64)
    step = {"float16": 4e-3, "bfloat16": 3e-2, "float32": 1e-6, "float64": 1e-14}[dtype]
    np.testing.assert_allclose(back, host, rtol=0, atol=step * 8 * np.abs(host).max())


def test_inverse_tables_are_cos_and_sin_divided_by_the_factor() -> None:
    """The bits of an inverse call: float32 tables ``round(cos/a)``, ``round(sin/a)``
    (one float64 division each), and the rotation by ``-angle``, on every CPU path."""
    rope = anyrope.RoPE(16, scaling=UNDOING["yarn"], max_position_embeddings=256)
    a = rope.attention_factor
    assert a != 1.0
    x = np.random.default_rng(6).standard_normal((1, 5, 2, 16)).astype(np.float32)
    positions = np.array([0, 3, 100, 17, 255])
    s, c = sincos(positions.astype(np.float64)[:, None] * rope.inv_freq)
    cos, sin = (c / a).astype(np.float32)[:, None, :], (s / a).astype(np.float32)[:, None, :]
    x0, x1 = x[..., :8], x[..., 8:]
    # The rotation by -angle: x1 * -s is exactly -(x1 * s).
    expected = np.concatenate(rotate_pair(x0, x1, cos, -sin), axis=-1)
    impls = ["array_api", "blocked"] + (["numba"] if _has_numba() else [])
    for impl in impls:
        got = rope.rotate(x, positions, inverse=True, impl=impl)
        np.testing.assert_array_equal(got, expected, err_msg=impl)


def _has_numba() -> bool:
    import importlib.util

    return importlib.util.find_spec("numba") is not None
