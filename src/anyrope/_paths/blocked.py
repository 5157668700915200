"""The blocked path: NumPy arrays and PyTorch CPU tensors, read and written once.

With the tables widened over every rotated feature (:func:`anyrope._tables.widen`), the
rotation is ``y = x * [c, c] + swap(x) * [-s, s]`` (half-split; interleaved alike): two
products and a sum, which give the bits of
:func:`~anyrope._paths.rotation.rotate_pair` because ``x1 * (-s)`` is exactly
``-(x1 * s)`` and ``a + (-b)`` is exactly ``a - b`` in IEEE 754.

A small input (a decode step) is computed whole on the calling thread in three
operations. A large one is walked in blocks small enough to stay in cache, on every
core, each product written into a reused scratch buffer and the sum straight into the
output, so memory is read and written about once instead of the six passes of the
array expression. torch float32/float64 tensors are computed by NumPy on views of their
memory (NumPy's loops cost far less per call than PyTorch's); torch float16/bfloat16
with torch's own operations (NumPy has no bfloat16 and converts float16 slowly).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import _threads
from .._cpu_memory import empty_like, host_rejects
from .._namespace import Array
from .._plan import Plan
from .._torch import bump_versions, numpy_view
from .rotation import halves

NAME = "blocked"
CHECKS_POSITIONS = False
TABLES = "host wide"

BLOCK_ELEMENTS = 1 << 17
"""Elements per block: each worker's two float32 scratch buffers (512 KiB each) and the
block's input and output stay in the L2/L3 caches. On a 2-core EPYC, 2**16 to 2**19
measured the same; smaller blocks pay Python's per-call overhead."""

TORCH_BLOCK_ELEMENTS = 1 << 14
"""Smaller for PyTorch: below its intra-op grain size (32768), so each operation stays on
the calling thread and PyTorch's own threads do not compete with ours."""

WHOLE_ELEMENTS = BLOCK_ELEMENTS
"""Inputs up to this many rotated elements (one block: a decode step) are computed whole,
in three operations on the calling thread; larger ones are split between the cores (on
two cores, handing half of one block to the pool cost more than it saved)."""

TORCH_WHOLE_ELEMENTS = 1 << 21
"""The same for torch's operations, which torch spreads over its threads."""

VIEW_ELEMENTS = 1 << 15
"""torch float32/float64 inputs up to this size (a decode step) are computed by NumPy on
views of their memory: NumPy's calls cost less than torch's on small arrays."""


def rejects(plan: Plan) -> str | None:
    """Only NumPy arrays and PyTorch CPU tensors, and no autograd."""
    return host_rejects(plan.library, plan.device, plan.requires_grad)


