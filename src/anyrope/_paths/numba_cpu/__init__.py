"""The compiled CPU path: NumPy arrays and PyTorch CPU tensors, through a numba kernel.

The kernel (:mod:`.kernels`) reads each element once and writes it once, converting
float16 and bfloat16 exactly in registers, so a rotation costs about what a copy of the
same bytes does, for every dtype. It needs the optional ``numba`` dependency
(``pip install numba``); without it, ``impl="auto"`` takes the blocked path.

The inputs are seen as (n0, n1, n2, head_dim) arrays of their own memory (NumPy views
of torch tensors, half types as 16-bit integers); each (n0, n1, n2) row reads one row of
the cos/sin tables, found by ``first + a*t0 + b*t1 + c*t2``. Large inputs are split
between threads (:mod:`anyrope._threads`) along n0*n1.
"""

from __future__ import annotations

import functools
import importlib.util
import itertools
from typing import Any

import numpy as np

from ... import _threads
from ..._cpu_memory import STORAGE_DTYPES, empty_like, host_rejects
from ..._namespace import Array
from ..._plan import Plan
from ..._torch import bump_versions, numpy_view

NAME = "numba"
CHECKS_POSITIONS = False
TABLES = "host rows"

PARALLEL_ELEMENTS = 1 << 21
"""Inputs of more rotated elements than this are split between threads; below it, a
thread's start-up costs more than it saves."""


@functools.cache
def installed() -> bool:
    """Whether numba can be imported (looked up once, without importing it)."""
    return importlib.util.find_spec("numba") is not None


def rejects(plan: Plan) -> str | None:
    """NumPy arrays and PyTorch CPU tensors without autograd, when numba is installed."""
    if not installed():
        return "needs numba, which is not installed (pip install numba)"
    return host_rejects(plan.library, plan.device, plan.requires_grad)


@functools.cache
def _kernels() -> Any:
    """The kernels module, imported (with numba) on first use."""
    from . import kernels

    return kernels


def run(plan: Plan) -> tuple[Array, ...]:
    """Rotate each array of ``plan`` into a new array, or into itself in place."""
    kernels = _kernels()
    kernel = kernels.rotate_in_place if plan.inplace else kernels.rotate
    cos, sin, first, strides = _tables(plan)
    results = []
    for x in plan.arrays:
        out = x if plan.inplace else empty_like(x)
        xv = held = _storage_view(x, plan)
        if xv.strides[-1] != xv.itemsize:  # the kernels read rows of unit stride
            xv = np.ascontiguousarray(xv)
        # What the kernel writes into besides x: nothing in place, else out.
        outv = () if plan.inplace else (_storage_view(out, plan),)
        if xv.ndim == 4:
            _launch(kernel, (xv, *outv, cos, sin, (first, *strides)), plan)
        elif xv.ndim == 3:
            # (seq, heads, head_dim): a leading axis of one, which reads no other row.
            outv = outv and (outv[0][None],)
            _launch(kernel, (xv[None], *outv, cos, sin, (first, 0, *strides)), plan)
        else:
            # Axes beyond four: a Python loop over the outermost ones (rare shapes).
            outer = xv.ndim - 4
            for index in itertools.product(*(range(n) for n in xv.shape[:outer])):
                offset = first + sum(i * t for i, t in zip(index, strides, strict=False))
                part = outv and (outv[0][index],)
                _launch(kernel, (xv[index], *part, cos, sin, (offset, *strides[outer:])), plan)
        if xv is not held and plan.inplace:
            held[...] = xv
        results.append(out)
    if plan.inplace and plan.library == "torch":
        # Written through NumPy views: autograd must still see the tensors change.
        bump_versions(plan.arrays)
    return tuple(results)


def _launch(kernel: Any, operands: tuple[Any, ...], plan: Plan) -> None:
    """``kernel`` over ``operands`` (x, out unless in place, cos, sin and rows; the arrays
    (n0, n1, n2, head_dim)), split between threads when large."""
    x, sin = operands[0], operands[-2]
    units = x.shape[0] * x.shape[1]
    small = units * x.shape[2] * sin.shape[1] * 2 <= PARALLEL_ELEMENTS
    workers = 1 if small else min(_threads.workers(plan.library), units)
    if workers <= 1:
        kernel(*operands, plan.interleaved, 0, units)
        return
    step = -(-units // workers)
    share = functools.partial(kernel, *operands, plan.interleaved)
    # The kernel releases the GIL: the shares run at once, the first on this thread.
    others = [
        _threads.executor().submit(share, start, min(start + step, units))
        for start in range(step, units, step)
    ]
    share(0, step)
    for other in others:
        other.result()


def _tables(plan: Plan) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], int, tuple[int, ...]]:
    """cos/sin as 2-D NumPy tables, and how the inputs' leading axes pick their rows:
    ``(cos, sin, first, strides)``, one stride (in rows) per leading axis of the inputs.

    For ``inverse=True`` the sines are negated: rotation by -angle, exact
    (numerical-contract.rst, "How every path computes" 4, The inverse).
    """
    axes = plan.axes
    cos, sin, index, first = plan.tables
    if index is None:
        if plan.inverse:
            # Only the rows this call reads, not the whole cached table.
            used = slice(first, first + plan.where[0].seq)
            cos, sin, first = cos[used], -sin[used], 0
        return cos, sin, first, _seq_strides(axes.layout, len(axes.batch) + 2)
    # The rows of each token, taken by NumPy with no call through the caller's library
    # (a decode step with position_ids pays two takes).
    flat = index.reshape(-1)
    cos, sin = cos.take(flat, axis=0), sin.take(flat, axis=0)
    return cos, (-sin if plan.inverse else sin), 0, _index_strides(index.shape, axes.layout)


def _storage_view(x: Array, plan: Plan) -> np.ndarray[Any, Any]:
    """The memory of ``x`` as the kernel reads it: NumPy, half types as 16-bit integers."""
    if plan.library == "torch":
        return numpy_view(x)
    if plan.dtype in ("float32", "float64"):
        return x  # type: ignore[no-any-return]
    return x.view(STORAGE_DTYPES[plan.dtype])  # type: ignore[no-any-return]


def _index_strides(shape: tuple[int, ...], layout: str) -> tuple[int, ...]:
    """Row strides of rows gathered for positions of ``shape`` ``(*batch', seq')`` (each
    axis full or 1), in C order: 0 along size-1 axes and the heads axis."""
    strides = []
    step = 1
    for n in reversed(shape):
        strides.append(0 if n == 1 else step)
        step *= n
    *batch, seq = reversed(strides)
    if layout == "bshd":
        return (*batch, seq, 0)
    if layout == "bhsd":
        return (*batch, 0, seq)
    return (seq, *batch, 0)


@functools.cache
def _seq_strides(layout: str, lead: int) -> tuple[int, ...]:
    """Row strides of consecutive positions: 1 along the sequence axis, 0 elsewhere (those
    of a gathered sequence, of any length above one, for ``lead`` axes)."""
    return _index_strides((*(1,) * (lead - 2), 2), layout)
