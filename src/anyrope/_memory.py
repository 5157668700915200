"""Where an array's elements lie in memory: for refusing in-place writes that would
read an element after writing it (broadcast views, ``q`` and ``k`` sharing memory).

Only addresses, shapes and strides are looked at, for NumPy, PyTorch and CuPy alike;
no element is read and no library is imported.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any

import array_api_compat
import numpy as np
from numpy.lib.stride_tricks import as_strided

from ._namespace import Array


@dataclass(frozen=True)
class Extent:
    """An array's first byte address, shape, byte strides and item size."""

    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    itemsize: int


def extent(x: Array) -> Extent | None:
    """The memory layout of ``x``, or ``None`` for a library that does not expose one."""
    if array_api_compat.is_torch_array(x):
        # Inside torch.func.grad or jvp the tensor is a wrapper without memory of its
        # own; its writes land in the tensor it wraps.
        functorch = sys.modules["torch"]._C._functorch
        while functorch.is_functorch_wrapped_tensor(x):
            x = functorch.get_unwrapped(x)
        size = int(x.element_size())
        return Extent(
            int(x.data_ptr()), tuple(x.shape), tuple(int(s) * size for s in x.stride()), size
        )
    numpy = isinstance(x, np.ndarray)
    if numpy or array_api_compat.is_cupy_array(x):
        ptr = x.__array_interface__["data"][0] if numpy else x.data.ptr
        return Extent(int(ptr), tuple(x.shape), tuple(x.strides), int(x.dtype.itemsize))
    return None


def has_internal_overlap(e: Extent) -> bool:
    """Whether two elements of one array may share memory (a broadcast or strided view).

    Sufficient test: walking the axes from the smallest stride up, each stride must step
    over everything the smaller axes span. Arrays that fail it and still do not overlap
    need ``as_strided`` tricks; refusing them in place is the safe answer.
    """
    if math.prod(e.shape) <= 1:
        return False
    span = e.itemsize
    # Axes of equal strides overlap whichever comes first.
    for stride, size in sorted(
        (abs(s), n) for n, s in zip(e.shape, e.strides, strict=True) if n > 1
    ):
        if stride < span:
            return True
        span = stride * (size - 1) + span
    return False


def may_overlap(a: Extent, b: Extent) -> bool:
    """Whether two arrays share at least one byte, decided exactly from their layouts.

    ``numpy.shares_memory`` solves the question from the pointers and strides of two
    views without reading their memory, so zero-size-backed views with these layouts
    stand in for arrays of any library.
    """
    if math.prod(a.shape) == 0 or math.prod(b.shape) == 0:
        return False
    low = min(a.ptr, b.ptr)
    # Views of one 1-byte buffer that claim the layouts of a and b, offset from the lower
    # address: only their addresses are compared, their bytes are never read.
    anchor = as_strided(np.zeros(1, np.uint8), (max(a.ptr, b.ptr) - low + 1,), (1,))
    view_a, view_b = [
        as_strided(anchor[e.ptr - low :], (*e.shape, e.itemsize), (*e.strides, 1)) for e in (a, b)
    ]
    try:
        # numpy's stubs allow only -1 and 0, but any bound on the work is accepted.
        work: Any = 10**6
        return bool(np.shares_memory(view_a, view_b, max_work=work))
    except np.exceptions.TooHardError:
        return True
