"""The one-way pipeline: plan, registry of paths, and the defects fuzzing found.

Each test here failed before the redesign (issue 12); the bits are compared with the
reference path (``impl="array_api"``), which the golden files pin.
"""

from __future__ import annotations

import copy
import importlib.util
import itertools
import multiprocessing
import os
import pickle
import re
import sys
import warnings
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import anyrope
from anyrope import _functional, _paths
from anyrope._paths import AUTO_ORDER, IMPLS, PATHS, blocked, numba_cpu, reference
from subprocess_run import run_python

SOURCE = Path(anyrope.__file__).parent

RNG = np.random.default_rng(12)


def _x(shape: tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


# -- the registry -----------------------------------------------------------------------


def test_every_path_has_the_interface_and_auto_ends_with_the_reference() -> None:
    for path in AUTO_ORDER:
        assert callable(path.rejects)
        assert callable(path.run)
        assert isinstance(path.CHECKS_POSITIONS, bool)
        assert PATHS[path.NAME] is path
    assert AUTO_ORDER[-1] is reference
    assert ("auto", *(path.NAME for path in AUTO_ORDER)) == IMPLS


class _Boxed:
    """An array of a library of its own, which a route hands on as NumPy."""

    def __init__(self, array: np.ndarray[Any, Any]) -> None:
        self.array = array


class _BoxRoute:
    NAME = "box"
    LIBRARY = __name__

    @staticmethod
    def takes(x: object) -> bool:
        return isinstance(x, _Boxed)

    @staticmethod
    def inner(call: Any) -> Any:
        return call._replace(arrays=tuple(x.array for x in call.arrays))

    @staticmethod
    def rotate(rotate_arrays: Any, sources: Any, call: Any, **geometry: Any) -> Any:
        return tuple(map(_Boxed, rotate_arrays(sources, _BoxRoute.inner(call), **geometry)))


def test_a_route_is_an_entry_of_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 24: dask and eager JAX are entries of the registry (``ROUTES``), which the
    pipeline asks before planning, not special cases of the pipeline; a new one is an
    entry."""
    assert [route.NAME for route in _paths.ROUTES] == ["dask", "jax host"]
    assert _paths.route_of(_x((1, 2, 1, 8))) is None
    if importlib.util.find_spec("dask") is not None:
        import dask.array as da

        assert _paths.route_of(da.zeros((1, 2, 1, 8))) is _paths.dask
    if importlib.util.find_spec("jax") is not None:
        import jax.numpy as jnp

        assert _paths.route_of(jnp.zeros((1, 2, 1, 8))) is _paths.jax_host
    monkeypatch.setattr(_paths, "ROUTES", (*_paths.ROUTES, _BoxRoute()))
    rope, q, k = anyrope.RoPE(8), _x((1, 4, 2, 8)), _x((1, 4, 1, 8)) + 1
    q2, k2 = rope(_Boxed(q), _Boxed(k), 5)
    want = rope(q, k, 5)
    assert q2.array.tobytes() == want[0].tobytes()
    assert k2.array.tobytes() == want[1].tobytes()
    assert rope.path(_Boxed(q)) == rope.path(q)


def test_a_numpy_array_of_jax_float0_is_refused_by_its_dtype(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """array-api-compat counts a NumPy array of dtype ``jax.float0`` (JAX's gradient of an
    integer) as a JAX array, by its dtype: the JAX route took it and failed on a NumPy
    method (AttributeError). Routes are asked by type, so it reaches the paths, which
    refuse its dtype by name; NumPy arrays after it rotate as before, also where it is
    the first NumPy array the routes are asked about (their answers are kept by type)."""
    jax = pytest.importorskip("jax")
    rope, x = anyrope.RoPE(8), _x((1, 4, 2, 8))
    want = rope.rotate(x)
    monkeypatch.setattr(_paths, "_routes_by_type", {})
    with pytest.raises(TypeError, match=r"`x` must have a real floating dtype .* got \[\('float0'"):
        rope.rotate(np.zeros((1, 4, 2, 8), dtype=jax.float0))
    assert _paths.route_of(np.zeros(1, dtype=jax.float0)) is None
    assert rope.rotate(x).tobytes() == want.tobytes()


def test_path_names_the_chosen_path() -> None:
    rope = anyrope.RoPE(8)
    x = _x((1, 4, 2, 8))
    assert rope.path(x) == ("numba" if numba_cpu.installed() else "blocked")
    assert rope.path(x, impl="blocked") == "blocked"
    assert rope.path(x, impl="array_api") == "array_api"
    with pytest.raises(ValueError, match="`impl`='cuda' needs CuPy arrays"):
        rope.path(x, impl="cuda")
    with pytest.raises(ValueError, match="`impl` must be one of 'auto', 'cuda', 'numba'"):
        rope.path(x, impl="fast")


def test_cuda_rejects_several_position_streams_instead_of_running_another_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from anyrope._call import make_call
    from anyrope._paths import cuda
    from anyrope._plan import make_plan

    # The arrays stand in for device arrays: only the streams are left to reject.
    monkeypatch.setattr(cuda, "cuda_array", lambda x: True)
    monkeypatch.setattr(cuda, "_cupy_installed", lambda: True)
    rope = anyrope.RoPE(16, scaling={"rope_type": "default", "mrope_section": [2, 3, 3]})
    x = _x((1, 4, 2, 16))
    plan = make_plan(
        rope._source,
        make_call(
            (x,),
            ("x",),
            np.zeros((3, 4), dtype=np.int64),
            layout="bshd",
            inverse=False,
            inplace=False,
            impl="auto",
            xp=None,
            cu_seqlens=None,
        ),
        head_dim=16,
        interleaved=False,
    )
    assert "one position stream" in cuda.rejects(plan)


# -- every CPU path past its whole-array threshold (issue 23) ------------------------------

# Rotated elements above which each library's inputs leave the small-input code: NumPy's
# for the blocked path's cache blocks; torch's for its blocked loop over torch operations
# (float16, bfloat16), over NumPy views (float32, float64) and for numba's threads.
LARGE_ELEMENTS = {
    "numpy": blocked.WHOLE_ELEMENTS,
    "torch": max(blocked.TORCH_WHOLE_ELEMENTS, numba_cpu.PARALLEL_ELEMENTS),
}

# (inverse, in place, positions) of each call: an offset and arrays of positions too.
LARGE_MODES = {
    "forward": (False, False, None),
    "in-place": (False, True, 70_001),
    "inverse": (True, False, "array"),
    "inverse-in-place": (True, True, "array"),
}


def _large_input(library: str, dtype: str) -> Any:
    """(batch, seq, heads, 136), rotated width 128: just past the library's threshold."""
    batch, heads, rotary = (2, 4, 128) if library == "numpy" else (1, 8, 128)
    seq = LARGE_ELEMENTS[library] // (batch * heads * rotary) + 1
    values = RNG.standard_normal((batch, seq, heads, rotary + 8), dtype=np.float32)
    if library == "numpy":
        return values.astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)
    torch = pytest.importorskip("torch")
    return torch.from_numpy(values).to(getattr(torch, dtype))


