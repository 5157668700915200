"""dask.array: RoPE block by block, lazily, on dask's own scheduler.

``rotate`` on a dask array returns a dask array with the input's chunks; nothing is
computed until the caller asks. Each block is rotated by the ordinary path of its own
library (NumPy, CuPy, ...) with its own positions: the slice of the caller's positions
array, or the offset of its first token. A rotation only mixes the features of one
token, so blocks along batch, sequence and heads are independent and the result is the
same bits as one call on the whole array. A head dimension split across chunks is
joined for the rotation and split again afterwards.

This module is imported only for dask arrays, when dask is already in ``sys.modules``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import array_api_compat
import numpy as np

from ._cpu import blocked
from ._layout import Axes
from ._namespace import Array
from ._validation import describe

if TYPE_CHECKING:
    from ._rope import RoPE


def rotate_dask(
    rope: RoPE,
    arrays: tuple[Array, ...],
    positions: object,
    axes: Axes,
    *,
    inverse: bool,
    inplace: bool,
    impl: str,
) -> tuple[Array, ...]:
    """Lazy rotations of the dask ``arrays`` (which share batch and sequence axes)."""
    if inplace:
        raise ValueError(
            "`inplace`=True is not possible for dask arrays, which are immutable; "
            "use the returned array"
        )
    if rope.sections is not None or rope.scaling.depends_on_length:
        raise ValueError(
            "dask arrays take RoPE with fixed frequencies; got "
            f"rope_type={rope.scaling.rope_type!r}"
            + (", with several position streams (M-RoPE or axial)" if rope.sections else "")
            + ": its frequencies depend on all positions at once, so rotate the computed "
            "array, or each block with its own call"
        )
    task = BlockRotation(rope, layout=axes.layout, inverse=inverse, impl=impl)
    if positions is None or (
        isinstance(positions, (int, np.integer)) and not isinstance(positions, bool)
    ):
        offset = 0 if positions is None else int(positions)
        if offset < 0:
            raise ValueError(f"`positions` offset must be non-negative; got {offset}")
        return tuple(_map(task.by_offset, x, offset=offset) for x in arrays)
    spread = _spread_positions(positions, axes, arrays[0].ndim)
    return tuple(_map(task.by_positions, x, spread) for x in arrays)


def _map(function: Any, x: Array, positions: Array | None = None, **kwargs: Any) -> Array:
    import dask.array as da

    whole = x if x.numblocks[-1] == 1 else x.rechunk({x.ndim - 1: -1})
    more = []
    if positions is not None:
        # dask would hand a single-chunk array whole to every block: cut it like the input.
        chunks = tuple(
            c if n == size else (n,)
            for c, n, size in zip(whole.chunks, positions.shape, whole.shape, strict=True)
        )
        more.append(positions.rechunk(chunks))
    y = da.map_blocks(function, whole, *more, dtype=x.dtype, meta=whole._meta, **kwargs)
    return y if whole is x else y.rechunk(x.chunks)


def _spread_positions(positions: object, axes: Axes, ndim: int) -> Array:
    """``positions`` (``(*batch', seq)``) as a dask array with ``ndim`` axes broadcasting
    against the input, so that dask hands each block its own slice."""
    import dask.array as da

    p: Any
    if array_api_compat.is_dask_array(positions):
        p = positions
    elif array_api_compat.is_numpy_array(positions):
        p = da.from_array(positions)
    else:
        raise TypeError(
            "`positions` for a dask array must be None, an int offset, or a NumPy or dask "
            f"integer array; got {describe(positions)}"
        )
    if not np.issubdtype(p.dtype, np.integer):
        raise TypeError(f"`positions` must have an integer dtype; got {p.dtype}")
    target = (*axes.batch, axes.seq)
    padded = (1,) * (len(target) - p.ndim) + tuple(p.shape)
    if (
        p.ndim < 1
        or p.ndim > len(target)
        or any(n not in (1, t) for n, t in zip(padded, target, strict=True))
    ):
        raise ValueError(
            f"`positions` of shape {tuple(p.shape)} does not broadcast to (*batch, seq)={target}"
        )
    p = p.reshape(padded)
    if axes.layout == "bshd":
        return p[..., None, None]
    if axes.layout == "bhsd":
        return p[..., None, :, None]
    return da.moveaxis(p, -1, 0)[..., None, None]


class BlockRotation:
    """What dask runs on each block; picklable for worker processes.

    A :class:`RoPE` holds locks, which do not pickle; this carries its constructor
    arguments instead. A worker process takes its :class:`RoPE` from the same per-process
    cache as :func:`anyrope.rotate`, so its tables are built once per process, not once
    per block.
    """

    def __init__(self, rope: RoPE, *, layout: str, inverse: bool, impl: str) -> None:
        self._rope: RoPE | None = rope
        self._arguments: dict[str, Any] = {
            "head_dim": rope.head_dim,
            "rotary_dim": rope.rotary_dim,
            "base": rope.base,
            "interleaved": rope.interleaved,
            "scaling": rope.scaling,
        }
        self._options: dict[str, Any] = {"layout": layout, "inverse": inverse, "impl": impl}

    def __getstate__(self) -> dict[str, Any]:
        return {"arguments": self._arguments, "options": self._options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._arguments = state["arguments"]
        self._options = state["options"]
        self._rope = None

    def _rotate(self, block: Array, positions: object) -> Array:
        from ._api import apply
        from ._functional import _rope_for

        if self._rope is None:
            self._rope = _rope_for(**self._arguments)
        # dask already runs one block per thread of each worker.
        with blocked.one_thread():
            (y,) = apply(
                self._rope, (block,), ("x",), positions, inplace=False, xp=None, **self._options
            )
        return y

    def by_offset(self, block: Array, *, offset: int, block_info: Any = None) -> Array:
        """Rotate a block whose tokens start at ``offset`` plus its place in the array."""
        layout = self._options["layout"]
        seq_axis = {"bshd": block.ndim - 3, "bhsd": block.ndim - 2, "sbhd": 0}[layout]
        start = 0 if block_info is None else block_info[0]["array-location"][seq_axis][0]
        return self._rotate(block, offset + start)

    def by_positions(self, block: Array, positions: Array) -> Array:
        """Rotate a block with its slice of the spread positions (see ``_spread_positions``)."""
        layout = self._options["layout"]
        if layout == "bshd":
            p = positions[..., 0, 0]
        elif layout == "bhsd":
            p = positions[..., 0, :, 0]
        else:
            xp = array_api_compat.array_namespace(positions)
            p = xp.moveaxis(positions[..., 0, 0], 0, -1)
        return self._rotate(block, p)