# inf * 0 is NaN and a huge pair may overflow: IEEE results the contract keeps
# (numerical-contract.rst, "What is identical, and what is not"), not something to warn about on
# NumPy and not elsewhere.
@np.errstate(invalid="ignore", over="ignore")
def run(plan: Plan) -> tuple[Array, ...]:
    """Rotate each array of ``plan`` into a new array, or into itself in place."""
    torch = plan.library == "torch"
    r, interleaved = plan.rotary_dim, plan.interleaved
    # torch float16/bfloat16 always, and float32/float64 between a decode step and a
    # block's worth per core, are computed by torch's operations (over its threads);
    # otherwise NumPy computes, on views of the tensors' memory.
    torch_ops = torch and (
        plan.dtype in ("float16", "bfloat16")
        or VIEW_ELEMENTS
        < max(math.prod((*x.shape[:-1], r)) for x in plan.arrays)
        <= TORCH_WHOLE_ELEMENTS
    )
    # Tables with the two elements of each pair as an axis of their own (`split`),
    # shaped to broadcast against the input split likewise.
    split = (r // 2, 2) if interleaved else (2, r // 2)
    ops = _torch_ops() if torch_ops else _NUMPY
    # Slicing and indexing NumPy's tables cost less than torch's; torch then views them.
    pairs = plan.tables[:2]
    if torch_ops:
        pairs = (ops.library.from_numpy(pairs[0]), ops.library.from_numpy(pairs[1]))
    if plan.inverse:
        pairs = (pairs[0], -pairs[1])
    results = []
    for x in plan.arrays:
        out = x if plan.inplace else empty_like(x)
        xv, outv = x, out
        if torch and not torch_ops:
            xv = numpy_view(x)
            outv = xv if plan.inplace else numpy_view(out)
        if x.shape[-1] == r:
            rotated, rotated_out = xv, outv
        else:
            rotated, rotated_out = xv[..., :r], outv[..., :r]
        if math.prod(rotated.shape) <= ops.whole_elements:
            # Three operations over the whole input: for the small arrays of a decode step.
            xr = rotated.reshape((*rotated.shape[:-1], *split))
            first = xr * pairs[0]
            second = ops.swap(xr, interleaved) * pairs[1]
            # Both products are read before out (which may be x) is written.
            ops.add_into(first, second, rotated_out, xr.shape)
        else:
            wide_cos, wide_sin = (p.reshape((*p.shape[:-2], r)) for p in pairs)
            _rotate_blocks(xv, wide_cos, wide_sin, outv, r, interleaved, ops, plan.library)
        if out is not x and r < x.shape[-1]:
            outv[..., r:] = xv[..., r:]
        results.append(out)
    if torch and plan.inplace:
        # Written through NumPy views, or by out= operations: autograd must see it.
        bump_versions(plan.arrays)
    return tuple(results)


def _rotate_blocks(  # noqa: PLR0917 - the loop's operands, in the order they are used
    x: Array,
    wide_cos: Array,
    wide_sin: Array,
    out: Array,
    r: int,
    interleaved: bool,
    ops: _Ops,
    library: str,
) -> None:
    """The cache-blocked loop over a large input, on every core."""
    lib = ops.library
    rotated_shape = (*x.shape[:-1], r)
    wide_cos = lib.broadcast_to(wide_cos, rotated_shape)
    first_sin, second_sin = (
        lib.broadcast_to(half, (*x.shape[:-1], r // 2)) for half in halves(wide_sin, r, interleaved)
    )
    blocks = list(_blocks(x.shape[:-1], r, ops.block_elements))
    workers = min(_threads.workers(library), len(blocks))
    chunks = [blocks[i::workers] for i in range(workers)]
    size = min(ops.block_elements, math.prod(rotated_shape))

    def run_chunk(chunk: list[tuple[Any, ...]]) -> None:
        # NumPy's error state is per thread: the caller's does not reach the pool's. inf * 0 is NaN
        # and a huge pair may overflow, IEEE results that the contract keeps
        # (numerical-contract.rst, "What is identical, and what is not"), not something to warn
        # about on NumPy and not elsewhere.
        with np.errstate(invalid="ignore", over="ignore"):
            products = lib.empty(size, dtype=wide_cos.dtype)
            swapped = lib.empty(size, dtype=wide_cos.dtype)
            for index in chunk:
                xb = x[index][..., :r]
                n = math.prod(xb.shape)
                t0 = products[:n].reshape(xb.shape)
                t1 = swapped[:n].reshape(xb.shape)
                first, second = halves(t1, r, interleaved)
                x_first, x_second = halves(xb, r, interleaved)
                lib.multiply(xb, wide_cos[index], out=t0)
                lib.multiply(x_second, first_sin[index], out=first)
                lib.multiply(x_first, second_sin[index], out=second)
                # Every read of this block of x is done, so out may alias x.
                lib.add(t0, t1, out=out[index][..., :r])

    if workers <= 1:
        run_chunk(blocks)
    else:
        list(_threads.executor().map(run_chunk, chunks))


def _blocks(shape: tuple[int, ...], row: int, elements: int) -> Iterator[tuple[Any, ...]]:
    """Index tuples that cover ``shape`` (the axes before the last) in blocks of about
    ``elements`` elements, splitting the outermost axes first."""
    inner = row
    split = len(shape)
    while split > 0 and inner * shape[split - 1] <= elements:
        split -= 1
        inner *= shape[split]
    if split == 0:
        yield ()
        return
    axis = split - 1
    step = max(1, elements // inner)
    for outer in itertools.product(*(range(n) for n in shape[:axis])):
        for start in range(0, shape[axis], step):
            yield (*outer, slice(start, start + step))


@dataclass(frozen=True)
class _Ops:
    """What the loops need of one library: NumPy or torch, whose ``multiply``, ``add``
    (with ``out=``), ``broadcast_to`` and ``empty`` they call alike, and the rest."""

    library: Any
    block_elements: int
    whole_elements: int
    add_into: Callable[[Array, Array, Array, tuple[int, ...]], Any]
    """``out`` (viewed as ``shape``) = ``a + b``, rounded once to the dtype of ``out``."""
    swap: Callable[[Array, bool], Array]
    """The pairs' elements exchanged (the pairs are an axis of their own)."""


_NUMPY = _Ops(
    library=np,
    block_elements=BLOCK_ELEMENTS,
    whole_elements=WHOLE_ELEMENTS,
    add_into=lambda a, b, out, shape: np.add(a, b, out=out.reshape(shape), casting="same_kind"),
    swap=lambda a, interleaved: a[..., ::-1] if interleaved else a[..., ::-1, :],  # a view
)


@functools.cache
def _torch_ops() -> _Ops:
    """The same on torch CPU tensors (float16 and bfloat16)."""
    import torch

    return _Ops(
        library=torch,
        block_elements=TORCH_BLOCK_ELEMENTS,
        whole_elements=TORCH_WHOLE_ELEMENTS,
        # Splitting the last axis is a view of any tensor: the float32 sum is rounded once
        # to out's dtype as it is stored.
        add_into=lambda a, b, out, shape: torch.add(a, b, out=out.view(shape)),
        # torch has no negative strides: a copy.
        swap=lambda a, interleaved: a.flip(-1 if interleaved else -2),
    )