def _bits(a: Any) -> np.ndarray:
    """The bit patterns of a NumPy array or a torch CPU tensor, as unsigned integers."""
    if not isinstance(a, np.ndarray):
        import torch

        unsigned = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        a = a.view(unsigned).numpy()
    return a.view(f"u{a.dtype.itemsize}")


def _cpu_paths(rope: anyrope.RoPE, x: Any) -> list[str]:
    """The registry's paths that take ``x``: the reference and blocked ones at least."""
    names = []
    for name in PATHS:
        try:
            rope.path(x, impl=name)
        except ValueError:
            continue
        names.append(name)
    assert {"array_api", "blocked"} <= set(names), names
    return names


@pytest.mark.parametrize(
    ("library", "dtype", "interleaved"),
    [
        *itertools.product(["numpy"], ["float16", "bfloat16", "float32", "float64"], [False, True]),
        # 16 times larger: torch's own operations, and NumPy views of torch's memory
        ("torch", "bfloat16", True),
        ("torch", "float32", True),
    ],
    ids=lambda value: {False: "half", True: "interleaved"}.get(value, value),
)
def test_large_inputs_on_every_cpu_path(library: str, dtype: str, interleaved: bool) -> None:
    """Every path the registry has for CPU arrays, on inputs just past the size where
    they are cut in blocks or threads: forward, in place, inverse (with an attention
    factor) and both, the bits of the reference."""
    x = _large_input(library, dtype)
    rope = anyrope.RoPE(
        136,
        rotary_dim=128,
        interleaved=interleaved,
        scaling={"rope_type": "yarn", "factor": 3.0, "original_max_position_embeddings": 3000},
    )
    positions_array = RNG.integers(0, 100_000, size=x.shape[:2])
    if library == "torch":
        import torch

        positions_array = torch.from_numpy(positions_array)
    paths = _cpu_paths(rope, x)
    for mode, (inverse, inplace, positions) in LARGE_MODES.items():
        where = positions_array if isinstance(positions, str) else positions
        want = _bits(rope.rotate(x, where, inverse=inverse, impl="array_api"))
        for path in paths:
            y = copy.deepcopy(x)
            got = rope.rotate(y, where, inverse=inverse, inplace=inplace, impl=path)
            assert (got is y) == inplace
            np.testing.assert_array_equal(_bits(got), want, err_msg=f"{path}, {mode}")


