"""The CUDA kernel without a GPU.

1. ``rope.cu`` compiles with ``nvcc`` for sm_80 and sm_90, every template instantiation
   that ``anyrope._paths.cuda._module`` asks NVRTC for, with no FMA in the generated PTX, no
   flush to zero under the ``-ftz=true`` CuPy adds, and 16-byte loads and stores in the
   vector variants.
2. The kernel body (``rope_math.cuh``), built for the host and run over a simulated grid
   on exactly the arguments ``anyrope._paths.cuda.dispatch`` packs for the device, gives the bits
   of the array-API path: a wrong index, stride, layout or rounding fails here on a CPU.

Without nvcc these tests skip, except under CI (``CI`` set), where they fail.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import importlib.util
import itertools
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import threading
import time
import types
import zlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import anyrope
from anyrope._call import make_call
from anyrope._paths.cuda import _module
from anyrope._paths.cuda.dispatch import rotate_raw
from anyrope._paths.cuda.geometry import (
    HEADS_PER_THREAD,
    INTERLEAVED_HEADS_PER_THREAD,
    Launch,
    Operand,
    launch_templates,
)
from anyrope._plan import Plan, make_plan, with_tables
from anyrope.tools._backends import numpy_dtype
from benchmark_scripts import load

HARNESS = Path(__file__).parent / "cuda_harness" / "harness.cpp"
bench_gpu_launch = load("bench_gpu_launch")
#: The configurations of bench_gpu_launch.py that time kernels edited from this one.
EDITED_CONFIGS = [config for config in bench_gpu_launch.CONFIGS if config.edits]
DTYPE_CODES = {"float16": 0, "bfloat16": 1, "float32": 2, "float64": 3}
_UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def _nvcc() -> str:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        if os.environ.get("CI"):
            pytest.fail(
                "nvcc is required when CI is set: the CUDA kernel must compile on every run"
            )
        pytest.skip("nvcc is not installed, so the CUDA kernel cannot be compiled here")
    return nvcc


def _compile(args: list[str]) -> None:
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{' '.join(args)}\n{done.stdout}\n{done.stderr}"


# -- 1. nvcc ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def instantiations(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A .cu file that includes rope.cu and instantiates every name NVRTC is given."""
    names = [name for dtype in _module.KERNEL_TYPES for name in _module.kernel_names(dtype)]
    lines = ['#include "rope.cu"', "void anyrope_instantiate_all() {"]
    lines += [f"  (void)&{name};" for name in names]
    lines.append("}")
    path = tmp_path_factory.mktemp("cuda") / "instantiate.cu"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_kernel_compiles(arch: str, instantiations: Path, tmp_path: Path) -> None:
    nvcc = _nvcc()
    _compile(
        [
            nvcc,
            f"-arch={arch}",
            *_module.COMPILE_OPTIONS,
            f"-I{_module.source_dir()}",
            "-cubin",
            "--keep",
            f"--keep-dir={tmp_path}",
            "-o",
            str(tmp_path / "rope.cubin"),
            str(instantiations),
        ]
    )
    assert (tmp_path / "rope.cubin").stat().st_size > 0
    (ptx_file,) = tmp_path.glob("*.ptx")
    ptx = ptx_file.read_text()
    entries = re.split(r"\.entry\s+", ptx)[1:]
    assert len(entries) == sum(len(_module.kernel_names(d)) for d in _module.KERNEL_TYPES)
    # numerical-contract.rst, "How every path computes" 3: no fused multiply-add anywhere, only
    # separately rounded operations.
    assert re.search(r"\bfma\.", ptx) is None
    assert "mul.rn.f32" in ptx
    assert "sub.rn.f64" in ptx
    # Each variant moves x in accesses of its width: V * sizeof(T) bytes (16, 8 or 4).
    mangled = {"float16": "6__half", "bfloat16": "13__nv_bfloat16", "float32": "f", "float64": "d"}
    access = {16: "v4.u32", 8: "v2.u32", 4: "u32"}
    seen = 0
    for dtype, code in mangled.items():
        itemsize = np.dtype(dtype if dtype != "bfloat16" else "float16").itemsize
        for width in _module.vector_widths(itemsize)[:-1]:
            prefix = f"_Z12anyrope_ropeI{code}Li{width}E"
            variants = [e for e in entries if e.startswith(prefix)]
            assert len(variants) == 4, prefix  # pair layouts x index types
            for entry in variants:
                seen += 1
                kind = access[width * itemsize]
                x_load = f"ld.relaxed.gpu.global.{kind}"
                assert x_load in entry
                assert f"st.global.{kind}" in entry
                # x is read before the position, and the position before the table rows
                # it selects; all are strong (relaxed) loads, which ptxas keeps in this
                # order (tests/test_cuda_sass.py).
                position = entry.index("ld.relaxed.gpu.global.s32")
                assert entry.index(x_load) < position
                if entry.startswith(f"{prefix}Lb0E"):
                    # Half-split pairs stage the rows in shared memory for the block.
                    stored = entry.index("st.shared")
                    staging = entry.rindex("ld.relaxed.gpu.global.s32", 0, stored)
                    table = re.compile(r"ld\.relaxed\.gpu\.global\.(v[24]\.)?u32")
                    rows = table.search(entry, staging)
                    assert rows is not None
                    assert rows.start() < stored < entry.index("bar.sync", stored)
                    assert "ld.global.nc" not in entry
                else:
                    # Interleaved pairs read their own rows, read-only, and stage nothing.
                    assert "ld.global.nc" in entry
                    assert "st.shared" not in entry
                    assert "bar.sync" not in entry
    assert seen == 4 * (3 + 3 + 2 + 1)
    # The grid walks (token, head, unit) without dividing: no integer division or
    # remainder anywhere (the old flat grid had three 64-bit divisions per unit).
    for entry in entries:
        assert re.search(r"\b(div|rem)\.[su](32|64)", entry) is None


def _nvrtc_library() -> ctypes.CDLL:
    """libnvrtc from the system or an NVIDIA wheel (``nvidia-cuda-nvrtc``); skip without one."""
    candidates = [ctypes.util.find_library("nvrtc")]
    spec = importlib.util.find_spec("nvidia")
    folders = [] if spec is None else list(spec.submodule_search_locations or [])
    # The wheels put it in nvidia/cu13/lib (CUDA 13) or nvidia/cuda_nvrtc/lib (CUDA 12).
    for folder in folders:
        candidates += sorted(str(p) for p in Path(folder).glob("*/lib/libnvrtc.so*"))
    found = next(filter(None, candidates), None)
    if found is None:
        pytest.skip("NVRTC is not installed (pip install nvidia-cuda-nvrtc to run this test)")
    return ctypes.CDLL(found)


def _cuda_include_dir(nvcc: str) -> str:
    """The CUDA toolkit's include directory, as nvcc itself reports it."""
    dry = subprocess.run(
        [nvcc, "--dryrun", "-x", "cu", "-c", os.devnull, "-o", os.devnull],
        capture_output=True,
        text=True,
        check=False,
    )
    match = re.search(r'INCLUDES="-I([^"]+?)"', dry.stdout + dry.stderr)
    assert match is not None, dry.stderr
    return match.group(1).strip()


