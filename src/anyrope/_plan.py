"""The plan of one call: every argument checked once, turned into plain data.

:func:`make_plan` checks what the arrays of a :class:`~anyrope._call.Call` tell (its
options were checked where it was made). A :class:`Plan` holds the arrays, where their axes
are, the positions of each stream, the flags, the namespace and the tables to use;
every path (:mod:`anyrope._paths`) reads a plan and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import array_api_compat
import numpy as np

from ._call import Call
from ._jax import outside_trace
from ._layout import Axes, axes_of, place_tables, range_table_shape
from ._memory import Extent, extent, has_internal_overlap, may_overlap
from ._mrope import resolve_streams
from ._namespace import (
    Array,
    Namespace,
    device_of,
    dtype_name,
    is_real_floating,
    library_name,
    namespace_of,
    table_dtype,
)
from ._packed import packed_positions
from ._positions import Positions, known_positions, offset_positions, resolve_positions
from ._tables import TableCache, TableSource
from ._validation import describe


@dataclass(frozen=True)
class Plan:
    """One rotation, as plain data.

    ``where`` has one :class:`~anyrope._positions.Positions` per position stream (one,
    or one per M-RoPE / axial section); ``tables`` are those of the frequencies for the
    largest position. ``table_dtype`` is the NumPy dtype the tables are rounded to once.
    """

    arrays: tuple[Array, ...]
    names: tuple[str, ...]
    xp: Namespace
    library: str
    dtype: str
    device: Any
    axes: Axes
    where: tuple[Positions, ...]
    source: TableSource
    tables: TableCache
    table_dtype: np.dtype[Any]
    interleaved: bool
    inverse: bool
    """Rotate by the negative angle (the sign of sin, for the paths)."""
    undo: bool
    """The tables divide by the attention factor (``inverse=True``; see
    :meth:`~anyrope._tables.TableCache.undoing`)."""
    inplace: bool
    requires_grad: bool
    unread: bool = False
    """Whether the position array was left unread (on the GPU, see
    :attr:`anyrope._tables.TableSource.unread_bound`; or traced, lazy or captured):
    only a path that checks its values
    where it reads them (``CHECKS_POSITIONS``) takes the plan. The same for every call of
    one geometry (the library, type, device, dtype and shape of the positions decide it)."""
    memo: dict[str, Any] = field(default_factory=dict, compare=False)
    """What a path derived from the geometry of :attr:`arrays` (shapes, strides, dtype,
    layout and options), keyed by the path's name. The plans that :meth:`for_call` makes
    for later calls share it: the pipeline keeps one plan per such geometry."""

    @property
    def rotary_dim(self) -> int:
        """The number of leading features that rotate (the source's)."""
        return self.source.rotary_dim

    def gathered_tables(self) -> tuple[Array, Array]:
        """cos/sin for every token, shaped to broadcast against the inputs."""
        cos, sin = self.source.gather(
            self.where, self.tables, self.xp, self.device, self.table_dtype
        )
        return place_tables(cos, self.axes, self.xp), place_tables(sin, self.axes, self.xp)

    def wide_tables(self, xp: Namespace, features: tuple[int, ...]) -> tuple[Array, Array]:
        """:func:`~anyrope._tables.widen` of the tables, in ``xp`` (NumPy or torch, on the
        host: the blocked path reads torch CPU tensors through NumPy), placed, with the
        last axis reshaped to ``features``.

        Consecutive positions that the cached tables cover are a slice of them, shaped
        once: a decode step pays two reshapes and two slices.
        """
        (where, *more) = self.where
        if not more and where.array is None and self.tables.covers(where):
            cos, sin = self.tables.get_wide(
                where.stop, xp, "cpu", self.table_dtype, self.interleaved
            )
            shape = range_table_shape(self.axes, cos.shape[0], features)
            start = where.offset - self.tables.first
            rows = slice(start, start + where.seq)
            # The arrays' own reshape: both libraries have one, cheaper than xp.reshape.
            return cos.reshape(shape)[rows, ...], sin.reshape(shape)[rows, ...]
        layout = self.axes.layout
        if (
            not more
            and isinstance(where.array, np.ndarray)
            and layout != "sbhd"
            and self.tables.covers(where)
        ):
            # Rows that NumPy positions (*batch', seq) name, a decode step's position_ids:
            # two takes, shaped at once with a size-1 heads axis.
            cos, sin = self.tables.get_wide(
                where.stop, xp, "cpu", self.table_dtype, self.interleaved
            )
            *lead, seq = where.array.shape
            shape = (*lead, *((seq, 1) if layout == "bshd" else (1, seq)), *features)
            flat = where.array.reshape(-1)
            return cos.take(flat, axis=0).reshape(shape), sin.take(flat, axis=0).reshape(shape)
        cos, sin = self.source.gather_wide(
            self.where, self.tables, xp, "cpu", self.table_dtype, self.interleaved
        )
        cos, sin = place_tables(cos, self.axes, xp), place_tables(sin, self.axes, xp)
        return (
            xp.reshape(cos, (*cos.shape[:-1], *features)),
            xp.reshape(sin, (*sin.shape[:-1], *features)),
        )

    def for_call(self, arrays: tuple[Array, ...], positions: object) -> Plan:
        """This plan for another call of the same geometry: new arrays and positions.

        The pipeline keeps plans by the libraries, shapes, dtypes and devices of the
        arrays and of the positions, so only what depends on values is checked again:
        the positions (range, and the frequencies they select), and for in-place calls
        the memory of the arrays.
        """
        where, tables = self.where, self.tables
        if positions is not None:
            if type(positions) is int:
                stream = offset_positions(positions, self.axes.seq)
            else:
                stream = known_positions(
                    positions,
                    self.xp,
                    self.axes.batch,
                    self.axes.seq,
                    unread_bound=self.source.unread_bound if self.unread else None,
                )
            where = (stream,)
            if self.source.depends_on_length:
                tables = self.source.for_length(stream.stop)
                tables = tables.undoing() if self.undo else tables
        if self.inplace:
            _check_writable_again(arrays, self.names)
        return self._replaced(arrays=arrays, where=where, tables=tables)

    def with_host_positions(self, view: Callable[[Array], Array]) -> Plan:
        """This plan with its position arrays replaced by ``view`` of them (NumPy views
        of torch CPU tensors, for the CPU paths that index NumPy's tables)."""
        where = tuple(
            stream if stream.array is None else stream._replace(array=view(stream.array))
            for stream in self.where
        )
        return self._replaced(where=where)

    def template(self) -> Plan:
        """This plan without the call's arrays (nor an array of positions), to be kept
        for :meth:`for_call` without keeping the caller's memory alive."""
        where = self.where if all(stream.array is None for stream in self.where) else ()
        return self._replaced(arrays=(), where=where)

    def with_arrays(self, arrays: tuple[Array, ...], names: tuple[str, ...]) -> Plan:
        """This plan for a subset of its arrays (same tokens, so the same positions)."""
        return self._replaced(arrays=arrays, names=names, memo={})

    def _replaced(self, **changes: Any) -> Plan:
        # Every field was checked when this plan was made, and the callers check what
        # they change: skip the dataclass __init__ (a decode step pays for every call).
        plan = object.__new__(Plan)
        plan.__dict__.update(self.__dict__, **changes)
        return plan


def make_plan(source: TableSource, call: Call, *, head_dim: int, interleaved: bool) -> Plan:
    """Check what the arrays of ``call`` tell (its options were checked by
    :func:`~anyrope._call.make_call`) and return its :class:`Plan`.

    ``inverse`` undoes a rotation: ``R(-angle) / a`` for the attention factor ``a``.
    ``adjoint`` (autograd's backward, never a user's option) gives the transpose of the
    rotation ``inverse`` asks for: the same tables with the other sign of the angle, so
    ``a * R(-angle)`` for a forward rotation and ``R(angle) / a`` for an inverse one.
    """
    arrays, names, positions, cu_seqlens, layout, inverse, inplace, _, xp, adjoint = call
    xp = namespace_of(*arrays, xp=xp, argument=names)
    torch = array_api_compat.is_torch_array(arrays[0])
    if torch:
        from ._torch import check_tensor, resolved

        for x, name in zip(arrays, names, strict=True):
            check_tensor(x, name)
        arrays = tuple(resolved(x, inplace=inplace) for x in arrays)
    if layout == "thd":
        # A packed batch is one sequence whose positions restart at each cu_seqlens entry.
        with outside_trace(xp):
            positions = packed_positions(cu_seqlens, positions, x=arrays[0], xp=xp)
        layout = "bshd"
    axes = [
        _check_input(x, name, head_dim, layout, xp) for x, name in zip(arrays, names, strict=True)
    ]
    _check_same_tokens(arrays, names, axes)
    if inplace:
        _check_writable(arrays, names)
    # Concrete positions stay concrete inside a jax.jit trace: read, checked, constants.
    with outside_trace(xp):
        where = _positions(source, positions, xp, arrays[0], axes[0])
    requires_grad = False
    if torch:
        from ._torch import requires_grad as torch_requires_grad

        requires_grad = torch_requires_grad(arrays)
    tables = source.for_length(max(stream.stop for stream in where))
    return Plan(
        arrays=arrays,
        names=names,
        xp=xp,
        library=library_name(xp),
        dtype=dtype_name(arrays[0].dtype),
        device=device_of(arrays[0]),
        axes=axes[0],
        where=where,
        source=source,
        tables=tables.undoing() if inverse else tables,
        # Tables are rounded once to the compute dtype (numerical-contract.rst, "How every path
        # computes" 2): no cast on the device.
        table_dtype=table_dtype(xp, arrays[0].dtype),
        interleaved=interleaved,
        inverse=inverse != adjoint,
        undo=inverse,
        inplace=inplace,
        requires_grad=requires_grad,
        unread=any(stream.unread for stream in where),
    )


def _positions(
    source: TableSource, positions: object, xp: Namespace, x: Array, axes: Axes
) -> tuple[Positions, ...]:
    """One stream of positions, or one per section for M-RoPE arrays and axial RoPE.

    M-RoPE with ``None`` or an offset (an int or a 0-d integer array) is text only, i.e.
    ordinary RoPE.
    """
    sections = source.sections
    if sections is None or not (source.axial or getattr(positions, "ndim", 0) != 0):
        streams = [
            resolve_positions(
                positions,
                xp,
                x,
                axes.batch,
                axes.seq,
                unread_bound=source.unread_bound,
            )
        ]
    else:
        streams = resolve_streams(
            positions,
            kind="axial" if source.axial else "mrope",
            count=len(sections),
            xp=xp,
            x=x,
            batch=axes.batch,
            seq=axes.seq,
        )
    unknown = [stream for stream in streams if stream.traced or stream.unread]
    if source.depends_on_length and unknown:
        raise ValueError(
            f"rope_type={source.scaling.rope_type!r} picks its frequencies by the largest "
            "position, which is unknown inside a graph (positions traced by jax.jit, lazy "
            "or captured, whose values are not read on the host); pass concrete positions "
            "or use a length-independent scaling"
        )
    if any(stream.unread and not stream.stop for stream in unknown):
        raise ValueError(
            "`positions` whose values cannot be read on the host (traced, lazy or captured) "
            "are gathered inside the graph from tables of a known size: build the RoPE "
            "with max_positions"
        )
    return tuple(streams)


def _check_input(x: Array, name: str, head_dim: int, layout: str, xp: Namespace) -> Axes:
    if isinstance(x, np.ma.MaskedArray):
        # The paths would rotate the masked elements on some paths and not on others.
        raise TypeError(
            f"`{name}` must not be a NumPy masked array; got {describe(x)} with a mask: "
            "pass its .data (every element rotated) or .filled(value)"
        )
    if not is_real_floating(xp, x.dtype):
        raise TypeError(
            f"`{name}` must have a real floating dtype (float16, bfloat16, float32 or float64); "
            f"got {x.dtype}"
        )
    axes = axes_of(x, layout, name)
    if axes.head_dim != head_dim:
        raise ValueError(
            f"`{name}` must have head_dim={head_dim} in its last axis; got {describe(x)}"
        )
    return axes


def _check_same_tokens(arrays: tuple[Array, ...], names: tuple[str, ...], axes: list[Axes]) -> None:
    first, first_axes = arrays[0], axes[0]
    for x, name, x_axes in zip(arrays[1:], names[1:], axes[1:], strict=True):
        if x.dtype != first.dtype:
            raise TypeError(
                f"`{name}` must have the dtype of `{names[0]}` ({first.dtype}); got {x.dtype}"
            )
        if str(device_of(x)) != str(device_of(first)):
            raise ValueError(
                f"`{name}` must be on the device of `{names[0]}` ({device_of(first)}); "
                f"got {device_of(x)}"
            )
        if (x_axes.batch, x_axes.seq) != (first_axes.batch, first_axes.seq):
            hint = ""
            if first_axes.layout == "bshd":
                other = (axes_of(first, "bhsd"), axes_of(x, "bhsd"))
                if (other[0].batch, other[0].seq) == (other[1].batch, other[1].seq):
                    hint = (
                        "; these shapes match as (*batch, heads, seq, head_dim): "
                        "pass layout='bhsd' for Hugging Face's order"
                    )
            raise ValueError(
                f"`{name}` must share the batch and sequence axes of `{names[0]}` "
                f"(batch {first_axes.batch}, seq {first_axes.seq}); "
                f"got batch {x_axes.batch}, seq {x_axes.seq}{hint}"
            )


def _check_writable(arrays: tuple[Array, ...], names: tuple[str, ...]) -> None:
    """In place, every element is read once and then written once: refuse anything else."""
    if array_api_compat.is_jax_array(arrays[0]):
        raise ValueError(
            "`inplace`=True is not possible for JAX arrays, which are immutable; "
            "use the returned array"
        )
    for x, name in zip(arrays, names, strict=True):
        if not array_api_compat.is_writeable_array(x):
            _refuse_read_only(x, name)
    extents = [extent(x) for x in arrays]
    for e, name in zip(extents, names, strict=True):
        if e is not None and has_internal_overlap(e):
            raise ValueError(
                f"`inplace`=True needs arrays whose elements do not overlap; `{name}` is a "
                f"broadcast or overlapping view (shape {e.shape}, byte strides {e.strides})"
            )
    _check_apart(extents, names)


def _check_writable_again(arrays: tuple[Array, ...], names: tuple[str, ...]) -> None:
    """:func:`_check_writable` for arrays of a planned geometry (NumPy arrays and torch
    tensors of the shapes and strides that passed it): only what the geometry leaves
    open, a read-only NumPy array and arrays that share memory, is checked again."""
    for x, name in zip(arrays, names, strict=True):
        if isinstance(x, np.ndarray) and not x.flags.writeable:
            _refuse_read_only(x, name)
    if len(arrays) > 1:
        _check_apart([extent(x) for x in arrays], names)


def _refuse_read_only(x: Array, name: str) -> None:
    raise ValueError(
        f"`inplace`=True needs writable arrays; got a read-only {describe(x)} as `{name}`"
    )


def _check_apart(extents: list[Extent | None], names: tuple[str, ...]) -> None:
    """Refuse two arrays that share memory: their shared elements would be rotated twice."""
    for i in range(len(extents)):
        for j in range(i + 1, len(extents)):
            a, b = extents[i], extents[j]
            if a is not None and b is not None and may_overlap(a, b):
                raise ValueError(
                    f"`inplace`=True needs `{names[i]}` and `{names[j]}` in separate memory; "
                    "they share elements, which would be rotated twice"
                )