# -- defect 1: fork after the thread pool started -----------------------------------------


FORK_CHILD = """
import multiprocessing, numpy as np, anyrope
x = np.ones((4, 1024, 8, 128), dtype=np.float32)
anyrope.rotate(x)                      # starts the thread pool in the parent
assert anyrope._threads._pool is not None

def child(queue):
    queue.put(float(anyrope.rotate(x)[0, 5, 0, 0]))

queue = multiprocessing.get_context("fork").Queue()
process = multiprocessing.get_context("fork").Process(target=child, args=(queue,))
process.start()
process.join(60)
print("alive" if process.is_alive() else queue.get(timeout=5))
if process.is_alive():
    process.kill()
"""


@pytest.mark.skipif(
    "fork" not in multiprocessing.get_all_start_methods(), reason="no fork on this platform"
)
def test_rotate_in_a_forked_child_returns() -> None:
    result = run_python("-W", "ignore::DeprecationWarning", "-c", FORK_CHILD, timeout=120)
    assert result.returncode == 0, result.stderr
    want = float(anyrope.rotate(np.ones((4, 1024, 8, 128), dtype=np.float32))[0, 5, 0, 0])
    assert result.stdout.split() == [repr(want)]


FORK_WHILE_LOCKED = """
import os, pickle, sys, threading, time
import numpy as np
import anyrope
from anyrope import _functional, _tables, _threads

rope = anyrope.RoPE(128)
x = np.ones((1, 1, 2, 128), dtype=np.float32)
expected = float(rope.rotate(x, 2**40 + 5)[0, 0, 0, 1])
rope.clear_cache()
source = rope._source
# What a parent thread may hold at a fork: a table cache building rows (decoding far),
# its source, the functional API's cache, the thread pool.
held = [source.default._lock, source._lock, _functional._lock, _threads._pool_lock]
holding, done = threading.Event(), threading.Event()

def hold():
    for lock in held:
        lock.acquire()
    holding.set()
    done.wait()
    for lock in held:
        lock.release()

threading.Thread(target=hold, daemon=True).start()
holding.wait()
pid = os.fork()
if pid == 0:
    got = float(rope.rotate(x, 2**40 + 5)[0, 0, 0, 1])
    anyrope.rotate(x, 2**41)
    pickle.loads(pickle.dumps(rope)).rotate(x, 3)
    anyrope.rotate(np.ones((4, 1024, 8, 128), dtype=np.float32))
    print(got == expected, flush=True)
    os._exit(0)
done.set()
for _ in range(600):
    finished, status = os.waitpid(pid, os.WNOHANG)
    if finished:
        print("exit", os.waitstatus_to_exitcode(status))
        break
    time.sleep(0.1)
else:
    os.kill(pid, 9)
    print("hung")
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_child_forked_while_a_thread_holds_the_locks_returns() -> None:
    """Issue 23, item 9: a thread decoding at far offsets held a table cache's lock when
    another thread forked; the child's first call waited forever for it. Every lock of
    the package is released in a forked child."""
    result = run_python("-W", "ignore::DeprecationWarning", "-c", FORK_WHILE_LOCKED, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "exit", "0"], result.stdout


def test_every_lock_is_released_in_a_forked_child() -> None:
    """Issue 23, item 9: every lock comes from anyrope._threads.lock, which a forked
    child finds released; a lock made otherwise would deadlock a child again."""
    made_elsewhere = [
        f"{path.relative_to(SOURCE)}:{number}"
        for path in sorted(SOURCE.rglob("*.py"))
        if path.name != "_threads.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\b(R?Lock|Condition|Semaphore|BoundedSemaphore|allocate_lock)\(", line)
    ]
    assert made_elsewhere == []


# -- defect 3: pickle and deepcopy ------------------------------------------------------


@pytest.mark.parametrize(
    "rope",
    [
        anyrope.RoPE(16),
        anyrope.RoPE(16, rotary_dim=8, interleaved=True, base=500000.0),
        anyrope.RoPE(
            16, scaling={"rope_type": "dynamic", "factor": 2.0}, max_position_embeddings=8
        ),
        anyrope.RoPE(16, scaling={"rope_type": "axial"}),
    ],
    ids=["default", "partial-interleaved", "dynamic", "axial"],
)
def test_rope_pickles_and_deep_copies(rope: anyrope.RoPE) -> None:
    x = _x((2, 5, 3, 16))
    positions = np.zeros((5, 2), dtype=np.int64) if rope.axial else 20
    want = rope.rotate(x, positions)
    for clone in (pickle.loads(pickle.dumps(rope)), copy.deepcopy(rope), copy.copy(rope)):
        assert repr(clone) == repr(rope)
        assert not clone.inv_freq.flags.writeable
        np.testing.assert_array_equal(clone.inv_freq, rope.inv_freq)
        np.testing.assert_array_equal(clone.rotate(x, positions), want)


def test_a_torch_module_holding_a_rope_is_deep_copied_and_saved(tmp_path: Any) -> None:
    torch = pytest.importorskip("torch")
    from torch_module import Attention

    module = Attention()
    q = torch.randn(1, 4, 2, 8)
    module(q)
    torch.save(module, tmp_path / "m.pt")
    loaded = torch.load(tmp_path / "m.pt", weights_only=False)
    assert torch.equal(copy.deepcopy(module)(q), module(q))
    assert torch.equal(loaded(q), module(q))


# -- defect 4: in-place writes that would read what they wrote ----------------------------


def test_inplace_refuses_a_torch_expand_view() -> None:
    torch = pytest.importorskip("torch")
    x = torch.randn(1, 1, 2, 8).expand(1, 4, 2, 8)
    with pytest.raises(ValueError, match="`x` is a broadcast or overlapping view"):
        anyrope.rotate(x, inplace=True)


def test_inplace_refuses_q_and_k_sharing_memory() -> None:
    q = _x((1, 4, 2, 8))
    with pytest.raises(ValueError, match="`q` and `k` in separate memory"):
        anyrope.rotate_qk(q, q, inplace=True)
    with pytest.raises(ValueError, match="`q` and `k` in separate memory"):
        anyrope.rotate_qk(q[:, :, :], q[:, :, 1:], inplace=True)


def test_inplace_takes_disjoint_views_of_one_fused_buffer() -> None:
    qkv = _x((2, 5, 3, 4, 8))
    q, k = qkv[:, :, 0], qkv[:, :, 1]
    want = anyrope.rotate_qk(q.copy(), k.copy(), impl="array_api")
    untouched = qkv[:, :, 2].copy()
    anyrope.rotate_qk(q, k, inplace=True)
    np.testing.assert_array_equal(q, want[0])
    np.testing.assert_array_equal(k, want[1])
    np.testing.assert_array_equal(qkv[:, :, 2], untouched)


# -- defect 5 and 15: every integer dtype, 0-d offsets ------------------------------------

INTEGER_DTYPES = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]


@pytest.mark.parametrize("dtype", INTEGER_DTYPES)
def test_positions_of_every_integer_dtype(backend: Any, dtype: str) -> None:
    xp = backend.xp
    if not hasattr(xp, dtype):
        pytest.skip(f"{backend.name} has no {dtype}")
    x = backend.from_numpy(_x((2, 5, 3, 8)))
    positions = xp.asarray(np.arange(3, 8), dtype=getattr(xp, dtype), device=_device(x))
    want = anyrope.rotate(x, 3)
    np.testing.assert_array_equal(
        backend.to_bits(anyrope.rotate(x, positions)), backend.to_bits(want)
    )


@pytest.mark.parametrize("dtype", ["int8", "int64", "uint64"])
def test_a_0d_integer_array_is_an_offset(backend: Any, dtype: str) -> None:
    xp = backend.xp
    if not hasattr(xp, dtype):
        pytest.skip(f"{backend.name} has no {dtype}")
    x = backend.from_numpy(_x((2, 5, 3, 8)))
    offset = xp.asarray(7, dtype=getattr(xp, dtype), device=_device(x))
    np.testing.assert_array_equal(
        backend.to_bits(anyrope.rotate(x, offset)), backend.to_bits(anyrope.rotate(x, 7))
    )


def _device(x: Any) -> Any:
    import array_api_compat

    return array_api_compat.device(x)


def test_wide_unsigned_positions_are_reported_as_themselves() -> None:
    x = _x((1, 2, 1, 8))
    with pytest.raises(ValueError, match=str(2**64 - 1)):
        anyrope.rotate(x, np.array([0, 2**64 - 1], dtype=np.uint64))
    with pytest.raises(ValueError, match=f"offset {2**64 - 1}"):
        anyrope.rotate(x, np.uint64(2**64 - 1))


# -- defect 6: dtypes that nothing computes in -------------------------------------------


def test_longdouble_is_refused() -> None:
    if np.dtype(np.longdouble) == np.dtype(np.float64):
        pytest.skip("longdouble is float64 on this platform")
    with pytest.raises(TypeError, match=r"`x` must have a real floating dtype.*got float"):
        anyrope.rotate(np.zeros((1, 2, 1, 8), dtype=np.longdouble))


def test_torch_float8_and_sparse_are_refused_by_name() -> None:
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="`x` must have a real floating dtype"):
        anyrope.rotate(torch.zeros(1, 2, 1, 8, dtype=torch.float8_e4m3fn))
    with pytest.raises(TypeError, match="`k` must be a dense"):
        anyrope.rotate_qk(torch.zeros(1, 2, 1, 8), torch.zeros(1, 2, 1, 8).to_sparse())


# -- defect 7: the functional API's cache is bounded by bytes ----------------------------


def test_functional_cache_is_bounded_by_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    anyrope.clear_cache()
    monkeypatch.setattr(_functional, "CACHE_BYTES", 16 * 2**20)
    x = _x((1, 4000, 1, 128))
    for base in range(2, 12):
        # A prefill of 4000 tokens: 4096 rows x 64 pairs x 4 bytes, (cos, sin) 2 MiB and
        # their wide forms 4 MiB (the blocked path widens them).
        anyrope.rotate(x, 0, base=float(base) * 1000, impl="blocked")
        assert anyrope.cache_nbytes() <= 16 * 2**20
    assert len(_functional._ropes) == 2
    anyrope.clear_cache()
    assert anyrope.cache_nbytes() == 0
    assert not _functional._ropes


PEAK_MEMORY = """
import resource
import numpy as np
import anyrope
from anyrope import _functional, _paths

