"""The plan of one call: every argument checked once, turned into plain data.

:func:`make_plan` checks what the arrays of a :class:`~anyrope._call.Call` tell (its
options were checked where it was made). A :class:`Plan` holds the arrays, where their axes
are, the positions of each stream, the flags and the namespace; once a path is chosen,
:func:`with_tables` adds the tables it reads, as arrays fetched from the caches of
:mod:`anyrope._tables` (the one place a call fetches tables). Every path
(:mod:`anyrope._paths`) reads a plan and nothing else: no path calls back into a cache.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

import array_api_compat
import array_api_compat.numpy as numpy_xp
import numpy as np

from ._call import Call
from ._layout import Axes, axes_of, place_tables, range_table_shape
from ._memory import extent, has_internal_overlap, may_overlap
from ._mrope import join_sections, resolve_streams
from ._namespace import (
    Array,
    Namespace,
    device_of,
    dtype_name,
    is_real_floating,
    library_name,
    namespace_of,
    outside_trace,
    table_dtype,
)
from ._packed import packed_positions
from ._positions import Positions, known_positions, offset_positions, resolve_positions
from ._tables import Rows, TableCache, TableSource, widen
from ._validation import LAYOUTS, check_choice, describe

NO_TABLES = Rows(None, None, None, 0)
"""The tables of a plan before :func:`with_tables` gives it those of its path."""


@dataclass(frozen=True)
class Plan:
    """One rotation, as plain data.

    ``where`` has one :class:`~anyrope._positions.Positions` per position stream (one,
    or one per M-RoPE / axial section). ``table_dtype`` is the NumPy dtype the tables
    are rounded to once. ``tables`` are those the path reads, in the form it asks for
    (its ``TABLES``; see :func:`with_tables`), fetched before it runs.
    """

    arrays: tuple[Array, ...]
    names: tuple[str, ...]
    xp: Namespace
    library: str
    dtype: str
    device: Any
    axes: Axes
    where: tuple[Positions, ...]
    rotary_dim: int
    """The number of leading features that rotate."""
    table_dtype: np.dtype[Any]
    interleaved: bool
    inverse: bool
    """Rotate by the negative angle (the sign of sin, for the paths)."""
    undo: bool
    """The tables divide by the attention factor (``inverse=True``; see
    :meth:`~anyrope._tables.TableCache.undoing`)."""
    inplace: bool
    requires_grad: bool
    """Whether autograd records the rotation: a tensor that requires grad, or forward mode
    (a tangent the tensors do not show). Only the paths autograd can see take it."""
    unread: bool = False
    """Whether the position array was left unread (on the GPU, see
    :attr:`anyrope._tables.TableSource.unread_bound`; or traced, lazy or captured):
    only a path that checks its values
    where it reads them (``CHECKS_POSITIONS``) takes the plan. The same for every call of
    one geometry (the library, type, device, dtype and shape of the positions decide it)."""
    unread_bound: int | None = None
    """The rows that positions left unread may index (``max_positions``)."""
    tables: Rows = NO_TABLES
    """The tables of the call's tokens, in the form its path reads (:data:`TABLE_FORMS`)."""
    memo: dict[str, Any] = field(default_factory=dict, compare=False)
    """What a path derived from the geometry of :attr:`arrays` (shapes, strides, dtype,
    layout and options), keyed by the path's name. The plans that :meth:`for_call` makes
    for later calls share it: the pipeline keeps one plan per such geometry."""

    def for_call(
        self,
        arrays: tuple[Array, ...],
        positions: object,
        source: TableSource | None = None,
        form: str = "",
    ) -> Plan:
        """This plan for another call of the same geometry: new arrays and positions, and
        with ``source`` the tables of ``form`` for them (:func:`with_tables`, without a
        second copy of the plan).

        The pipeline keeps plans by the libraries, shapes, dtypes and devices of the
        arrays and of the positions, so only what depends on values is checked again:
        the positions (range, and the frequencies they select), and for in-place calls
        the memory of the arrays.
        """
        where = self.where
        if positions is not None:
            if type(positions) is int:
                stream = offset_positions(positions, self.axes.seq)
            else:
                stream = known_positions(
                    positions,
                    self.xp,
                    self.axes.batch,
                    self.axes.seq,
                    unread_bound=self.unread_bound,
                )
            where = (stream,)
        if self.inplace:
            _check_writable(arrays, self.names, again=True)
        tables = self.tables if source is None else _tables_of(self, where, source, form)
        return self._replaced(arrays=arrays, where=where, tables=tables)

    def template(self) -> Plan:
        """This plan without the call's arrays (nor an array of positions), to be kept
        for :meth:`for_call` without keeping the caller's memory alive."""
        where = self.where if all(stream.array is None for stream in self.where) else ()
        return self._replaced(arrays=(), where=where)

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
    requires_grad = False
    if array_api_compat.is_torch_array(arrays[0]):
        from ._torch import checked

        arrays, requires_grad = checked(arrays, names, positions, inplace=inplace)
    packed = check_choice(layout, "layout", (*LAYOUTS, "thd")) == "thd"
    if packed:
        if source.axial:
            raise ValueError(
                "axial RoPE takes coordinates per token, which packed sequences "
                "(layout='thd') do not give; rotate each image with layout 'bshd', 'bhsd' "
                "or 'sbhd'"
            )
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
        where = _positions(source, positions, xp, arrays[0], axes[0], text=packed)
    unread = any(stream.unread for stream in where)
    return Plan(
        arrays=arrays,
        names=names,
        xp=xp,
        library=library_name(xp),
        dtype=dtype_name(arrays[0].dtype),
        device=device_of(arrays[0]),
        axes=axes[0],
        where=where,
        rotary_dim=source.rotary_dim,
        # Tables are rounded once to the compute dtype (numerical-contract.rst, "How every path
        # computes" 2): no cast on the device.
        table_dtype=table_dtype(xp, arrays[0].dtype),
        interleaved=interleaved,
        inverse=inverse != adjoint,
        undo=inverse,
        inplace=inplace,
        requires_grad=requires_grad,
        unread=unread,
        unread_bound=source.unread_bound if unread else None,
    )


