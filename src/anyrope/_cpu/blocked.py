"""Cache-blocked rotation for NumPy arrays and PyTorch CPU tensors.

The array expression makes about six passes over memory (a product, a rotated copy,
another product, a sum, casts). Here the input is walked in blocks small enough to stay
in cache, on every core, each product written into a reused scratch buffer and the sum
straight into the output, so memory is read and written about once.

The rotation is computed over the whole rotated width at once, as
``y = x * [c, c] + x_swapped * [-s, s]`` (half-split; interleaved alike), which keeps the
inner loops long. It gives the bits of :func:`anyrope._agnostic.rotation.rotate_pairs`:
``x1 * (-s)`` is exactly ``-(x1 * s)`` and ``a + (-b)`` is exactly ``a - b`` in IEEE 754.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import array_api_compat
import numpy as np

from .._namespace import Array, is_bfloat16

BLOCK_ELEMENTS = 1 << 17
"""Elements per block: each worker's two float32 scratch buffers (512 KiB each) and the
block's input and output stay in the L2/L3 caches. On a 2-core EPYC, 2**16 to 2**19
measured the same; smaller blocks pay Python's per-call overhead."""

TORCH_BLOCK_ELEMENTS = 1 << 14
"""Smaller for PyTorch: below its intra-op grain size (32768), so each operation stays on
the calling thread and PyTorch's own threads do not compete with ours."""

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
_local = threading.local()


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Keep rotations in this block on the calling thread.

    For callers that already run one rotation per core (dask's workers): threads of ours
    on top of theirs would only compete for the same cores.
    """
    previous = getattr(_local, "one_thread", False)
    _local.one_thread = True
    try:
        yield
    finally:
        _local.one_thread = previous


def supports(x: Array) -> bool:
    """Whether ``x`` can take this path: a NumPy array or a PyTorch CPU tensor."""
    if isinstance(x, np.ndarray):
        return True
    return bool(array_api_compat.is_torch_array(x) and x.device.type == "cpu")


def rotate_blocked(
    x: Array,
    cos: Array,
    sin: Array,
    *,
    rotary_dim: int,
    interleaved: bool,
    inverse: bool,
    out: Array,
) -> Array:
    """Write the rotation of ``x`` into ``out`` (which may be ``x`` itself) and return it.

    ``cos``/``sin`` are in the compute dtype and broadcast against the pair view
    ``x[..., :rotary_dim // 2]``.
    """
    if not isinstance(x, np.ndarray) and not is_bfloat16(x.dtype):
        # Host memory either way, and NumPy's loops cost far less per call than
        # PyTorch's on cache-sized blocks; NumPy has no bfloat16, so that stays below.
        rotate_blocked(
            x.numpy(),
            cos.numpy(),
            sin.numpy(),
            rotary_dim=rotary_dim,
            interleaved=interleaved,
            inverse=inverse,
            out=out.numpy(),
        )
        return out
    ops = _Ops(x)
    wide_cos, first_sin, second_sin = _wide_tables(ops, cos, sin, interleaved, inverse)
    rotated_shape = (*x.shape[:-1], rotary_dim)
    wide_cos = ops.broadcast_to(wide_cos, rotated_shape)
    first_sin = ops.broadcast_to(first_sin, (*x.shape[:-1], rotary_dim // 2))
    second_sin = ops.broadcast_to(second_sin, (*x.shape[:-1], rotary_dim // 2))
    blocks = list(_blocks(x.shape[:-1], rotary_dim, ops.block_elements))
    workers = 1 if getattr(_local, "one_thread", False) else min(_cores(), len(blocks))
    chunks = [blocks[i::workers] for i in range(workers)]
    size = min(ops.block_elements, math.prod(rotated_shape))

    def run(chunk: list[tuple[Any, ...]]) -> None:
        products = ops.empty(size, wide_cos.dtype)
        swapped = ops.empty(size, wide_cos.dtype)
        for index in chunk:
            xb = x[index][..., :rotary_dim]
            n = math.prod(xb.shape)
            t0 = ops.reshape(products[:n], xb.shape)
            t1 = ops.reshape(swapped[:n], xb.shape)
            first, second = _halves(t1, rotary_dim, interleaved)
            x_first, x_second = _halves(xb, rotary_dim, interleaved)
            ops.mul(xb, wide_cos[index], t0)
            ops.mul(x_second, first_sin[index], first)
            ops.mul(x_first, second_sin[index], second)
            # Every read of this block of x is done, so out may alias x.
            ops.add(t0, t1, out[index][..., :rotary_dim])

    if workers <= 1:
        run(blocks)
    else:
        list(_executor().map(run, chunks))
    if out is not x and rotary_dim < x.shape[-1]:
        ops.copy(x[..., rotary_dim:], out[..., rotary_dim:])
    return out


def _halves(a: Array, rotary_dim: int, interleaved: bool) -> tuple[Array, Array]:
    """The first and second elements of every pair, as two views."""
    if interleaved:
        return a[..., 0:rotary_dim:2], a[..., 1:rotary_dim:2]
    half = rotary_dim // 2
    return a[..., :half], a[..., half:rotary_dim]


def _wide_tables(
    ops: _Ops, cos: Array, sin: Array, interleaved: bool, inverse: bool
) -> tuple[Array, Array, Array]:
    """``cos`` for both elements of each pair, and the sine factor of each element's partner."""
    wide = ops.merge_last(ops.stack((cos, cos), axis=-1)) if interleaved else ops.concat((cos, cos))
    if inverse:
        return wide, sin, -sin
    return wide, -sin, sin


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


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _executor() -> ThreadPoolExecutor:
    """One shared pool: NumPy and PyTorch release the GIL inside these operations."""
    global _pool  # noqa: PLW0603 - created on first use, shared by every call
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=_cores(), thread_name_prefix="anyrope")
        return _pool


class _Ops:
    """The few operations the blocked loop needs, with output buffers, for one library."""

    def __init__(self, x: Array) -> None:
        self._numpy = isinstance(x, np.ndarray)
        self.block_elements = BLOCK_ELEMENTS if self._numpy else TORCH_BLOCK_ELEMENTS
        if not self._numpy:
            import torch

            self._torch = torch

    def mul(self, a: Array, b: Array, out: Array) -> None:
        if self._numpy:
            np.multiply(a, b, out=out)
        else:
            self._torch.mul(a, b, out=out)

    def add(self, a: Array, b: Array, out: Array) -> None:
        if self._numpy:
            np.add(a, b, out=out)
        else:
            self._torch.add(a, b, out=out)

    def stack(self, arrays: tuple[Array, Array], axis: int) -> Array:
        return np.stack(arrays, axis=axis) if self._numpy else self._torch.stack(arrays, dim=axis)

    def concat(self, arrays: tuple[Array, Array]) -> Array:
        if self._numpy:
            return np.concatenate(arrays, axis=-1)
        return self._torch.cat(arrays, dim=-1)

    def merge_last(self, a: Array) -> Array:
        """Merge the last two axes: ``(..., n, 2) -> (..., 2n)``."""
        return a.reshape((*a.shape[:-2], a.shape[-2] * 2))

    def broadcast_to(self, a: Array, shape: tuple[int, ...]) -> Array:
        return np.broadcast_to(a, shape) if self._numpy else a.expand(shape)

    def empty(self, n: int, dtype: Any) -> Array:
        return np.empty(n, dtype=dtype) if self._numpy else self._torch.empty(n, dtype=dtype)

    def reshape(self, a: Array, shape: tuple[int, ...]) -> Array:
        return a.reshape(shape) if self._numpy else a.view(shape)

    def copy(self, source: Array, target: Array) -> None:
        if self._numpy:
            np.copyto(target, source)
        else:
            target.copy_(source)