def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux

_functional.CACHE_BYTES = 32 * 2**20
anyrope.rotate(np.ones((1, 1, 4, 16), np.float32), 5)  # imports and compiled code
before = peak()
for i in range(600):
    head_dim = 2 * (8 + i % 200)
    anyrope.rotate(np.ones((1, 1, 4, head_dim), np.float32), 1000 + i)
print(peak() - before, anyrope.cache_nbytes())
"""


@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss in KiB: Linux")
def test_peak_memory_stays_within_twice_the_functional_cache() -> None:
    """Issue 23, item 10: decode calls over 200 head dims reached a peak RSS of 2.5 GB
    with a cache of 256 MiB: the RoPEs the cache dropped kept their tables until the
    cyclic garbage collector ran (their plans refer back to them). Dropped tables are
    freed at once: the peak grows by at most twice the cache's bound."""
    result = run_python("-c", PEAK_MEMORY, timeout=300)
    assert result.returncode == 0, result.stderr
    grown, held = (int(v) for v in result.stdout.split())
    assert held <= 32 * 2**20
    assert grown <= 2 * 32 * 2**20, f"peak RSS grew by {grown / 2**20:.0f} MiB"


def test_clear_cache_keeps_the_bits() -> None:
    x = _x((2, 5, 3, 64))
    first = anyrope.rotate(x, 100)
    anyrope.clear_cache()
    np.testing.assert_array_equal(anyrope.rotate(x, 100), first)
    rope = anyrope.RoPE(64)
    rope.rotate(x, 100)
    # One form for one name: both count their tables when called.
    assert rope.cache_nbytes() == anyrope.cache_nbytes() > 0
    rope.clear_cache()
    assert rope.cache_nbytes() == 0


