"""The CUDA kernel path (``impl="cuda"``) on a GPU, and its errors on a CPU.

GPU tests run for CuPy arrays and PyTorch CUDA tensors (``--backend cupy-cuda`` /
``--backend torch-cuda``) and skip with the reason when there is no device or no CuPy.
Every result is compared bit for bit with the array-API path on NumPy.
"""

from __future__ import annotations

import ctypes
import importlib.util
import subprocess
import sys
import types
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

import anyrope
from anyrope._paths.cuda import dispatch as cuda_dispatch
from anyrope._paths.cuda.geometry import Launch
from anyrope.tools._backends import Backend, known_backends, numpy_dtype
from goldens import CASES, DATA, assert_same_bits, case_id, rotate_case

_UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}
GPU_BACKENDS = [b for b in known_backends() if b.device_label != "cpu"]


@pytest.fixture(params=GPU_BACKENDS, ids=[b.id for b in GPU_BACKENDS])
def gpu(request: pytest.FixtureRequest) -> Backend:
    backend: Backend = request.param
    chosen = request.config.getoption("--backend")
    if chosen and backend.id not in chosen and backend.name not in chosen:
        pytest.skip(f"{backend.id} not selected with --backend")
    if backend.unavailable is not None:
        pytest.skip(backend.unavailable)
    if importlib.util.find_spec("cupy") is None:
        pytest.skip("CuPy is not installed: the kernel path needs it")
    return backend


def _ints(backend: Backend, a: np.ndarray) -> Any:
    """An integer NumPy array on the backend's device (``from_numpy`` takes floats)."""
    return backend.from_bits(a.view(_UINT[a.dtype.itemsize]), a.dtype.name)


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch) -> list[Launch]:
    """Records every kernel launch (and still runs it)."""
    seen: list[Launch] = []
    run = cuda_dispatch.launch_on_device

    def counting(first: Any, name: str, call: list[Launch], tables: tuple[Any, Any]) -> None:
        seen.extend(call)
        run(first, name, call, tables)

    monkeypatch.setattr(cuda_dispatch, "launch_on_device", counting)
    return seen


def _np(name: str) -> np.dtype[Any]:
    dtype = numpy_dtype(name)
    if dtype is None:
        pytest.skip("bfloat16 on NumPy needs ml_dtypes")
    return dtype


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(_UINT[a.dtype.itemsize])


def _assert_same(backend: Backend, got: Any, want: np.ndarray) -> None:
    assert tuple(got.shape) == want.shape
    np.testing.assert_array_equal(backend.to_bits(got), _bits(want))


def _random(shape: tuple[int, ...], dtype: np.dtype[Any], seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * 3).astype(dtype)


# -- on any machine ---------------------------------------------------------------------


def test_cuda_on_numpy_is_a_clear_error() -> None:
    x = np.zeros((1, 4, 2, 8), dtype=np.float32)
    with pytest.raises(ValueError, match=r"`impl`='cuda' needs CuPy arrays or PyTorch CUDA"):
        anyrope.rotate(x, impl="cuda")
    with pytest.raises(ValueError, match="numpy arrays on device cpu"):
        anyrope.rotate_qk(x, x, impl="cuda")


def test_cuda_on_torch_cpu_is_a_clear_error() -> None:
    torch = pytest.importorskip("torch")
    x = torch.zeros((1, 4, 2, 8))
    with pytest.raises(ValueError, match="torch arrays on device cpu"):
        anyrope.rotate(x, impl="cuda")


def test_auto_on_numpy_does_not_touch_cuda(launches: list[Launch]) -> None:
    x = _random((2, 3, 2, 8), np.dtype(np.float32))
    anyrope.rotate(x)
    assert launches == []


