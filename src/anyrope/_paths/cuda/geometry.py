"""From array geometry to kernel launches: pure Python, no CuPy, no device.

Everything the kernel needs to know about shapes, strides and layouts is computed
here, as the flat argument tuple of ``ANYROPE_PARAMS`` (``rope_math.cuh``), once per
geometry (:func:`launch_templates`); a call only binds its addresses. The CPU
harness (tests/cuda_harness) runs the kernel body on exactly these arguments, so a
wrong stride, layout permutation or batch collapse is caught without a GPU.
"""

from __future__ import annotations

import ctypes
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import product
from typing import NamedTuple

__all__ = [
    "BLOCK",
    "HEADS_PER_THREAD",
    "INTERLEAVED_HEADS_PER_THREAD",
    "Launch",
    "LaunchTemplate",
    "Operand",
    "launch_templates",
]

#: Threads per block at most (the kernel declares ``__launch_bounds__(256)``).
BLOCK = 256
#: Heads one thread rotates (half-split pairs), by the itemsize of the dtype: it reads the
#: table rows of their token once for all of them, and has as many times the bytes of x in
#: flight. The kernel is compiled with these values (``ANYROPE_HEADS_PER_THREAD_<itemsize>``).
#: More heads hold more registers: the 16-bit variants, which move 16 pairs per head, stop
#: at 2. Measured: docs/performance.rst, "GPU".
HEADS_PER_THREAD = {2: 2, 4: 4, 8: 4}
#: The same for interleaved pairs (``ANYROPE_INTERLEAVED_HEADS_PER_THREAD_<itemsize>``),
#: which stage no table rows: two heads took 16-bit prefill on an H200 from 0.89 of a copy
#: to 0.97; float32 pairs, read split (rope_unit), ran at 0.94 with one head, 0.97 with
#: two and 0.99 with four.
INTERLEAVED_HEADS_PER_THREAD = {2: 2, 4: 4, 8: 1}
# Every grid dimension is a stride loop in the kernel: more blocks only add scheduling work.
_MAX_GRID = (1 << 20, 65535, 65535)
_MAX_TOKENS_PER_BLOCK = 64  # blockDim.z
# The 32-bit variants need every offset, size and stride-loop index below 2**31; the
# margin covers a stride loop stepping one grid past a size.
_INT32_LIMIT = 1 << 30


class Operand(NamedTuple):
    """An array as the kernel sees it: address, shape and strides in elements (a named
    tuple: made for every operand of every call, cheaply)."""

    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]


# The kernel's parameter buffer, ANYROPE_PARAMS in order and each at its natural
# alignment, as cuLaunchKernel takes it whole (CU_LAUNCH_PARAM_BUFFER_POINTER): the seven
# pointers, then the table offset, the table rows and the 24 integers of the geometry in
# the index type (int32, or int64 for ``wide_index``), then the position size and
# ``inverse`` as int32. Packed once per geometry; a call writes only its addresses and
# offset, so no argument is converted per call.
PARAMS = {False: struct.Struct("<7Q26i2i"), True: struct.Struct("<7Q26q2i")}
# A launch's buffer: cuLaunchKernel's `extra` list (the parameter buffer's key and
# address, its size's key and address, the end), the size, then the parameters; `bind`
# copies the template's once and writes, in one pack, the list and the size, the seven
# pointers (the tables' unchanged) and the table offset.
HEADER = 48
_BOUND = {False: struct.Struct("<13Qi"), True: struct.Struct("<13Qq")}
_BUFFER = {wide: ctypes.c_char * (HEADER + PARAMS[wide].size) for wide in (False, True)}