TABLE_FORMS = ("placed", "rows", "host rows", "host wide")
"""The forms of tables a path may read (its ``TABLES``), each as :class:`~anyrope._tables.Rows`:

``"placed"``
    cos/sin of every token (``row_of`` ``None``, ``offset`` 0), in the plan's library and on
    its device, shaped to broadcast against the inputs (a size-1 heads axis).
``"rows"``
    Tables indexed by row and what selects the rows of the call (one position stream).
``"host rows"``
    The same in NumPy, on the host (with NumPy views of torch CPU positions); several
    streams give each token's row of their joined tables.
``"host wide"``
    :func:`~anyrope._tables.widen` of ``"placed"``, in NumPy: ``[c, c]`` and ``[-s, s]``.
"""


def with_tables(plan: Plan, source: TableSource, form: str) -> Plan:
    """``plan`` with the tables its path reads (``form``, the path's ``TABLES``), fetched
    from the caches of ``source``: the one place a call fetches tables, before its path runs.
    """
    return plan._replaced(tables=_tables_of(plan, plan.where, source, form))


def _tables_of(plan: Plan, where: tuple[Positions, ...], source: TableSource, form: str) -> Rows:
    """The tables of ``form`` for the positions ``where`` of a call planned as ``plan``."""
    one = where[0] if len(where) == 1 else None
    if source.depends_on_length:
        cache = source.for_length(max(s.stop for s in where) if one is None else one.stop)
    else:  # the one cache of fixed frequencies, without a call
        cache = source.default
    cache = cache.undoing if plan.undo else cache
    xp, device, dtype = plan.xp, plan.device, plan.table_dtype
    # Membership, not str methods: this runs at every call.
    if form in ("host rows", "host wide"):
        xp, device = numpy_xp, "cpu"
        # Most decode steps hold no position array: no import, no new tuple, for them.
        if plan.library == "torch" and (one is None or one.array is not None):
            from ._torch import positions_view

            where = tuple(
                s if s.array is None else s._replace(array=positions_view(s.array)) for s in where
            )
            one = where[0] if one is not None else None
    if form in ("rows", "host rows") and one is not None:
        return cache.rows(one, xp, device, dtype)
    axes = plan.axes
    if (
        form == "host wide"
        and one is not None
        and (one.array is None or axes.layout != "sbhd")
        and cache.covers(one)
    ):
        return _kept_wide(plan, one, cache)
    if one is not None:
        cos, sin = cache.gather(one, xp, device, dtype)
    else:
        parts = [cache.gather(stream, xp, device, dtype) for stream in where]
        assert source.sections is not None
        mrope = source.scaling.mrope_interleaved
        cos, sin = join_sections(parts, source.sections, xp, interleaved=mrope)
    if form == "host rows":
        # Several streams: each token reads its own row of the joined tables.
        lead = (1,) * (len(axes.batch) + 2 - cos.ndim) + cos.shape[:-1]
        index = np.arange(math.prod(lead)).reshape(lead)
        width = cos.shape[-1]
        return Rows(cos.reshape(-1, width), sin.reshape(-1, width), index, 0)
    if form == "host wide":
        cos, sin = widen(cos, sin, plan.interleaved, xp)
    cos, sin = place_tables(cos, axes, xp), place_tables(sin, axes, xp)
    if form == "host wide":
        cos, sin = (xp.reshape(t, (*t.shape[:-1], *_pairing(plan))) for t in (cos, sin))
    return Rows(cos, sin, None, 0)