# -- on a GPU ---------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=case_id)
@pytest.mark.parametrize("impl", ["cuda", "auto"])
def test_golden_bits(gpu: Backend, case: dict[str, Any], impl: str, launches: list[Launch]) -> None:
    if case["dtype"] not in gpu.dtype_names:
        pytest.skip(f"{gpu.name} has no {case['dtype']}")
    several_streams = case["kind"] == "mrope"
    if several_streams and impl == "cuda":
        pytest.skip("the kernel takes one position stream; M-RoPE goes through array_api")
    x = gpu.from_bits(DATA[f"{case['name']}_x"], case["dtype"])
    positions = case["positions"]
    if positions == "array":
        positions = _ints(gpu, DATA[f"{case['name']}_positions"])
    y = rotate_case(case, x, positions, impl=impl)
    assert_same_bits(gpu.to_bits(y), DATA[f"{case['name']}_y"], case["dtype"])
    assert launches or several_streams


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["bshd", "bhsd", "sbhd"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("interleaved", [False, True], ids=["half", "interleaved"])
def test_q_and_k_in_one_launch(
    gpu: Backend, layout: str, dtype: str, interleaved: bool, launches: list[Launch]
) -> None:
    if dtype not in gpu.dtype_names:
        pytest.skip(f"{gpu.name} has no {dtype}")
    shapes = {"bshd": ((2, 9, 8, 64), (2, 9, 2, 64)), "bhsd": ((2, 8, 9, 64), (2, 2, 9, 64))}
    q_shape, k_shape = shapes.get(layout, ((9, 2, 8, 64), (9, 2, 2, 64)))
    q, k = _random(q_shape, _np(dtype), 1), _random(k_shape, _np(dtype), 2)
    positions = np.array([[5, 6, 7, 8, 9, 10, 11, 12, 13], [0, 1, 2, 3, 4, 5, 6, 7, 8]])
    options = {"rotary_dim": 48, "interleaved": interleaved, "layout": layout}
    want_q, want_k = anyrope.rotate_qk(q, k, positions, impl="array_api", **options)

    got_q, got_k = anyrope.rotate_qk(
        gpu.from_numpy(q), gpu.from_numpy(k), _ints(gpu, positions), impl="cuda", **options
    )

    _assert_same(gpu, got_q, want_q)
    _assert_same(gpu, got_k, want_k)
    # One launch rotates q and k (all their heads) and copies both past rotary_dim.
    assert len(launches) == 1
    heads = q_shape[1 if layout == "bhsd" else 2] + k_shape[1 if layout == "bhsd" else 2]
    assert [launch.args[30] for launch in launches] == [heads]
    assert all(launch.width > 1 for launch in launches)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("positions_dtype", [np.int32, np.int64])
def test_strided_views_of_a_fused_qkv(
    gpu: Backend, dtype: str, positions_dtype: type, launches: list[Launch]
) -> None:
    fused = _random((2, 7, 12, 32), _np(dtype), 3)
    positions = np.arange(100, 107).astype(positions_dtype)
    want_q, want_k = anyrope.rotate_qk(
        fused[:, :, :8], fused[:, :, 8:10], positions, rotary_dim=16, impl="array_api"
    )
    device_fused = gpu.from_numpy(fused)

    got_q, got_k = anyrope.rotate_qk(
        device_fused[:, :, :8],
        device_fused[:, :, 8:10],
        _ints(gpu, positions),
        rotary_dim=16,
        impl="cuda",
    )

    _assert_same(gpu, got_q, want_q)
    _assert_same(gpu, got_k, want_k)
    _assert_same(gpu, device_fused, fused)
    assert [launch.width > 1 for launch in launches] == [True]  # the rotation and the copy in one


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("view", ["misaligned", "strided-last-axis"])
def test_scalar_variant_for_what_vectors_cannot_take(
    gpu: Backend, dtype: str, view: str, launches: list[Launch]
) -> None:
    shape = (2, 5, 3, 32)
    if view == "misaligned":
        flat = _random((int(np.prod(shape)) + 1,), _np(dtype), 4)
        host, device = flat[1:].reshape(shape), gpu.from_numpy(flat)[1:].reshape(shape)
    else:
        wide = _random((*shape[:-1], 64), _np(dtype), 5)
        host, device = wide[..., ::2], gpu.from_numpy(wide)[..., ::2]
    want = anyrope.rotate(host, 3, interleaved=True, impl="array_api")

    got = anyrope.rotate(device, 3, interleaved=True, impl="cuda")

    _assert_same(gpu, got, want)
    assert [launch.width > 1 for launch in launches] == [False]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_inplace_rotates_the_callers_buffer(gpu: Backend, dtype: str) -> None:
    if dtype not in gpu.dtype_names:
        pytest.skip(f"{gpu.name} has no {dtype}")
    host = _random((3, 6, 4, 64), _np(dtype), 6)
    want = anyrope.rotate(host, 17, rotary_dim=32, inverse=True, impl="array_api")
    x = gpu.from_numpy(host)

    y = anyrope.rotate(x, 17, rotary_dim=32, inverse=True, inplace=True, impl="cuda")

    assert y is x
    _assert_same(gpu, x, want)


@pytest.mark.gpu
def test_positions_beyond_the_cached_table(gpu: Backend) -> None:
    host = _random((2, 4, 2, 64), np.dtype(np.float32), 7)
    positions = np.array([[2**40, 3, 2**40 + 9, 3], [1, 2, 3, 4]])
    want = anyrope.rotate(host, positions, impl="array_api")

    got = anyrope.rotate(gpu.from_numpy(host), _ints(gpu, positions), impl="cuda")

    _assert_same(gpu, got, want)
    offset = anyrope.rotate(gpu.from_numpy(host), 2**45, impl="cuda")
    _assert_same(gpu, offset, anyrope.rotate(host, 2**45, impl="array_api"))


@pytest.mark.gpu
def test_positions_of_one_geometry_as_an_array_then_a_range_then_an_array(gpu: Backend) -> None:
    # After a geometry's first call, positions whose rows hold one range are planned as
    # an offset, other values as an array: each takes its own launches (the CPU harness
    # checks the same in tests/test_cuda_source.py).
    host = _random((2, 3, 4, 32), np.dtype(np.float32), 5)
    x = gpu.from_numpy(host)
    rope = anyrope.RoPE(32)
    for rows in ([[0, 1, 2], [5, 6, 7]], [[254, 255, 256]] * 2, [[10, 20, 30], [40, 50, 60]]):
        positions = np.array(rows)
        got = rope.rotate(x, _ints(gpu, positions), impl="cuda")
        _assert_same(gpu, got, anyrope.rotate(host, positions, impl="array_api"))


@pytest.mark.gpu
def test_cupy_tables_built_on_a_busy_stream_are_whole_on_another(gpu: Backend) -> None:
    # CuPy copies the tables on the stream current when they are built; a launch on
    # another stream right after reads them whole (the copy is waited for once).
    if gpu.name != "cupy":
        pytest.skip("torch copies tables from the host synchronously")
    import cupy

    host = _random((1, 1, 4, 128), np.dtype(np.float32), 6)
    x = cupy.asarray(host)
    rope = anyrope.RoPE(128)
    busy, other = cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True)
    work = cupy.ones((4096, 4096), cupy.float32)
    with busy:
        for _ in range(20):
            work = work @ work * 1e-4
        rope.rotate(x, 3, impl="cuda")  # builds the tables on the busy stream
    with other:
        y = rope.rotate(x, 5, impl="cuda")
    other.synchronize()
    _assert_same(gpu, y, anyrope.rotate(host, 5, impl="array_api"))