class Launch(NamedTuple):
    """One kernel launch, bound to the memory of one call (a named tuple: made for every
    call, cheaply).

    ``buffer`` is what cuLaunchKernel reads at ``ctypes.addressof(buffer)`` as its
    ``extra`` list, with the kernel's parameter buffer (:data:`PARAMS`) from
    :data:`HEADER` on; the driver copies it at the launch. ``shared``: its bytes of dynamic
    shared memory per block.
    """

    width: int
    interleaved: bool
    wide_index: bool
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    buffer: ctypes.Array[ctypes.c_char]
    shared: int

    @property
    def params(self) -> bytes:
        """The kernel's parameter buffer."""
        return bytes(self.buffer)[HEADER:]

    @property
    def args(self) -> tuple[int, ...]:
        """The arguments as Python integers, in ``ANYROPE_PARAMS`` order (the host
        harness takes them so)."""
        return PARAMS[self.wide_index].unpack_from(self.buffer, HEADER)


@dataclass(frozen=True)
class LaunchTemplate:
    """A launch for one geometry and one pair of tables, before the call's addresses
    are known.

    The same shapes, strides, flags, pointer alignments and tables give the same
    templates, so they are planned once and :meth:`bind` fills in what changes between
    calls: the addresses of q and k, of their outputs and of the positions (each plus a
    fixed byte shift, for the launches of non-collapsible batch axes) and the table
    offset. ``params`` holds the rest of a launch's buffer already: the cos and sin
    pointers, the table rows and the geometry, after :data:`HEADER` bytes that ``bind``
    fills.
    """

    width: int
    interleaved: bool
    wide_index: bool
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shifts: tuple[int, ...]
    params: bytes
    shared: int
    # Read from `params` once (see __post_init__): what `bind` writes with the addresses.
    _tables: tuple[int, int] = field(init=False, repr=False, compare=False)
    _launch: tuple[object, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        set_once = object.__setattr__  # the dataclass is frozen
        set_once(self, "_tables", struct.unpack_from("<2Q", self.params, HEADER + 32))
        set_once(
            self, "_launch", (self.width, self.interleaved, self.wide_index, self.grid, self.block)
        )

    def bind(self, io: Sequence[int], positions: int, offset: int) -> Launch:
        """The launch for q_in, q_out, k_in and k_out at ``io`` (0 for an absent k), the
        positions at ``positions`` (0 for none) and the table ``offset``."""
        s0, s1, s2, s3, s4 = self.shifts
        wide = self.wide_index
        buffer = _BUFFER[wide].from_buffer_copy(self.params)
        at = ctypes.addressof(buffer)
        q_in, q_out, k_in, k_out = io
        pointers = (
            q_in + s0,
            q_out + s1,
            k_in + s2 if k_in else 0,
            k_out + s3 if k_out else 0,
            *self._tables,
            positions + s4 if positions else 0,
        )
        size = PARAMS[wide].size
        # CU_LAUNCH_PARAM_BUFFER_POINTER (1), BUFFER_SIZE (2) and END (0); the size at 40.
        _BOUND[wide].pack_into(buffer, 0, 1, at + HEADER, 2, at + 40, 0, size, *pointers, offset)
        # tuple.__new__: the named tuple's own __new__ is a Python function more per call.
        return tuple.__new__(Launch, (*self._launch, buffer, self.shared))


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
    lead = len(target) - len(pos.shape)
    if lead < 0 or any(
        n not in (1, want) for n, want in zip(pos.shape, target[lead:], strict=True)
    ):
        raise ValueError(
            f"`positions` of shape {pos.shape} does not broadcast to (*batch, seq) = {target}"
        )
    strides = (0,) * lead + tuple(
        0 if n == 1 else s for n, s in zip(pos.shape, pos.strides, strict=True)
    )
    return Operand(pos.ptr, target, strides)


def _collapse(
    shape: Sequence[int], strides: Sequence[Sequence[int]]
) -> list[tuple[int, list[int]]]:
    """Merge batch dims that every operand walks as one: [(size, [stride per operand])]."""
    dims = [(size, [s[i] for s in strides]) for i, size in enumerate(shape) if size != 1]
    merged: list[tuple[int, list[int]]] = []
    for size, st in dims:
        if merged and all(p == s * size for p, s in zip(merged[-1][1], st, strict=True)):
            merged[-1] = (merged[-1][0] * size, st)
        else:
            merged.append((size, st))
    return merged


def launch_templates(
    operands: Sequence[Operand],
    *,
    layout: str,
    itemsize: int,
    rotary_dim: int,
    interleaved: bool,
    inverse: bool,
    inplace: bool,
    positions: Operand | None,
    position_itemsize: int,
    cos_ptr: int,
    sin_ptr: int,
    table_rows: int,
    bound: int | None = None,
) -> list[LaunchTemplate]:
    """The launches for one geometry and one pair of tables; the pointers of
    ``operands`` (q_in, q_out and, for ``rotate_qk``, k_in, k_out) and of the positions
    are read only for their alignment. :meth:`LaunchTemplate.bind` binds the addresses.

    One launch for q and k together, the features past the rotated width copied by the
    same launch, unless the batch axes of the operands cannot be walked with a single
    stride (then one launch per outer batch index, still exact). The widest variant whose
    accesses every operand allows is chosen: x read ``width`` pairs at a time (16, 8 or 4
    bytes) when every tensor has a unit last stride, rows and pointers aligned to that many
    bytes, a rotated half that is a whole number of vectors and copied features a whole
    number of pairs of them, and both tables aligned for their reads; otherwise the
    scalar variant.
    ``table_rows`` (rows of cos and sin, ``rotary_dim // 2`` entries each) bounds the
    table offsets, for the choice of 32-bit indices. The kernel gives NaN for a
    position array's value outside ``0 .. bound - 1`` (default ``table_rows``).
    """
    q_in = operands[0]
    batch_axes, s_axis, h_axis = _axes(layout, len(q_in.shape))
    batch_shape = tuple(q_in.shape[a] for a in batch_axes)
    seq, head_dim = q_in.shape[s_axis], q_in.shape[-1]
    half = rotary_dim // 2
    tail = 0 if inplace else head_dim - rotary_dim
    heads = sum(op.shape[h_axis] for op in operands[::2])
    shared_axes = (*batch_shape, seq, head_dim)
    for k in operands[2::2]:
        if (*(k.shape[a] for a in batch_axes), k.shape[s_axis], k.shape[-1]) != shared_axes:
            raise ValueError(
                f"`k` must share batch, seq and head_dim with `q` ({layout}); got q "
                f"{q_in.shape}, k {k.shape}"
            )

    pos = None if positions is None else _broadcast_positions(positions, batch_shape, seq)
    strided = [*operands, *([pos] if pos is not None else [])]
    batch = _collapse(
        batch_shape,
        [[op.strides[a] for a in batch_axes] for op in operands]
        + ([list(pos.strides[:-1])] if pos is not None else []),
    )
    width = _width(operands, itemsize, half, tail, (cos_ptr, sin_ptr))
    per_thread = (INTERLEAVED_HEADS_PER_THREAD if interleaved else HEADS_PER_THREAD)[itemsize]
    # The units of a row: the rotated ones, then those that copy 2 * width features past
    # the rotated width each (one in the scalar variant), in the same instructions
    # (rope_unit), so that one launch reads and writes each row whole.
    units = half // width + tail // (1 if width == 1 else 2 * width)
    sizes = (table_rows * half, *map(_extent, strided), *q_in.shape, heads, half + tail)
    wide = max(sizes) >= _INT32_LIMIT

    outer = batch[:-1]
    inner_size, inner = batch[-1] if batch else (1, [0] * len(strided))
    # The index along an axis of size 1 is 0: its stride, which may be any (and past
    # int32, uncounted by `wide`), is passed as 0.
    strides = [
        s
        for op, step in zip(operands, inner, strict=False)
        for s in (step, *(op.strides[a] if op.shape[a] > 1 else 0 for a in (s_axis, h_axis, -1)))
    ]
    strides += [0] * (16 - len(strides))
    strides += [0, 0] if pos is None else [inner[-1], pos.strides[-1] if seq > 1 else 0]
    pos_itemsize = 0 if pos is None else position_itemsize
    if heads * seq * inner_size == 0:
        return []
    templates = []
    for at in product(*(range(size) for size, _ in outer)):
        shift = [
            sum(i * st[n] for i, (_, st) in zip(at, outer, strict=True))
            for n in range(len(strided))
        ]
        shifts = [s * itemsize for s in shift[: len(operands)]]
        shifts += [0] * (4 - len(operands)) + [shift[-1] * pos_itemsize]
        # The addresses of the call and the table offset are written by `bind`.
        params = bytes(HEADER) + PARAMS[wide].pack(
            *(0, 0, 0, 0, cos_ptr, sin_ptr, 0, 0),
            table_rows if bound is None else bound,
            *strides,
            *(inner_size, seq, operands[0].shape[h_axis], heads, half, units),
            pos_itemsize,
            int(inverse),
        )
        block = _block(units, heads, seq, per_thread)
        grid = (
            min(math.ceil(seq / block[2]), _MAX_GRID[0]),
            min(inner_size, _MAX_GRID[1]),
            min(math.ceil(heads / (block[1] * per_thread)), _MAX_GRID[2]),
        )
        # Half-split pairs stage V cos and V sin entries per unit and token (rope_unit): 64
        # bytes a thread at most, under the 48 KiB of a launch that does not opt in.
        # Interleaved pairs stage nothing (rope_thread).
        staged = 0 if interleaved else 2 * width * _table_itemsize(itemsize)
        shared = block[0] * block[2] * staged
        templates.append(
            LaunchTemplate(width, interleaved, wide, grid, block, tuple(shifts), params, shared)
        )
    return templates


def _width(
    operands: Sequence[Operand], itemsize: int, half: int, tail: int, tables: tuple[int, int]
) -> int:
    """Pairs per access: the widest 16-, 8- or 4-byte accesses of two elements or more that
    every operand's rows and address, the tables, the half and the features copied past
    it (``tail``, a whole number of two accesses) allow; 1 for the scalar variant."""
    if any(op.strides[-1] != 1 for op in operands):
        return 1
    for size in (16, 8, 4):
        width = size // itemsize
        table_bytes = min(16, width * _table_itemsize(itemsize))
        if (
            width >= 2
            and half % width == 0
            and tail % (2 * width) == 0
            and all(ptr % table_bytes == 0 for ptr in tables)
            and all(
                op.ptr % size == 0
                and all(
                    (s * itemsize) % size == 0
                    for s, n in zip(op.strides[:-1], op.shape[:-1], strict=True)
                    if n != 1
                )
                for op in operands
            )
        ):
            return width
    return 1


def _table_itemsize(itemsize: int) -> int:
    """Bytes of a table entry (the kernel's compute type: float32 for 16-bit
    elements) for elements of ``itemsize`` bytes."""
    return 8 if itemsize == 8 else 4


def _extent(op: Operand) -> int:
    """The largest element offset from ``op``'s address, either way."""
    return sum((n - 1) * abs(s) for n, s in zip(op.shape, op.strides, strict=True))


def _block(units: int, heads: int, seq: int, per_thread: int) -> tuple[int, int, int]:
    """(units of a row, threads along the heads, tokens) per block: as many whole rows as
    fit in BLOCK threads, each thread taking ``per_thread`` heads, the heads spread evenly
    over the fewest groups."""
    x = max(1, min(units, BLOCK))
    slots = math.ceil(heads / per_thread)
    groups = math.ceil(slots / max(1, BLOCK // x))
    y = max(1, math.ceil(slots / groups))
    return x, y, max(1, min(seq, BLOCK // (x * y), _MAX_TOKENS_PER_BLOCK))