def _nvrtc_compile(
    options: list[str],
    *,
    lib: ctypes.CDLL | None = None,
    output: str = "PTX",
    source: str | None = None,
) -> tuple[bytes, dict[str, bytes]]:
    """PTX (or, with ``output="CUBIN"``, the cubin) and lowered names of the source CuPy
    compiles (or of ``source``), every name of every dtype, by NVRTC (``lib``: the one
    installed)."""
    lib = _nvrtc_library() if lib is None else lib
    program = ctypes.c_void_p()
    text = (_module.kernel_source() if source is None else source).encode()
    assert lib.nvrtcCreateProgram(ctypes.byref(program), text, b"rope.cu", 0, None, None) == 0
    names = [name for dtype in _module.KERNEL_TYPES for name in _module.kernel_names(dtype)]
    for name in names:
        assert lib.nvrtcAddNameExpression(program, name.encode()) == 0
    encoded = (ctypes.c_char_p * len(options))(*(o.encode() for o in options))
    status = lib.nvrtcCompileProgram(program, len(options), encoded)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(program, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(program, log)
    assert status == 0, log.value.decode()
    lowered_names = {}
    for name in names:
        lowered = ctypes.c_char_p()
        assert lib.nvrtcGetLoweredName(program, name.encode(), ctypes.byref(lowered)) == 0
        assert lowered.value is not None
        lowered_names[name] = lowered.value
    getattr(lib, f"nvrtcGet{output}Size")(program, ctypes.byref(size))
    code = ctypes.create_string_buffer(size.value)
    assert getattr(lib, f"nvrtcGet{output}")(program, code) == 0
    lib.nvrtcDestroyProgram(ctypes.byref(program))
    return (code.value if output == "PTX" else code.raw), lowered_names


def test_nvrtc_compiles_every_name_expression() -> None:
    # CuPy compiles rope.cu at run time with NVRTC, not nvcc: same options, same names.
    # No -I for the package folder: the source CuPy gets must stand alone. The toolkit's
    # include folder is what CuPy itself adds (CUDA_PATH or the cudart wheel's headers).
    ptx, lowered = _nvrtc_compile(
        [
            *_module.COMPILE_OPTIONS,
            f"-I{_cuda_include_dir(_nvcc())}",
            "--gpu-architecture=compute_80",
        ]
    )
    assert all(name.startswith(b"_Z12anyrope_rope") for name in lowered.values())
    assert re.search(rb"\bfma\.", ptx) is None


# Flags after the caller's options. CuPy's compiler.py appends `-ftz=true` to every
# compile (_compile_with_cache_cuda), then the architecture (compile_using_nvrtc); the
# other sets flush and approximate harder still, to show that no flag reaches the math.
FLUSHING_FLAGS = {
    "cupy-ftz": ["-ftz=true"],
    "use-fast-math": ["--use_fast_math"],
    "fast-div-sqrt-ftz": ["-prec-div=false", "-prec-sqrt=false", "-ftz=true"],
}


@pytest.mark.parametrize("flags", list(FLUSHING_FLAGS.values()), ids=list(FLUSHING_FLAGS))
@pytest.mark.parametrize("arch", ["compute_80", "compute_90"])
def test_nvrtc_float32_math_keeps_subnormals(arch: str, flags: list[str]) -> None:
    # numerical-contract.rst, "How every path computes" 3: subnormals are kept as NumPy keeps them.
    # `.ftz` on any f32 instruction (mul, add, sub, neg, cvt, setp, ...) would flush them on the
    # GPU.
    ptx, _ = _nvrtc_compile(
        [
            *_module.COMPILE_OPTIONS,
            f"-I{_cuda_include_dir(_nvcc())}",
            *flags,
            f"-arch={arch}",
        ]
    )
    flushing = sorted(set(re.findall(rb"[\w.]*\.ftz[\w.]*", ptx)))
    assert flushing == []
    # The float32 math and the conversions are there, so this cannot pass vacuously.
    for op in (
        "mul.rn.f32",
        "add.rn.f32",
        "sub.rn.f32",
        "neg.f32",
        "cvt.rn.f16.f32",
        "cvt.rn.bf16.f32",
    ):
        assert re.search(rf"\b{re.escape(op)}\s".encode(), ptx) is not None, op
    assert re.search(rb"\bfma\.", ptx) is None


# -- 2. the host harness ----------------------------------------------------------------


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return _build_harness(tmp_path_factory.mktemp("harness"), _module.source_dir())


def _build_harness(folder: Path, kernel_dir: Path) -> Any:
    """The host harness built in ``folder`` from the kernel sources in ``kernel_dir``."""
    nvcc = _nvcc()
    library = folder / "libharness.so"
    # nvcc drives the host compiler and supplies the CUDA headers; -ffp-contract=off keeps
    # a*b - c*d from being fused on the host, as --fmad=false does on the device. No
    # -ffast-math (harness.cpp refuses it): SSE at -O2 keeps subnormals, as NumPy does.
    _compile(
        [
            nvcc,
            "-std=c++17",
            "-O2",
            "-shared",
            "-Xcompiler",
            "-fPIC,-ffp-contract=off,-Wall,-Wno-unknown-pragmas",
            f"-I{kernel_dir}",
            *(option for option in _module.COMPILE_OPTIONS if option.startswith("-D")),
            "-o",
            str(library),
            str(HARNESS),
        ]
    )
    lib = ctypes.CDLL(str(library))
    lib.anyrope_harness_run.restype = ctypes.c_int
    lib.anyrope_harness_run.argtypes = [
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.POINTER(ctypes.c_uint),
        ctypes.POINTER(ctypes.c_uint),
        ctypes.c_uint,
        ctypes.POINTER(ctypes.c_longlong),
        ctypes.c_int,
        ctypes.c_int,
    ]
    return lib


def _dtype(name: str) -> np.dtype[Any]:
    dtype = numpy_dtype(name)
    if dtype is None:
        pytest.skip("bfloat16 on NumPy needs ml_dtypes")
    return dtype


def _data(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
    return (rng.standard_normal(shape) * 3).astype(dtype)


def _harness_run(harness: Any, name: str, launch: Launch, skip: int = 0) -> int:
    """Run ``launch`` in the host harness: 0, or the harness's code for what went wrong
    (5: the threads of a block did not all meet at a barrier)."""
    args = (ctypes.c_longlong * len(launch.args))(*launch.args)
    return int(
        harness.anyrope_harness_run(
            DTYPE_CODES[name],
            launch.width,
            int(launch.interleaved),
            int(launch.wide_index),
            (ctypes.c_uint * 3)(*launch.grid),
            (ctypes.c_uint * 3)(*launch.block),
            launch.shared,
            args,
            len(launch.args),
            skip,
        )
    )


def _harness_launcher(
    harness: Any,
    launches: list[Launch],
    grid_cap: int | None = None,
    block: tuple[int, int, int] | None = None,
    tables_read: list[Any] | None = None,
) -> Any:
    """A launcher for anyrope._paths.cuda.dispatch that runs each launch in the host
    harness; ``grid_cap`` caps the grid, ``block`` replaces the block shape (any shape
    covers any geometry: the kernel's stride loops); ``tables_read`` gets (and keeps)
    the cos table of each call."""

    def launcher(x: Any, name: str, call: Sequence[Launch], tables: tuple[Any, Any]) -> None:
        if tables_read is not None:
            tables_read.append(tables[0])
        for launch in call:
            launches.append(launch)
            assert _harness_run(harness, name, _reshaped(launch, grid_cap, block)) == 0

    return launcher


def _reshaped(launch: Launch, grid_cap: int | None, block: tuple[int, int, int] | None) -> Launch:
    """``launch`` with its grid capped at ``grid_cap`` and its block shape ``block``, its
    shared memory sized for that shape (the table rows of a unit and token, each)."""
    if grid_cap is not None:
        launch = launch._replace(grid=tuple(min(grid_cap, n) for n in launch.grid))
    if block is not None:
        per_unit = launch.shared // (launch.block[0] * launch.block[2])
        launch = launch._replace(block=block, shared=per_unit * block[0] * block[2])
    return launch


def _run(
    harness: Any,
    arrays: tuple[np.ndarray, ...],
    positions: object,
    *,
    rotary_dim: int,
    interleaved: bool,
    layout: str,
    inverse: bool = False,
    inplace: bool = False,
    grid_cap: int | None = None,
    max_positions: int | None = None,
    block: tuple[int, int, int] | None = None,
) -> tuple[tuple[np.ndarray, ...], list[Launch]]:
    """Rotate NumPy ``arrays`` through launch.py with the harness in place of the GPU."""
    first = arrays[0]
    rope = anyrope.RoPE(
        first.shape[-1],
        rotary_dim=rotary_dim,
        interleaved=interleaved,
        max_positions=max_positions,
    )
    plan = _plan(rope, arrays, positions, layout=layout, inverse=inverse, inplace=inplace)
    launches: list[Launch] = []
    launcher = _harness_launcher(harness, launches, grid_cap, block)
    outputs = rotate_raw(plan, plan.arrays, launcher=launcher)
    return outputs, launches


def _plan(
    rope: anyrope.RoPE,
    arrays: tuple[Any, ...],
    positions: object,
    *,
    layout: str = "bshd",
    inverse: bool = False,
    inplace: bool = False,
) -> Plan:
    """The plan the pipeline makes for ``arrays``, as the CUDA path receives it."""
    plan = make_plan(
        rope._source,
        make_call(
            arrays,
            ("q", "k")[: len(arrays)] if len(arrays) > 1 else ("x",),
            positions,
            layout=layout,
            inverse=inverse,
            inplace=inplace,
            impl="auto",
            xp=None,
            cu_seqlens=None,
        ),
        head_dim=rope.head_dim,
        interleaved=rope.interleaved,
    )
    return with_tables(plan, rope._source, "rows")


def _expected(x: np.ndarray, positions: object, **options: Any) -> np.ndarray:
    return anyrope.rotate(np.array(x), positions, impl="array_api", **options)


def _assert_bits(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape
    assert got.dtype == want.dtype
    uint = _UINT[got.dtype.itemsize]
    np.testing.assert_array_equal(np.ascontiguousarray(got).view(uint), want.view(uint))


def _shape(layout: str, batch: tuple[int, ...], seq: int, heads: int, dim: int) -> tuple[int, ...]:
    if layout == "bshd":
        return (*batch, seq, heads, dim)
    if layout == "bhsd":
        return (*batch, heads, seq, dim)
    return (seq, *batch, heads, dim)


def _heads_axis(layout: str, ndim: int) -> int:
    return ndim - 3 if layout == "bhsd" else ndim - 2


def _scenario(
    name: str, layout: str, dtype: np.dtype[Any], rng: np.random.Generator
) -> dict[str, Any]:
    """Inputs of one scenario and what the planner must make of them."""
    dim, seq, batch = 32, 5, (2,)
    spec: dict[str, Any] = {
        "rotary_dim": dim,
        "positions": None,
        # Pairs per access: 16 bytes of x for a rotated half of 16.
        "width": 16 // dtype.itemsize,
        "launches": 1,
        "options": {},
    }
    if name == "contiguous-qk":
        q = _data(rng, _shape(layout, batch, seq, 4, dim), dtype)
        k = _data(rng, _shape(layout, batch, seq, 2, dim), dtype)
        spec["arrays"] = (q, k)
    elif name in ("fused-qkv-partial-int32", "inplace-partial"):
        fused = _data(rng, _shape(layout, batch, seq, 4 + 2 + 2, dim), dtype)
        axis = _heads_axis(layout, fused.ndim)
        spec["arrays"] = tuple(
            fused[(slice(None),) * axis + (slice(lo, hi),)] for lo, hi in ((0, 4), (4, 6))
        )
        assert not spec["arrays"][0].flags.c_contiguous
        spec["rotary_dim"] = 16
        spec["positions"] = rng.integers(0, 300, size=seq).astype(np.int32)
        if name == "inplace-partial":
            spec["options"] = {"inplace": True}
    elif name == "offset-inverse":
        spec["arrays"] = (_data(rng, _shape(layout, batch, seq, 3, dim), dtype),)
        spec["positions"] = 1000
        spec["options"] = {"inverse": True}
    elif name == "batch-positions-int64":
        batch = (2, 3)
        q = _data(rng, _shape(layout, batch, seq, 2, dim), dtype)
        k = _data(rng, _shape(layout, batch, seq, 1, dim), dtype)
        spec["arrays"] = (q, k)
        spec["positions"] = rng.integers(0, 5000, size=(2, 1, seq)).astype(np.int64)
        # positions broadcast over the second batch axis: no single batch stride fits both.
        spec["launches"] = 2
    elif name == "misaligned":
        shape = _shape(layout, batch, seq, 3, dim)
        flat = _data(rng, (int(np.prod(shape)) + 1,), dtype)
        spec["arrays"] = (flat[1:].reshape(shape),)
        spec["width"] = 1
    elif name == "strided-last-axis":
        wide = _data(rng, _shape(layout, batch, seq, 3, 2 * dim), dtype)
        spec["arrays"] = (wide[..., ::2],)
        spec["rotary_dim"] = 24
        spec["width"] = 1
    elif name == "odd-width":
        # A rotated half of 10: two pairs per access (4 bytes of float16, 16 of float64).
        spec["arrays"] = (_data(rng, _shape(layout, batch, seq, 3, 24), dtype),)
        spec["rotary_dim"] = 20
        spec["width"] = 2
    elif name in (
        "head-96-rotary-24",
        "head-80-rotary-20",
        "head-128-rotary-64",
        "head-100-rotary-96",
    ):
        dim, rotary = (int(n) for n in name.split("-")[1::2])
        q = _data(rng, _shape(layout, batch, seq, 4, dim), dtype)
        k = _data(rng, _shape(layout, batch, seq, 2, dim), dtype)
        spec["arrays"] = (q, k)
        spec["rotary_dim"] = rotary
        spec["positions"] = rng.integers(0, 3000, size=(*batch, seq)).astype(np.int64)
        half, tail = rotary // 2, dim - rotary
        # Whole accesses in the rotated half, whole pairs of them past it (head 100: 4
        # features, 2 accesses of 2), rows aligned for them.
        spec["width"] = max(
            w
            for w in (16 // dtype.itemsize, 8 // dtype.itemsize, 4 // dtype.itemsize, 1)
            if w >= 1
            and half % w == 0
            and tail % (2 * w if w > 1 else 1) == 0
            and dim % w == 0
            and (w == 1 or w * dtype.itemsize >= 4)
        )
    elif name == "shifted-8-bytes":
        # Rows 8 bytes off a 16-byte boundary: the 8-byte variant (float64: scalar).
        shape = _shape(layout, batch, seq, 3, dim)
        flat = _data(rng, (int(np.prod(shape)) + 8 // dtype.itemsize,), dtype)
        spec["arrays"] = (flat[8 // dtype.itemsize :].reshape(shape),)
        spec["width"] = max(1, 8 // dtype.itemsize) if dtype.itemsize < 8 else 1
    elif name == "noncollapsible-batch":
        # batch (2, 3) whose strides cannot be merged into one: one launch per outer index.
        base = _data(rng, _shape(layout, (3, 2), seq, 2, dim), dtype)
        b0, b1 = (0, 1) if layout != "sbhd" else (1, 2)
        q = np.swapaxes(base, b0, b1)
        k = _data(rng, _shape(layout, (2, 3), seq, 1, dim), dtype)
        spec["arrays"] = (q, k)
        spec["launches"] = 2
        spec["positions"] = 7
    elif name == "large-positions":
        spec["arrays"] = (_data(rng, _shape(layout, batch, seq, 2, dim), dtype),)
        spec["positions"] = np.array([3, 2**40, 5, 2**40 + 1, 3], dtype=np.int64)
    elif name == "large-offset":
        spec["arrays"] = (_data(rng, _shape(layout, batch, seq, 2, dim), dtype),)
        spec["positions"] = 2**45
    elif name == "grid-stride":
        spec["arrays"] = (_data(rng, _shape(layout, (3,), 40, 4, dim), dtype),)
        spec["options"] = {"grid_cap": 2}
    else:
        raise AssertionError(name)
    return spec


SCENARIOS = [
    "contiguous-qk",
    "fused-qkv-partial-int32",
    "inplace-partial",
    "offset-inverse",
    "batch-positions-int64",
    "misaligned",
    "strided-last-axis",
    "odd-width",
    "head-96-rotary-24",
    "head-80-rotary-20",
    "head-128-rotary-64",
    "head-100-rotary-96",
    "shifted-8-bytes",
    "noncollapsible-batch",
    "large-positions",
    "large-offset",
    "grid-stride",
]


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("layout", ["bshd", "bhsd", "sbhd"])
@pytest.mark.parametrize("interleaved", [False, True], ids=["half", "interleaved"])
@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16", "float32", "float64"])
def test_harness_matches_array_api(
    harness: Any, dtype_name: str, interleaved: bool, layout: str, scenario: str
) -> None:
    dtype = _dtype(dtype_name)
    rng = np.random.default_rng(
        zlib.crc32(f"{dtype_name}-{interleaved}-{layout}-{scenario}".encode())
    )
    spec = _scenario(scenario, layout, dtype, rng)
    arrays = spec["arrays"]
    options = dict(spec["options"])
    grid_cap = options.pop("grid_cap", None)
    common = {"rotary_dim": spec["rotary_dim"], "interleaved": interleaved, "layout": layout}
    expected = [_expected(x, spec["positions"], **common, **options) for x in arrays]
    before = [np.array(x) for x in arrays]

    outputs, launches = _run(
        harness, arrays, spec["positions"], grid_cap=grid_cap, **common, **options
    )

    # The features past rotary_dim, when copied, are copied by the same launch.
    count = spec["launches"]
    assert len(launches) == count
    assert [launch.width for launch in launches] == [spec["width"]] * count
    for x, y, want, old in zip(arrays, outputs, expected, before, strict=True):
        _assert_bits(y, want)
        if options.get("inplace"):
            assert y is x
        else:
            _assert_bits(x, old)


@pytest.mark.parametrize("scenario", ["contiguous-qk", "head-80-rotary-20", "misaligned"])
@pytest.mark.parametrize("dtype_name", ["bfloat16", "float64"])
def test_harness_64_bit_indices(
    harness: Any, dtype_name: str, scenario: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Offsets past 2**31 need more memory than a test has: with the limit at 0, every
    # launch takes the long long variants, which must give the same bits.
    from anyrope._paths.cuda import dispatch as cuda_dispatch
    from anyrope._paths.cuda import geometry as cuda_geometry

    monkeypatch.setattr(cuda_geometry, "_INT32_LIMIT", 0)
    monkeypatch.setattr(cuda_dispatch, "_templates", {})
    dtype = _dtype(dtype_name)
    rng = np.random.default_rng(zlib.crc32(f"wide-{dtype_name}-{scenario}".encode()))
    spec = _scenario(scenario, "bshd", dtype, rng)
    common = {"rotary_dim": spec["rotary_dim"], "interleaved": False, "layout": "bshd"}
    expected = [_expected(x, spec["positions"], **common) for x in spec["arrays"]]

    outputs, launches = _run(harness, spec["arrays"], spec["positions"], **common)

    assert launches
    assert all(launch.wide_index for launch in launches)
    for y, want in zip(outputs, expected, strict=True):
        _assert_bits(y, want)


def test_harness_binds_each_call_to_its_own_memory(harness: Any) -> None:
    # The second call of a geometry reuses the first call's launch templates: only the
    # addresses and the offset change, and the results must be those of its own inputs.
    rng = np.random.default_rng(11)
    common = {"rotary_dim": 20, "interleaved": True, "layout": "bhsd"}
    for offset in (3, 200):  # both within the tables from position 0
        x = _data(rng, (2, 3, 5, 80), np.dtype(np.float32))
        (y,), launches = _run(harness, (x,), offset, **common)
        _assert_bits(y, _expected(x, offset, **common))
        # One launch rotates and copies past rotary_dim.
        assert [launch.args[7] for launch in launches] == [offset]


# q with 3 heads and k with 2, bfloat16 (2 heads per thread half-split, 1 interleaved), 32
# rotated pairs in 4 units, run in blocks of 2 units x 2 head rows x 3 tokens, at most 2
# blocks per grid dimension: the units loop runs twice, the tokens loop twice (7 tokens in
# tiles of 3), the last group of heads has a head row with no live head and the last tile
# two tokens past the sequence.  Every loop turn past the first waits for the shared rows
# to be read before it restages them.  Interleaved pairs stage nothing: the same blocks
# run them with no barrier.
_BARRIER_BLOCK = (2, 2, 3)
PAIRINGS = pytest.mark.parametrize("interleaved", [False, True], ids=["half", "interleaved"])


def _barrier_case(
    harness: Any, interleaved: bool
) -> tuple[list[np.ndarray], list[np.ndarray], list[Launch], Plan]:
    """(outputs, expected, launches, plan) of the geometry above, through the harness; the
    launches read the plan's arrays, positions and tables at their addresses, so a test
    that runs them again holds the plan."""
    rng = np.random.default_rng(27)
    dtype = _dtype("bfloat16")
    q = _data(rng, (2, 7, 3, 64), dtype)
    k = _data(rng, (2, 7, 2, 64), dtype)
    positions = rng.permutation(50)[:7].astype(np.int64)
    common = {"rotary_dim": 64, "interleaved": interleaved, "layout": "bshd"}
    plan = _plan(anyrope.RoPE(64, rotary_dim=64, interleaved=interleaved), (q, k), positions)
    launches: list[Launch] = []
    launcher = _harness_launcher(harness, launches, 2, _BARRIER_BLOCK)
    outputs = rotate_raw(plan, plan.arrays, launcher=launcher)
    expected = [_expected(x, positions, **common) for x in (q, k)]
    return list(outputs), expected, launches, plan


@PAIRINGS
def test_harness_block_threads_meet_at_every_barrier(harness: Any, interleaved: bool) -> None:
    # The harness runs a block's threads as fibers and fails a launch (5) in which they
    # do not all wait at the same barrier: threads without a live head or token, and
    # units past the row, take part in every barrier of the rotation.
    outputs, expected, launches, _ = _barrier_case(harness, interleaved)
    (launch,) = launches
    assert HEADS_PER_THREAD[2] == 2
    assert launch.args[30] == 5  # heads
    for y, want in zip(outputs, expected, strict=True):
        _assert_bits(y, want)


def test_harness_catches_a_thread_that_misses_a_barrier(harness: Any) -> None:
    # The fault the harness must catch: one thread of each block passes every barrier
    # (as a per-thread `continue` around the barrier would make it).
    _, _, (launch,), _plan_held = _barrier_case(harness, interleaved=False)
    assert _harness_run(harness, "bfloat16", _reshaped(launch, 2, _BARRIER_BLOCK), skip=1) == 5


def test_harness_catches_rows_read_before_they_are_staged(harness: Any) -> None:
    # Without the barrier after the staging, the harness (which runs the last thread of a
    # block first, over shared memory filled with NaN bytes) gives wrong bits: the head
    # rows read the table rows before the first head row has written them (NaN in a
    # block's first turn, the rows of the turn before in the others).
    outputs, expected, (launch,), _plan_held = _barrier_case(harness, interleaved=False)
    for y in outputs:
        y[...] = 0
    assert _harness_run(harness, "bfloat16", _reshaped(launch, 2, _BARRIER_BLOCK), skip=2) == 0
    assert any(np.isnan(y.astype(np.float32)).any() for y in outputs)
    for y, want in zip(outputs, expected, strict=True):
        with pytest.raises(AssertionError):
            _assert_bits(y, want)


@PAIRINGS
@pytest.mark.parametrize("rotary_dim", [16, 48, 64], ids=lambda r: f"rotary-{r}-of-64")
@pytest.mark.parametrize("block", [(3, 2, 2), (8, 1, 3)], ids=["3x2x2", "8x1x3"])
def test_harness_rotates_and_copies_in_any_block(
    harness: Any, interleaved: bool, rotary_dim: int, block: tuple[int, int, int]
) -> None:
    # The units of a row rotate, then copy past the rotated width (bfloat16, 4 units of 8
    # features each): in blocks whose units straddle both kinds, a tile and a group of
    # heads left part empty, at most 2 blocks per grid dimension, every feature must have
    # the bits of the array-API path, and every thread of a block meet at each barrier.
    rng = np.random.default_rng(rotary_dim + 7 * interleaved)
    dtype = _dtype("bfloat16")
    q = _data(rng, (2, 5, 3, 64), dtype)
    k = _data(rng, (2, 5, 2, 64), dtype)
    positions = rng.permutation(40)[:5].astype(np.int64)
    common = {"rotary_dim": rotary_dim, "interleaved": interleaved, "layout": "bshd"}
    outputs, (launch,) = _run(harness, (q, k), positions, grid_cap=2, block=block, **common)
    assert launch.args[31:33] == (rotary_dim // 2, rotary_dim // 16 + (64 - rotary_dim) // 16)
    for x, y in zip((q, k), outputs, strict=True):
        _assert_bits(y, _expected(x, positions, **common))


@PAIRINGS
@pytest.mark.parametrize(
    ("itemsize", "head_dim", "heads"),
    [(2, 128, 4), (2, 4096, 1), (4, 128, 4), (8, 8192, 1), (8, 64, 1)],
    ids=["bfloat16", "bfloat16-wide-head", "float32", "float64-wide-head", "float64-narrow"],
)
def test_rotation_launches_size_their_shared_memory(
    itemsize: int, head_dim: int, heads: int, interleaved: bool
) -> None:
    """A launch of half-split pairs stages V cos and V sin entries of the compute type per
    unit and token of its block (the units that copy past the rotated width too, whose
    rows no thread reads), within the 48 KiB a launch takes without opting in; a launch
    of interleaved pairs stages nothing."""
    q = _contiguous(4096, (2, 9, heads, head_dim))
    (launch,) = _bf16_launches(
        q,
        _contiguous(1 << 28, q.shape),
        None,
        None,
        rotary_dim=head_dim // 2,
        itemsize=itemsize,
        interleaved=interleaved,
    )
    table_itemsize = 8 if itemsize == 8 else 4
    per_unit = 0 if interleaved else 2 * launch.width * table_itemsize
    assert launch.shared == launch.block[0] * launch.block[2] * per_unit
    assert launch.shared <= 48 * 1024


@pytest.mark.parametrize("wide_index", [False, True], ids=["int32-index", "int64-index"])
@pytest.mark.parametrize("position_dtype", ["int32", "int64"])
@pytest.mark.parametrize("dtype_name", ["bfloat16", "float32", "float64"])
def test_harness_checks_positions_the_host_left_unread(
    harness: Any,
    dtype_name: str,
    position_dtype: str,
    wide_index: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # With max_positions, a position array on a GPU is not read on the host (that would
    # wait for the device): the kernel checks each value as it reads it. A value the
    # tables do not hold (negative, max_positions or beyond, or past 2**32, which a
    # 32-bit index would wrap into range) gives NaN in the rotated features of its
    # token; the copied tail and every other token keep the bits of the array-API path.
    from anyrope import _positions
    from anyrope._paths.cuda import dispatch as cuda_dispatch
    from anyrope._paths.cuda import geometry as cuda_geometry

    def never(*args: object) -> None:
        raise AssertionError("the positions were read on the host")

    monkeypatch.setattr(cuda_dispatch, "_templates", {})
    if wide_index:
        monkeypatch.setattr(cuda_geometry, "_INT32_LIMIT", 0)
    dtype = _dtype(dtype_name)
    rng = np.random.default_rng(zlib.crc32(f"unread-{dtype_name}-{position_dtype}".encode()))
    low, high = np.iinfo(position_dtype).min, np.iinfo(position_dtype).max
    positions = np.array([[0, 99, 100, -1], [5, high, 64, low]], dtype=position_dtype)
    if position_dtype == "int64":
        positions[1, 1] = 2**32 + 3
    held = (positions >= 0) & (positions < 100)
    q = _data(rng, (2, 4, 3, 48), dtype)
    k = _data(rng, (2, 4, 1, 48), dtype)
    common = {"rotary_dim": 32, "interleaved": False, "layout": "bshd"}
    in_range = np.where(held, positions, 0).astype(np.int64)
    expected = [_expected(x, in_range, **common) for x in (q, k)]
    monkeypatch.setattr(_positions, "waits_for_device", lambda values: True)
    monkeypatch.setattr(_positions, "_checked", never)

    outputs, launches = _run(harness, (q, k), positions, max_positions=100, **common)

    # One launch rotates and copies the features past rotary_dim.
    assert [launch.wide_index for launch in launches] == [wide_index]
    assert launches[0].args[8] == 100  # the rows a position may index
    for x, y, want in zip((q, k), outputs, expected, strict=True):
        _assert_bits(y[held], want[held])
        assert np.isnan(y[~held][..., :32].astype(np.float64)).all()
        _assert_bits(y[~held][..., 32:], x[~held][..., 32:])


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    case=st.fixed_dictionaries(
        {
            "dtype": st.sampled_from(["float16", "float32", "float64"]),
            "layout": st.sampled_from(["bshd", "bhsd", "sbhd"]),
            "interleaved": st.booleans(),
            "half": st.integers(1, 12),
            "extra": st.integers(0, 6),
            "batch": st.lists(st.integers(1, 3), max_size=2).map(tuple),
            "seq": st.integers(1, 9),
            "heads": st.tuples(st.integers(1, 4), st.integers(0, 3)),
            "positions": st.sampled_from(["none", "offset", "int32", "int64"]),
            "inverse": st.booleans(),
            "inplace": st.booleans(),
            "seed": st.integers(0, 2**16),
        }
    )
)
def test_harness_random_geometry(harness: Any, case: dict[str, Any]) -> None:
    rng = np.random.default_rng(case["seed"])
    layout, batch, seq = case["layout"], case["batch"], case["seq"]
    rotary_dim = 2 * case["half"]
    dim = rotary_dim + 2 * case["extra"]
    arrays = tuple(
        _data(rng, _shape(layout, batch, seq, h, dim), np.dtype(case["dtype"]))
        for h in case["heads"]
        if h > 0
    )
    positions: object = {
        "none": None,
        "offset": int(rng.integers(0, 10**6)),
        "int32": rng.integers(0, 10**4, size=seq).astype(np.int32),
        "int64": rng.integers(0, 10**9, size=(*batch, seq)).astype(np.int64),
    }[case["positions"]]
    common = {"rotary_dim": rotary_dim, "interleaved": case["interleaved"], "layout": layout}
    expected = [_expected(x, positions, inverse=case["inverse"], **common) for x in arrays]

    outputs, _ = _run(
        harness, arrays, positions, inverse=case["inverse"], inplace=case["inplace"], **common
    )

    for y, want in zip(outputs, expected, strict=True):
        _assert_bits(y, want)


def _special_values(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Any:
    """A random mix of subnormals, tiny normals (whose products with cos and sin are
    subnormal), zeros, infinities, NaN, the largest finite value and ordinary numbers."""
    uint = _UINT[dtype.itemsize]
    inf = int(np.array(np.inf, dtype).view(uint))
    normal = inf & -inf  # bits of the smallest normal number: exponent 1, mantissa 0
    size = int(np.prod(shape))
    pools = [
        rng.integers(1, normal, size),
        rng.integers(normal, 8 * normal, size),
        np.zeros(size, dtype=np.int64),
        rng.choice([inf, inf | (normal >> 1), inf - 1], size),
        _data(rng, (size,), dtype).view(uint),
    ]
    bits = np.choose(rng.integers(0, len(pools), size), [pool.astype(uint) for pool in pools])
    signs = rng.integers(0, 2, size).astype(uint) << uint(8 * dtype.itemsize - 1)
    return (bits ^ signs).view(dtype).reshape(shape)


def _nan_and_subnormal(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Masks of the NaNs and of the subnormals of ``x``, read from its bits."""
    uint = _UINT[x.dtype.itemsize]
    inf = int(np.array(np.inf, x.dtype).view(uint))
    magnitude = np.ascontiguousarray(x).view(uint) & uint(inf | (inf - 1))
    return magnitude > inf, (magnitude != 0) & (magnitude < (inf & -inf))


@pytest.mark.parametrize("inverse", [False, True], ids=["forward", "inverse"])
@pytest.mark.parametrize("interleaved", [False, True], ids=["half", "interleaved"])
@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16", "float32", "float64"])
def test_harness_keeps_subnormals_inf_and_nan(
    harness: Any, dtype_name: str, interleaved: bool, inverse: bool
) -> None:
    # numerical-contract.rst, "How every path computes" 3: no flush to zero, IEEE special values as
    # NumPy gives them.
    dtype = _dtype(dtype_name)
    rng = np.random.default_rng(
        zlib.crc32(f"special-{dtype_name}-{interleaved}-{inverse}".encode())
    )
    x = _special_values(rng, (2, 8, 3, 20), dtype)
    # Position 0 (cos 1, sin 0) sends subnormals through the arithmetic unchanged.
    positions = np.array([0, 1, 2, 3, 1000, 12345, 2**20, 7], dtype=np.int64)
    common = {"rotary_dim": 16, "interleaved": interleaved, "layout": "bshd", "inverse": inverse}
    with np.errstate(invalid="ignore", over="ignore"):  # inf * 0, inf - inf, overflow
        want = _expected(x, positions, **common)

    (got,), _ = _run(harness, (x,), positions, **common)

    nan_got, _ = _nan_and_subnormal(got)
    nan_want, subnormal_want = _nan_and_subnormal(want)
    np.testing.assert_array_equal(nan_got, nan_want)
    _assert_bits(np.where(nan_want, want, got), want)  # NaN payloads may differ
    # The rotated entries hold what the test is about, so it cannot pass vacuously (nor
    # in a process whose NumPy flushes subnormals too).
    rotated = want[..., :16]
    assert subnormal_want[..., :16].any()
    assert nan_want[..., :16].any()
    assert np.isinf(rotated.astype(np.float64)).any()
    assert (np.signbit(rotated.astype(np.float64)) & (rotated == 0)).any()


def test_autograd_function_through_the_harness(harness: Any) -> None:
    # The torch.autograd.Function of the CUDA path, with CPU tensors and the host harness
    # standing in for the device: forward and backward are launches of the same kernel.
    torch = pytest.importorskip("torch")
    from anyrope._paths.cuda.autograd import rotate_with_grad

    rope = anyrope.RoPE(16, rotary_dim=12, interleaved=True)
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 5, 3, 16, dtype=torch.float64, generator=gen, requires_grad=True)
    k = torch.randn(2, 5, 1, 16, dtype=torch.float64, generator=gen, requires_grad=True)
    positions = torch.tensor([3, 1, 4, 1, 5])
    launches: list[Launch] = []

    def rotated(q: Any, k: Any) -> Any:
        plan = _plan(rope, (q, k), positions)
        assert plan.requires_grad
        return rotate_with_grad(plan, launcher=_harness_launcher(harness, launches))

    want = anyrope.rotate_qk(
        q.detach(), k.detach(), positions, rotary_dim=12, interleaved=True, impl="array_api"
    )
    for got, expected in zip(rotated(q, k), want, strict=True):
        assert torch.equal(got.detach(), expected)
    assert torch.autograd.gradcheck(rotated, (q, k))
    grad = torch.randn(2, 5, 3, 16, dtype=torch.float64, generator=gen)
    (q_grad,) = torch.autograd.grad(rotated(q, k)[0], q, grad)
    undone = anyrope.rotate(grad, positions, rotary_dim=12, interleaved=True, inverse=True)
    assert torch.equal(q_grad, undone)
    assert launches


# Forward mode's first use in a process loads torch's own scripted decompositions.
@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("inplace", [False, True], ids=["out-of-place", "in-place"])
def test_forward_mode_and_torch_func_through_the_harness(harness: Any, inplace: bool) -> None:
    """Forward-mode autograd turns the tangents by the rotation (it dropped them silently
    on the paths that write through raw memory), and torch.func's transforms take the
    Function: grad and jvp, on the host harness standing in for the device."""
    torch = pytest.importorskip("torch")
    import torch.autograd.forward_ad as fwad

    from anyrope._paths.cuda.autograd import rotate_with_grad

    rope = anyrope.RoPE(16, rotary_dim=12, interleaved=True)
    gen = torch.Generator().manual_seed(2)
    q, dq = (torch.randn(2, 5, 3, 16, dtype=torch.float64, generator=gen) for _ in "qt")
    k, dk = (torch.randn(2, 5, 1, 16, dtype=torch.float64, generator=gen) for _ in "kt")
    positions = torch.tensor([3, 1, 4, 1, 5])
    launches: list[Launch] = []

    def rotated(q: Any, k: Any) -> Any:
        plan = _plan(rope, (q, k), positions, inplace=inplace)
        assert plan.requires_grad
        return rotate_with_grad(plan, launcher=_harness_launcher(harness, launches))

    want = rope(q, k, positions, impl="array_api")
    turned = rope(dq, dk, positions, impl="array_api")
    with fwad.dual_level():
        duals = rotated(
            fwad.make_dual(q.clone(), dq.clone()), fwad.make_dual(k.clone(), dk.clone())
        )
        for dual, primal, tangent in zip(duals, want, turned, strict=True):
            assert torch.equal(fwad.unpack_dual(dual).primal, primal)
            assert torch.equal(fwad.unpack_dual(dual).tangent, tangent)
    primals, tangents = torch.func.jvp(rotated, (q.clone(), k.clone()), (dq.clone(), dk.clone()))
    for got, expected in zip((*primals, *tangents), (*want, *turned), strict=True):
        assert torch.equal(got, expected)
    if not inplace:  # torch.func.grad refuses to write into its input
        grad = torch.func.grad(lambda q: (rotated(q, k)[0] * dq).sum())(q)
        undone = rope.rotate(dq, positions, inverse=True, impl="array_api")
        assert torch.equal(grad, undone)
    assert launches


@pytest.mark.parametrize("inverse", [False, True], ids=["forward", "inverse"])
def test_autograd_is_the_adjoint_twice_with_an_attention_factor(
    harness: Any, inverse: bool
) -> None:
    """With ``a != 1`` (YaRN) the backward is the transpose, not the inverse: ``a R(-t)``
    of a forward call, ``R(t) / a`` of an inverse one; and it is differentiable again."""
    torch = pytest.importorskip("torch")
    from anyrope._paths.cuda.autograd import rotate_with_grad

    rope = anyrope.RoPE(
        16, scaling={"rope_type": "yarn", "factor": 4.0}, max_position_embeddings=64
    )
    assert rope.attention_factor != 1.0
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(1, 4, 2, 16, dtype=torch.float64, generator=gen, requires_grad=True)
    positions = torch.tensor([9, 2, 7, 5])
    launches: list[Launch] = []

    def rotated(q: Any) -> Any:
        plan = _plan(rope, (q,), positions, inverse=inverse)
        return rotate_with_grad(plan, launcher=_harness_launcher(harness, launches))[0]

    expected = rope.rotate(q.detach(), positions, inverse=inverse, impl="array_api")
    assert torch.equal(rotated(q).detach(), expected)
    g = torch.randn(1, 4, 2, 16, dtype=torch.float64, generator=gen)
    (back,) = torch.autograd.grad(rotated(q), q, g)
    x = q.detach()
    # <M x, g> == <x, M^T g>
    assert torch.allclose((rotated(x) * g).sum(), (x * back).sum(), rtol=1e-13, atol=0)
    assert torch.autograd.gradcheck(rotated, (q,))
    assert torch.autograd.gradgradcheck(rotated, (q,))


@pytest.fixture
def torch_as_cuda(monkeypatch: pytest.MonkeyPatch) -> list[Launch]:
    """torch CPU tensors taken by the CUDA path as if they were on a GPU (reading their
    values would wait for it); the launches are recorded, not run."""
    pytest.importorskip("torch")
    from anyrope import _positions
    from anyrope._paths import cuda
    from anyrope._paths.cuda import dispatch as cuda_dispatch

    launches: list[Launch] = []
    monkeypatch.setattr(cuda, "cuda_array", lambda x: True)
    monkeypatch.setattr(cuda, "_cupy_installed", lambda: True)
    monkeypatch.setattr(cuda, "unusable", lambda device_id: None)
    monkeypatch.setattr(cuda, "_device_id", lambda x: 0)
    monkeypatch.setattr(_positions, "waits_for_device", lambda values: True)
    monkeypatch.setattr(
        cuda_dispatch, "launch_on_device", lambda first, name, call, tables: launches.extend(call)
    )
    return launches


def _host_reads(call: Any) -> list[str]:
    """The torch operations of ``call`` that bring a value to the host (on a GPU, each
    waits for the device)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    reads: list[str] = []

    class Reads(TorchDispatchMode):
        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            if func.__name__.startswith("_local_scalar_dense"):
                reads.append(str(func))
            return func(*args, **(kwargs or {}))

    with Reads():
        call()
    return reads


def test_device_positions_stay_unread_with_max_positions(torch_as_cuda: list[Launch]) -> None:
    # A decode step with one position per sequence: with max_positions the CUDA path
    # never reads the positions (no device synchronisation; a CUDA graph can capture
    # it), and the kernel gets the bound it checks them against. Without it, the
    # positions are read and range-checked on the host, which this test sees.
    import torch

    q = torch.zeros(4, 1, 8, 64, dtype=torch.bfloat16)
    k = torch.zeros(4, 1, 2, 64, dtype=torch.bfloat16)
    positions = torch.tensor([[7], [300], [4095], [12]])
    ahead = anyrope.RoPE(64, max_positions=4096)
    plain = anyrope.RoPE(64)

    for _ in range(2):  # the first call plans, the second reuses the plan
        assert _host_reads(lambda: ahead(q, k, positions, impl="cuda")) == []
    assert [launch.args[8] for launch in torch_as_cuda] == [4096, 4096]
    assert torch_as_cuda[-1].args[6] == positions.data_ptr()
    assert _host_reads(lambda: plain(q, k, positions, impl="cuda")) != []


def test_unread_positions_are_gathered_in_the_graph_by_the_reference(
    torch_as_cuda: list[Launch],
) -> None:
    # With max_positions the array-API path reads no position on the host either (a
    # CUDA graph can capture it): it gathers the rows on the device, with the bits of
    # positions read on the host, and NaN for a token outside the tables, as the
    # kernel gives. The paths that index tables on the host's word refuse the call.
    import torch

    x = torch.randn(2, 3, 4, 32, dtype=torch.float32, generator=torch.Generator().manual_seed(0))
    positions = torch.tensor([[1, 5000, 9], [0, 2, -3]])
    ahead = anyrope.RoPE(32, max_positions=1024)
    inside = torch.tensor([[1, 0, 9], [0, 2, 0]])
    want = anyrope.RoPE(32).rotate(x, inside, impl="array_api")
    for _ in range(2):  # the first call plans, the second reuses the plan
        assert _host_reads(lambda: ahead.rotate(x, positions, impl="array_api")) == []
    got = ahead.rotate(x, positions, impl="array_api")
    outside = torch.tensor([[False, True, False], [False, False, True]])
    assert torch.equal(got[~outside], want[~outside])
    assert got[outside].isnan().all()
    with pytest.raises(ValueError, match="leaves unread"):
        ahead.rotate(x, positions, impl="blocked")
    assert torch_as_cuda == []


def _kernel_path_on_the_harness(
    harness: Any, monkeypatch: pytest.MonkeyPatch, tables_read: list[Any] | None = None
) -> list[Launch]:
    """The CUDA path taking NumPy arrays as device arrays, its launches (listed in the list
    returned) run by the host harness (see :func:`_harness_launcher`)."""
    from anyrope._paths import cuda

    launches: list[Launch] = []
    monkeypatch.setattr(cuda, "cuda_array", lambda x: True)
    monkeypatch.setattr(cuda, "_cupy_installed", lambda: True)
    monkeypatch.setattr(cuda, "unusable", lambda device_id: None)
    monkeypatch.setattr(cuda, "_device_id", lambda x: 0)
    launcher = _harness_launcher(harness, launches, tables_read=tables_read)
    monkeypatch.setattr(cuda.dispatch, "launch_on_device", launcher)
    return launches


def _planned_calls(monkeypatch: pytest.MonkeyPatch, rope: anyrope.RoPE) -> list[object]:
    """The positions of each call of ``rope`` that the pipeline plans (a new plan, or a
    kept plan made for new arrays), listed as they come."""
    from anyrope import _pipeline
    from anyrope._plan import Plan

    planned: list[object] = []
    make_plan, for_call = _pipeline.make_plan, Plan.for_call

    def made(source: Any, call: Any, **geometry: Any) -> Any:
        if source is rope._source:
            planned.append(call.positions)
        return make_plan(source, call, **geometry)

    def again(plan: Any, arrays: Any, positions: object, source: Any, form: str) -> Any:
        if source is rope._source:
            planned.append(positions)
        return for_call(plan, arrays, positions, source, form)

    monkeypatch.setattr(_pipeline, "make_plan", made)
    monkeypatch.setattr(Plan, "for_call", again)
    return planned


@pytest.mark.parametrize("rotary_dim", [32, 24], ids=["full", "partial"])
def test_a_decode_step_binds_its_addresses_only(
    harness: Any, monkeypatch: pytest.MonkeyPatch, rotary_dim: int
) -> None:
    # The host time of a decode step: after its first call, a geometry's launches are
    # bound to the tables of its last call (anyrope._paths.binder), so a step whose rows
    # those tables hold plans nothing (no plan for the call, no table lookup, no
    # templates); the step past their rows plans in full and binds the grown tables.
    # Every step gives the bits of the array-API path.
    launches = _kernel_path_on_the_harness(harness, monkeypatch)
    rope = anyrope.RoPE(32, rotary_dim=rotary_dim)
    planned = _planned_calls(monkeypatch, rope)
    rng = np.random.default_rng(8)
    reference = anyrope.RoPE(32, rotary_dim=rotary_dim)
    steps = [0, 1, 2, 254, 255, 256, 257, 511, 512]  # the tables hold 256 rows, then 512, ...
    for step in steps:
        q = _data(rng, (2, 1, 4, 32), np.dtype(np.float32))
        k = _data(rng, (2, 1, 2, 32), np.dtype(np.float32))
        wanted = reference(q, k, step, impl="array_api")
        for y, want in zip(rope(q, k, step, impl="cuda"), wanted, strict=True):
            _assert_bits(y, want)
        x = _data(rng, (3, 2, 32), np.dtype(np.float32))
        want = reference.rotate(x, step, impl="array_api")
        _assert_bits(rope.rotate(x, step, impl="cuda"), want)
    assert planned[:2] == [0, 0]  # the first call of each geometry (q and k, then x)
    # Past the rows of its tables, each geometry once: x (3 tokens) at 254 and 511, q
    # and k (1 token) at 256 and 512.
    assert planned[2:] == [254, 256, 511, 512]
    assert len(launches) == len(steps) * 2  # one launch a call, partial rotary too
    # A 0-d position array is an offset read on the host: planned at every call.
    del planned[:]
    for step in (7, 8):
        wanted = reference(q, k, step, impl="array_api")
        for y, want in zip(rope(q, k, np.asarray(step), impl="cuda"), wanted, strict=True):
            _assert_bits(y, want)
    assert [int(p) for p in planned] == [7, 8]
    # Errors still name what was received: a call that the bound launches do not serve
    # is planned, and checked, in full.
    with pytest.raises(ValueError, match="offset must be non-negative; got -1"):
        rope(q, k, -1, impl="cuda")
    with pytest.raises(ValueError, match="exceeds 2\\*\\*53"):
        rope(q, k, 2**53, impl="cuda")


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    case=st.fixed_dictionaries(
        {
            "layout": st.sampled_from(["bshd", "bhsd", "sbhd"]),
            "interleaved": st.booleans(),
            "rotary_dim": st.sampled_from([16, 12, 6]),
            "seq": st.integers(1, 3),
            "heads": st.tuples(st.integers(1, 3), st.integers(1, 2)),
            "steps": st.lists(st.integers(0, 600), min_size=2, max_size=5),
        }
    )
)
def test_bound_steps_give_the_bits_of_the_array_api_path(
    harness: Any, monkeypatch: pytest.MonkeyPatch, case: dict[str, Any]
) -> None:
    # Any layout, pairing, width and walk of offsets (back, forth, past the tables' rows,
    # into windows): the steps that run the bound launches give the array-API bits.
    _kernel_path_on_the_harness(harness, monkeypatch)
    layout, seq, steps = case["layout"], case["seq"], case["steps"]
    options = {"rotary_dim": case["rotary_dim"], "interleaved": case["interleaved"]}
    rope, reference = anyrope.RoPE(16, **options), anyrope.RoPE(16, **options)
    rng = np.random.default_rng(len(steps))
    shapes = {"bshd": (2, seq, 0, 16), "bhsd": (2, 0, seq, 16), "sbhd": (seq, 2, 0, 16)}
    for step in steps:
        q, k = (
            _data(rng, tuple(n or h for n in shapes[layout]), np.dtype(np.float32))
            for h in case["heads"]
        )
        wanted = reference(q, k, step, layout=layout, impl="array_api")
        for y, want in zip(rope(q, k, step, layout=layout, impl="cuda"), wanted, strict=True):
            _assert_bits(y, want)


@pytest.mark.parametrize("config", EDITED_CONFIGS, ids=[c.name for c in EDITED_CONFIGS])
def test_the_kernels_that_bench_gpu_launch_edits_give_the_same_bits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: Any
) -> None:
    # benchmarks/bench_gpu_launch.py times kernels edited from the shipped one on a GPU:
    # built from the same edits, the host harness gives the array-API bits with each, for
    # every pairing, vector width and partial width. (Edits of what the host does not
    # compile, a load's scope or the launch bounds, leave its code as shipped.)
    header = (_module.source_dir() / "rope_math.cuh").read_text()
    kernel_dir = tmp_path / "kernel"
    kernel_dir.mkdir()
    (kernel_dir / "rope_math.cuh").write_text(
        bench_gpu_launch.edited(header, tuple(e for e in config.edits if e[0] in header))
    )
    launches = _kernel_path_on_the_harness(_build_harness(tmp_path, kernel_dir), monkeypatch)
    rng = np.random.default_rng(5)
    for dtype_name, interleaved, rotary_dim, layout in itertools.product(
        ("float16", "bfloat16", "float32", "float64"),
        (True, False),
        (32, 24, 12),
        ("bshd", "bhsd", "sbhd"),
    ):
        dtype = _dtype(dtype_name)
        rope = anyrope.RoPE(32, rotary_dim=rotary_dim, interleaved=interleaved)
        q = _data(rng, _shape(layout, (2,), 3, 5, 32), dtype)
        k = _data(rng, _shape(layout, (2,), 3, 3, 32), dtype)
        for inverse in (False, True):
            wanted = rope(q, k, 7, layout=layout, inverse=inverse, impl="array_api")
            got = rope(q, k, 7, layout=layout, inverse=inverse, impl="cuda")
            for y, want in zip(got, wanted, strict=True):
                _assert_bits(y, want)
    # Every vector width of interleaved pairs ran (16-bit: 8, 4 and 2 pairs an access).
    assert {launch.width for launch in launches if launch.interleaved} >= {8, 4, 2}


def test_a_bound_decode_step_in_place_tells_autograd(
    harness: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # rotate_qkv in place rotates q and k as one view: bound too, its writes still bump
    # the tensor's version counter at every step (see test_inplace_on_torch_tells_autograd).
    torch = pytest.importorskip("torch")

    _kernel_path_on_the_harness(harness, monkeypatch)
    rope = anyrope.RoPE(16)
    planned = _planned_calls(monkeypatch, rope)
    gen = torch.Generator().manual_seed(3)
    qkv = torch.randn(2, 1, 4 + 2 * 2, 16, dtype=torch.float32, generator=gen)
    for step in range(4):
        want = anyrope.RoPE(16).rotate_qkv(qkv, step, num_heads_q=4, impl="array_api")
        version = qkv._version
        assert rope.rotate_qkv(qkv, step, num_heads_q=4, inplace=True, impl="cuda") is qkv
        assert torch.equal(qkv, want)
        assert qkv._version > version
    assert planned == [0]  # the first step: a plan of the view of q and k


def test_binding_a_call_allocates_nothing(harness: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Binding plans the launches from the call just run, without outputs of its own: a
    # prefill's first call must not hold a second set of outputs the size of its inputs.
    from anyrope._paths.cuda import dispatch as cuda_dispatch

    _kernel_path_on_the_harness(harness, monkeypatch)
    made: list[int] = []
    empty_like = cuda_dispatch._empty_like

    def counted(arrays: Any, xp: Any) -> Any:
        made.append(len(arrays))
        return empty_like(arrays, xp)

    monkeypatch.setattr(cuda_dispatch, "_empty_like", counted)
    rng = np.random.default_rng(4)
    rope = anyrope.RoPE(32)
    for step in (0, 1, 300):  # planned and bound, bound, planned past the rows and bound
        q = _data(rng, (2, 1, 4, 32), np.dtype(np.float32))
        k = _data(rng, (2, 1, 2, 32), np.dtype(np.float32))
        wanted = anyrope.RoPE(32)(q, k, step, impl="array_api")
        for y, want in zip(rope(q, k, step, impl="cuda"), wanted, strict=True):
            _assert_bits(y, want)
    assert made == [2, 2, 2]  # one pair of outputs a call


def test_a_bound_decode_step_reads_each_calls_positions(
    harness: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A positions array left unread on the host (a GPU's, with max_positions) is read by
    # the kernel at each call: the bound launches take the address of each call's array,
    # and a position outside the tables gives NaN, as the first call does.
    from anyrope import _positions

    _kernel_path_on_the_harness(harness, monkeypatch)
    monkeypatch.setattr(_positions, "waits_for_device", lambda values: True)
    rope = anyrope.RoPE(32, max_positions=64)
    planned = _planned_calls(monkeypatch, rope)
    rng = np.random.default_rng(9)
    for rows in ([1, 5], [7, 63], [64, 2], [0, 0]):
        positions = np.array(rows, dtype=np.int64)[:, None]  # a new array each step
        q = _data(rng, (2, 1, 4, 32), np.dtype(np.float32))
        k = _data(rng, (2, 1, 2, 32), np.dtype(np.float32))
        wanted = anyrope.RoPE(32)(q, k, np.minimum(positions, 63), impl="array_api")
        for y, want in zip(rope(q, k, positions, impl="cuda"), wanted, strict=True):
            held = (positions < 64)[:, 0]
            _assert_bits(y[held], want[held])
            assert np.isnan(y[~held]).all()
    assert len(planned) == 1  # the first step; the others bind their addresses only


def test_harness_through_the_pipeline_as_the_tables_change(
    harness: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Calls of one geometry reuse their plan, launch templates and tables (Plan.memo):
    # a table that grows or is cleared between them must be looked up again, and every
    # call must give the bits of the array-API path.
    cos_tables: list[Any] = []  # the cos table each call read, kept (so no address is reused)
    launches = _kernel_path_on_the_harness(harness, monkeypatch, tables_read=cos_tables)
    rng = np.random.default_rng(5)
    rope = anyrope.RoPE(32, rotary_dim=24)
    reference = anyrope.RoPE(32, rotary_dim=24)
    # A call at the end of the tables grows them; one far beyond reads a window.
    for positions in [3, 200, 256, "clear", 17, 256, 5, 70000]:
        if positions == "clear":
            rope.clear_cache()
            continue
        q = _data(rng, (2, 1, 4, 32), np.dtype(np.float32))
        k = _data(rng, (2, 1, 2, 32), np.dtype(np.float32))
        before = len(launches)
        got = rope(q, k, positions, impl="cuda")
        assert len(launches) == before + 1  # the rotation and the copy past rotary_dim
        for y, want in zip(got, reference(q, k, positions, impl="array_api"), strict=True):
            _assert_bits(y, want)
        assert launches[before].args[4] == cos_tables[-1].__array_interface__["data"][0]
    first, same, grown, cleared, grown_again, last, window = cos_tables
    assert first is same is not grown  # kept, then grown for 256
    assert cleared is not grown  # after clear_cache, new tables (the old ones are not read)
    assert grown_again is not cleared  # grown for 256 again
    assert last is grown_again
    assert window is not last  # rows from 70000 on, not tables grown to 2**17 rows


def test_inplace_on_torch_tells_autograd(harness: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Raw pointers bypass torch's version counter: a tensor that autograd saved (here q,
    # for the gradient of w) and that the kernel then rotates in place must make
    # backward fail loudly, as any in-place torch operation would, not give wrong grads.
    torch = pytest.importorskip("torch")

    from anyrope._paths import cuda as cuda_path
    from anyrope._paths.cuda import dispatch as cuda_dispatch

    monkeypatch.setattr(cuda_dispatch, "launch_on_device", _harness_launcher(harness, []))
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(16, 16, dtype=torch.float64, generator=gen, requires_grad=True)
    q = torch.randn(2, 5, 3, 16, dtype=torch.float64, generator=gen)
    want = anyrope.rotate(q, 7, impl="array_api")
    loss = (q @ w).sum()
    rope = anyrope.RoPE(16)

    (y,) = cuda_path.run(_plan(rope, (q,), 7, inplace=True))

    assert y is q
    assert torch.equal(q, want)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()
    with torch.inference_mode():
        x = torch.randn(2, 5, 3, 16, dtype=torch.float64, generator=gen)
        want = anyrope.rotate(x, 7, impl="array_api")
        cuda_path.run(_plan(rope, (x,), 7, inplace=True))
        assert torch.equal(x, want)


def test_inplace_refuses_a_broadcast_view(harness: Any) -> None:
    row = _data(np.random.default_rng(0), (1, 1, 2, 8), np.dtype(np.float32))
    x = np.broadcast_to(row, (1, 4, 2, 8))
    with pytest.raises(ValueError, match="writable"):
        _run(harness, (x,), None, rotary_dim=8, interleaved=False, layout="bshd", inplace=True)


# -- the planner on its own -------------------------------------------------------------


def plan_launches(
    *operands: Operand | None,
    positions: Operand | None,
    offset: int,
    table_rows: int = 1,
    **options: Any,
) -> list[Launch]:
    """The launch templates bound to the operands' addresses, as a call binds them."""
    given = [op for op in operands if op is not None]
    templates = launch_templates(given, positions=positions, table_rows=table_rows, **options)
    io = [op.ptr for op in given] + [0] * (4 - len(given))
    if positions is not None:
        return [t.bind(io, positions.ptr, 0) for t in templates]
    return [t.bind(io, 0, offset) for t in templates]


def _contiguous(ptr: int, shape: tuple[int, ...]) -> Operand:
    strides = [1]
    for n in reversed(shape[1:]):
        strides.insert(0, strides[0] * n)
    return Operand(ptr, shape, tuple(strides))


def _bf16_launches(
    q_in: Operand,
    q_out: Operand,
    k_in: Operand | None,
    k_out: Operand | None,
    *,
    rotary_dim: int,
    itemsize: int = 2,
    interleaved: bool = False,
) -> list[Launch]:
    """The launches of a bshd call (bfloat16 unless ``itemsize`` says otherwise) at offset
    0, tables at 512 and 1024."""
    return plan_launches(
        q_in,
        q_out,
        k_in,
        k_out,
        layout="bshd",
        itemsize=itemsize,
        rotary_dim=rotary_dim,
        interleaved=interleaved,
        inverse=False,
        inplace=False,
        positions=None,
        position_itemsize=0,
        offset=0,
        cos_ptr=512,
        sin_ptr=1024,
        table_rows=4096,
    )


@pytest.mark.parametrize(
    ("itemsize", "interleaved", "per_thread"),
    [(2, False, 2), (4, False, 4), (8, False, 4), (2, True, 2), (4, True, 4), (8, True, 1)],
    ids=[
        "16-bit",
        "float32",
        "float64",
        "16-bit-interleaved",
        "float32-interleaved",
        "float64-interleaved",
    ],
)
def test_a_thread_rotates_several_heads_of_one_token(
    itemsize: int, interleaved: bool, per_thread: int
) -> None:
    """The threads of a launch cover each (token, unit) once for every ``per_thread``
    heads: the table rows of a token are read once for that many heads (the launch
    model of docs/performance.rst). The harness tests check that every head is rotated."""
    q = _contiguous(4096, (4, 16, 32, 128))
    (launch,) = _bf16_launches(
        q,
        _contiguous(1 << 24, q.shape),
        None,
        None,
        rotary_dim=128,
        itemsize=itemsize,
        interleaved=interleaved,
    )
    assert (INTERLEAVED_HEADS_PER_THREAD if interleaved else HEADS_PER_THREAD)[
        itemsize
    ] == per_thread
    units = 64 // launch.width
    threads = math.prod(launch.block) * math.prod(launch.grid)
    assert launch.block[0] == units
    assert threads == 4 * 16 * units * 32 // per_thread


@pytest.mark.parametrize(
    ("rotary_dim", "units"), [(64, 4 + 4), (32, 2 + 6), (96, 6 + 2), (16, 1 + 7), (128, 8)]
)
def test_partial_rotary_is_one_launch(rotary_dim: int, units: int) -> None:
    """One launch reads and writes each row whole: the units of a row rotate 8 pairs each
    (bfloat16, 16-byte accesses), then copy 16 features past the rotated width each, in
    the same instructions (rope_unit), so that the threads of a warp cover the row's 256
    bytes together."""
    q = _contiguous(4096, (2, 7, 8, 128))
    (launch,) = _bf16_launches(q, _contiguous(2 << 20, q.shape), None, None, rotary_dim=rotary_dim)
    assert launch.width == 8
    assert launch.args[31:33] == (rotary_dim // 2, units)  # half, units of a row
    assert launch.args[:2] == (4096, 2 << 20)  # rows from their first feature
    assert launch.block[0] == units


def test_plan_packs_q_and_k_into_one_launch() -> None:
    q = _contiguous(4096, (2, 7, 8, 128))
    k = _contiguous(1 << 20, (2, 7, 2, 128))
    (launch,) = _bf16_launches(
        q, _contiguous(2 << 20, q.shape), k, _contiguous(3 << 20, k.shape), rotary_dim=128
    )
    assert launch.width == 8
    assert not launch.wide_index
    # The parameter buffer: seven 8-byte pointers, 26 int32 (the offset, the rows and
    # the geometry), the position size and `inverse`; the driver reads it whole.
    assert len(launch.params) == 7 * 8 + 28 * 4
    assert len(launch.args) == 35
    assert struct.unpack_from("<7Q", launch.params) == launch.args[:7]
    assert struct.unpack_from("<28i", launch.params, 56) == launch.args[7:]
    assert launch.args[:7] == (4096, 2 << 20, 1 << 20, 3 << 20, 512, 1024, 0)
    assert launch.args[7:9] == (0, 4096)  # the table offset and rows
    # batch 2, seq 7, 8 q heads of 10, 64 pairs in 8 units of 8, no tail.
    assert launch.args[27:33] == (2, 7, 8, 10, 64, 8)
    # A block holds whole rows: 8 units x 5 threads of HEADS_PER_THREAD (2) heads x 6
    # tokens; the grid covers the rest.
    assert HEADS_PER_THREAD[2] == 2
    assert launch.block == (8, 5, 6)
    assert launch.grid == (2, 2, 1)


def test_plan_in_place_leaves_the_tail_alone() -> None:
    q = _contiguous(4096, (3, 4, 64))
    (launch,) = plan_launches(
        q,
        q,
        None,
        None,
        layout="bshd",
        itemsize=4,
        rotary_dim=32,
        interleaved=True,
        inverse=True,
        inplace=True,
        positions=None,
        position_itemsize=0,
        offset=5,
        cos_ptr=512,
        sin_ptr=1024,
    )
    assert launch.args[7] == 5  # offset
    assert launch.args[32] == 16 // 4  # units: the rotated ones only, no copies
    assert launch.args[30] == launch.args[29] == 4  # heads: q's only
    assert launch.args[-1] == 1


def test_plan_vectors_need_aligned_tables() -> None:
    # The vector variants read cos/sin rows with vector loads too: a table that is not
    # aligned for them must get a narrower variant, never a misaligned vector load.
    q = _contiguous(4096, (3, 4, 64))
    common: dict[str, Any] = {
        "layout": "bshd",
        "itemsize": 4,
        "rotary_dim": 64,
        "interleaved": False,
        "inverse": False,
        "inplace": True,
        "positions": None,
        "position_itemsize": 0,
        "offset": 0,
    }
    (aligned,) = plan_launches(q, q, None, None, cos_ptr=512, sin_ptr=1024, **common)
    (shifted_cos,) = plan_launches(q, q, None, None, cos_ptr=516, sin_ptr=1024, **common)
    (shifted_sin,) = plan_launches(q, q, None, None, cos_ptr=512, sin_ptr=1032, **common)
    # float32 tables are read 4 x 4 bytes for 16-byte x accesses, 2 x 4 for 8-byte ones.
    assert aligned.width == 4
    assert shifted_cos.width == 1
    assert shifted_sin.width == 2


def test_plan_rejects_unknown_layout() -> None:
    q = _contiguous(4096, (3, 4, 64))
    with pytest.raises(ValueError, match="layout"):
        plan_launches(
            q,
            q,
            None,
            None,
            layout="bsdh",
            itemsize=4,
            rotary_dim=32,
            interleaved=False,
            inverse=False,
            inplace=True,
            positions=None,
            position_itemsize=0,
            offset=0,
            cos_ptr=0,
            sin_ptr=0,
        )


def test_kernel_source_ships_with_the_package() -> None:
    assert (_module.source_dir() / "rope.cu").is_file()
    assert (_module.source_dir() / "rope_math.cuh").is_file()
    assert "--fmad=false" in _module.COMPILE_OPTIONS


def test_kernel_source_inlines_the_header() -> None:
    # CuPy's on-disk cache keys a binary on the source text and the options, not on the
    # files the source includes: the header must be part of the text CuPy is given, or an
    # upgrade that changes only rope_math.cuh would keep running the old kernel.
    source = _module.kernel_source()
    header = (_module.source_dir() / "rope_math.cuh").read_text(encoding="utf-8")
    assert '#include "rope_math.cuh"' not in source
    assert header.split("#pragma once\n", 1)[1] in source
    assert "anyrope_rope(ANYROPE_PARAMS" in source


class _FakeKernel(NamedTuple):
    """A ``RawKernel`` as the fake CuPy makes it: its device and name; ``kernel.ptr``
    stands for its ``CUfunction``."""

    device: int
    name: str

    @property
    def kernel(self) -> Any:
        return types.SimpleNamespace(ptr=hash((self.device, self.name)) & 0xFFFF_FFFF)


def _device_of_cupy(current: list[int]) -> Any:
    """A stand-in for ``cupy.cuda.Device``: entered, its id is last in ``current``."""

    class Device:
        def __init__(self, device_id: int) -> None:
            self.id = device_id

        def __enter__(self) -> None:
            current.append(self.id)

        def __exit__(self, *exc: object) -> None:
            current.pop()

    return Device


def test_cupy_outputs_are_made_on_the_device_of_the_arrays(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # CuPy allocates on its current device, and array-api-compat's `empty` drops its
    # `device=`: arrays on device 1 while device 0 is current would get their outputs on
    # device 0, written by a kernel launched on device 1.
    from anyrope._paths.cuda import dispatch as cuda_dispatch

    current = [0]

    Device = _device_of_cupy(current)

    made: list[tuple[tuple[int, ...], int]] = []

    def empty(shape: tuple[int, ...], *, dtype: Any) -> tuple[int, ...]:
        made.append((shape, current[-1]))
        return shape

    fake = types.ModuleType("cupy")
    fake.ndarray = type("ndarray", (), {"__module__": "cupy"})  # type: ignore[attr-defined]
    fake.empty = empty  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cupy", fake)
    arrays = []
    for shape in ((2, 1, 4, 8), (2, 1, 2, 8)):
        x = fake.ndarray()
        x.shape, x.dtype, x.device = shape, np.dtype(np.float32), Device(1)
        arrays.append(x)

    # `xp`, array-api-compat's namespace, allocates as CuPy's `empty` does.
    outputs = cuda_dispatch._empty_like(tuple(arrays), types.SimpleNamespace(empty=empty))
    assert outputs == ((2, 1, 4, 8), (2, 1, 2, 8))
    assert made == [((2, 1, 4, 8), 1), ((2, 1, 2, 8), 1)]
    assert current == [0]


class _FakeCupy:
    """Just enough of CuPy for ``_module.get_kernel``: records compilations and devices."""

    def __init__(self) -> None:
        self.compiled: list[tuple[int, tuple[str, ...]]] = []
        self.lookups: list[tuple[int, str]] = []
        self.device_stack: list[int] = []
        self.lock = threading.Lock()
        fake = self

        class Device:
            def __init__(self, device_id: int) -> None:
                self.device_id = device_id

            def __enter__(self) -> None:
                fake.device_stack.append(self.device_id)

            def __exit__(self, *exc: object) -> None:
                fake.device_stack.pop()

        class RawModule:
            def __init__(self, *, code: str, options: tuple[str, ...], name_expressions: Any):
                assert code == _module.kernel_source()
                assert set(_module.COMPILE_OPTIONS) <= set(options)
                self.names = list(name_expressions)

            def compile(self) -> None:
                time.sleep(0.01)  # widen the window for a second thread to race in
                with fake.lock:
                    fake.compiled.append((fake.device_stack[-1], tuple(self.names)))

            def get_function(self, name: str) -> _FakeKernel:
                assert name in self.names
                with fake.lock:
                    fake.lookups.append((fake.device_stack[-1], name))
                return _FakeKernel(fake.device_stack[-1], name)

        self.cuda = types.SimpleNamespace(Device=Device)
        self.RawModule = RawModule


def test_kernels_compile_once_per_device_and_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _FakeCupy()
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(_module, "_kernels", {})
    monkeypatch.setattr(_module, "_pointers", {})
    variants = [
        (device, dtype, width, interleaved, wide)
        for device in (0, 1)
        for dtype in ("float16", "float32")
        for width in _module.vector_widths(2 if dtype == "float16" else 4)
        for interleaved in (False, True)
        for wide in (False, True)
    ]

    def fetch(variant: tuple[int, str, int, bool, bool]) -> Any:
        device, dtype, width, interleaved, wide = variant
        return _module.get_kernel(
            device, dtype, width=width, interleaved=interleaved, wide_index=wide
        )

    with ThreadPoolExecutor(8) as pool:
        first = list(pool.map(fetch, variants * 4))
    again = [fetch(v) for v in variants]

    assert sorted(device for device, _ in fake.compiled) == [0, 0, 1, 1]
    assert all(
        names == tuple(_module.kernel_names("float16"))
        or names == tuple(_module.kernel_names("float32"))
        for _, names in fake.compiled
    )
    # Every kernel is looked up once, on its own device, and then served from the cache.
    assert len(fake.lookups) == len(variants)
    for variant, kernel in zip(variants, again, strict=True):
        device, dtype, width, interleaved, wide = variant
        name = _module.kernel_name(dtype, width=width, interleaved=interleaved, wide_index=wide)
        assert kernel == (device, name)
        pointer = _module.kernel_pointer(
            device, dtype, width=width, interleaved=interleaved, wide_index=wide
        )
        assert pointer == kernel.kernel.ptr
    assert first == again * 4
    assert len(fake.compiled) == 4  # the pointers came with the kernels


@pytest.mark.parametrize("raw_getter", [True, False], ids=["raw-stream-getter", "no-raw-getter"])
def test_torch_tables_are_recorded_once_per_stream(
    monkeypatch: pytest.MonkeyPatch, raw_getter: bool
) -> None:
    # Decode steps through the whole CUDA path on torch, only the driver call stubbed:
    # each launch goes to the current stream, whose handle alone is looked up per call
    # where torch has the raw getter; the tables are recorded once per stream (torch's
    # caching allocator waits for every stream a block was recorded on, so once is
    # enough), again on a new stream and for new tables, never per call.
    torch = pytest.importorskip("torch")
    from anyrope import _positions
    from anyrope._paths import cuda
    from anyrope._paths.cuda import dispatch as cuda_dispatch

    current = types.SimpleNamespace(stream=types.SimpleNamespace(cuda_stream=11))
    made: list[int] = []  # a torch.cuda.Stream made, by handle
    recorded: list[tuple[int, int]] = []  # (table address, stream handle)
    launched_on: list[int] = []

    def current_stream(device: int) -> Any:
        made.append(current.stream.cuda_stream)
        return current.stream

    def launch_kernel(function: int, *dims_and_more: int) -> None:
        launched_on.append(dims_and_more[7])

    fake = types.ModuleType("cupy")
    fake.ndarray = type("ndarray", (), {})  # type: ignore[attr-defined]
    fake.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
        Device=lambda device_id: contextlib.nullcontext(),
        driver=types.SimpleNamespace(launchKernel=launch_kernel),
    )
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(cuda, "cuda_array", lambda x: True)
    monkeypatch.setattr(cuda, "_cupy_installed", lambda: True)
    monkeypatch.setattr(cuda, "unusable", lambda device_id: None)
    monkeypatch.setattr(cuda, "_device_id", lambda x: 0)
    monkeypatch.setattr(_positions, "waits_for_device", lambda values: True)
    monkeypatch.setattr(_module, "kernel_pointer", lambda *args, **kwargs: 1)
    monkeypatch.setattr(cuda_dispatch, "_recorded", {}, raising=False)
    monkeypatch.setattr(torch.cuda, "current_stream", current_stream)
    if raw_getter:
        monkeypatch.setattr(
            torch._C,
            "_cuda_getCurrentRawStream",
            lambda device: current.stream.cuda_stream,
            raising=False,
        )
    else:
        monkeypatch.delattr(torch._C, "_cuda_getCurrentRawStream", raising=False)
    monkeypatch.setattr(
        torch.Tensor,
        "record_stream",
        lambda self, on: recorded.append((self.data_ptr(), on.cuda_stream)),
    )
    q = torch.zeros(4, 1, 8, 64, dtype=torch.bfloat16)
    k = torch.zeros(4, 1, 2, 64, dtype=torch.bfloat16)
    rope = anyrope.RoPE(64)

    def decode(steps: int, stream: int) -> list[tuple[int, int]]:
        current.stream = types.SimpleNamespace(cuda_stream=stream)
        before, made[:] = len(recorded), []
        for _ in range(steps):
            rope(q, k, positions=1000, impl="cuda")
        assert launched_on[-steps:] == [stream] * steps
        return recorded[before:]

    first = decode(50, 11)
    assert len(first) == 2  # cos and sin, once
    assert {on for _, on in first} == {11}
    assert made == ([11] if raw_getter else [11] * 51)
    assert [on for _, on in decode(10, 12)] == [12, 12]  # a stream of its own
    assert made == ([12] if raw_getter else [12] * 11)
    assert decode(10, 11) == []  # stream 11 has these tables already
    assert made == ([] if raw_getter else [11] * 10)
    rope.clear_cache()
    again = decode(3, 11)  # new tables
    assert [on for _, on in again] == [11, 11]
    assert {table for table, _ in again}.isdisjoint(table for table, _ in first)


def test_two_threads_bind_one_template_each_to_its_own_buffer() -> None:
    # A launch's buffer (cuLaunchKernel's `extra` list, then the parameters) is made per
    # call: threads that launch the same template at once never see each other's
    # addresses, and each `extra` list points into its own buffer.
    from anyrope._paths.cuda.geometry import HEADER

    (template,) = launch_templates(
        [_contiguous(1 << 20, (2, 1, 4, 64)), _contiguous(1 << 21, (2, 1, 4, 64))],
        layout="bshd",
        itemsize=4,
        rotary_dim=64,
        interleaved=False,
        inverse=False,
        inplace=False,
        positions=None,
        position_itemsize=0,
        cos_ptr=1 << 22,
        sin_ptr=1 << 23,
        table_rows=100,
    )

    def bind(i: int) -> tuple[int, Launch]:
        return i, template.bind((i << 12, (i << 12) + 2048, 0, 0), 0, i)

    with ThreadPoolExecutor(4) as pool:
        bound = list(pool.map(bind, range(400)))
    for i, launch in bound:
        at = ctypes.addressof(launch.buffer)
        assert struct.unpack_from("<6Q", launch.buffer) == (
            1,
            at + HEADER,
            2,
            at + 40,
            0,
            len(launch.params),
        )
        assert launch.args[:4] == (i << 12, (i << 12) + 2048, 0, 0)
        assert launch.args[4:7] == (1 << 22, 1 << 23, 0)
        assert launch.args[7] == i  # the table offset


def test_host_time_benchmark_runs_both_trees_and_refuses_without_a_gpu(tmp_path: Path) -> None:
    # benchmarks/bench_cuda_host_gpu.py, the lead's one command on a GPU: without one it
    # says so in one line; with --stub it times two trees (here the same one twice) in
    # workers of their own, on the CPU, and writes every median.
    pytest.importorskip("torch")
    script = Path(__file__).parents[1] / "benchmarks" / "bench_cuda_host_gpu.py"
    src = str(Path(anyrope.__file__).parents[1])
    refused = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, check=False
    )
    if "no CUDA GPU" in refused.stdout:
        assert refused.returncode == 2
        assert refused.stdout.count("\n") == 1
    report = tmp_path / "host.json"
    options = ["--stub", "--before", src, "--after", src, "--rounds", "1", "--calls", "3"]
    done = subprocess.run(
        [sys.executable, str(script), *options, "--json", str(report)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "after/before" in done.stdout
    medians = json.loads(report.read_text())["median_us"]
    lines = (
        "torch offset",
        "torch tensor, max_positions",
        "launch planning",
        "outputs and launch",
        "torch q.add_(1)",
    )
    assert set(medians) == {f"{tree}: {line}" for tree in ("before", "after") for line in lines}
    assert all(us > 0 for us in medians.values())


@pytest.mark.parametrize(
    "calls",
    [
        ([[0, 1, 2], [5, 6, 7]], [[4, 5, 6], [4, 5, 6]]),
        ([[0, 1, 2], [5, 6, 7]], [[254, 255, 256], [254, 255, 256]], [[10, 20, 30], [40, 50, 60]]),
    ],
    ids=["array-then-range", "range-then-array"],
)
def test_calls_of_one_geometry_with_an_array_or_a_range_take_their_own_launches(
    harness: Any, monkeypatch: pytest.MonkeyPatch, calls: tuple[list[list[int]], ...]
) -> None:
    # After the first call of a geometry, a positions array whose rows hold one range is
    # planned as an offset, and any other values as an array. The launches planned for one
    # must not serve the other: an array's read the positions at a null pointer, a range's
    # ignored the array (each row rotated by 0 .. seq-1).
    from anyrope._paths import cuda

    run = _harness_launcher(harness, [])

    def launcher(x: Any, name: str, call: Sequence[Launch], tables: tuple[Any, Any]) -> None:
        for launch in call:
            # ANYROPE_PARAMS: pos (6), pos_size (33). Checked before the harness runs it:
            # there a position read at a null pointer ends the process.
            assert launch.args[6] != 0 or launch.args[33] == 0, "positions read at address 0"
        run(x, name, call, tables)

    _kernel_path_on_the_harness(harness, monkeypatch)
    monkeypatch.setattr(cuda.dispatch, "launch_on_device", launcher)
    rng = np.random.default_rng(0)
    q = _data(rng, (2, 3, 4, 32), np.dtype(np.float32))
    k = _data(rng, (2, 3, 2, 32), np.dtype(np.float32))
    rope, reference = anyrope.RoPE(32), anyrope.RoPE(32)
    for values in calls:
        positions = np.array(values, dtype=np.int64)
        got = rope(q, k, positions, impl="cuda")
        for y, want in zip(got, reference(q, k, positions, impl="array_api"), strict=True):
            _assert_bits(y, want)


@pytest.mark.parametrize("axis", [1, 2], ids=["seq", "heads"])
def test_an_axis_of_size_one_with_a_stride_past_int32_is_planned(
    harness: Any, monkeypatch: pytest.MonkeyPatch, axis: int
) -> None:
    # Its index is always 0, so its stride is never used: the 32-bit variant serves, and
    # the stride (which packing as int32 refused) is passed as 0.
    launches = _kernel_path_on_the_harness(harness, monkeypatch)
    shape = [2, 3, 4, 64]
    shape[axis] = 1
    rng = np.random.default_rng(1)
    x = _data(rng, tuple(shape), np.dtype(np.float32))
    strides = list(x.strides)
    strides[axis] = 2**31 * x.itemsize
    view = np.lib.stride_tricks.as_strided(x, shape=x.shape, strides=strides)
    rope = anyrope.RoPE(64)
    _assert_bits(rope.rotate(view, 9, impl="cuda"), rope.rotate(x, 9, impl="array_api"))
    assert not launches[-1].wide_index


@pytest.mark.parametrize("capturing", [False, True], ids=["eager", "capturing"])
def test_cupy_tables_are_whole_before_any_stream_reads_them(
    monkeypatch: pytest.MonkeyPatch, capturing: bool
) -> None:
    # CuPy copies host tables on the device's current stream; a launch on another stream
    # could read them before the copy lands. The copy's stream is waited for, on the
    # tables' device, unless it is being captured (a wait would end the capture).
    from anyrope._namespace import from_host

    current = [0]
    waited: list[int] = []

    Device = _device_of_cupy(current)

    class Stream:
        def is_capturing(self) -> bool:
            return capturing

        def synchronize(self) -> None:
            waited.append(current[-1])

    fake = types.ModuleType("cupy")
    fake.ndarray = type("ndarray", (), {"__module__": "cupy"})  # type: ignore[attr-defined]
    fake.cuda = types.SimpleNamespace(get_current_stream=Stream)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cupy", fake)

    def asarray(values: Any, *, device: Any) -> Any:
        x = fake.ndarray()
        x.device = device
        return x

    table = from_host(np.zeros(4), types.SimpleNamespace(asarray=asarray), Device(1))
    assert table.device.id == 1
    assert waited == ([] if capturing else [1])
    assert current == [0]