# -- defect 9 to 15: arguments -------------------------------------------------------------


@pytest.mark.parametrize("xp", ["numpy", np.float32, 3])
def test_xp_must_be_a_namespace(xp: object) -> None:
    with pytest.raises(TypeError, match="`xp` must be an array-API namespace"):
        anyrope.rotate(_x((1, 2, 1, 8)), xp=xp)


def test_rotate_qk_with_no_key_heads_still_rotates_q() -> None:
    q, k = _x((1, 4, 2, 8)), _x((1, 4, 0, 8))
    q2, k2 = anyrope.rotate_qk(q, k, 5)
    np.testing.assert_array_equal(q2, anyrope.rotate(q, 5))
    assert k2.shape == k.shape
    q3, _ = anyrope.rotate_qk(k.copy(), q.copy(), inplace=True)
    assert q3.shape == k.shape


def test_cu_seqlens_as_a_list_is_named() -> None:
    x = _x((6, 2, 8))
    with pytest.raises(TypeError, match=r"`cu_seqlens` must be an array of the same library.*list"):
        anyrope.rotate(x, layout="thd", cu_seqlens=[0, 6])


def test_inf_input_warns_nothing_on_any_path() -> None:
    x = _x((4, 512, 8, 64))
    x[0, 3, 0, 0] = np.inf
    for impl in _cpu_paths(anyrope.RoPE(64), x):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            y = anyrope.rotate(x, 5, impl=impl)
        assert not np.isfinite(y[0, 3, 0]).all(), impl


