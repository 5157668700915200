"""Cache-blocked rotation for NumPy arrays and PyTorch CPU tensors.

The array expression makes about six passes over memory (a product, a rotated copy,
another product, a sum, casts). Here the input is walked in blocks small enough to
stay in cache, each product is written into a reused scratch buffer and each result
straight into the output, so memory is read and written about once. The operations
and their order are those of :func:`anyrope._agnostic.rotation.rotate_pairs`, so the
bits are the same.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from typing import Any

import array_api_compat
import numpy as np

from .._namespace import Array

BLOCK_ELEMENTS = 1 << 15
"""Pair elements per block: three float32 scratch buffers of 128 KiB plus the block's
inputs and outputs stay within a typical L2 cache."""


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
    ops = _Ops(x)
    half = rotary_dim // 2
    pair_shape = (*x.shape[:-1], half)
    if interleaved:
        x0, x1 = x[..., 0:rotary_dim:2], x[..., 1:rotary_dim:2]
        y0, y1 = out[..., 0:rotary_dim:2], out[..., 1:rotary_dim:2]
    else:
        x0, x1 = x[..., :half], x[..., half:rotary_dim]
        y0, y1 = out[..., :half], out[..., half:rotary_dim]
    c = ops.broadcast_to(cos, pair_shape)
    s = ops.broadcast_to(sin, pair_shape)
    combine_0, combine_1 = (ops.add, ops.sub) if inverse else (ops.sub, ops.add)
    scratch = [ops.empty(min(BLOCK_ELEMENTS, math.prod(pair_shape)), cos.dtype) for _ in range(3)]
    for index in _blocks(pair_shape[:-1], half):
        a0, a1, cc, ss = x0[index], x1[index], c[index], s[index]
        n = math.prod(a0.shape)
        t0, t1, t2 = (ops.reshape(buffer[:n], a0.shape) for buffer in scratch)
        ops.mul(a0, cc, t0)
        ops.mul(a1, ss, t1)
        ops.mul(a0, ss, t2)
        # y0 may alias x0 when rotating in place: every product that reads x0 is done.
        combine_0(t0, t1, y0[index])
        ops.mul(a1, cc, t0)
        combine_1(t0, t2, y1[index])
    if out is not x and rotary_dim < x.shape[-1]:
        ops.copy(x[..., rotary_dim:], out[..., rotary_dim:])
    return out


def _blocks(shape: tuple[int, ...], row: int) -> Iterator[tuple[Any, ...]]:
    """Index tuples that cover ``shape`` (the axes before the pair axis) in blocks of
    about :data:`BLOCK_ELEMENTS` pair elements, splitting the outermost axes first."""
    inner = row
    split = len(shape)
    while split > 0 and inner * shape[split - 1] <= BLOCK_ELEMENTS:
        split -= 1
        inner *= shape[split]
    if split == 0:
        yield ()
        return
    axis = split - 1
    step = max(1, BLOCK_ELEMENTS // inner)
    for outer in itertools.product(*(range(n) for n in shape[:axis])):
        for start in range(0, shape[axis], step):
            yield (*outer, slice(start, start + step))


class _Ops:
    """The handful of out-parameter operations the blocked loop needs, for one library."""

    mul: Callable[[Array, Array, Array], object]
    add: Callable[[Array, Array, Array], object]
    sub: Callable[[Array, Array, Array], object]

    def __init__(self, x: Array) -> None:
        self._numpy = isinstance(x, np.ndarray)
        if self._numpy:
            self.mul = lambda a, b, out: np.multiply(a, b, out=out)
            self.add = lambda a, b, out: np.add(a, b, out=out)
            self.sub = lambda a, b, out: np.subtract(a, b, out=out)
        else:
            import torch

            self._torch = torch
            self.mul = lambda a, b, out: torch.mul(a, b, out=out)
            self.add = lambda a, b, out: torch.add(a, b, out=out)
            self.sub = lambda a, b, out: torch.sub(a, b, out=out)

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