def _pairing(plan: Plan) -> tuple[int, int]:
    """The last axis of wide tables, split into the two elements of each pair."""
    r = plan.rotary_dim
    return (r // 2, 2) if plan.interleaved else (2, r // 2)


def _kept_wide(plan: Plan, one: Positions, cache: TableCache) -> Rows:
    """The ``"host wide"`` tables of a call from those ``cache`` keeps: two slices, or two
    takes of NumPy positions (a decode step's position_ids), and two reshapes by NumPy's
    own methods (a decode step pays few calls)."""
    cos, sin = cache.get_wide(one.stop, numpy_xp, "cpu", plan.table_dtype, plan.interleaved)
    axes, features = plan.axes, _pairing(plan)
    if one.array is None:
        start = one.offset - cache.first
        shape = range_table_shape(axes, cos.shape[0], features)
        rows = slice(start, start + one.seq)
        return Rows(cos.reshape(shape)[rows, ...], sin.reshape(shape)[rows, ...], None, 0)
    *lead, seq = one.array.shape
    shape = (*lead, *((seq, 1) if axes.layout == "bshd" else (1, seq)), *features)
    flat = one.array.reshape(-1)
    return Rows(
        cos.take(flat, axis=0).reshape(shape), sin.take(flat, axis=0).reshape(shape), None, 0
    )


def _positions(
    source: TableSource, positions: object, xp: Namespace, x: Array, axes: Axes, *, text: bool
) -> tuple[Positions, ...]:
    """One stream of positions, or one per section for M-RoPE arrays and axial RoPE.

    M-RoPE with ``None`` or an offset (an int or a 0-d integer array) is text only, i.e.
    ordinary RoPE; so are the positions of packed sequences (``text``), one per token.
    """
    sections, batch, seq = source.sections, axes.batch, axes.seq
    if sections is None or text or not (source.axial or getattr(positions, "ndim", 0) != 0):
        streams = [
            resolve_positions(positions, xp, x, batch, seq, unread_bound=source.unread_bound)
        ]
    else:
        kind, count = ("axial" if source.axial else "mrope"), len(sections)
        streams = resolve_streams(
            positions, kind=kind, count=count, xp=xp, x=x, batch=batch, seq=seq
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
        # A JAX tracer has no device (JAX places it): nothing to compare.
        devices = device_of(x), device_of(first)
        if None not in devices and str(devices[0]) != str(devices[1]):
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


def _check_writable(
    arrays: tuple[Array, ...], names: tuple[str, ...], *, again: bool = False
) -> None:
    """In place, every element is read once and then written once: refuse anything else.

    ``again``: arrays of a planned geometry (NumPy arrays and torch tensors of the shapes
    and strides that passed it): only what the geometry leaves open, a read-only NumPy
    array and arrays that share memory, is checked again.
    """
    if not again and array_api_compat.is_jax_array(arrays[0]):
        raise ValueError(
            "`inplace`=True is not possible for JAX arrays, which are immutable; "
            "use the returned array"
        )
    for x, name in zip(arrays, names, strict=True):
        writable = x.flags.writeable if isinstance(x, np.ndarray) else again
        if not (writable or array_api_compat.is_writeable_array(x)):
            raise ValueError(
                f"`inplace`=True needs writable arrays; got a read-only {describe(x)} as `{name}`"
            )
    if again and len(arrays) == 1:
        return
    extents = [(extent(x), name) for x, name in zip(arrays, names, strict=True)]
    for e, name in extents:
        if not again and e is not None and has_internal_overlap(e):
            raise ValueError(
                f"`inplace`=True needs arrays whose elements do not overlap; `{name}` is a "
                f"broadcast or overlapping view (shape {e.shape}, byte strides {e.strides})"
            )
    # Two arrays that share memory would have their shared elements rotated twice.
    for (a, first), (b, second) in itertools.combinations(extents, 2):
        if a is not None and b is not None and may_overlap(a, b):
            raise ValueError(
                f"`inplace`=True needs `{first}` and `{second}` in separate memory; "
                "they share elements, which would be rotated twice"
            )
