"""The RoPE object: tables, caching, threads, in-place writes, outputs in the caller's library."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
import threading

import numpy as np
import pytest

import anyrope
from anyrope import _tables
from anyrope._paths.rotation import rotate_pair
from anyrope.tools._backends import float32_to_bfloat16_bits


def test_import_needs_only_numpy_and_array_api_compat():
    code = (
        "import sys, anyrope, numpy as np; anyrope.rotate(np.ones((1, 2, 1, 4)));"
        "heavy = [m for m in ('torch', 'cupy', 'jax', 'dask', 'ml_dtypes') if m in sys.modules];"
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_inv_freq_and_attention_factor():
    rope = anyrope.RoPE(128, rotary_dim=64, base=500000.0)
    assert rope.inv_freq.dtype == np.float64
    assert rope.inv_freq.shape == (32,)
    np.testing.assert_array_equal(rope.inv_freq, 500000.0 ** (-np.arange(0, 64, 2) / 64))
    assert rope.attention_factor == 1.0
    assert "rotary_dim=64" in repr(rope)


def test_tables_are_float64_values_rounded_once(backend):
    rope = anyrope.RoPE(16, base=10000.0)
    positions = backend.from_numpy(np.array([[0, 3], [70000, 2**40]], dtype=np.int64))
    cos, sin = rope.tables(positions, dtype=backend.dtype("float32"))
    angles = np.array([[0, 3], [70000, 2**40]], dtype=np.float64)[..., None] * rope.inv_freq
    np.testing.assert_array_equal(backend.to_numpy(cos), np.cos(angles).astype(np.float32))
    np.testing.assert_array_equal(backend.to_numpy(sin), np.sin(angles).astype(np.float32))
    assert tuple(cos.shape) == (2, 2, 8)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_tables_are_rounded_from_the_float32_tables_in_every_library(backend, dtype):
    """Half tables have the same bits in every library: rounded from the float32 tables
    (torch and JAX rounded float64 through float32, NumPy at once: 90 of 1.28M float16
    entries differed between them)."""
    if dtype not in backend.dtype_names:
        pytest.skip(f"{backend.id} has no {dtype}")
    rope = anyrope.RoPE(128)
    host = np.arange(20000, dtype=np.int64)
    want = rope.tables(host, dtype=np.float32)
    expected = [
        float32_to_bfloat16_bits(t) if dtype == "bfloat16" else t.astype(np.float16).view(np.uint16)
        for t in want
    ]
    got = rope.tables(backend.from_numpy(host), dtype=backend.dtype(dtype))
    for table, bits in zip(got, expected, strict=True):
        np.testing.assert_array_equal(backend.to_bits(table), bits)


@pytest.mark.parametrize(
    ("kind", "name", "value"),
    [
        ("RoPE", "base", 500000.0),
        ("RoPE", "rotary_dim", 32),
        ("RoPE", "start_index", 8),
        ("RoPE", "interleaved", True),
        ("RoPE", "scaling", anyrope.RopeScaling("linear", factor=4.0)),
        ("RoPE", "inv_freq", np.ones(32)),
        ("XPos", "scale_base", 16),
        ("RoPE", "something_new", 1),
    ],
)
def test_settings_are_fixed_when_it_is_made(kind, name, value):
    """A setting changed after the tables were built showed in the attributes, the repr
    and pickled copies, not in the rotation (a new start_index overran the kernel's
    rows): it is refused, and the rotation stays the one it was made with."""
    rope = getattr(anyrope, kind)(64)
    x = np.random.default_rng(0).standard_normal((1, 5, 2, 64)).astype(np.float32)
    before = rope.rotate_queries(x) if kind == "XPos" else rope.rotate(x)
    with pytest.raises(AttributeError, match=rf"settings are fixed when it is made.*got {name}="):
        setattr(rope, name, value)
    with pytest.raises(AttributeError, match="settings are fixed"):
        delattr(rope, "base")
    after = rope.rotate_queries(x) if kind == "XPos" else rope.rotate(x)
    np.testing.assert_array_equal(after, before)
    assert repr(rope) == repr(getattr(anyrope, kind)(64))


def test_grown_cache_gives_the_bits_of_a_fresh_one():
    x = np.random.default_rng(0).standard_normal((1, 4, 2, 32)).astype(np.float32)
    grown = anyrope.RoPE(32)
    grown.rotate(x, positions=1)
    grown.rotate(x, positions=10_000)  # grows the table
    fresh = anyrope.RoPE(32)
    for offset in (0, 3, 9_000):
        np.testing.assert_array_equal(
            grown.rotate(x, offset), fresh.rotate(x, np.arange(offset, offset + 4))
        )


def test_positions_past_the_cache_give_the_same_bits(monkeypatch):
    x = np.random.default_rng(1).standard_normal((2, 3, 2, 16))
    positions = np.array([[5, 900, 70_000], [1, 2, 3]])
    expected = anyrope.RoPE(16).rotate(x, positions)
    monkeypatch.setattr(_tables, "MAX_CACHED_ENTRIES", 64)
    uncached = anyrope.RoPE(16)
    np.testing.assert_array_equal(uncached.rotate(x, positions), expected)
    np.testing.assert_array_equal(uncached.rotate(x, 70_000), anyrope.RoPE(16).rotate(x, 70_000))


@pytest.mark.parametrize("impl", ["numba", "blocked", "array_api"])
def test_decoding_past_the_cached_tables_builds_windows_not_rows(monkeypatch, impl):
    """Issue 13: past the cached tables (2**22 entries: 65536 positions at head_dim 128)
    a decode step used to build its row on the host every call. A window of rows now
    follows the calls, 256 rows at head_dim 128: 2000 steps build 8 windows."""
    if impl == "numba":
        pytest.importorskip("numba")
    rope = anyrope.RoPE(128)
    rng = np.random.default_rng(4)
    q = rng.standard_normal((1, 1, 4, 128)).astype(np.float32)
    sizes: list[int] = []
    build = _tables.TableCache.build

    def counted(self, positions, *args):
        sizes.append(positions.size)
        return build(self, positions, *args)

    monkeypatch.setattr(_tables.TableCache, "build", counted)
    start = 10**7
    got = [rope.rotate(q, p, impl=impl) for p in range(start, start + 2000)]
    assert sizes == [256] * 8
    positions = np.arange(start, start + 2000, 199)
    cos, sin = _tables.host_tables(
        rope.inv_freq, positions, attention_factor=1.0, dtype=np.dtype(np.float32)
    )
    x0, x1 = q[..., :64], q[..., 64:]
    for row, p in enumerate(positions):
        c, s = cos[row], sin[row]
        expected = np.concatenate(rotate_pair(x0, x1, c, s), axis=-1)
        np.testing.assert_array_equal(got[p - start], expected)
    # Arrays of positions within a window read it too; wider spans are built per call.
    sizes.clear()
    rows = np.array([[start + 1800], [start + 1950]])  # the last window: from start + 1792
    rope.rotate(np.concatenate([q, q]), rows, impl=impl)
    assert sizes == []
    rope.rotate(np.concatenate([q, q]), np.array([[5], [start + 10**6]]), impl=impl)
    assert sizes == [2]


def _counting_rows(monkeypatch) -> list[int]:
    """The number of rows of every table the table caches build from now on."""
    sizes: list[int] = []
    build = _tables.TableCache.build

    def counted(self, positions, *args):
        sizes.append(positions.size)
        return build(self, positions, *args)

    monkeypatch.setattr(_tables.TableCache, "build", counted)
    return sizes


@pytest.mark.parametrize("impl", ["numba", "blocked", "array_api"])
def test_far_offsets_build_the_rows_asked_for(monkeypatch, impl):
    """Issue 23, item 8: one token at 2**40, 2**40 + 2**32, ... built a window twice the
    last each call (13.9 s by the eighth), its angles reduced with Fractions. Rows past
    2**33 radians now cost microseconds an entry: a call builds just its own rows, once
    for every layer that asks for them, with the bits of tables built directly."""
    if impl == "numba":
        pytest.importorskip("numba")
    rope = anyrope.RoPE(128)
    q = np.random.default_rng(5).standard_normal((1, 1, 2, 128)).astype(np.float32)
    offsets = [2**40 + k * 2**32 for k in range(8)] + [2**53 - 2, 2**40]
    expected = [anyrope.RoPE(128).rotate(q, np.array([[p]]), impl="array_api") for p in offsets]
    sizes = _counting_rows(monkeypatch)
    for offset, want in zip(offsets, expected, strict=True):
        for _layer in range(3):
            np.testing.assert_array_equal(rope.rotate(q, offset, impl=impl), want)
    # One row a position; 2**40 again after eight others: its window was dropped.
    assert sizes == [1] * 10
    # Far positions of an array: the distinct ones, not the 60000 rows between them.
    sizes.clear()
    pair = np.concatenate([q, q])
    rows = np.array([[2**45], [2**45 + 60_000]])
    got = rope.rotate(pair, rows, impl=impl)
    assert sizes == [2]
    for row in range(2):
        want = anyrope.RoPE(128).rotate(q, rows[row : row + 1], impl="array_api")
        np.testing.assert_array_equal(got[row : row + 1], want)


def _rows_per_call(rope: anyrope.RoPE, positions: list[int], sizes: list[int]) -> list[int]:
    q = np.ones((1, 1, 2, 128), np.float32)
    per_call = []
    for position in positions:
        before = sum(sizes)
        rope.rotate(q, position)
        per_call.append(sum(sizes) - before)
    return per_call


def test_interleaved_sequences_build_at_most_twice_the_rows_of_one(monkeypatch):
    """Issue 23, item 8: two sequences decoded in turn at 3e6 and 9e6 made the one
    window of rows jump between them, doubling (33 ms a call instead of 0.4 ms). Each
    now keeps its windows: twice the rows of one sequence, and no call builds more than
    its own row and a window of WINDOW_ENTRIES entries."""
    sizes = _counting_rows(monkeypatch)
    steps = range(1000)
    single = _rows_per_call(anyrope.RoPE(128), [3_000_000 + i for i in steps], sizes)
    turns = [p for i in steps for p in (3_000_000 + i, 9_000_000 + i)]
    interleaved = _rows_per_call(anyrope.RoPE(128), turns, sizes)
    assert sum(interleaved) <= 2 * sum(single)
    window = _tables.WINDOW_ENTRIES // 64
    assert sum(single) == window * -(-len(steps) // window)
    assert max(single + interleaved) <= window


@pytest.mark.parametrize("impl", ["numba", "blocked", "array_api"])
def test_a_first_call_far_from_zero_builds_its_rows_not_the_rows_before(monkeypatch, impl):
    """Issue 23, item 8: a fresh RoPE asked for one token at 60,000 built the tables of
    positions 0 .. 65,535 (4 Mi entries, most of a second). A call that starts beyond
    the tables from position 0 now gets a window from its own first position; calls that
    walk on from the start still grow those tables, each row built once."""
    if impl == "numba":
        pytest.importorskip("numba")
    window = _tables.WINDOW_ENTRIES // 64
    q = np.random.default_rng(8).standard_normal((1, 1, 2, 128)).astype(np.float32)
    positions = (60_000, 60_001, 40_000)
    expected = [anyrope.RoPE(128).rotate(q, np.array([[p]]), impl="array_api") for p in positions]
    sizes = _counting_rows(monkeypatch)
    rope = anyrope.RoPE(128)
    for position, want in zip(positions, expected, strict=True):
        np.testing.assert_array_equal(rope.rotate(q, position, impl=impl), want)
    assert sizes == [window, window]
    sizes.clear()
    walked = _rows_per_call(anyrope.RoPE(128), list(range(2000)), sizes)
    assert sum(walked) <= 2 * 2048
    assert max(sizes) <= 2048


def test_threads_share_one_rope():
    rope = anyrope.RoPE(64)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 8, 2, 64)).astype(np.float32)
    offsets = list(range(0, 40_000, 1_000))
    expected = {o: anyrope.RoPE(64).rotate(x, o) for o in offsets}
    results: dict[int, np.ndarray] = {}
    barrier = threading.Barrier(8)

    def work(start: int) -> None:
        barrier.wait()
        for offset in offsets[start::8]:
            results[offset] = rope.rotate(x, offset)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for offset in offsets:
        np.testing.assert_array_equal(results[offset], expected[offset])


@pytest.mark.parametrize("impl", ["auto", "array_api"])
def test_inplace_writes_the_callers_buffer(backend, impl):
    if backend.name == "array_api_strict" and impl == "auto":
        pytest.skip("same path as array_api")
    rng = np.random.default_rng(3)
    q_host = rng.standard_normal((2, 5, 4, 16)).astype(np.float32)
    k_host = rng.standard_normal((2, 5, 2, 16)).astype(np.float32)
    expected_q, expected_k = anyrope.rotate_qk(q_host, k_host, 7, rotary_dim=12, interleaved=True)
    q, k = backend.from_numpy(q_host), backend.from_numpy(k_host)
    q2, k2 = anyrope.rotate_qk(q, k, 7, rotary_dim=12, interleaved=True, inplace=True, impl=impl)
    assert q2 is q
    assert k2 is k
    np.testing.assert_array_equal(backend.to_numpy(q), expected_q)
    np.testing.assert_array_equal(backend.to_numpy(k), expected_k)


def test_strided_views_of_a_fused_buffer():
    qkv = np.random.default_rng(4).standard_normal((2, 6, 3 * 4, 32)).astype(np.float32)
    q, k = qkv[:, :, 0:4], qkv[:, :, 4:8]
    q2, k2 = anyrope.rotate_qk(q, k)
    e2, f2 = anyrope.rotate_qk(q.copy(), k.copy())
    np.testing.assert_array_equal(q2, e2)
    np.testing.assert_array_equal(k2, f2)
    transposed = np.swapaxes(qkv, 1, 2)[:, :4]  # a bhsd view with non-contiguous strides
    np.testing.assert_array_equal(anyrope.rotate(transposed, layout="bhsd"), np.swapaxes(e2, 1, 2))


def test_torch_in_torch_out_and_autograd():
    torch = pytest.importorskip("torch")
    x = torch.randn(2, 5, 3, 8, dtype=torch.float64, requires_grad=True)
    y = anyrope.rotate(x, positions=torch.arange(5))
    assert isinstance(y, torch.Tensor)
    assert y.requires_grad
    assert torch.autograd.gradcheck(lambda t: anyrope.rotate(t, rotary_dim=6), (x,))
    g = torch.randn_like(x)
    (grad,) = torch.autograd.grad(anyrope.rotate(x), x, g)
    # the transpose of a rotation is its inverse
    torch.testing.assert_close(grad, anyrope.rotate(g, inverse=True), rtol=0, atol=1e-15)
    with pytest.raises(ValueError, match="autograd"):
        anyrope.rotate(x, impl="blocked")


def test_offset_equals_explicit_positions(backend):
    x = backend.from_numpy(
        np.random.default_rng(5).standard_normal((3, 4, 2, 8)).astype(np.float32)
    )
    explicit = backend.from_numpy(np.arange(40, 44, dtype=np.int64))
    np.testing.assert_array_equal(
        backend.to_bits(anyrope.rotate(x, 40)), backend.to_bits(anyrope.rotate(x, explicit))
    )
    int32 = backend.from_numpy(np.arange(40, 44, dtype=np.int32))
    np.testing.assert_array_equal(
        backend.to_bits(anyrope.rotate(x, 40)), backend.to_bits(anyrope.rotate(x, int32))
    )


def test_one_thread_keeps_the_blocked_loop_on_the_calling_thread(monkeypatch):
    from anyrope import _threads

    def no_pool():
        raise AssertionError("the thread pool was used")

    monkeypatch.setattr(_threads, "executor", no_pool)
    monkeypatch.setattr(_threads, "cores", lambda: 4)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    x = np.random.default_rng(0).standard_normal((2, 512, 8, 64), dtype=np.float32)
    with pytest.raises(AssertionError, match="thread pool"):
        anyrope.rotate(x, impl="blocked")
    with _threads.one_thread():
        y = anyrope.rotate(x, impl="blocked")
    assert np.array_equal(y, anyrope.rotate(x, impl="array_api"))


@pytest.mark.parametrize(
    ("value", "error"),
    [(0, ValueError), (2**53 + 1, ValueError), (1.5, TypeError), (True, TypeError)],
)
def test_max_positions_is_checked(value: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="`max_positions`"):
        anyrope.RoPE(8, max_positions=value)  # type: ignore[arg-type]


def test_max_positions_builds_the_tables_ahead_and_is_kept() -> None:
    import pickle

    rope = anyrope.RoPE(8, max_positions=1000)
    x = np.ones((1, 1, 2, 8), dtype=np.float32)
    rope.rotate(x, 3)
    # One build at the first call: every row below max_positions, cos and sin in float32.
    assert rope.cache_nbytes() >= 2 * 1000 * 4 * 4
    clone = pickle.loads(pickle.dumps(rope))
    assert clone.max_positions == 1000
    assert "max_positions=1000" in repr(rope)
    config = {"hidden_size": 64, "num_attention_heads": 8, "max_position_embeddings": 64}
    assert anyrope.RoPE.from_hf_config(config, max_positions=128).max_positions == 128
    assert np.array_equal(rope.rotate(x, 999), anyrope.RoPE(8).rotate(x, 999))


SHARED_DOCS = [
    anyrope.rotate,
    anyrope.rotate_qk,
    anyrope.rotate_qkv,
    anyrope.RoPE,
    anyrope.RoPE.__call__,
    anyrope.RoPE.rotate,
    anyrope.RoPE.rotate_qkv,
    anyrope.RoPE.path,
    anyrope.XPos,
    anyrope.XPos.rotate_queries,
    anyrope.XPos.rotate_keys,
    anyrope.attention,
    anyrope.linear_attention,
]


@pytest.mark.parametrize("documented", SHARED_DOCS, ids=lambda f: f.__qualname__)
def test_every_parameter_is_documented_on_its_page(documented):
    """The parameters documented once (anyrope._call) are written into each docstring."""
    doc = documented.__doc__
    assert "{shared}" not in doc
    documented_names = {
        name.strip()
        for names in re.findall(r"^ *([\w, ]+) : ", doc, re.MULTILINE)
        for name in names.split(",")
    }
    for name in inspect.signature(documented).parameters:
        if name != "self":
            assert name in documented_names, f"{documented.__qualname__}: `{name}`"
