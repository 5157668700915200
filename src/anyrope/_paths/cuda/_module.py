"""Compile ``rope.cu`` once per (device, dtype) with CuPy and cache its kernels.

The single helper for loading the kernel: everything CUDA-side goes through
:func:`get_kernel`. CuPy is imported only when a kernel is first needed.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from ... import _threads
from .geometry import HEADS_PER_THREAD, INTERLEAVED_HEADS_PER_THREAD

__all__ = [
    "COMPILE_OPTIONS",
    "INDEX_TYPES",
    "KERNEL_TYPES",
    "get_kernel",
    "kernel_name",
    "kernel_names",
    "kernel_pointer",
    "kernel_source",
    "source_dir",
    "vector_widths",
]

#: C++ element type of the kernel for each supported dtype name.
KERNEL_TYPES: dict[str, str] = {
    "float16": "__half",
    "bfloat16": "__nv_bfloat16",
    "float32": "float",
    "float64": "double",
}

_ITEMSIZE: dict[str, int] = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}

#: C++ index type of the kernel: 32-bit when every offset of a launch fits, else 64-bit.
INDEX_TYPES: dict[bool, str] = {False: "int", True: "long long"}

#: ``--fmad=false`` is the contract of numerical-contract.rst, "How every path computes" 3 (no FMA
#: contraction). The
#: float32 arithmetic is inline PTX with explicit rounding, never contracted and never
#: flushed to zero by the ``-ftz=true`` that CuPy appends to these options. The heads per
#: thread are the host's, which sizes the grid by them.
COMPILE_OPTIONS: tuple[str, ...] = (
    "--std=c++17",
    "--fmad=false",
    *(f"-DANYROPE_HEADS_PER_THREAD_{size}={n}" for size, n in HEADS_PER_THREAD.items()),
    *(
        f"-DANYROPE_INTERLEAVED_HEADS_PER_THREAD_{size}={n}"
        for size, n in INTERLEAVED_HEADS_PER_THREAD.items()
    ),
)


def vector_widths(itemsize: int) -> tuple[int, ...]:
    """Pairs per work unit of each variant for elements of ``itemsize`` bytes, widest first.

    16-, 8- and 4-byte accesses of x where they hold two elements or more, then 1, the
    scalar variant (any strides and alignment).
    """
    return (*(size // itemsize for size in (16, 8, 4) if size // itemsize >= 2), 1)


def kernel_name(dtype_name: str, *, width: int, interleaved: bool, wide_index: bool) -> str:
    """The template instantiation of ``anyrope_rope`` for one variant."""
    if width not in vector_widths(_ITEMSIZE[dtype_name]):
        raise ValueError(f"no variant of width {width} for {dtype_name}")
    return (
        f"anyrope_rope<{KERNEL_TYPES[dtype_name]}, {width}, "
        f"{'true' if interleaved else 'false'}, {INDEX_TYPES[wide_index]}>"
    )


def _variants(dtype_name: str) -> list[tuple[int, bool, bool]]:
    """(width, interleaved, wide index) of every variant compiled for a dtype."""
    return [
        (width, interleaved, wide)
        for width in vector_widths(_ITEMSIZE[dtype_name])
        for interleaved in (False, True)
        for wide in (False, True)
    ]


def kernel_names(dtype_name: str) -> list[str]:
    """Every variant compiled for one dtype: width x pair layout x index type."""
    return [
        kernel_name(dtype_name, width=width, interleaved=interleaved, wide_index=wide)
        for width, interleaved, wide in _variants(dtype_name)
    ]


def source_dir() -> Path:
    """The package directory holding ``rope.cu`` and ``rope_math.cuh`` (package data)."""
    return Path(__file__).resolve().parent


@functools.cache
def kernel_source() -> str:
    """The text CuPy compiles: ``rope.cu`` with ``rope_math.cuh`` written in place.

    CuPy's on-disk cache keys a binary on this text and the options, never on the files
    it includes; with the header inlined, any change to the kernel is a new key.
    """
    header = (source_dir() / "rope_math.cuh").read_text(encoding="utf-8")
    # `#pragma once` only means something in an included file.
    header = header.replace("#pragma once\n", "", 1)
    source = (source_dir() / "rope.cu").read_text(encoding="utf-8")
    include = '#include "rope_math.cuh"\n'
    if include not in source:
        raise RuntimeError(f"rope.cu no longer includes rope_math.cuh as {include!r}")
    return source.replace(include, header, 1)


_lock = _threads.lock()
#: (device, dtype name, width, interleaved, wide index) -> ``cupy.RawKernel``.
_kernels: dict[tuple[int, str, int, bool, bool], Any] = {}
#: The same keys -> the kernel's ``CUfunction`` on that device, which calls launch.
_pointers: dict[tuple[int, str, int, bool, bool], int] = {}


def get_kernel(
    device_id: int,
    dtype_name: str,
    *,
    width: int,
    interleaved: bool,
    wide_index: bool,
) -> Any:
    """The compiled ``cupy.RawKernel`` of one variant on ``device_id``.

    All variants of a dtype are compiled together the first time that dtype is used on
    that device; CuPy's on-disk cache makes later processes skip the compilation. The
    kernels are kept, so a call after the first is one dictionary lookup (CuPy's
    ``RawModule.get_function`` builds a new ``RawKernel`` and looks the function up in
    the driver each time it is called).
    """
    return _compiled(_kernels, (device_id, dtype_name, width, interleaved, wide_index))


def kernel_pointer(
    device_id: int, dtype_name: str, width: int, interleaved: bool, wide_index: bool
) -> int:
    """The ``CUfunction`` of one variant on ``device_id``, for ``cuLaunchKernel``
    (compiled as :func:`get_kernel` compiles it; asked once per launch, so the arguments
    may come positionally, and a known one is one lookup)."""
    key = (device_id, dtype_name, width, interleaved, wide_index)
    return _pointers.get(key) or _compiled(_pointers, key)


def _compiled(table: dict[tuple[int, str, int, bool, bool], Any], key: Any) -> Any:
    """``table[key]``, compiling the key's dtype on its device first if need be."""
    found = table.get(key)
    if found is not None:
        return found
    with _lock:
        if key not in table:
            _compile(key[0], key[1])
        return table[key]


def _compile(device_id: int, dtype_name: str) -> None:
    """Compile every variant of ``dtype_name`` on ``device_id`` into ``_kernels`` (lock held)."""
    import cupy

    # CuPy adds the CUDA headers itself (CUDA_PATH, or the cudart wheel's include folder).
    with cupy.cuda.Device(device_id):
        module = cupy.RawModule(
            code=kernel_source(),
            options=COMPILE_OPTIONS,
            name_expressions=kernel_names(dtype_name),
        )
        module.compile()
        # Looked up on the kernel's own device: CuPy loads a module per current device.
        for (width, interleaved, wide), name in zip(
            _variants(dtype_name), kernel_names(dtype_name), strict=True
        ):
            kernel = module.get_function(name)
            _kernels[device_id, dtype_name, width, interleaved, wide] = kernel
            _pointers[device_id, dtype_name, width, interleaved, wide] = int(kernel.kernel.ptr)
