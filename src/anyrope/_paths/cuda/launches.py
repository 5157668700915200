"""From array geometry to kernel launches: pure Python, no CuPy, no device.

Everything the kernel needs to know about shapes, strides and layouts is computed
here, as the flat argument tuple of ``ANYROPE_PARAMS`` (``rope_math.cuh``). The CPU
harness (tests/cuda_harness) runs the kernel body on exactly these arguments, so a
wrong stride, layout permutation or batch collapse is caught without a GPU.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import product

import numpy as np

__all__ = ["BLOCK", "Launch", "Operand", "plan_launches"]

#: Threads per block (the kernel declares ``__launch_bounds__(256)``).
BLOCK = 256
# Grid-stride loop: more blocks than this only add scheduling work.
_MAX_GRID = 1 << 20
_VECTOR_BYTES = 16
_N_PARAMS = 34


@dataclass(frozen=True)
class Operand:
    """An array as the kernel sees it: address, shape and strides in elements."""

    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]


@dataclass(frozen=True)
class Launch:
    """One kernel launch: variant, grid and the flat arguments in ``ANYROPE_PARAMS`` order.

    ``pointer_args`` are the indices of ``args`` that are device pointers.
    """

    vector: bool
    interleaved: bool
    grid: int
    block: int
    args: tuple[int, ...]

    pointer_args = (0, 1, 12, 13, 24, 25, 26)

    def device_args(self) -> tuple[np.generic, ...]:
        """The arguments as fixed-width NumPy scalars, the C types of ``ANYROPE_PARAMS``.

        Pointers become ``uint64``, the integers ``int64`` (``long long``), and the last
        one (``inverse``) ``int32``.
        """
        *wide, inverse = self.args
        return (
            *(np.uint64(v) if i in self.pointer_args else np.int64(v) for i, v in enumerate(wide)),
            np.int32(inverse),
        )


def _axes(layout: str, ndim: int) -> tuple[list[int], int, int]:
    """(batch axes, seq axis, head axis) of a ``layout`` array with ``ndim`` axes."""
    if layout == "bshd":
        return list(range(ndim - 3)), ndim - 3, ndim - 2
    if layout == "bhsd":
        return list(range(ndim - 3)), ndim - 2, ndim - 3
    if layout == "sbhd":
        return list(range(1, ndim - 2)), 0, ndim - 2
    raise ValueError(f"`layout` must be one of 'bshd', 'bhsd', 'sbhd'; got {layout!r}")


def _broadcast_positions(pos: Operand, batch_shape: tuple[int, ...], seq: int) -> Operand:
    """``pos`` (shape (seq,) or (*batch, seq), broadcastable) as strides over (*batch, seq)."""
    target = (*batch_shape, seq)
    if len(pos.shape) > len(target):
        raise ValueError(
            f"`positions` must have shape (seq,) or (*batch, seq) = {target}; got {pos.shape}"
        )
    lead = len(target) - len(pos.shape)
    strides = [0] * lead
    for size, stride, want in zip(pos.shape, pos.strides, target[lead:], strict=True):
        if size not in (1, want):
            raise ValueError(
                f"`positions` of shape {pos.shape} does not broadcast to (*batch, seq) = {target}"
            )
        strides.append(0 if size == 1 else stride)
    return Operand(pos.ptr, target, tuple(strides))


def _collapse(
    shape: Sequence[int], strides: Sequence[Sequence[int]]
) -> list[tuple[int, list[int]]]:
    """Merge batch dims that every operand walks as one: [(size, [stride per operand])]."""
    dims = [(size, [s[i] for s in strides]) for i, size in enumerate(shape) if size != 1]
    merged: list[tuple[int, list[int]]] = []
    for size, st in dims:
        if merged:
            prev_size, prev_st = merged[-1]
            if all(p == s * size for p, s in zip(prev_st, st, strict=True)):
                merged[-1] = (prev_size * size, st)
                continue
        merged.append((size, st))
    return merged


def plan_launches(
    q_in: Operand,
    q_out: Operand,
    k_in: Operand | None,
    k_out: Operand | None,
    *,
    layout: str,
    itemsize: int,
    rotary_dim: int,
    interleaved: bool,
    inverse: bool,
    inplace: bool,
    positions: Operand | None,
    position_itemsize: int,
    offset: int,
    cos_ptr: int,
    sin_ptr: int,
) -> list[Launch]:
    """The launches that rotate q (and k) as ``rotate`` / ``rotate_qk`` define it.

    One launch for q and k together unless the batch axes of the operands cannot be
    walked with a single stride (then one launch per outer batch index, still exact).
    The 16-byte vector variant is chosen when every tensor has a unit last stride,
    16-byte aligned rows and widths that are whole vectors, and both tables are 16-byte
    aligned; otherwise the scalar one.
    """
    ndim = len(q_in.shape)
    batch_axes, s_axis, h_axis = _axes(layout, ndim)
    batch_shape = tuple(q_in.shape[a] for a in batch_axes)
    seq = q_in.shape[s_axis]
    head_dim = q_in.shape[-1]
    half = rotary_dim // 2
    tail = 0 if inplace else head_dim - rotary_dim

    tensors = [(q_in, q_out)] if k_in is None or k_out is None else [(q_in, q_out), (k_in, k_out)]
    for t_in, _ in tensors[1:]:
        if tuple(t_in.shape[a] for a in batch_axes) != batch_shape or t_in.shape[s_axis] != seq:
            raise ValueError(
                f"`k` must share batch and seq with `q` ({layout}); got q {q_in.shape}, "
                f"k {t_in.shape}"
            )
        if t_in.shape[-1] != head_dim:
            raise ValueError(f"`k` head_dim {t_in.shape[-1]} differs from q head_dim {head_dim}")

    operands = [op for pair in tensors for op in pair]
    pos = None if positions is None else _broadcast_positions(positions, batch_shape, seq)
    strided = [*operands, *([pos] if pos is not None else [])]
    batch = _collapse(
        batch_shape,
        [[op.strides[a] for a in batch_axes] for op in operands]
        + ([list(pos.strides[:-1])] if pos is not None else []),
    )

    width = _VECTOR_BYTES // itemsize
    vector = (
        half % width == 0
        and tail % width == 0
        # Table rows are read with 16-byte loads as well (a row holds `half` entries).
        and cos_ptr % _VECTOR_BYTES == 0
        and sin_ptr % _VECTOR_BYTES == 0
        and all(
            op.strides[-1] == 1
            and op.ptr % _VECTOR_BYTES == 0
            and all(
                s % width == 0
                for s, n in zip(op.strides[:-1], op.shape[:-1], strict=True)
                if n != 1
            )
            for op in operands
        )
    )
    per_row = half // (width if vector else 1) + tail // (width if vector else 1)

    outer = batch[:-1]
    inner_size, inner_strides = batch[-1] if batch else (1, [0] * len(strided))
    launches = []
    for index in product(*(range(size) for size, _ in outer)):
        shift = [
            sum(i * st[n] for i, (_, st) in zip(index, outer, strict=True))
            for n in range(len(strided))
        ]
        args: list[int] = []
        for n, (t_in, t_out) in enumerate(tensors):
            heads = t_in.shape[h_axis]
            views = []
            for m, op in enumerate((t_in, t_out)):
                j = 2 * n + m
                views.append(
                    (
                        op.ptr + shift[j] * itemsize,
                        (inner_strides[j], op.strides[s_axis], op.strides[h_axis], op.strides[-1]),
                    )
                )
            (in_ptr, in_st), (out_ptr, out_st) = views
            args += [in_ptr, out_ptr, heads, *in_st, *out_st, inner_size * seq * heads * per_row]
        if len(tensors) == 1:
            args += [0] * 12
        if pos is None:
            args += [cos_ptr, sin_ptr, 0, 0, 0, offset]
        else:
            pos_ptr = pos.ptr + shift[-1] * position_itemsize
            args += [cos_ptr, sin_ptr, pos_ptr, inner_strides[-1], pos.strides[-1], 0]
        args += [seq, half, tail, int(inverse)]
        total = args[11] + args[23]
        if total == 0:
            continue
        grid = min(math.ceil(total / BLOCK), _MAX_GRID)
        launches.append(Launch(vector, interleaved, grid, BLOCK, tuple(args)))
    return launches