@pytest.mark.gpu
def test_negative_positions_are_refused_before_the_launch(
    gpu: Backend, launches: list[Launch]
) -> None:
    x = gpu.from_numpy(_random((1, 3, 2, 16), np.dtype(np.float32)))
    with pytest.raises(ValueError, match="non-negative"):
        anyrope.rotate(x, _ints(gpu, np.array([0, -1, 2])), impl="cuda")
    assert launches == []


@pytest.mark.gpu
def test_arrays_on_a_device_that_is_not_the_current_one(gpu: Backend) -> None:
    # The outputs are made on the arrays' device and the kernel runs there, whichever
    # device is current (CuPy allocates on its current device).
    import cupy

    if cupy.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs")
    host = _random((2, 5, 4, 64), np.dtype(np.float32), 9)
    want = anyrope.rotate(host, 3, impl="array_api")
    with cupy.cuda.Device(0):
        if gpu.name == "torch":
            import torch

            x = torch.from_numpy(host).to("cuda:1")
        else:
            with cupy.cuda.Device(1):
                x = cupy.asarray(host)
        y = anyrope.rotate(x, 3, impl="cuda")
    assert (y.get_device() if gpu.name == "torch" else y.device.id) == 1
    _assert_same(gpu, y, want)


@pytest.mark.gpu
def test_torch_runs_on_the_callers_stream(gpu: Backend) -> None:
    if gpu.name != "torch":
        pytest.skip("streams are a PyTorch test")
    import torch

    host = _random((4, 64, 8, 128), np.dtype(np.float32), 8)
    want = anyrope.rotate(host, impl="array_api")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        x = gpu.from_numpy(host)
        y = anyrope.rotate(x, impl="cuda")
    stream.synchronize()
    _assert_same(gpu, y, want)


