"""Compile ``rope.cu`` once per (device, dtype) with CuPy and cache the module.

The single helper for loading the kernel: everything CUDA-side goes through
:func:`get_kernel`. CuPy is imported only when a kernel is first needed.
"""

from __future__ import annotations

import functools
import os
import threading
from pathlib import Path
from typing import Any

__all__ = [
    "COMPILE_OPTIONS",
    "KERNEL_TYPES",
    "POSITION_TYPES",
    "get_kernel",
    "kernel_name",
    "kernel_names",
    "kernel_source",
    "source_dir",
    "vector_width",
]

#: C++ element type of the kernel for each supported dtype name.
KERNEL_TYPES: dict[str, str] = {
    "float16": "__half",
    "bfloat16": "__nv_bfloat16",
    "float32": "float",
    "float64": "double",
}

_ITEMSIZE: dict[str, int] = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}

#: C++ type of the positions for each integer itemsize.
POSITION_TYPES: dict[int, str] = {4: "int", 8: "long long"}

#: ``--fmad=false`` is the contract of numerics.md section 3 (no FMA contraction); the
#: arithmetic also uses the ``__f*_rn`` intrinsics, which are never contracted.
COMPILE_OPTIONS: tuple[str, ...] = ("--std=c++17", "--fmad=false")


def vector_width(dtype_name: str) -> int:
    """Pairs per work unit of the 16-byte vector variant for ``dtype_name``."""
    return 16 // _ITEMSIZE[dtype_name]


def kernel_name(dtype_name: str, *, vector: bool, interleaved: bool, position_itemsize: int) -> str:
    """The template instantiation of ``anyrope_rope`` for one variant."""
    width = vector_width(dtype_name) if vector else 1
    return (
        f"anyrope_rope<{KERNEL_TYPES[dtype_name]}, {width}, "
        f"{'true' if interleaved else 'false'}, {POSITION_TYPES[position_itemsize]}>"
    )


def kernel_names(dtype_name: str) -> list[str]:
    """Every variant compiled for one dtype: vector/scalar x pair layout x position type."""
    return [
        kernel_name(dtype_name, vector=vector, interleaved=interleaved, position_itemsize=size)
        for vector in (True, False)
        for interleaved in (False, True)
        for size in sorted(POSITION_TYPES)
    ]


def source_dir() -> Path:
    """The package directory holding ``rope.cu`` and ``rope_math.cuh`` (package data)."""
    return Path(__file__).resolve().parent


@functools.cache
def kernel_source() -> str:
    """The text of ``rope.cu``."""
    return (source_dir() / "rope.cu").read_text(encoding="utf-8")


def _include_options(cupy: Any) -> tuple[str, ...]:
    options = [f"-I{source_dir()}"]
    # NVRTC ships cuda_fp16.h / cuda_bf16.h built in since CUDA 12; older toolkits need the
    # toolkit's include directory.
    cuda_path = cupy.cuda.get_cuda_path()
    if cuda_path:
        include = os.path.join(cuda_path, "include")
        if os.path.isdir(include):
            options.append(f"-I{include}")
    return tuple(options)


_lock = threading.Lock()
_modules: dict[tuple[int, str], Any] = {}


def get_kernel(
    device_id: int,
    dtype_name: str,
    *,
    vector: bool,
    interleaved: bool,
    position_itemsize: int,
) -> Any:
    """The compiled ``cupy.RawKernel`` of one variant on ``device_id``.

    All variants of a dtype are compiled together the first time that dtype is used on
    that device; CuPy's on-disk cache makes later processes skip the compilation.
    """
    key = (device_id, dtype_name)
    with _lock:
        module = _modules.get(key)
        if module is None:
            import cupy

            with cupy.cuda.Device(device_id):
                module = cupy.RawModule(
                    code=kernel_source(),
                    options=(*COMPILE_OPTIONS, *_include_options(cupy)),
                    name_expressions=kernel_names(dtype_name),
                )
                module.compile()
            _modules[key] = module
    return module.get_function(
        kernel_name(
            dtype_name,
            vector=vector,
            interleaved=interleaved,
            position_itemsize=position_itemsize,
        )
    )
