"""dask.array: RoPE block by block, lazily, on dask's own scheduler.

``rotate`` on a dask array returns a dask array with the input's chunks; nothing is
computed until the caller asks. Each block is rotated by the ordinary path of its own
library (NumPy, CuPy, ...) with its own positions: the slice of the caller's positions
array, or the offset of its first token. A rotation only mixes the features of one
token, so blocks along batch, sequence and heads are independent and the result is the
same bits as one call on the whole array. A head dimension split across chunks is
joined for the rotation and split again afterwards. A 0-d dask array of positions is an
offset, like an int, whose value is read (and checked) by each block when it runs.

It is one of the registry's routes (:data:`anyrope._paths.ROUTES`): it takes the call before
it is planned, since lazy positions have no values to plan with, and hands each block to
the function the pipeline gives it (the pipeline itself). It imports dask only for dask
arrays, when dask is already in ``sys.modules``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import array_api_compat
import numpy as np

from .. import _threads
from .._call import Call
from .._layout import axes_of, heads_axis, place_tables
from .._namespace import Array, namespace_of
from .._offsets import Offsets
from .._plan import make_plan
from .._tables import TableSource
from .._validation import describe

NAME = "dask"
LIBRARY = "dask.array"


def takes(x: object) -> bool:
    """Whether ``x`` is a dask array (asked without importing dask)."""
    return bool(array_api_compat.is_dask_array(x))


def inner(call: Call) -> Call:
    """``call`` on empty blocks of its arrays' library, whose path their blocks take."""
    namespace_of(*call.arrays, xp=call.xp, argument=call.names)
    blocks = tuple(x._meta.reshape((0,) * (x.ndim - 1) + (x.shape[-1],)) for x in call.arrays)
    return call._replace(arrays=blocks, xp=None)


def rotate(
    rotate_block: Callable[..., tuple[Array, ...]],
    sources: tuple[TableSource, ...],
    call: Call,
    *,
    head_dim: int,
    interleaved: bool,
) -> tuple[Array, ...]:
    """Lazy rotations of the dask arrays of ``call`` (which share batch and sequence
    axes), the ``j``-th with the tables of ``sources[j]`` (the same settings but for an
    xPos amplitude), each block by ``rotate_block`` (the pipeline's ``rotate_arrays``).

    Everything that can be checked without computing is checked now, as for any other
    array: shapes, dtypes, the flags and concrete positions (a NumPy array's values too).
    """
    arrays, names, positions = call.arrays, call.names, call.positions
    namespace_of(*arrays, xp=call.xp, argument=names)
    if call.inplace:
        raise ValueError(
            "`inplace`=True is not possible for dask arrays, which are immutable; "
            "use the returned array"
        )
    if call.layout == "thd":
        raise ValueError("dask arrays take layouts 'bshd', 'bhsd' and 'sbhd'; got layout='thd'")
    source = sources[0]
    if source.sections is not None:
        raise ValueError(
            "dask arrays take RoPE with one position stream; got "
            f"rope_type={source.scaling.rope_type!r} with {len(source.sections)} streams "
            "(M-RoPE or axial): rotate the computed array, or each block with its own call"
        )
    if source.depends_on_length:
        raise ValueError(
            "dask arrays take RoPE with fixed frequencies; got "
            f"rope_type={source.scaling.rope_type!r}: its frequencies depend on all positions "
            "at once, so rotate the computed array, or each block with its own call"
        )
    for x, name in zip((*arrays, positions), (*names, "positions"), strict=True):
        # Blocks are matched to their positions by their place in x: dask must know it.
        if array_api_compat.is_dask_array(x) and any(math.isnan(n) for n in x.shape):
            raise ValueError(
                f"`{name}` must be a dask array with known chunk sizes; got shape {x.shape} "
                f"(unknown sizes, as after boolean indexing): call `{name}.compute_chunk_sizes()` "
                "first"
            )
    if isinstance(positions, Offsets) and array_api_compat.is_dask_array(positions.values):
        positions = _offset_rows(positions.values, arrays[0], call.layout)
        call = call._replace(positions=positions)
    elif isinstance(positions, Offsets) and not array_api_compat.is_numpy_array(positions.values):
        raise TypeError(
            "`positions`=Offsets(...) for a dask array takes a NumPy or dask integer array of "
            f"offsets; got {describe(positions.values)}"
        )
    if hasattr(positions, "shape") and not (
        array_api_compat.is_dask_array(positions) or array_api_compat.is_numpy_array(positions)
    ):
        raise TypeError(
            "`positions` for a dask array must be None, an int offset, or a NumPy or dask "
            f"integer array; got {describe(positions)}"
        )
    stand_ins = call._replace(
        arrays=tuple(_stand_in(x) for x in arrays),
        positions=_stand_in(positions) if array_api_compat.is_dask_array(positions) else positions,
        xp=None,
    )
    geometry: dict[str, Any] = {"head_dim": head_dim, "interleaved": interleaved}
    plan = make_plan(source, stand_ins, **geometry)
    # The options of each block's call; its arrays and positions are the block's.
    options = call._replace(arrays=(), names=("x",), positions=None, xp=None)
    tasks = [BlockRotation(rotate_block, source, options, geometry) for source in sources]
    where = plan.where[0]
    lazy = None
    if array_api_compat.is_dask_array(positions) and positions.ndim == 0:
        # A lazy offset (make_plan saw a stand-in zero): each block reads its value.
        lazy = positions.reshape((1,) * arrays[0].ndim)
    if lazy is not None or where.array is None:
        return tuple(
            _map(task.by_offset, x, lazy, offset=where.offset)
            for task, x in zip(tasks, arrays, strict=True)
        )
    import dask.array as da

    # Offsets were made into an array of positions by make_plan; a dask array of
    # positions stood in as zeros there, so it is spread itself: ``(*batch', seq)`` placed
    # as a table of one feature with every batch axis, to broadcast against the input so
    # that dask hands each block its own slice.
    p = da.asarray(where.array if isinstance(positions, Offsets) else positions)
    p = p.reshape((1,) * (len(plan.axes.batch) + 1 - p.ndim) + (*p.shape, 1))
    spread = place_tables(p, plan.axes, array_api_compat.array_namespace(p))
    # Without batch axes a "bhsd" table has no heads axis either: one of 1, as the input.
    spread = spread.reshape((1,) * (arrays[0].ndim - spread.ndim) + spread.shape)
    return tuple(_map(task.by_positions, x, spread) for task, x in zip(tasks, arrays, strict=True))