@pytest.mark.gpu
@pytest.mark.parametrize("interleaved", [False, True], ids=["half", "interleaved"])
def test_torch_gradcheck_float64(gpu: Backend, interleaved: bool) -> None:
    if gpu.name != "torch":
        pytest.skip("autograd is a PyTorch test")
    import torch

    q = torch.randn(2, 5, 3, 16, dtype=torch.float64, device="cuda", requires_grad=True)
    k = torch.randn(2, 5, 1, 16, dtype=torch.float64, device="cuda", requires_grad=True)
    positions = torch.tensor([3, 1, 4, 1, 5], device="cuda")

    def rotated(q: Any, k: Any) -> Any:
        return anyrope.rotate_qk(
            q, k, positions, rotary_dim=12, interleaved=interleaved, impl="cuda"
        )

    assert torch.autograd.gradcheck(rotated, (q, k))


@pytest.mark.gpu
def test_torch_backward_is_the_inverse_rotation(gpu: Backend) -> None:
    if gpu.name != "torch":
        pytest.skip("autograd is a PyTorch test")
    import torch

    x = torch.randn(2, 6, 4, 32, device="cuda", requires_grad=True)
    grad = torch.randn(2, 6, 4, 32, device="cuda")
    anyrope.rotate(x, 11, impl="cuda").backward(grad)

    want = anyrope.rotate(grad, 11, inverse=True, impl="cuda")
    np.testing.assert_array_equal(gpu.to_bits(x.grad), gpu.to_bits(want))


# Forward mode's first use in a process loads torch's own scripted decompositions.
@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
@pytest.mark.gpu
@pytest.mark.parametrize("inplace", [False, True], ids=["out-of-place", "in-place"])
def test_torch_forward_mode_and_torch_func(gpu: Backend, inplace: bool) -> None:
    """Forward mode turns the tangents by the kernel; torch.func's grad and jvp take the
    autograd Function; tables first built inside a transform are plain tensors, whose
    memory the next eager launch reads."""
    if gpu.name != "torch":
        pytest.skip("autograd is a PyTorch test")
    import torch
    import torch.autograd.forward_ad as fwad

    rope = anyrope.RoPE(32, base=54321.0)  # tables first built inside the transforms
    gen = torch.Generator(device="cuda").manual_seed(0)
    x, t = (torch.randn(2, 6, 4, 32, device="cuda", generator=gen) for _ in "xt")
    positions = torch.tensor([3, 1, 4, 1, 5, 9], device="cuda")

    def rotated(a: Any) -> Any:
        return rope.rotate(a.clone() if inplace else a, positions, inplace=inplace, impl="cuda")

    grad = torch.func.grad(lambda a: (rotated(a) * t).sum())(x)
    primal, tangent = torch.func.jvp(rotated, (x,), (t,))
    with fwad.dual_level():
        dual_primal, dual_tangent = fwad.unpack_dual(rotated(fwad.make_dual(x, t)))
    want, turned = rope.rotate(x, positions, impl="cuda"), rope.rotate(t, positions, impl="cuda")
    undone = rope.rotate(t, positions, inverse=True, impl="cuda")
    for got, expected in (
        (grad, undone),
        (primal, want),
        (tangent, turned),
        (dual_primal, want),
        (dual_tangent, turned),
    ):
        np.testing.assert_array_equal(gpu.to_bits(got), gpu.to_bits(expected))