def test_torch_outputs_own_their_storage() -> None:
    torch = pytest.importorskip("torch")
    for impl in _cpu_paths(anyrope.RoPE(32), torch.randn(2, 64, 4, 32)):
        y = anyrope.rotate(torch.randn(2, 64, 4, 32), impl=impl)
        y.resize_(2 * y.numel())
        assert y.numel() == 2 * 2 * 64 * 4 * 32
        x = torch.randn(2, 64, 4, 32)
        anyrope.rotate(x, impl=impl)
        x.resize_(2 * x.numel())  # the caller's input is left resizable too


def test_gqa_in_hugging_face_order_hints_at_the_layout() -> None:
    q, k = _x((1, 32, 7, 8)), _x((1, 8, 7, 8))
    with pytest.raises(ValueError, match="pass layout='bhsd'"):
        anyrope.rotate_qk(q, k)
    q2, k2 = anyrope.rotate_qk(q, k, layout="bhsd")
    assert q2.shape == q.shape
    assert k2.shape == k.shape
    with pytest.raises(ValueError, match="must share the batch") as info:
        anyrope.rotate_qk(_x((1, 7, 4, 8)), _x((1, 6, 5, 8)))
    assert "bhsd" not in str(info.value)


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ({"base": [1.0]}, "`base` must be a real number"),
        ({"rotary_dim": [2]}, "`rotary_dim` must be an integer"),
        ({"interleaved": [True]}, "`interleaved` must be True or False"),
    ],
    ids=["base", "rotary_dim", "interleaved"],
)
def test_functional_options_of_any_type_are_named(option: dict, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        anyrope.rotate(_x((1, 2, 1, 8)), **option)