def _offset_rows(values: Array, x: Array, layout: str) -> Array:
    """Lazy per-row offsets as the lazy positions ``values[..., None] + 0 .. seq - 1``,
    checked when computed as any dask array of positions is."""
    import dask.array as da

    if not np.issubdtype(values.dtype, np.integer):
        raise TypeError(f"`positions`=Offsets(...) must hold integers; got {describe(values)}")
    steps = da.arange(axes_of(x, layout).seq, dtype=np.int64)
    return values.astype(np.int64)[..., None] + steps


def _stand_in(x: Array) -> np.ndarray[Any, Any]:
    """A NumPy array with the shape and dtype of a dask array, holding no data."""
    return np.broadcast_to(np.zeros((), dtype=x.dtype), x.shape)


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


@dataclass(frozen=True, eq=False)
class BlockRotation:
    """What dask runs on each block; picklable for worker processes.

    It carries the :class:`~anyrope._tables.TableSource`, which pickles as its settings
    and is shared again by every block unpickled in one worker process, so tables are
    built once per process, not once per block.
    """

    rotate_block: Callable[..., tuple[Array, ...]]
    source: TableSource
    call: Call
    """The options of each block's call, without arrays or positions."""
    geometry: dict[str, Any]
    """``head_dim`` and ``interleaved``."""

    def _rotate(self, block: Array, positions: object) -> Array:
        # dask already runs one block per thread of each worker.
        with _threads.one_thread():
            call = self.call._replace(arrays=(block,), positions=positions)
            (y,) = self.rotate_block((self.source,), call, **self.geometry)
        return y

    def by_offset(
        self, block: Array, lazy: Array | None = None, *, offset: int = 0, block_info: Any = None
    ) -> Array:
        """Rotate a block whose tokens start at ``offset`` plus its place in the array;
        ``lazy``, a block of one element, holds the offset instead (a 0-d dask array)."""
        seq_axis = {"bshd": block.ndim - 3, "bhsd": block.ndim - 2, "sbhd": 0}[self.call.layout]
        start = 0 if block_info is None else block_info[0]["array-location"][seq_axis][0]
        if lazy is not None:
            # As a Python int: the sum must not wrap in the offset's own dtype.
            offset = int(lazy.reshape(()))
        return self._rotate(block, offset + start)

    def by_positions(self, block: Array, positions: Array) -> Array:
        """Rotate a block with its slice of the spread positions (see :func:`rotate`)."""
        xp = array_api_compat.array_namespace(positions)
        p = xp.squeeze(positions, axis=(heads_axis(self.call.layout), -1))
        return self._rotate(block, xp.moveaxis(p, 0, -1) if self.call.layout == "sbhd" else p)