def test_gpu_benchmark_without_a_gpu_says_so(tmp_path: Path) -> None:
    has_torch_cuda = importlib.util.find_spec("torch") is not None and _torch_cuda()
    if has_torch_cuda and importlib.util.find_spec("cupy") is not None:
        pytest.skip("a GPU is here: run benchmarks/bench_gpu.py itself")
    script = Path(__file__).parents[1] / "benchmarks" / "bench_gpu.py"
    done = subprocess.run(
        [sys.executable, str(script), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 1
    assert "bench_gpu.py needs a CUDA GPU" in done.stderr
    assert not (tmp_path / "gpu.json").exists()


def _torch_cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def test_a_broken_cupy_is_warned_about_once_and_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    """CuPy installed but unable to compile (no libnvrtc of its CUDA version): the path
    says why, once, and ``impl="auto"`` moves on instead of raising."""
    from anyrope._paths import cuda
    from anyrope._paths.cuda import _module

    def no_nvrtc(*args: object, **kwargs: object) -> None:
        raise OSError("libnvrtc.so.12: cannot open shared object file\nmore detail")

    monkeypatch.setattr(_module, "get_kernel", no_nvrtc)
    cuda.unusable.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match=r"CUDA path cannot run.*libnvrtc\.so\.12"):
            reason = cuda.unusable(0)
        assert reason is not None
        assert "OSError: libnvrtc.so.12: cannot open shared object file)" in reason
        assert "more detail" not in reason
        assert cuda.unusable(0) == reason  # tried once: no second warning (errors here)
    finally:
        cuda.unusable.cache_clear()


class _Event:
    """A stand-in for ``cupy.cuda.Event`` that fails if made or queried under capture."""

    made: ClassVar[list[_Event]] = []

    def __init__(self, **options: object) -> None:
        self.passed = False
        self.stream: _Stream | None = None
        _Event.made.append(self)

    def record(self, stream: _Stream) -> None:
        assert not stream.capturing, "an event recorded under capture"
        self.stream = stream

    @property
    def done(self) -> bool:
        assert self.stream is not None
        assert not any(s.capturing for s in _Stream.every), "an event queried under capture"
        return self.passed


class _Stream:
    """A stand-in for a CuPy stream whose capture state the test sets."""

    every: ClassVar[list[_Stream]] = []

    def __init__(self, ptr: int) -> None:
        self.ptr, self.capturing = ptr, False
        _Stream.every.append(self)

    def is_capturing(self) -> bool:
        return self.capturing


@pytest.fixture
def fake_cupy(monkeypatch: pytest.MonkeyPatch) -> Any:
    _Event.made, _Stream.every = [], []
    for name, empty in (("_in_use", {}), ("_retired", []), ("_captured", {})):
        monkeypatch.setattr(cuda_dispatch, name, empty)
    return types.SimpleNamespace(cuda=types.SimpleNamespace(Event=_Event))


def test_the_same_tables_take_no_event(fake_cupy: Any) -> None:
    """Every decode step of a model reads the tables of the step before: no event per
    call, no query, and the tables stay held while the stream may still read them."""
    stream = _Stream(7)
    tables = (object(), object())
    for _ in range(100):
        cuda_dispatch.hold_cupy_tables(fake_cupy, stream, tables, device_id=0)
    assert _Event.made == []
    assert cuda_dispatch._in_use == {(0, 7): tables}


def test_tables_a_stream_moved_on_from_are_held_until_it_read_them(fake_cupy: Any) -> None:
    """A table the cache drops (grown, cleared) while a kernel is queued must not be
    reused meanwhile: when a stream's tables change, one event recorded on that stream
    keeps the old ones until it has passed; other streams keep their own."""
    one, two = _Stream(1), _Stream(2)
    first, second, third = ((object(), object()) for _ in range(3))
    cuda_dispatch.hold_cupy_tables(fake_cupy, one, first, device_id=0)
    cuda_dispatch.hold_cupy_tables(fake_cupy, two, first, device_id=0)
    cuda_dispatch.hold_cupy_tables(fake_cupy, one, second, device_id=0)
    (event,) = _Event.made
    assert event.stream is one
    assert [kept for _, kept in cuda_dispatch._retired] == [first]
    assert cuda_dispatch._in_use == {(0, 1): second, (0, 2): first}
    # The first event has not passed:
    cuda_dispatch.hold_cupy_tables(fake_cupy, one, third, device_id=0)
    assert [kept for _, kept in cuda_dispatch._retired] == [first, second]
    event.passed = True
    cuda_dispatch.hold_cupy_tables(fake_cupy, one, first, device_id=0)
    assert [kept for _, kept in cuda_dispatch._retired] == [second, third]
    assert len(_Event.made) == 3


def test_the_null_streams_of_two_devices_hold_their_own_tables(fake_cupy: Any) -> None:
    """Handle 0 names the null stream of every device: tables read there on one device
    are not taken for another device's, nor released by an event on it."""
    null_0, null_1 = _Stream(0), _Stream(0)
    on_0, on_1 = (object(), object()), (object(), object())
    cuda_dispatch.hold_cupy_tables(fake_cupy, null_0, on_0, device_id=0)
    cuda_dispatch.hold_cupy_tables(fake_cupy, null_1, on_1, device_id=1)
    assert _Event.made == []  # no stream moved on: device 1 met its own stream
    assert cuda_dispatch._in_use == {(0, 0): on_0, (1, 0): on_1}
    cuda_dispatch.hold_cupy_tables(fake_cupy, null_0, on_0, device_id=0)
    assert _Event.made == []
    assert cuda_dispatch._retired == []


def test_under_capture_no_event_no_query(fake_cupy: Any) -> None:
    """A launch under stream capture records no event and queries none (either breaks
    the capture); the tables it read are kept for good (the graph may replay at any
    time), and the stream's tables before the capture stay held."""
    stream = _Stream(3)
    before, captured = (object(), object()), (object(), object())
    cuda_dispatch.hold_cupy_tables(fake_cupy, stream, before, device_id=0)
    cuda_dispatch.hold_cupy_tables(fake_cupy, stream, (object(), object()), device_id=0)
    stream.capturing = True
    for tables in (before, captured, captured):
        cuda_dispatch.hold_cupy_tables(fake_cupy, stream, tables, device_id=0)
    assert len(_Event.made) == 1  # the change before the capture
    assert list(cuda_dispatch._captured.values()) == [before, captured]
    stream.capturing = False
    cuda_dispatch.hold_cupy_tables(fake_cupy, stream, captured, device_id=0)
    assert cuda_dispatch._captured[id(captured[0])] is captured


def test_torch_tables_are_recorded_on_the_launch_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each launch is one cuLaunchKernel on the torch stream (its raw handle looked up
    once per call) with the launch's buffer, and torch's caching allocator keeps the
    tables until that stream has passed them."""
    torch = pytest.importorskip("torch")
    stream = types.SimpleNamespace(cuda_stream=99)
    looked_up: list[int] = []
    recorded: list[object] = []
    ran: list[tuple[object, ...]] = []

    class DeviceTensor(torch.Tensor):
        def get_device(self) -> int:
            return 0

        def record_stream(self, on: object) -> None:
            recorded.append(on)

    class Device:
        def __init__(self, device_id: int) -> None:
            pass

        def __enter__(self) -> None:
            pass

        def __exit__(self, *exc: object) -> None:
            pass

    def launch_kernel(function: int, *dims_and_more: int) -> None:
        *dims, shared, on, params, extra = dims_and_more
        # What the driver reads: the `extra` list (buffer, its size, end) and the buffer.
        keys = (ctypes.c_void_p * 5).from_address(extra)
        size = ctypes.c_size_t.from_address(keys[3]).value
        assert (keys[0], keys[2], keys[4]) == (1, 2, None)
        ran.append((function, tuple(dims), shared, on, params, ctypes.string_at(keys[1], size)))

    fake = types.ModuleType("cupy")
    fake.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
        Device=Device, driver=types.SimpleNamespace(launchKernel=launch_kernel)
    )
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: stream)
    monkeypatch.setattr(
        torch._C,
        "_cuda_getCurrentRawStream",
        lambda device: looked_up.append(device) or stream.cuda_stream,
        raising=False,
    )
    from anyrope._paths.cuda import _module
    from anyrope._paths.cuda.geometry import LaunchTemplate

    monkeypatch.setattr(_module, "kernel_pointer", lambda *a, **k: 1234)
    x = torch.zeros(4).as_subclass(DeviceTensor)
    tables = (torch.zeros(2).as_subclass(DeviceTensor), torch.zeros(2).as_subclass(DeviceTensor))
    template = LaunchTemplate(
        1, False, False, (5, 6, 7), (8, 9, 10), (0,) * 5, bytes(48) + bytes(range(168)), 96
    )
    launch = template.bind((16, 32, 0, 0), 0, 3)
    cuda_dispatch.launch_on_device(x, "float32", [launch, launch], tables)
    assert looked_up == [0]
    assert ran == [(1234, (5, 6, 7, 8, 9, 10), 96, 99, 0, launch.params)] * 2
    assert launch.args[:4] == (16, 32, 0, 0)
    assert recorded == [stream, stream]


@pytest.mark.parametrize(
    ("driver", "wheel"),
    [((12, 8), "cupy-cuda12x[ctk]"), ((13, 0), "cupy-cuda13x[ctk]"), ((14, 1), "cupy-cuda13x")],
    ids=["driver-cuda12.8", "driver-cuda13.0", "driver-cuda14.1"],
)
def test_missing_cupy_names_the_wheel_of_the_driver(
    monkeypatch: pytest.MonkeyPatch, driver: tuple[int, int], wheel: str
) -> None:
    """A CUDA 12 driver cannot run cupy-cuda13x: the advice follows the driver's version
    (a newer driver runs the newest wheel)."""
    from anyrope._call import make_call
    from anyrope._paths import cuda
    from anyrope._plan import make_plan

    monkeypatch.setattr(cuda, "cuda_array", lambda x: True)
    monkeypatch.setattr(cuda, "_cupy_installed", lambda: False)
    monkeypatch.setattr(cuda, "driver_cuda_version", lambda: driver)
    x = np.zeros((1, 4, 2, 16), dtype=np.float32)
    plan = make_plan(
        anyrope.RoPE(16)._source,
        make_call(
            (x,),
            ("x",),
            None,
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
    reason = cuda.rejects(plan)
    assert reason is not None
    assert f"pip install '{wheel}" in reason
    assert f"the driver runs CUDA {driver[0]}.{driver[1]}" in reason
    other = "cupy-cuda13x" if "12x" in wheel else "cupy-cuda12x"
    assert other not in reason


def test_cupy_advice_without_a_driver_or_with_an_old_one() -> None:
    from anyrope._paths.cuda import cupy_advice

    assert "'cupy-cuda13x[ctk]' or 'cupy-cuda12x[ctk]'" in cupy_advice(None)
    old = cupy_advice((11, 8))
    assert "update the driver" in old
    assert "pip install" not in old


def test_driver_version_is_read_from_libcuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """``cuDriverGetVersion`` gives 1000 x major + 10 x minor; no library, no version."""
    import ctypes

    from anyrope._paths import cuda

    class Driver:
        def __init__(self, path: str) -> None:
            assert path in {"libcuda.so.1", "nvcuda.dll"}

        @staticmethod
        def cuDriverGetVersion(pointer: object) -> int:
            ctypes.cast(pointer, ctypes.POINTER(ctypes.c_int))[0] = 12080
            return 0

    def no_driver(path: str) -> None:
        raise OSError(f"{path}: cannot open shared object file")

    try:
        for library, want in ((Driver, (12, 8)), (no_driver, None)):
            cuda.driver_cuda_version.cache_clear()
            monkeypatch.setattr(cuda.ctypes, "CDLL", library)
            assert cuda.driver_cuda_version() == want
    finally:
        cuda.driver_cuda_version.cache_clear()


def test_a_broken_cupy_warning_names_the_wheel_of_the_driver(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """cupy-cuda13x installed under a CUDA 12 driver fails to import: the warning says
    which CuPy fits."""
    from anyrope._paths import cuda
    from anyrope._paths.cuda import _module

    def wrong_cupy(*args: object, **kwargs: object) -> None:
        raise RuntimeError("CUDA driver version is insufficient for CUDA runtime version")

    monkeypatch.setattr(_module, "get_kernel", wrong_cupy)
    monkeypatch.setattr(cuda, "driver_cuda_version", lambda: (12, 4))
    cuda.unusable.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match=r"pip install 'cupy-cuda12x\[ctk\]'"):
            cuda.unusable(0)
    finally:
        cuda.unusable.cache_clear()
